"""The command-line tool: `optimus-eq demo` (optimize, explain and bench are planned)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

STRATEGIES = ("none", "greedy", "eqsat")


def _fmt(value: Any, spec: str = "") -> str:
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    return format(value, spec)


# (row label, how to read it from a run_demo result)
_ROWS: list[tuple[str, Callable[[dict[str, Any]], str]]] = [
    ("FX nodes before", lambda r: _fmt(r.get("nodes_before"))),
    ("FX nodes after", lambda r: _fmt(r.get("nodes_after"))),
    ("split/cat/stack/unbind before", lambda r: _fmt(r.get("junk_before"))),
    ("split/cat/stack/unbind after", lambda r: _fmt(r.get("junk_after"))),
    ("kernels per iteration", lambda r: _fmt(r.get("kernels"))),
    ("ms per iteration (median)", lambda r: _fmt(r.get("ms"), ".3f")),
    ("ms per iteration (fastest)", lambda r: _fmt(r.get("ms_min"), ".3f")),
    ("compile s (first call)", lambda r: _fmt(r.get("compile_s"), ".1f")),
    ("optimizer s", lambda r: _fmt(r.get("optimize_s"), ".2f")),
    ("optimizer fell back", lambda r: "n/a" if r.get("graphs", 0) == 0 else
        ("YES" if r.get("fallback") else "no")),
    ("max |out - eager|", lambda r: _fmt(r.get("max_abs_diff"), ".1e")),
    ("outputs equal eager", lambda r: _fmt(r.get("outputs_match"))),
]

_KERNEL_NOTE = {
    "cpu": "kernels per iteration (cpu): calls one iteration's compiled graph makes, counted with "
    "torch.profiler: Inductor's generated C++ kernels plus extern ATen ops (addmm); allocations "
    "and views not counted.",
    "cuda": "kernels per iteration (cuda): GPU activities (kernels, memcpy, memset) of one iteration, "
    "counted with torch.profiler.",
}


def format_table(results: Sequence[dict[str, Any]]) -> str:
    """A metric-by-strategy table of `run_demo` results."""
    header = ["metric"] + [r["strategy"] for r in results]
    rows = [header] + [[label] + [get(r) for r in results] for label, get in _ROWS]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = []
    for j, row in enumerate(rows):
        cells = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:], widths[1:])]
        lines.append("  ".join(cells))
        if j == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _details(r: dict[str, Any], verbose: bool = False) -> list[str]:
    out = [f"{r['strategy']}:"]
    if r.get("error"):
        out.append(f"  error: {r['error']}")
    if r.get("mismatch"):
        out.append("  outputs differ from eager: " + r["mismatch"].replace("\n", "\n    "))
    if r.get("fallback"):
        out.append(f"  fallback: {r['fallback']}")
    fired = r.get("patterns_fired") or {}
    if fired:
        out.append("  patterns fired: " + ", ".join(f"{k} x{v}" for k, v in sorted(fired.items())))
    if r["strategy"] == "eqsat" and r.get("graphs"):
        out.append(
            f"  e-graph: {r.get('egraph_nodes')} e-nodes, {r.get('egraph_classes')} e-classes, "
            f"{r.get('iterations')} iterations, stop reason: {r.get('stop_reason') or 'n/a'}"
        )
    if r.get("graphs", 0) == 0 and not r.get("error"):
        out.append("  (the backend left no report: optimus_eq.last_reports was empty)")
    elif r.get("graphs", 0) > 1:
        out.append(f"  {r['graphs']} graphs compiled (graph breaks); numbers are summed over them")
    if verbose and r.get("summary"):
        out.append("  " + r["summary"].replace("\n", "\n  "))
    return out if len(out) > 1 else []


def cmd_demo(args: argparse.Namespace) -> int:
    import torch

    from optimus_eq.demo import run_demo, warm_up_compiler

    if args.device == "cuda" and not torch.cuda.is_available():
        print("optimus-eq demo: --device cuda, but no CUDA device is available", file=sys.stderr)
        return 2
    strategies = list(STRATEGIES) if args.strategy == "all" else [args.strategy]
    width = args.fields * args.dim
    print(
        f"optimus-eq demo: {args.fields} fields x {args.dim} = input [{args.batch}, {width}], "
        f"device {args.device}, strategies: {', '.join(strategies)}",
        flush=True,
    )
    print("== warming up Dynamo and Inductor (one tiny compile, so that no strategy pays the one-time "
          "start-up costs) ...", flush=True)
    print(f"   done in {warm_up_compiler(args.device):.1f} s", flush=True)
    results = []
    for i, strategy in enumerate(strategies, 1):
        print(f"== [{i}/{len(strategies)}] strategy {strategy}", flush=True)
        results.append(
            run_demo(
                strategy,
                args.device,
                num_fields=args.fields,
                dim=args.dim,
                batch=args.batch,
                iters=args.iters,
                warmup=args.warmup,
                fresh_cache=not args.warm_cache,
            )
        )
    print()
    print(format_table(results))
    print()
    print(_KERNEL_NOTE[args.device])
    print("compile s: Dynamo + optimizer + Inductor on the first call"
          + ("." if args.warm_cache else ", into an empty Inductor cache."))
    print()
    for r in results:
        lines = _details(r, args.verbose)
        if lines:
            print("\n".join(lines))
    ok = all(r.get("outputs_match") and not r.get("error") for r in results)
    fell_back = [r["strategy"] for r in results if r.get("fallback")]
    print()
    if fell_back:
        print(f"note: {', '.join(fell_back)} fell back to the original graph (see above); "
              "its numbers are those of the unoptimized graph")
    print("outputs equal eager for every strategy" if ok else "FAILED: some strategy's outputs differ "
          "from eager or it raised (see above)")
    return 0 if ok else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="optimus-eq",
        description="Remove split/cat/stack/unbind junk from PyTorch FX graphs (equality saturation "
        "or greedy), then compile with Inductor.",
        epilog="Planned subcommands, not yet written: optimize, explain, bench.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    demo = sub.add_parser(
        "demo",
        help="compile a small recommendation-style model with each strategy and compare",
        description="Compile a recommendation-style demo model full of split/cat junk with "
        "torch.compile(backend=optimus_eq.backend(strategy=...)), check its outputs against eager, "
        "and print graph size, kernels, time per iteration and compile time per strategy.",
    )
    demo.add_argument("--strategy", choices=(*STRATEGIES, "all"), default="all",
                      help="strategy to run; 'all' (default) runs none (plain Inductor, the baseline), "
                      "greedy and eqsat side by side")
    demo.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    demo.add_argument("--fields", type=int, default=16, help="number of feature fields N (default 16)")
    demo.add_argument("--dim", type=int, default=32, help="width D of one field (default 32)")
    demo.add_argument("--batch", type=int, default=256, help="batch size (default 256)")
    demo.add_argument("--iters", type=int, default=20, help="timed runs per strategy (default 20)")
    demo.add_argument("--warmup", type=int, default=3, help="untimed runs before timing (default 3)")
    demo.add_argument("--warm-cache", action="store_true",
                      help="reuse Inductor's on-disk cache (faster; compile times are then not cold)")
    demo.add_argument("-v", "--verbose", action="store_true", help="print each optimizer report in full")
    demo.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    for name in ("fields", "dim", "batch", "iters"):
        if getattr(args, name, 1) < 1:
            print(f"optimus-eq: --{name} must be at least 1", file=sys.stderr)
            return 2
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
