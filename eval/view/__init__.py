"""`mrjudge view`: what the judge did, as one static HTML page.

A person who trains a judge spends most of the time looking at what it did: the items it got wrong, the
reasoning behind a wrong pick, the pairs where the two display orders disagree, the answers a policy was
paid for, what changed from one judge to the next. The page shows each item with its picture, the
candidates as each display order showed them, each call's reasoning and answer, the pick, the label and a
status; filters, search and sort find the interesting ones, and the header sums the run up.

The steps, a module each:
- `recognise`: what a path holds (a run, a file, a folder of runs), told from its rows;
- `readers`: each kind read into rows, bad rows skipped and counted;
- `rows`: one judged item: display orders drawn again from the judge's settings, reasoning set apart;
- `compare`: two runs matched by id, each pair named by what changed;
- `summary`: the header's figures (accuracy by category with intervals, position bias, the audit's pay);
- `thumbs`: each distinct image once, downscaled and embedded;
- `page`: the HTML (Jinja2, with `assets/`'s JS and CSS inlined), written atomically or served on loopback.

    page = build_page([Path("runs/demo/sft/vlrb"), Path("runs/demo/grpo/vlrb")], out=Path("compare.html"))
    write_page(page, Path("compare.html"))
"""

from eval.view.compare import CHANGES, compare_sections
from eval.view.page import Page, build_page, render_page, serve_page, write_page
from eval.view.readers import Section, ViewError
from eval.view.recognise import EXPECTED, read_path
from eval.view.rows import STATUSES

__all__ = [
    "CHANGES",
    "EXPECTED",
    "STATUSES",
    "Page",
    "Section",
    "ViewError",
    "build_page",
    "compare_sections",
    "read_path",
    "render_page",
    "serve_page",
    "write_page",
]
