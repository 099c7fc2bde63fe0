"""The command-line tool: `optimus-eq demo`, `optimize`, `explain`, `bench` and `calibrate`.

The parser imports nothing heavy (no torch, no egglog): `optimus-eq --help` and `--version` answer in a fraction
of a second, and each subcommand imports what it needs when it runs.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Sequence

from optimus_eq.cli_output import KERNEL_NOTE, demo_details, format_optimize_table, format_table, graph_code

#: demo columns: plain Inductor, Inductor with the built-in Optimus passes, ours
STRATEGIES = ("none", "builtin", "greedy", "eqsat")


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
    options = {}
    if args.min_fuse_set_size is not None:
        from optimus_eq.modelrun import horizontal_options

        options = horizontal_options("pre_grad", args.min_fuse_set_size)
    if args.fields < (args.min_fuse_set_size or 5):
        print(f"note: {args.fields} fields < min_fuse_set_size = {args.min_fuse_set_size or 5}: the per-field Linear "
              "and LayerNorm are not batched (--min-fuse-set-size N lowers it)", flush=True)
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
                options=options if strategy in ("greedy", "eqsat") else None,
            )
        )
    print()
    print(format_table(results))
    print()
    print(KERNEL_NOTE[args.device])
    print("compile s: Dynamo + optimizer + Inductor on the first call"
          + ("." if args.warm_cache else ", into an empty Inductor cache."))
    print()
    for r in results:
        lines = demo_details(r, args.verbose)
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


def _names(value: str) -> list[str]:
    """``"a,b c"`` -> ``["a", "b", "c"]`` (comma- or space-separated lists on the command line)."""
    return [v for part in value.split(",") for v in part.split() if v]


def cmd_bench(args: argparse.Namespace) -> int:
    try:
        import torch

        from optimus_bench import runner
        from optimus_bench.models import MODELS
        from optimus_bench.strategies import available
    except ImportError as exc:
        print(f"optimus-eq bench: the benchmark package does not import ({exc}); install the project with its "
              "bench/ folder (pip install -e '.[bench]') or put bench/ on PYTHONPATH", file=sys.stderr)
        return 2
    if args.list:
        print("models:     " + ", ".join(MODELS))
        print("strategies: " + ", ".join(available()))
        print("modes:      inference, train")
        return 0
    if args.merge:
        try:
            merged = runner.merge(args.merge, args.out, plots=not args.no_plots)
        except (OSError, ValueError, KeyError) as exc:
            print(f"optimus-eq bench --merge: {exc}", file=sys.stderr)
            return 2
        print(f"merged {len(args.merge)} runs, {len(merged['cells'])} cells, into {args.out}")
        return 0
    device = args.device
    models = [m for group in args.models for m in _names(group)] if args.models else list(runner.DEFAULT_MODELS)
    if args.strategies:
        strategies = [s for group in args.strategies for s in _names(group)]
    else:
        strategies = list(runner.DEFAULT_STRATEGIES if device == "cuda" else runner.CPU_DEFAULT_STRATEGIES)
    modes = [m for group in args.modes for m in _names(group)] if args.modes else ["inference", "train"]
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[args.dtype]
    try:
        overrides = runner.parse_overrides(args.set)
        prewarmed, cache = None, args.cache or ("row" if device == "cuda" else "cold")
        if args.prewarm:
            cell_args = [a for k, v in (("--size", args.size), ("--dtype", args.dtype), ("--cost-model", args.cost_model))
                         if v for a in (k, v)] + [a for kv in (args.set or []) for a in ("--set", kv)]
            cache_dir = os.path.join(args.out, "prewarm", "cache")
            print(f"prewarm: compiling {len(models) * len(modes) * len(strategies)} cells, {args.prewarm} at a time, "
                  f"into {cache_dir} ...", flush=True)
            prewarmed = runner.prewarm(models, strategies, modes, device, args.prewarm, cache_dir, cell_args,
                                       os.path.join(args.out, "prewarm"))
            print(f"prewarm: {prewarmed['seconds']} s; failed cells: {prewarmed['failed'] or 'none'}", flush=True)
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = prewarmed["cache_dir"]
            os.environ["TRITON_CACHE_DIR"] = os.path.join(prewarmed["cache_dir"], "triton")
            cache = "warm"
        results = runner.run_matrix(
            models, strategies, modes, device, args.out, size=args.size, dtype=dtype, iters=args.iters,
            warmup=args.warmup, cache=cache, overrides=overrides,
            time_budget_s=args.time_budget, plots=not args.no_plots, progress=not args.no_progress,
            argv=sys.argv[1:], cost_model=args.cost_model, prewarmed=prewarmed, rounds=args.rounds,
            warm_up=not args.no_warm_up)
    except (ValueError, RuntimeError) as exc:
        print(f"optimus-eq bench: {exc}", file=sys.stderr)
        return 2
    cells = results["cells"]
    count = {k: sum(1 for c in cells if c["status"] == k) for k in ("ok", "mismatch", "error", "skipped", "not_run")}
    print(f"\nwrote {args.out}/results.json, results.md" + (", plots" if not args.no_plots else "") + ": "
          + ", ".join(f"{v} {k}" for k, v in count.items() if v))
    return 1 if count["mismatch"] or count["error"] else 0


def _load_model(args: argparse.Namespace, command: str):
    """``((ModelSpec, strategies, optimize options), 0)``, or ``(None, 2)`` after a message: a bad strategy or
    option fails here, before anything is captured."""
    from optimus_eq import modelrun

    try:
        strategies = _names(args.strategies)
        options = modelrun.horizontal_options(args.level, args.min_fuse_set_size)
        modelrun.check_strategies(strategies, args.level, options, f"optimus-eq {command}")
        _check_paths(args)
        return (modelrun.load_factory(args.model), strategies, options), 0
    except (ValueError, TypeError, FileNotFoundError) as exc:
        print(f"optimus-eq {command}: {exc}", file=sys.stderr)
        return None, 2


def _check_paths(args: argparse.Namespace) -> None:
    """Raise ValueError for an output path that cannot be written, before anything runs: ``--out`` naming an
    existing file (it must be a folder), ``--html`` naming an existing folder (it must be a file)."""
    import os

    out, html = getattr(args, "out", None), getattr(args, "html", None)
    if out and os.path.exists(out) and not os.path.isdir(out):
        raise ValueError(f"--out {out}: is a file, not a folder")
    if html and os.path.isdir(html):
        raise ValueError(f"--html {html}: is a folder, not a file")


def _with_model(command: str):
    """A subcommand ``body(args, spec, strategies, options)`` as ``cmd(args) -> exit code``: the model is loaded
    and the strategies and options checked first (:func:`_load_model`, exit code 2 on a bad one)."""
    def wrap(body):
        @functools.wraps(body)
        def cmd(args: argparse.Namespace) -> int:
            loaded, code = _load_model(args, command)
            return code if loaded is None else body(args, *loaded)
        return cmd
    return wrap


@_with_model("optimize")
def cmd_optimize(args: argparse.Namespace, spec, strategies: list[str], options: dict) -> int:
    """Capture your model's graphs with Dynamo, optimize them with each strategy side by side, run them as
    optimized (no Inductor) and compare outputs (and gradients, with a loss) with eager; print graph size,
    split/cat junk, what became of each input op, the cost model's estimate and the seconds spent. FACTORY is a
    function of FILE.py that returns (model, example_inputs) or (model, example_inputs, loss), loss(output) ->
    scalar tensor; with a loss one training step runs (and the backward graph is optimized too at --level
    post_grad)."""
    from pathlib import Path

    from optimus_eq.modelrun import count_compiled_kernels, eager_result, run_strategy

    print(f"optimus-eq optimize {spec.name}: level {args.level}, strategies {', '.join(strategies)}, "
          f"{'training step (loss given)' if spec.loss else 'inference (torch.no_grad)'}", flush=True)
    expected = eager_result(spec)
    runs = []
    for s in strategies:
        print(f"== {s}: Dynamo -> optimus_eq ({args.level}) -> run, compare with eager", flush=True)
        run = run_strategy(spec, s, args.level, rtol=args.rtol, atol=args.atol, options=options,
                           expected=expected)
        if args.kernels:
            print("   counting kernels (Inductor compile) ...", flush=True)
            run.kernels = count_compiled_kernels(spec, s, args.level, options)
        runs.append(run)
    baseline = None
    if args.kernels:
        print("== none: plain Inductor, for the kernel baseline", flush=True)
        baseline = count_compiled_kernels(spec, "none", args.level)
    print()
    print(format_optimize_table(runs, baseline))
    print()
    print("input ops: the captured graph's op nodes, read off each plan the same way (kept: computed as written; "
          "rewritten: by an equal term; removed: not needed). rewrites in the plan: per pattern, what the plan uses, "
          "read off it the same way for every strategy (groups batched, ops rewritten, nodes normalized). rule "
          "matches: egglog's, summed over iterations (greedy: rewrites applied; eqsat: alternatives offered, "
          "chosen or not). plan cost: the cost model's estimate, not a measurement.")
    for r in runs:
        t = r.totals()
        lines = [f"{r.strategy}:"]
        if r.error:
            lines.append(f"  error: {r.error}")
        if r.mismatch:
            lines.append("  differs from eager: " + r.mismatch.replace("\n", "\n    "))
        for fb in t["fallbacks"]:
            lines.append(f"  FELL BACK to the original graph: {fb}")
        if t["patterns_fired"]:
            lines.append("  patterns (rewrites in the plan): "
                         + ", ".join(f"{k} x{v}" for k, v in sorted(t["patterns_fired"].items())))
        if args.verbose:
            for g in r.graphs:
                lines.append(f"  [{g.name}] " + g.report.summary().replace("\n", "\n  "))
        print("\n".join(lines))
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        if runs:
            (out / "input.py").write_text(graph_code(runs[0], "before"))
        for r in runs:
            (out / f"{r.strategy}.py").write_text(graph_code(r, "after"))
        print(f"\nwrote the captured graph and each strategy's optimized graph (gm.code) to {out}/: "
              + ", ".join(["input.py"] + [f"{r.strategy}.py" for r in runs]))
    ok = all(r.outputs_match and not r.error for r in runs)
    print("\noutputs equal eager for every strategy" if ok else "\nFAILED: some strategy differs from eager or raised")
    return 0 if ok else 1


@_with_model("explain")
def cmd_explain(args: argparse.Namespace, spec, strategies: list[str], options: dict) -> int:
    """Run optimize's strategies on your model (FILE.py:FACTORY, as optimus-eq optimize) and explain each graph:
    which pattern rewrote which source lines (a pattern is credited with an op when leaving it out keeps the op
    as written), which ops were left alone and why (unsupported op, mutation, symbolic size, ...), which
    batchable ops were not batched and why where known, and pictures of each graph before and after (graphviz's
    dot when installed, else a built-in drawing). Writes one self-contained HTML page."""
    from pathlib import Path

    from optimus_eq import explain

    print(f"optimus-eq explain {spec.name}: level {args.level}, strategies {', '.join(strategies)}"
          + ("" if args.no_credits else "; crediting patterns: one more optimize per pattern that fired"), flush=True)
    ex = explain.explain(spec, strategies, args.level, options, credits=not args.no_credits,
                         pictures=not args.no_pictures, rtol=args.rtol, atol=args.atol,
                         min_fuse_set_size=args.min_fuse_set_size or 5)
    table = format_optimize_table(ex.runs)
    print()
    print(table)
    print()
    print(explain.to_text(ex))
    path = Path(args.html)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(explain.to_html(ex, table))
    print(f"\npictures: {ex.picture_method}")
    print(f"wrote {path} (one self-contained HTML page)")
    ok = all(r.outputs_match and not r.error for r in ex.runs)
    if not ok:
        print("FAILED: some strategy differs from eager or raised (see the page)")
    return 0 if ok else 1


def cmd_calibrate(args: argparse.Namespace) -> int:
    try:
        from optimus_bench.calibrate import run
    except ImportError as e:
        print(f"optimus-eq calibrate needs the bench package (pip install -e . from the repository): {e}",
              file=sys.stderr)
        return 2
    return run(args)


def version() -> str:
    """The installed distribution's version (``importlib.metadata``), or a note when it is not installed."""
    from importlib import metadata

    try:
        return metadata.version("optimus-eq")
    except metadata.PackageNotFoundError:
        return "(not installed: run from a source tree)"


