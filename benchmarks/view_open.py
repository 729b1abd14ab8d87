"""How long a large run takes to become a page, how heavy the page is, and how fast it opens in a browser.

A VL-RewardBench-format run of `--items` items is written (each item its own 84x84 picture, two calls of
judge reasoning as long as the demo judge's, ~500 characters), `mrjudge view` builds the page, and Debian's
Chromium (headless, through Playwright) opens it from disk `--opens` times: the time to open is from the
navigation to the first rows on screen, with every thumbnail decoded. Then the page scrolls to the end.

    python -m benchmarks.view_open [--items 10000] [--opens 3]

Goal (issue 55): 10,000 items open in <= 2 s. Prints one JSON line: `build_s`, `page_mb`, `mb_per_1000_items`,
`open_s` (median) and `open_s_runs`, `scroll_to_end_s`, and the page's `rows`.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

from PIL import Image

from benchmarks.kit import emit
from eval.view import build_page, write_page

REASONING = (
    "Image: {shape} {colour}, {shape} {size}, {shape} at the {cell}. A: {shape} against {shape} yes; {cell} against "
    "{cell} yes; {colour} against {colour} yes; so yes. B: {other} against {shape} no; {cell} against {cell} yes; "
    "{colour} against {colour} yes; so no. The first candidate names what the picture holds, where it is and its "
    "colour; the second names a {other} that is not there, a hallucinated object, so the first is better."
)


ON_SCREEN_DECODED = (
    "[...document.images].filter(img => img.getBoundingClientRect().top < innerHeight)"
    ".every(img => img.complete && img.naturalWidth > 0)"
)
"""The first screen is ready: every picture on it decoded (the rows below load theirs as they come into view)."""


SCROLL_LIMIT_S = 120.0


def write_run(root: Path, n: int, seed: int = 0) -> Path:
    """A run folder as `mrjudge eval vl-rewardbench` leaves it: its data file, images, predictions, metrics."""
    rng = random.Random(seed)
    (root / "images").mkdir(parents=True)
    rows, predictions = [], []
    for i in range(n):
        colour = rng.choice(["red", "green", "blue", "yellow"])
        shape, other = rng.sample(["square", "circle", "triangle"], 2)
        Image.new("RGB", (84, 84), (rng.randrange(256), rng.randrange(256), rng.randrange(256))).save(
            root / f"images/{i}.png"
        )
        preferred = rng.randrange(2)
        responses = [f"The {other} at the centre is {colour}.", f"The {shape} at the centre is {colour}."]
        if preferred == 0:
            responses.reverse()
        rows.append(
            {
                "id": f"vlfeedback_{i}",
                "query": f"What colour is the {shape}?",
                "response": responses,
                "image": f"images/{i}.png",
                "human_ranking": [0, 1] if preferred == 0 else [1, 0],
            }
        )
        think = REASONING.format(shape=shape, other=other, colour=colour, size="large", cell="centre")
        right = rng.random() < 0.8
        pick = preferred if right else 1 - preferred
        letters = ["A", "B"] if pick == 0 else ["B", "A"]  # both orders pick the same response
        predictions.append(
            {
                "id": f"vlfeedback_{i}",
                "group": "general",
                "source": "vlfeedback",
                "preferred": preferred,
                "pred": pick,
                "votes": [pick, pick],
                "consistent": True,
                "probs": [0.9, 0.1] if pick == 0 else [0.1, 0.9],
                "raw": [f"<think>{think}</think><answer>{letter}</answer>" for letter in letters],
                "usage": {"prompt_tokens": 220, "completion_tokens": 260},
            }
        )
    data = root / "vlrb.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = root / "run"
    run.mkdir()
    (run / "predictions.jsonl").write_text("".join(json.dumps(p) + "\n" for p in predictions))
    (run / "metrics.json").write_text(json.dumps({"data_source": str(data), "macro_accuracy": None}))
    return run


def open_times(page_path: Path, opens: int) -> tuple[list[float], float]:
    """Seconds from navigation to the first rows with their thumbnails decoded, per open; and the scroll to the end."""
    import shutil

    from playwright.sync_api import sync_playwright

    executable = shutil.which("chromium")
    if executable is None:
        raise SystemExit("Chromium is not installed: apt-get install chromium")
    args = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"]
    times = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=args)
        for _ in range(opens):
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            started = time.perf_counter()
            page.goto(page_path.as_uri(), wait_until="commit")  # "load" waits on pictures far below
            page.wait_for_selector("details.row")
            page.wait_for_function(ON_SCREEN_DECODED)
            times.append(time.perf_counter() - started)
            page.close()
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(page_path.as_uri(), wait_until="commit")  # "load" waits on pictures far below
        page.wait_for_selector("details.row")
        total = page.evaluate("JSON.parse(document.getElementById('view-data').textContent).sections[0].rows.length")
        started = time.perf_counter()
        while page.evaluate("document.querySelectorAll('details.row').length") < total:
            if time.perf_counter() - started > SCROLL_LIMIT_S:
                raise SystemExit(f"scrolling stopped adding rows before {total} in {SCROLL_LIMIT_S} s")
            page.evaluate("window.scrollTo(0, document.body.scrollHeight)")
            page.wait_for_timeout(10)
        scroll = time.perf_counter() - started
        browser.close()
    return times, scroll


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--opens", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run = write_run(Path(tmp), args.items)
        out = Path(tmp) / "view.html"
        started = time.perf_counter()
        page = build_page([run], out=out)
        size = write_page(page, out)
        build = time.perf_counter() - started
        times, scroll = open_times(out, args.opens)
    emit(
        {
            "items": args.items,
            "rows": len(page.sections[0].rows),
            "build_s": build,
            "page_mb": size / 1e6,
            "mb_per_1000_items": size / 1e6 / args.items * 1000,
            "open_s": statistics.median(times),
            "open_s_runs": times,
            "scroll_to_end_s": scroll,
            "goal_open_s": 2.0,
        },
        digits=3,
    )


if __name__ == "__main__":
    main()
