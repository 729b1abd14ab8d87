"""`benchmarks.view_open` end to end on a small run (the figures in docs/viewer.md come from its default, 10,000)."""

from __future__ import annotations

from eval.view import build_page, write_page
from tests.eval.view.test_view_browser import BrowserMissing, _chromium
from tests.support.required import found_or_skip


def test_the_open_benchmark_runs_small(tmp_path):
    """300 items: opened, and every row reached by scrolling, well in time (in its own module: the benchmark
    starts its own Playwright, which cannot run inside the browser tests' one)."""
    from benchmarks.view_open import open_times, write_run

    found_or_skip(_chromium, BrowserMissing, "MRJUDGE_REQUIRE_BROWSER")
    out = tmp_path / "view.html"
    write_page(build_page([write_run(tmp_path, 300)], out=out), out)
    times, scroll = open_times(out, 1)
    assert len(times) == 1 and 0 < times[0] < 10 and scroll < 30
