"""Open an HTML page in headless Chromium: measure its pictures and take a full-page screenshot.

Used by ``bench/html_report_check.py`` and ``tests/test_html_report.py`` to check that ``optimus-eq explain``'s
page shows its graph pictures in a real browser. Only Chromium's own command line is used (``--dump-dom``,
``--screenshot``), no driver package: a probe script is appended to a copy of the page; on ``load`` it
measures every top-level ``<svg>`` / ``<img>`` (``getBoundingClientRect``, CSS px) and the drawn shapes inside
it, and writes the figures as JSON into the DOM that ``--dump-dom`` prints.

Chromium on a machine with no network hangs on its background services unless told not to: the flags below
turn them off, and every run gets a fresh ``--user-data-dir``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
         "--disable-dev-shm-usage")
NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")

_PROBE = """<script>
window.addEventListener('load', function () {
  var pics = [];
  document.querySelectorAll('svg, img').forEach(function (e) {
    if (e.parentElement && e.parentElement.closest('svg')) return;          // nested: part of a picture
    var r = e.getBoundingClientRect(), shapes = 0;
    e.querySelectorAll('rect, ellipse, polygon, path').forEach(function (s) {
      var b = s.getBoundingClientRect(); if (b.width > 0 && b.height > 0) shapes++; });
    var texts = Array.prototype.filter.call(e.querySelectorAll('text'), function (t) {
      return t.getBoundingClientRect().width > 0; }).length;
    var fig = e.closest('figure'), cap = fig && fig.querySelector('figcaption');
    pics.push({tag: e.tagName.toLowerCase(), caption: cap ? cap.textContent : null,
               x: r.left, y: r.top + window.scrollY, width: r.width, height: r.height,
               visible_shapes: shapes, visible_texts: texts,
               display: getComputedStyle(e).display, visibility: getComputedStyle(e).visibility});
  });
  var pre = document.createElement('pre');
  pre.id = 'optimus-eq-probe';
  pre.textContent = JSON.stringify({pictures: pics, viewport_width: window.innerWidth,
                                    page_width: document.documentElement.scrollWidth,
                                    page_height: document.documentElement.scrollHeight});
  document.body.appendChild(pre);
});
</script>"""


def find_chromium() -> str | None:
    """The Chromium executable: ``$OPTIMUS_EQ_CHROMIUM`` if set, else the first of :data:`NAMES` on PATH."""
    env = os.environ.get("OPTIMUS_EQ_CHROMIUM")
    if env:
        return env if Path(env).exists() else None
    return next((p for p in map(shutil.which, NAMES) if p), None)


def _run(chromium: str, args: list[str], timeout: float) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="optimus-eq-chromium-") as profile:
        return subprocess.run([chromium, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL)


@dataclass
class PageProbe:
    """What the browser laid out: ``pictures`` (one dict per top-level svg/img: ``tag``, ``caption``, ``x``,
    ``y``, ``width``, ``height`` in CSS px, ``visible_shapes`` and ``visible_texts``: drawn elements inside it
    with a non-zero box), the viewport's and the page's size in CSS px."""

    pictures: list[dict]
    viewport_width: float
    page_width: float
    page_height: float
    problems: list[str] = field(default_factory=list)


def probe(page: Path, chromium: str, *, width: int = 1280, timeout: float = 120) -> PageProbe:
    """Load ``page`` (an HTML file) in headless Chromium at ``width`` CSS px and measure its pictures.

    Raises RuntimeError when Chromium prints no DOM or the probe did not run (Chromium's stderr is in the
    message). ``problems`` lists each picture with a zero-size box, nothing drawn, or wider than the viewport.
    """
    text = page.read_text()
    with tempfile.TemporaryDirectory(prefix="optimus-eq-probe-") as tmp:
        copy = Path(tmp) / page.name
        copy.write_text(text.replace("</body>", _PROBE + "</body>") if "</body>" in text else text + _PROBE)
        done = _run(chromium, [f"--window-size={width},900", "--dump-dom", copy.resolve().as_uri()], timeout)
    m = re.search(r'<pre id="optimus-eq-probe">(.*?)</pre>', done.stdout, re.S)
    if not m:
        raise RuntimeError(f"Chromium printed no probe result (rc {done.returncode}): {done.stderr[-2000:]}")
    import html

    data = json.loads(html.unescape(m.group(1)))
    result = PageProbe(**data)
    for i, p in enumerate(result.pictures):
        name = f"picture {i} ({p['caption'] or p['tag']})"
        if p["width"] <= 0 or p["height"] <= 0:
            result.problems.append(f"{name}: zero-size box {p['width']}x{p['height']}")
        if p["visible_shapes"] == 0 or p["visible_texts"] == 0:
            result.problems.append(f"{name}: {p['visible_shapes']} shapes and {p['visible_texts']} texts drawn")
        if p["display"] == "none" or p["visibility"] == "hidden":
            result.problems.append(f"{name}: hidden ({p['display']}, {p['visibility']})")
        if p["x"] < 0 or p["x"] + p["width"] > result.viewport_width + 1:
            result.problems.append(f"{name}: spans x {p['x']:.0f}..{p['x'] + p['width']:.0f}, past the "
                                   f"viewport's {result.viewport_width:.0f} px")
    return result


def screenshot(page: Path, png: Path, chromium: str, *, width: int = 1280, height: int, timeout: float = 120) -> Path:
    """A PNG of ``page`` at ``width`` x ``height`` px (pass the probe's ``page_height`` for the whole page)."""
    png.parent.mkdir(parents=True, exist_ok=True)
    done = _run(chromium, [f"--window-size={width},{height}", f"--screenshot={png.resolve()}",
                           page.resolve().as_uri()], timeout)
    if not png.exists() or png.stat().st_size == 0:
        raise RuntimeError(f"Chromium wrote no screenshot (rc {done.returncode}): {done.stderr[-2000:]}")
    return png
