"""Check ``optimus-eq explain``'s HTML page in a real browser: run the command as a user would on a model
file, open the page in headless Chromium, assert every picture is laid out with a non-zero size and drawn
shapes inside the page's width, and save a full-page screenshot.

    python bench/html_report_check.py --out bench/results/html_report_chromium_2026-12-02
    python bench/html_report_check.py --model path/to/model.py:make --no-credits --out /tmp/check

Writes ``explain.html``, ``explain.txt`` (the command's output), ``screenshot.png`` and ``probe.json`` (what
the browser measured) into ``--out``. Exit code 0 when every picture is shown, 1 when one is not or the
command failed, 2 when no Chromium is installed (``apt-get install chromium``; ``$OPTIMUS_EQ_CHROMIUM``
names another executable).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from optimus_bench.browser import find_chromium, probe, screenshot  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MODEL = "bench/user_models/ranking_tower.py:make"


def expected_pictures(page: Path) -> int:
    """The pictures the page's HTML holds (top-level ``<svg`` tags; pictures do not nest)."""
    return page.read_text().count("<svg")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=DEFAULT_MODEL, help=f"FILE.py:FACTORY (default {DEFAULT_MODEL})")
    ap.add_argument("--strategies", default="greedy,eqsat")
    ap.add_argument("--level", default="pre_grad", choices=("pre_grad", "post_grad"))
    ap.add_argument("--no-credits", action="store_true", help="pass --no-credits to explain (faster)")
    ap.add_argument("--width", type=int, default=1280, help="browser window width in px (default 1280)")
    ap.add_argument("--out", default="bench/out/html_report_check")
    args = ap.parse_args(argv)

    chromium = find_chromium()
    if chromium is None:
        print("no Chromium found (apt-get install chromium, or set OPTIMUS_EQ_CHROMIUM)", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    page = out / "explain.html"
    cmd = [sys.executable, "-m", "optimus_eq.cli", "explain", args.model, "--strategies", args.strategies,
           "--level", args.level, "--html", str(page)] + (["--no-credits"] if args.no_credits else [])
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT if not Path(args.model).is_absolute() else None)
    explain_s = time.perf_counter() - t0
    (out / "explain.txt").write_text(f"$ optimus-eq {' '.join(cmd[3:])}\n(rc {done.returncode}, {explain_s:.0f} s)\n\n"
                                     + done.stdout + done.stderr)
    if done.returncode != 0:
        print(f"optimus-eq explain failed (rc {done.returncode}); see {out / 'explain.txt'}", file=sys.stderr)
        return 1

    expected = expected_pictures(page)
    seen = probe(page, chromium, width=args.width)
    problems = list(seen.problems)
    if len(seen.pictures) != expected or expected == 0:
        problems.append(f"the page holds {expected} pictures, the browser laid out {len(seen.pictures)}")
    png = screenshot(page, out / "screenshot.png", chromium, width=args.width, height=int(seen.page_height))
    version = subprocess.run([chromium, "--version"], capture_output=True, text=True).stdout.strip()
    (out / "probe.json").write_text(json.dumps({
        "model": args.model, "strategies": args.strategies, "level": args.level, "chromium": version,
        "explain_seconds": round(explain_s, 1), "window_width": args.width, "viewport_width": seen.viewport_width,
        "page_height": seen.page_height, "pictures": seen.pictures, "problems": problems}, indent=1))

    for p in seen.pictures:
        print(f"{p['caption'] or p['tag']:>8}: {p['width']:.0f} x {p['height']:.0f} px at y={p['y']:.0f}, "
              f"{p['visible_shapes']} shapes, {p['visible_texts']} labels drawn")
    print(f"{version}; page {seen.page_height:.0f} px tall; screenshot {png}")
    for p in problems:
        print("PROBLEM:", p)
    print("OK: every picture is shown" if not problems else f"FAILED: {len(problems)} problem(s)")
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
