"""The long profile of the differential fuzzer (tests/fuzzing.py), run by hand.

    PYTHONPATH=src:bridge:bench python bench/fuzz.py --programs 10000 --strategy eqsat --jobs 8 \\
        [--start 0] [--level mixed|pre_grad|post_grad] [--out fuzz_failures] [--minutes M]

Generates programs ``start .. start+programs-1`` (each seed is one program; see ``fuzzing.generate``), runs
each with the chosen strategies in a pool of ``jobs`` processes (one thread each; an egglog e-graph never
crosses a process), and prints markdown tables: outcomes per strategy (ok / wrong / crash / fallback /
invalid), wrong results by failed check and by issue 11's known class, fallback and crash causes, and
programs per second. Each program that is not ok (invalid ones aside) is written to ``out`` as a script
that reruns it (``<kind>_<strategy>_<seed>.py``, run with ``PYTHONPATH=src:bridge:bench:tests``).
``--minutes`` stops handing out programs after that much wall time. Each program's row is also appended to
``out/rows.jsonl`` as it finishes, so a profile killed from outside keeps its results: ``--report ROWS`` prints
the tables of such a file.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

TESTS = str(Path(__file__).resolve().parent.parent / "tests")


def _init() -> None:
    import warnings

    import torch

    if TESTS not in sys.path:
        sys.path.insert(0, TESTS)
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")


def _one(job):
    seed, strategies, level, out = job
    import fuzzing

    program = fuzzing.generate(seed, level=None if level == "mixed" else level)
    t = time.perf_counter()
    try:
        results = fuzzing.run(program, strategies)
    except BaseException as exc:  # noqa: BLE001 -- a harness failure must not stop the profile
        results = {s: fuzzing.Outcome("crash", f"harness: {type(exc).__name__}", repr(exc)) for s in strategies}
    row = {}
    for s, o in results.items():
        known = fuzzing.known_class(program, o)
        row[s] = (o.kind, o.cause, known)
        if out and o.kind in ("wrong", "crash", "fallback"):
            path = Path(out) / f"{o.kind}_{s}_{seed}.py"
            detail = "\n".join("# " + line for line in o.detail.splitlines()[:40])
            path.write_text(f"# {o.kind}: {o.cause} ({known or 'new'})\n{detail}\n{program.script(s)}")
    return seed, program.level, sorted(program.features), row, time.perf_counter() - t


def _table(title, counter: Counter, header) -> str:
    lines = [f"\n**{title}**\n", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for key, n in counter.most_common():
        key = key if isinstance(key, tuple) else (key,)
        lines.append("| " + " | ".join(str(k).replace("|", "/") for k in key) + f" | {n} |")
    return "\n".join(lines)


def report(rows, strategies, seconds) -> str:
    """The markdown tables of a profile's rows (``_one``'s results)."""
    kinds = ("ok", "wrong", "crash", "fallback", "invalid")
    out = [f"{len(rows)} programs ({Counter(r[1] for r in rows)}), {seconds:.0f} s wall, "
           f"{len(rows) / max(seconds, 1e-9):.2f} programs/s (all strategies of a program together)\n",
           "| strategy | " + " | ".join(kinds) + " | fallback % of valid |", "|---" * (len(kinds) + 2) + "|"]
    for s in strategies:
        c = Counter(r[3][s][0] for r in rows)
        valid = sum(c[k] for k in kinds if k != "invalid")
        out.append(f"| {s} | " + " | ".join(str(c[k]) for k in kinds) +
                   f" | {100 * c['fallback'] / max(valid, 1):.2f} |")
    wrong = Counter((s, r[1], r[3][s][1], r[3][s][2] or "new") for r in rows for s in strategies
                    if r[3][s][0] == "wrong")
    out.append(_table("wrong results", wrong, ["strategy", "level", "check", "issue 11 class", "programs"]))
    for kind in ("fallback", "crash", "invalid"):
        c = Counter((s, r[3][s][1]) for r in rows for s in strategies if r[3][s][0] == kind)
        out.append(_table(f"{kind} causes", c, ["strategy", "cause", "programs"]))
    return "\n".join(out)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--programs", type=int, default=200)
    p.add_argument("--start", type=int, default=0)
    p.add_argument("--strategy", default="greedy,eqsat", help="comma-separated strategies")
    p.add_argument("--level", default="mixed", choices=["mixed", "pre_grad", "post_grad"])
    p.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    p.add_argument("--out", default="fuzz_failures", help="folder for failing programs ('' for none)")
    p.add_argument("--minutes", type=float, default=None, help="stop handing out programs after this long")
    p.add_argument("--report", default=None, metavar="ROWS", help="print the tables of a rows.jsonl file and stop (its wall time and programs/s are estimated: the programs' summed seconds / --jobs)")
    args = p.parse_args(argv)
    strategies = tuple(args.strategy.split(","))
    if args.report:
        rows = [json.loads(line) for line in Path(args.report).read_text().splitlines() if line.strip()]
        print(report(rows, strategies, sum(r[4] for r in rows) / max(args.jobs, 1)))
        return
    log = None
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        log = open(Path(args.out) / "rows.jsonl", "a")
    jobs = [(seed, strategies, args.level, args.out) for seed in range(args.start, args.start + args.programs)]
    t0, rows = time.perf_counter(), []
    deadline = t0 + 60 * args.minutes if args.minutes else None

    def keep(row) -> None:
        rows.append(row)
        if log:
            log.write(json.dumps(row) + "\n")
            log.flush()

    if args.jobs <= 1:
        _init()
        for job in jobs:
            if deadline and time.perf_counter() > deadline:
                break
            keep(_one(job))
    else:
        import multiprocessing as mp

        pool = mp.get_context("spawn").Pool(args.jobs, initializer=_init, maxtasksperchild=200)
        results = pool.imap_unordered(_one, jobs, chunksize=1)
        while len(rows) < len(jobs) and not (deadline and time.perf_counter() > deadline):
            try:  # a timeout, so that the deadline holds even while every worker is busy with a slow program
                keep(results.next(timeout=5))
            except mp.TimeoutError:
                continue
        # the tables first: tearing the pool down may wait on a worker stuck in a slow program
        print(report(rows, strategies, time.perf_counter() - t0), flush=True)
        pool.terminate()
        return
    print(report(rows, strategies, time.perf_counter() - t0))

if __name__ == "__main__":
    main()
