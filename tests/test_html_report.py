"""``optimus-eq explain``'s HTML page in a real browser (headless Chromium): every graph picture is laid out
with a non-zero size, shapes and labels drawn, within the page's width; its "actual size" box shows it at
full size. Skips when no Chromium is installed (CI installs none; ``bench/html_report_check.py`` is the
same check as a script, with a screenshot)."""

from __future__ import annotations

from pathlib import Path

import pytest

from optimus_bench.browser import find_chromium, probe

CHROMIUM = find_chromium()
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no Chromium installed (apt-get install chromium)")

MODEL = Path(__file__).resolve().parent.parent / "bench" / "user_models" / "ranking_tower.py"


@pytest.fixture(scope="module")
def explained():
    from optimus_eq import explain, modelrun

    return explain, explain.explain(modelrun.load_factory(f"{MODEL}:make"), ["greedy", "eqsat"], credits=False,
                                    pictures=False)


@pytest.mark.parametrize("method", ["builtin", "dot"])
def test_every_picture_is_shown_in_chromium(explained, method, tmp_path):
    explain, ex = explained
    from optimus_eq import pictures

    if method == "dot" and not pictures.dot_available():
        pytest.skip("graphviz's dot is not installed")
    for strategy, graphs in ex.graphs.items():      # draw the pictures the page shows, with this method
        for g in graphs:
            g.pictures = explain.draw_pictures(g, method == "dot")
    page = tmp_path / "explain.html"
    page.write_text(explain.to_html(ex))

    seen = probe(page, CHROMIUM, width=1000)
    expected = sum(len(g.pictures) for graphs in ex.graphs.values() for g in graphs)
    assert expected == 4                             # before and after, one graph, two strategies
    assert len(seen.pictures) == expected and not seen.problems, seen.problems
    for p in seen.pictures:
        assert p["caption"] in ("before", "after") and p["width"] > 100 and p["height"] > 100, p
    # the "actual size" box: the same pictures at their natural size, wider than the window here
    zoomed = tmp_path / "zoomed.html"
    zoomed.write_text(page.read_text().replace("class='zoom'", "class='zoom' checked"))
    wide = probe(zoomed, CHROMIUM, width=1000)
    assert max(p["width"] for p in wide.pictures) > wide.viewport_width