def _command(sub, name: str, func, help: str, **kw) -> argparse.ArgumentParser:
    """Add the subcommand ``name``, run by ``func``; its ``--help`` description is ``func``'s docstring."""
    p = sub.add_parser(name, help=help, description=" ".join(func.__doc__.split()), **kw)
    p.set_defaults(func=func)
    return p


def _model_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments ``optimize`` and ``explain`` share."""
    p.add_argument("model", metavar="FILE.py:FACTORY",
                   help="a Python file and a function in it that returns (model, example_inputs[, loss])")
    p.add_argument("--strategies", default="greedy,eqsat",
                   help="comma-separated strategies (default greedy,eqsat; also none, taso, tensat)")
    p.add_argument("--level", choices=("pre_grad", "post_grad"), default="pre_grad",
                   help="pre_grad (default): the Torch-IR graph Dynamo captures; post_grad: the Aten-IR graphs "
                   "AOTAutograd makes (forward, and backward with a loss), as Inductor's post-grad pass sees them")
    p.add_argument("--min-fuse-set-size", type=int, default=None, metavar="N",
                   help="smallest group horizontal fusion batches (default 5, as Optimus; 2 batches pairs)")
    p.add_argument("--rtol", type=float, default=1e-4, help="relative tolerance against eager (default 1e-4)")
    p.add_argument("--atol", type=float, default=1e-4, help="absolute tolerance against eager (default 1e-4)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="optimus-eq",
        description="Remove split/cat/stack/unbind junk from PyTorch FX graphs (equality saturation "
        "or greedy), then compile with Inductor.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
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
                      "builtin (Inductor with every built-in Optimus pass on), greedy and eqsat side by side")
    demo.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    demo.add_argument("--fields", type=int, default=16, help="number of feature fields N (default 16)")
    demo.add_argument("--dim", type=int, default=32, help="width D of one field (default 32)")
    demo.add_argument("--batch", type=int, default=256, help="batch size (default 256)")
    demo.add_argument("--iters", type=int, default=20, help="timed runs per strategy (default 20)")
    demo.add_argument("--warmup", type=int, default=3, help="untimed runs before timing (default 3)")
    demo.add_argument("--warm-cache", action="store_true",
                      help="reuse Inductor's on-disk cache (faster; compile times are then not cold)")
    demo.add_argument("--min-fuse-set-size", type=int, default=None, metavar="N",
                      help="smallest group horizontal fusion batches (default 5, as Optimus: fewer fields than "
                      "that batch no Linear)")
    demo.add_argument("-v", "--verbose", action="store_true", help="print each optimizer report in full")
    demo.set_defaults(func=cmd_demo)

    optimize = _command(
        sub, "optimize", cmd_optimize,
        "optimize your own model (FILE.py:FACTORY) with each strategy; table, check against eager, code",
        epilog="Example: optimus-eq optimize mymodel.py:make --out out/  (writes out/input.py, out/greedy.py, "
        "out/eqsat.py)",
    )
    _model_arguments(optimize)
    optimize.add_argument("--out", metavar="DIR", help="write each graph's code (gm.code) here: input.py and one "
                          "file per strategy")
    optimize.add_argument("--kernels", action="store_true",
                          help="also compile with Inductor (plain, and after each strategy) and count kernels per "
                          "call with torch.profiler (slow: one Inductor compile each)")
    optimize.add_argument("-v", "--verbose", action="store_true", help="print each graph's report in full")

    explain_p = _command(sub, "explain", cmd_explain, "what each strategy did to your model, by source line: "
                         "text and one HTML page with graph pictures")
    _model_arguments(explain_p)
    explain_p.add_argument("--html", default="optimus-eq-explain.html", metavar="PATH",
                           help="the HTML page to write (default optimus-eq-explain.html)")
    explain_p.add_argument("--no-credits", action="store_true",
                           help="skip the leave-one-out runs that credit patterns (faster on large graphs)")
    explain_p.add_argument("--no-pictures", action="store_true", help="draw no graphs")

    bench = sub.add_parser(
        "bench",
        help="benchmark models x strategies x modes; write JSON, a markdown table and plots",
        description="Run every (model, mode, strategy) cell: compile, check outputs (and gradients) against "
        "eager, and measure kernels per iteration, ms per iteration, examples/s, peak GPU memory, compile time "
        "(optimus_eq's and Inductor's shares) and e-graph size. A failing cell is recorded and the run goes on. "
        "With --rounds R > 1 the strategies of each (model, mode) are timed side by side, in R rounds whose "
        "order rotates, instead of each alone at its own moment. "
        "Lists are comma- or space-separated; 'optimus-eq bench --list' prints the names.",
        epilog="GPU default (--device cuda): every model at its 'gpu' size, strategies eager, inductor, "
        "inductor-cudagraphs, inductor-optimus, greedy, eqsat, eqsat-cudagraphs, both modes; sized to finish in "
        "about 8 minutes on one H200 (see bench/README.md).",
    )
    bench.add_argument("--models", nargs="+", metavar="MODEL", help="models (default: all)")
    bench.add_argument("--strategies", nargs="+", metavar="STRATEGY",
                       help="strategies (default: see below; 'all' = every available one)")
    bench.add_argument("--modes", nargs="+", metavar="MODE", help="inference and/or train (default: both)")
    bench.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    bench.add_argument("--out", default="bench/out", help="output folder (default bench/out)")
    bench.add_argument("--size", choices=("cpu", "gpu"), default=None,
                       help="model size presets (default: gpu on cuda, cpu on cpu)")
    bench.add_argument("--set", action="append", metavar="MODEL.KEY=VALUE",
                       help="override one size key, e.g. --set launch_bound.branches=256 (repeatable)")
    bench.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default="float32")
    bench.add_argument("--iters", type=int, default=20, help="timed iterations per cell (default 20)")
    bench.add_argument("--warmup", type=int, default=3, help="untimed iterations before timing (default 3)")
    bench.add_argument("--rounds", type=int, default=1, metavar="R",
                       help="1 (default): each cell is timed alone right after its compile. R > 1: per model and "
                       "mode, compile and check every strategy first, keep them alive, then time them side by side "
                       "in R rounds of --iters iterations, the order rotated each round; ms = median over all "
                       "rounds, and results.md marks differences within the spread of round medians as noise")
    bench.add_argument("--cache", choices=("cold", "row", "warm"), default=None,
                       help="Inductor cache: cold = empty per cell (comparable compile times), row = empty per "
                       "model and mode, shared by its strategies (about 2x faster; later strategies reuse "
                       "kernels), warm = the user's cache (default: row on cuda, cold on cpu)")
    bench.add_argument("--merge", nargs="+", metavar="DIR",
                       help="only combine the results.json of earlier runs (e.g. one per device call) into "
                       "--out, with the table and plots; runs nothing")
    bench.add_argument("--time-budget", type=float, default=None, metavar="SECONDS",
                       help="start no new cell after this many seconds; the rest is recorded as not run")
    bench.add_argument("--prewarm", type=int, default=0, metavar="JOBS",
                       help="first compile every cell once, JOBS processes at a time, each on an empty cache of its own (its "
                       "first-call seconds, in OUT/prewarm, are cold compiles under JOBS-way load), then merged into "
                       "one Inductor cache under OUT/prewarm; the timed run then reads that cache (compile-bound "
                       "matrices in a fraction of the time on a many-core host; its compile times are warm-cache times)")
    bench.add_argument("--cost-model", default=None, metavar="JSON",
                       help="our strategies use the cost-model constants of this calibration record "
                       "(optimus-eq calibrate); default: the built-in ones")
    bench.add_argument("--no-warm-up", action="store_true",
                       help="skip the tiny warm-up compile: the first cell pays Dynamo's and Inductor's one-time costs "
                       "(imports, the start of Inductor's compile-worker pool), as a user's first compile in a fresh "
                       "process does")
    bench.add_argument("--no-plots", action="store_true", help="skip the matplotlib plots")
    bench.add_argument("--no-progress", action="store_true", help="plain progress lines instead of a tqdm bar")
    bench.add_argument("--list", action="store_true", help="print the model, strategy and mode names and exit")
    bench.set_defaults(func=cmd_bench)

    calibrate = sub.add_parser(
        "calibrate",
        help="measure the cost model's launch_us and bytes_per_us on this device; write JSON",
        description="Measure GPUCostModel's constants on this device (kernel launch cost in an Inductor graph, "
        "memory bandwidth of cat/add/relu/layer_norm) and write them as JSON; use them with "
        "optimize(..., cost_model=GPUCostModel.from_calibration(path)). Needs the bench package "
        "(installed with the project).",
    )
    calibrate.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    calibrate.add_argument("--out", default="calibration.json", help="JSON file to write (default calibration.json)")
    calibrate.add_argument("--quick", action="store_true", help="few small sizes (a smoke run)")
    calibrate.add_argument("--refit", metavar="JSON", default=None,
                           help="measure nothing: recompute the constants from the samples of an earlier record")
    calibrate.set_defaults(func=cmd_calibrate)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    for name, least in (("fields", 1), ("dim", 1), ("batch", 1), ("iters", 1), ("min_fuse_set_size", 1),
                        ("rounds", 1), ("warmup", 0), ("prewarm", 0), ("rtol", 0), ("atol", 0)):
        value = getattr(args, name, None)
        if value is not None and not value >= least:  # NaN too
            print(f"optimus-eq: --{name.replace('_', '-')} must be at least {least}", file=sys.stderr)
            return 2
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
