"""The page: sections and thumbnails as one JSON document inside one HTML file, with the viewer's own JS and
CSS inlined (no CDN, no build step), so it opens offline, from a mail or from a pull request.

The rows are data, not markup: the browser builds a page of rows at a time as they scroll into view and a
row's detail only when it is opened, which is what lets a 10,000-item run open in about a second.
`serve` hands the same page out on loopback, with the originals of its images behind `/original`.
"""

from __future__ import annotations

import http.server
import json
import mimetypes
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from eval.view.compare import compare_sections
from eval.view.readers import Section, ViewError
from eval.view.recognise import read_path
from eval.view.summary import audit_header, judge_header
from eval.view.thumbs import Thumbnails
from jobs.jsonl import write_text_atomic

__all__ = ["Page", "build_page", "render_page", "serve_page", "write_page"]


@dataclass
class Page:
    """What one HTML file shows: its sections (tabs) and every thumbnail they use."""

    title: str
    sections: list[Section]
    thumbs: dict[str, str] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)
    """Images that could not be read: key → reason (the row shows a placeholder with the path)."""
    originals: dict[str, str] = field(default_factory=dict)
    """Key → file path of each image, for `--serve`'s `/original`."""

    @property
    def skipped(self) -> int:
        return sum(s.skipped for s in self.sections)


def _compact_calls(rows: Sequence[dict[str, Any]]) -> None:
    """Drop a call's raw output where it is exactly `<think>…</think><answer>X</answer>` (the page rebuilds
    it): on the demo's evaluation the raw text made the page 22 % larger (904 against 744 KB)."""
    for row in rows:
        for call in row.get("calls") or ():
            canonical = f"<think>{call['think']}</think><answer>{call['letter']}</answer>"
            if call["raw"] is not None and call["raw"].strip() == canonical:
                call["raw"] = None
        for side in ("a", "b"):
            if side in row and row[side] is not None:
                _compact_calls([row[side]])


def build_page(
    paths: Sequence[Path],
    *,
    out: Path | None = None,
    title: str | None = None,
    data: Path | None = None,
    items: Path | None = None,
    image_folder: Path | None = None,
) -> Page:
    """Read one path (a run, or a folder of runs) or two (compared side by side) into a page."""
    if not 1 <= len(paths) <= 2:
        raise ViewError(f"give one path, or two to compare; got {len(paths)}")
    thumbs = Thumbnails(out_dir=out.parent if out is not None else None)
    options = {"data": data, "items": items, "image_folder": image_folder}
    read = [read_path(Path(p), thumbs, **options) for p in paths]
    sections = read[0]
    if len(paths) == 2:
        a, b = (_one_run(path, found) for path, found in zip(paths, read))
        a.name, b.name = _distinct_names(Path(a.source), Path(b.source))
        sections = [compare_sections(a, b), a, b]
    for section in sections:
        if section.kind in ("judge", "bestofn"):
            section.header = judge_header(section.rows)
        elif section.kind == "audit":
            section.header = audit_header(section.rows)
        _compact_calls(section.rows)
    used = {row["image"]["key"] for s in sections for row in s.rows if row.get("image")}
    rendered, missing = thumbs.render(used)
    originals = {k: str(ref.path) for k, ref in thumbs.refs.items() if ref.path is not None and k in used}
    name = title or " vs ".join(Path(p).resolve().name for p in paths)
    return Page(title=name, sections=sections, thumbs=rendered, missing=missing, originals=originals)


def _distinct_names(a: Path, b: Path) -> tuple[str, str]:
    """The shortest trailing parts of two runs' paths that tell them apart (`sft/vlrb`, `evaluate/vlrb`)."""
    a_parts, b_parts = a.resolve().parts, b.resolve().parts
    for depth in range(1, max(len(a_parts), len(b_parts)) + 1):
        names = "/".join(a_parts[-depth:]), "/".join(b_parts[-depth:])
        if names[0] != names[1]:
            return names
    return f"A: {a.name}", f"B: {b.name}"


def _one_run(path: Path, sections: list[Section]) -> Section:
    judged = [s for s in sections if s.kind in ("judge", "bestofn")]
    if len(judged) != 1:
        raise ViewError(
            f"{path}: to compare two runs, give two run folders or files; this holds {len(judged)} judged runs"
        )
    return judged[0]


def _asset(name: str) -> str:
    return resources.files("eval.view").joinpath("assets", name).read_text(encoding="utf-8")


def render_page(page: Page) -> str:
    """The page's HTML: the template, the JS and CSS inlined, the data as one JSON script block."""
    document = {
        "title": page.title,
        "generated": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "sections": [
            {
                "name": s.name,
                "kind": s.kind,
                "source": s.source,
                "benchmark": s.benchmark,
                "skipped": s.skipped,
                "problems": s.problems,
                "header": s.header,
                "rows": s.rows,
            }
            for s in page.sections
        ],
        "thumbs": page.thumbs,
        "missing": page.missing,
    }
    data = json.dumps(document, ensure_ascii=False, separators=(",", ":")).replace("</", "<\\/")
    environment = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    template = environment.from_string(_asset("page.html.j2"))
    # the assets and the data are ours and already safe inside <style> / <script> (the data's "</" escaped)
    return template.render(
        title=page.title, css=Markup(_asset("view.css")), js=Markup(_asset("view.js")), data=Markup(data)
    )


def write_page(page: Page, out: Path) -> int:
    """Write the page atomically; returns its size in bytes."""
    html = render_page(page)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out, html)
    return len(html.encode("utf-8"))


def serve_page(page: Page, port: int, host: str = "127.0.0.1") -> http.server.ThreadingHTTPServer:
    """A loopback server for the page (`/`) and its images' originals (`/original?key=…`); call
    `serve_forever()` on it. Only the files the page shows are served."""
    html = render_page(page).encode("utf-8")
    originals = dict(page.originals)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the standard library's name
            url = urllib.parse.urlsplit(self.path)
            if url.path in ("/", "/index.html"):
                self._send(200, html, "text/html; charset=utf-8")
            elif url.path == "/original":
                key = urllib.parse.parse_qs(url.query).get("key", [""])[0]
                path = Path(originals[key]) if key in originals else None
                if path is None or not path.is_file():
                    self._send(404, b"not an image of this page", "text/plain")
                else:
                    self._send(200, path.read_bytes(), mimetypes.guess_type(path.name)[0] or "application/octet-stream")
            else:
                self._send(404, b"not found", "text/plain")

        def _send(self, code: int, body: bytes, content_type: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet: the command prints the URL
            return

    return http.server.ThreadingHTTPServer((host, port), Handler)
