"""What a path holds, told from its contents, and the sections it gives.

A user points the viewer at whatever they have: a run folder, a file in it, `mrjudge judge`'s output, an
`audit.jsonl`, or a folder of runs (the demo's). Names are only a hint; the rows decide. A folder of runs
gives one section per run, and each judged run is also compared with the run made before it on the same
benchmark (the demo's untrained → SFT → GRPO judges).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from eval.view.compare import compare_sections
from eval.view.readers import Section, ViewError, read_audit, read_bestofn, read_pairwise, read_verdicts
from eval.view.thumbs import Thumbnails
from jobs.jsonl import numbered_jsonl

__all__ = ["EXPECTED", "read_path", "runs_in"]

EXPECTED = (
    "an evaluation folder (predictions.jsonl and metrics.json of VL-RewardBench or Multimodal RewardBench), "
    "an MM-Vet best-of-N folder, a verdicts JSONL of `mrjudge judge` beside its items, a reward audit's "
    "audit.jsonl, or a folder holding them (the demo's)"
)
MAX_DEPTH = 4
"""How deep a folder of runs is searched."""


def _first_row(path: Path) -> dict[str, Any] | None:
    for _, row in numbered_jsonl(path):
        if isinstance(row, dict):
            return row
    return None


def _kind_of_file(path: Path) -> str:
    row = _first_row(path)
    if row is None:
        raise ViewError(f"{path}: no JSON object in it; expected {EXPECTED}")
    if {"completion", "reward", "gold"} <= row.keys():
        return "audit"
    if "picks" in row and "candidates" in row:
        return "bestofn"
    if "pred" in row and "id" in row:  # an evaluation's predictions, or a user's {"id", "pred"} file
        return "pairwise"
    if "choice" in row and "votes" in row:
        return "verdicts"
    if "question" in row and "candidates" in row:
        raise ViewError(
            f"{path}: these are MC items, not verdicts: judge them (`mrjudge judge --input {path}`), then view the verdicts"
        )
    raise ViewError(f"{path}: its rows are none of the kinds the viewer reads; expected {EXPECTED}")


def _read_run(path: Path, kind: str, thumbs: Thumbnails, options: dict[str, Any]) -> Section:
    if kind == "audit":
        return read_audit(path, thumbs)
    if kind == "verdicts":
        return read_verdicts(path, thumbs, items=options.get("items"))
    if kind == "bestofn":
        return read_bestofn(path.parent, thumbs, data=options.get("data"))
    return read_pairwise(path, thumbs, data=options.get("data"), image_folder=options.get("image_folder"))


def runs_in(folder: Path) -> list[tuple[Path, str]]:
    """The runs below a folder, `(file, kind)` each, in the order they were made (their files' times)."""
    found = []
    for path in sorted(folder.rglob("*.jsonl")):
        depth = len(path.relative_to(folder).parts)
        if depth > MAX_DEPTH or path.name not in ("predictions.jsonl", "audit.jsonl"):
            continue
        try:
            found.append((path, _kind_of_file(path)))
        except ViewError:
            continue
    return sorted(found, key=lambda pk: (pk[0].stat().st_mtime, str(pk[0])))


def _named(section: Section, path: Path, folder: Path) -> Section:
    relative = path.relative_to(folder)
    section.name = str(relative.parent if relative.parent.parts else relative)
    return section


def read_path(path: Path, thumbs: Thumbnails, **options: Any) -> list[Section]:
    """The sections of one path: one run, or every run of a folder of runs plus their comparisons.

    `options`: `data` (the benchmark file), `image_folder`, `items` (the items of a verdicts file).
    """
    if not path.exists():
        raise ViewError(f"{path}: no such file or folder; expected {EXPECTED}")
    if path.is_file():
        return [_read_run(path, _kind_of_file(path), thumbs, options)]
    for name in ("predictions.jsonl", "audit.jsonl"):
        if (path / name).is_file():
            return [_read_run(path / name, _kind_of_file(path / name), thumbs, options)]
    runs = runs_in(path)
    if not runs and (path / "metrics.json").is_file():
        raise ViewError(
            f"{path}: an evaluation scored from a predictions file keeps no predictions of its own; view that "
            "file: `mrjudge view PREDICTIONS.jsonl --data BENCHMARK_FILE`"
        )
    if not runs:
        raise ViewError(f"{path}: no run in this folder; expected {EXPECTED}")
    sections: list[Section] = []
    problems = []
    for run, kind in runs:
        try:
            sections.append(_named(_read_run(run, kind, thumbs, options), run, path))
        except ViewError as exc:
            problems.append(str(exc))
    if not sections:
        raise ViewError("no run in this folder could be read:\n" + "\n".join(problems))
    return sections + _comparisons(sections)


def _comparisons(sections: list[Section]) -> list[Section]:
    """Each judged run against the one made before it over the same benchmark file and the same ids."""
    out = []
    judged = [s for s in sections if s.kind == "judge"]
    for before, after in zip(judged, judged[1:]):
        same_ids = {r["id"] for r in before.rows} == {r["id"] for r in after.rows}
        if before.benchmark == after.benchmark and same_ids:
            out.append(compare_sections(before, after))
    return out
