"""`mrjudge view`: one static HTML page of what a judge did, or of two runs side by side.

    mrjudge view runs/demo                                   # every run of the demo, with comparisons
    mrjudge view runs/demo/grpo/vlrb --out grpo.html         # one evaluation
    mrjudge view runs/demo/sft/vlrb runs/demo/grpo/vlrb      # two runs, matched by id
    mrjudge view verdicts.jsonl --items items.jsonl          # `mrjudge judge`'s output
    mrjudge view runs/policy/audit.jsonl --serve --port 8765 # on loopback, for a large run

The page needs nothing but a browser: thumbnails, JS and CSS are inside it.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "view",
        help="one static HTML page of verdicts, evaluations, best-of-N, audits, or two runs side by side",
        description="Read a run (an evaluation folder, MM-Vet best-of-N, a verdicts JSONL beside its items, an "
        "audit.jsonl, or a folder of runs such as the demo's) and write one HTML file that opens offline. "
        "Give two runs to compare them item by item. Bad rows are skipped and counted.",
    )
    parser.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="a run, or two runs to compare")
    parser.add_argument(
        "--out", type=Path, default=None, help="the HTML file (default: view.html in the first run's folder)"
    )
    parser.add_argument("--title", default=None, help="the page's title (default: the runs' names)")
    parser.add_argument(
        "--data", type=Path, default=None, help="the benchmark file, where the run's metrics.json names none here"
    )
    parser.add_argument(
        "--image-folder", type=Path, default=None, help="where the benchmark's relative image paths start"
    )
    parser.add_argument(
        "--items", type=Path, default=None, help="the MC items a verdicts file judged (default: found beside it)"
    )
    parser.add_argument("--serve", action="store_true", help="also serve the page on loopback until Ctrl-C")
    parser.add_argument("--port", type=int, default=8765, help="--serve's port (default: 8765)")
    parser.set_defaults(run=run)


def _default_out(path: Path) -> Path:
    folder = path if path.is_dir() else path.parent
    return folder / "view.html"


def run(args: argparse.Namespace) -> int:
    from eval.view import build_page, serve_page, write_page

    out = args.out or _default_out(args.paths[0])
    started = time.perf_counter()
    page = build_page(
        args.paths, out=out, title=args.title, data=args.data, items=args.items, image_folder=args.image_folder
    )
    size = write_page(page, out)
    rows = sum(len(s.rows) for s in page.sections)
    print(
        f"wrote {out} ({size / 1e6:.1f} MB, {len(page.sections)} section(s), {rows} rows, {len(page.thumbs)} images) "
        f"in {time.perf_counter() - started:.1f} s"
    )
    for section in page.sections:
        if section.skipped:
            print(f"  {section.name}: {section.skipped} bad row(s) skipped, first: {section.problems[0]}")
    if page.missing:
        print(
            f"  {len(page.missing)} image(s) could not be read (placeholders on the page), e.g. {next(iter(page.missing))}"
        )
    if args.serve:
        server = serve_page(page, args.port)
        print(f"serving on http://127.0.0.1:{server.server_address[1]}/ (Ctrl-C to stop)")
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()
    return 0
