"""Each kind of file the viewer reads, as the page's rows: a pairwise evaluation (VL-RewardBench, Multimodal
RewardBench), `mrjudge judge`'s verdicts beside their items, an MM-Vet best-of-N run, a reward audit.

A reader takes the rows it can and counts the ones it cannot (`Section.skipped`, the first problems in
`Section.problems`), as `mrjudge judge` does: one bad line does not hide a 10,000-item run. A file in which
no row reads is not of that kind (`ViewError`, naming what was expected).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eval.view.rows import game_calls, judge_config_of, judge_row
from eval.view.thumbs import Thumbnails
from jobs.jsonl import InputError, UnparsableLine, numbered_jsonl, read_json_list
from judge.types import DataError, MCItem

__all__ = [
    "Section",
    "ViewError",
    "read_audit",
    "read_bestofn",
    "read_pairwise",
    "read_verdicts",
]

MAX_PROBLEMS = 20
"""Bad rows listed by name on the page (all are counted)."""


class ViewError(InputError):
    """The input is not a kind the viewer reads, or what it needs beside it is missing."""


@dataclass
class Section:
    """One run on the page: its rows and where they came from (a tab of the page)."""

    name: str
    kind: str
    """`judge` (verdicts and pairwise evaluations), `bestofn`, `audit` or `compare`."""
    source: str
    rows: list[dict[str, Any]]
    skipped: int = 0
    problems: list[str] = field(default_factory=list)
    benchmark: str = ""
    header: dict[str, Any] = field(default_factory=dict)
    """The figures above the rows (`eval.view.summary`)."""

    def skip(self, where: str, problem: str) -> None:
        self.skipped += 1
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(f"{where}: {problem}")


def _json_rows(path: Path, section: Section, need: tuple[str, ...]) -> list[dict[str, Any]]:
    """The objects of a JSONL file that have the `need`ed keys; other lines are skipped and counted."""
    rows = []
    for number, row in numbered_jsonl(path):
        where = f"{path.name} line {number}"
        if not isinstance(row, dict):
            section.skip(where, row.problem if isinstance(row, UnparsableLine) else "not a JSON object")
        elif missing := [k for k in need if k not in row]:
            section.skip(where, f"missing {', '.join(repr(k) for k in missing)}")
        else:
            rows.append(row)
    return rows


def _none_read(section: Section, path: Path, expected: str) -> None:
    if not section.rows:
        first = f"; first problem: {section.problems[0]}" if section.problems else " (the file is empty)"
        raise ViewError(f"{path}: no row reads as {expected}{first}")


def _metrics(run_dir: Path) -> dict[str, Any]:
    """A run folder's `metrics.json` (where its benchmark file is named), or {} when it has none."""
    try:
        return json.loads((run_dir / "metrics.json").read_text())
    except (OSError, ValueError):
        return {}


def _settings(path: Path) -> dict[str, Any]:
    """The settings recorded beside a JSONL of rows (`jobs.resumable`), or {}."""
    settings = path.with_name(f"{path.name.removesuffix('.jsonl')}.settings.json")
    try:
        return json.loads(settings.read_text())
    except (OSError, ValueError):
        return {}


# -- pairwise evaluations ---------------------------------------------------------------------------------


def _benchmark_module(name: str) -> Any:
    if name == "multimodal_rewardbench":
        from eval import multimodal_rewardbench

        return multimodal_rewardbench
    from eval.vl_rewardbench import data

    return data


def _benchmark_of(predictions: Path, metrics: Mapping[str, Any], data: Path | None) -> str:
    """Which benchmark: as the run recorded it, else as its metrics or its data file read."""
    recorded = _settings(predictions).get("benchmark")
    if recorded in ("vl_rewardbench", "multimodal_rewardbench"):
        return recorded
    if metrics:
        vlrb = "accuracy_hallucination" in metrics or "macro_accuracy" in metrics
        return "vl_rewardbench" if vlrb else "multimodal_rewardbench"
    if data is not None and data.suffix in (".jsonl", ".json"):  # a user's predictions file beside no metrics
        first = next((row for _, row in _data_rows(data) if isinstance(row, dict)), {})
        return "multimodal_rewardbench" if "Better" in first else "vl_rewardbench"
    return "vl_rewardbench"  # the hub's Parquet


def _data_rows(data: Path) -> Iterable[tuple[str, Any]]:
    if data.suffix == ".jsonl":
        for number, row in numbered_jsonl(data):
            yield f"line {number}", row
    elif data.suffix == ".json":
        yield from ((f"item {i}", row) for i, row in enumerate(read_json_list(data, str(data), "a JSON list of items")))
    else:
        raise ViewError(f"{data}: this benchmark's file is read as .jsonl or .json; give one as --data")


def _pair_items(data: Path, benchmark: str, section: Section) -> dict[str, tuple[Any, dict[str, Any]]]:
    """The benchmark's items by id, with each row's own extra columns (a flaw type, a kind)."""
    module = _benchmark_module(benchmark)
    items: dict[str, tuple[Any, dict[str, Any]]] = {}
    if data.suffix not in (".jsonl", ".json") and benchmark == "vl_rewardbench":  # the hub's Parquet: its loader
        loaded = module.load_vl_rewardbench(data, max_bad_fraction=1.0)
        for problem in loaded.skipped:
            section.skip(data.name, str(problem))
        return {item.id: (item, {}) for item in loaded}
    counts: dict[str, int] = defaultdict(int)
    for where, row in _data_rows(data):
        try:
            item = module.item_from_row(row, where=f"{data.name} {where}")
        except DataError as exc:
            section.skip(f"{data.name} {where}", str(exc))
            continue
        counts[item.id] += 1
        if counts[item.id] > 1:  # VL-RewardBench's repeated ids, numbered as the run numbered them
            item.id = f"{item.id}#{counts[item.id]}"
        items[item.id] = (item, row)
    return items


def _verdict(row: dict[str, Any], pick: str) -> dict[str, Any]:
    """What a prediction or verdict row says of its item, as `judge_row` takes it (`pick` names the chosen
    option's field). Votes (or an evaluation's `calls`) and raw outputs that are not lists are left out: a
    hand-edited file loses that column, not the row."""
    votes = row.get("votes") if isinstance(row.get("votes"), list) else row.get("calls")
    raw = row.get("raw")
    return {
        "pick": row.get(pick),
        "votes": votes if isinstance(votes, list) else None,
        "raw": raw if isinstance(raw, list) else None,
        "probs": row.get("probs"),
        "consistent": row.get("consistent"),
        "usage": row.get("usage"),
    }


def read_pairwise(
    predictions_path: Path, thumbs: Thumbnails, *, data: Path | None = None, image_folder: Path | None = None
) -> Section:
    """An evaluation's `predictions.jsonl` (or a user's `{"id", "pred"}` file) with its benchmark file: `data`,
    or the file named in the `metrics.json` beside it (`data_source`)."""
    run_dir = predictions_path.parent
    metrics = _metrics(run_dir)
    named = Path(metrics["data_source"]) if metrics.get("data_source") else None
    source = data or named
    if source is None or not source.is_file():
        said = f" ({named} is not a file here)" if named is not None else ""
        raise ViewError(
            f"{predictions_path}: no benchmark file this machine has goes with these predictions{said}; give the "
            "benchmark's file as --data (.jsonl, .json or VL-RewardBench's Parquet; --image-folder if its images "
            "are elsewhere)"
        )
    benchmark = _benchmark_of(predictions_path, metrics, source)
    name = run_dir.name if predictions_path.name == "predictions.jsonl" else predictions_path.stem
    section = Section(name=name, kind="judge", source=str(run_dir), rows=[], benchmark=benchmark)
    items = _pair_items(source, benchmark, section)
    predictions = _json_rows(predictions_path, section, ("id", "pred"))
    config = judge_config_of(_settings(predictions_path))
    base = image_folder or source.parent
    for row in predictions:
        found = items.get(str(row["id"]))
        if found is None:
            section.skip(f"prediction {row['id']!r}", f"no item with this id in {source.name}")
            continue
        item, data_row = found
        section.rows.append(
            judge_row(
                item_id=item.id,
                question=item.query,
                candidates=item.responses,
                label=item.preferred,
                **_verdict(row, "pred"),
                config=config,
                image=thumbs.add(item.image, base),
                category=item.group,
                subset=item.source,
                flaw=str(data_row.get("flaw") or data_row.get("flaw_type") or ""),
            )
        )
    _none_read(section, predictions_path, "a prediction of an item in " + str(source))
    return section


# -- verdicts of `mrjudge judge` --------------------------------------------------------------------------


def _mc_items(path: Path, section: Section | None) -> dict[str, MCItem]:
    items: dict[str, MCItem] = {}
    for number, row in numbered_jsonl(path):
        try:
            if isinstance(row, UnparsableLine) or not isinstance(row, dict) or "votes" in row:
                raise DataError("row", "not an MC item", "write id, question, candidates", f"line {number}")
            item = MCItem.from_dict(row, where=f"{path.name} line {number}")
        except DataError as exc:
            if section is not None:
                section.skip(f"{path.name} line {number}", str(exc))
            continue
        items[str(item.id)] = item
    return items


def items_beside(verdicts: Path) -> Path | None:
    """The JSONL file in the verdicts' folder whose items cover the most of the verdicts' ids."""
    ids = {str(row.get("id")) for _, row in numbered_jsonl(verdicts) if isinstance(row, dict)}
    best, best_overlap = None, 0
    for candidate in sorted(verdicts.parent.glob("*.jsonl")):
        if candidate == verdicts or candidate.stat().st_size > 2**30:
            continue
        overlap = len(ids & set(_mc_items(candidate, None)))
        if overlap > best_overlap:
            best, best_overlap = candidate, overlap
    return best


def read_verdicts(path: Path, thumbs: Thumbnails, *, items: Path | None = None) -> Section:
    """A verdicts JSONL with the items it judged (`items`, or the JSONL beside it that holds them)."""
    items_path = items or items_beside(path)
    if items_path is None:
        raise ViewError(
            f"{path}: verdicts need the items they judged, and no JSONL of MC items beside it has their ids; "
            "give the file `mrjudge judge --input` read as --items"
        )
    section = Section(name=path.stem, kind="judge", source=str(path), rows=[])
    by_id = _mc_items(items_path, section)
    config = judge_config_of(_settings(path))
    for row in _json_rows(path, section, ("id", "choice", "votes")):
        item = by_id.get(str(row["id"]))
        if item is None:
            section.skip(f"verdict {row['id']!r}", f"no item with this id in {items_path.name}")
            continue
        flaws = item.meta.get("flaws") if isinstance(item.meta.get("flaws"), list) else []
        pick = row.get("choice")
        flaw = flaws[pick] if isinstance(pick, int) and 0 <= pick < len(flaws) and flaws[pick] else ""
        section.rows.append(
            judge_row(
                item_id=item.id,
                question=item.question,
                candidates=item.candidates,
                label=item.label,
                **_verdict(row, "choice"),
                config=config,
                image=thumbs.add(item.images[0], items_path.parent) if item.images else None,
                category=str(item.meta.get("category") or item.meta.get("source") or ""),
                subset=str(item.meta.get("split") or ""),
                flaw=str(flaw),
            )
        )
    _none_read(section, path, f"a verdict of an item in {items_path}")
    return section


# -- MM-Vet best-of-N ------------------------------------------------------------------------------------


def _mmvet_images(metrics: Mapping[str, Any], data: Path | None) -> dict[str, Path]:
    """Question id → image file, from `data` (mm-vet.json) or the JSON beside the image folder the run used."""
    from eval.mmvet.data import load_mmvet

    candidates = [data] if data is not None else []
    source = Path(metrics["data_source"]) if metrics.get("data_source") else None
    if source is not None and source.is_file():
        candidates.append(source)
    elif source is not None and source.is_dir():
        candidates += sorted(source.parent.glob("*.json"))
    for json_path in candidates:
        try:
            return {q.id: q.image for q in load_mmvet(json_path, max_bad_fraction=1.0)}
        except (InputError, DataError, OSError):
            continue
    return {}


def read_bestofn(run_dir: Path, thumbs: Thumbnails, *, data: Path | None = None) -> Section:
    """A best-of-N folder: each question's N answers, the judge's calls, the picks and the grader's scores."""
    images = _mmvet_images(_metrics(run_dir), data)
    section = Section(name=run_dir.name, kind="bestofn", source=str(run_dir), rows=[], benchmark="mmvet")
    config = judge_config_of(_settings(run_dir / "predictions.jsonl"))
    for row in _json_rows(run_dir / "predictions.jsonl", section, ("id", "question", "candidates", "picks")):
        grades = [float(g) for g in row.get("grades") or []]
        pick = row.get("judge_choice")
        best = max(grades) if grades else None
        record = judge_row(
            item_id=row["id"],
            question=str(row["question"]),
            candidates=row["candidates"],
            label=None,
            pick=pick,
            votes=row.get("judge_votes"),
            raw=row.get("judge_raw"),
            probs=row.get("judge_probs"),
            consistent=row.get("consistent"),
            config=config,
            image=thumbs.add(str(images[str(row["id"])]), None) if str(row["id"]) in images else None,
            category=", ".join(row.get("capabilities") or []),
        )
        picked_grade = grades[pick] if isinstance(pick, int) and 0 <= pick < len(grades) else None
        if pick is not None:  # the grader is the label: did the judge pick a best-graded answer?
            record["correct"] = picked_grade is not None and picked_grade == best
        if record["status"] == "unlabelled":
            record["status"] = "right" if record["correct"] else "wrong"
        if isinstance(row.get("judge_games"), list):  # the judge's bracket: pairwise games, not one listwise call
            record["games"] = [{k: g.get(k) for k in ("round", "players", "winner")} for g in row["judge_games"]]
            record["calls"] = game_calls(row["judge_games"], row.get("judge_raw") or [])
        record.update(reference=row.get("answer"), grades=grades, picks=row.get("picks"), picked_grade=picked_grade)
        section.rows.append(record)
    _none_read(section, run_dir / "predictions.jsonl", "a best-of-N question")
    return section


# -- the reward audit ------------------------------------------------------------------------------------


def _audit_status(reward: float | None, gold: float | None, even: float) -> str:
    """As `judge.reward.audit.figures` reads a sample: paid is above an even share, right is gold ≥ 0.5."""
    if gold is None or reward is None:
        return "no gold"
    if gold < 0.5:
        return "overpaid" if reward > even else "agreed"
    return "underpaid" if reward < even / 2 else "agreed"


def read_audit(path: Path, thumbs: Thumbnails) -> Section:
    """`audit.jsonl`: each audited answer, what the judge paid, its reasoning, and the gold."""
    section = Section(name=path.parent.name or path.stem, kind="audit", source=str(path), rows=[])
    rows = _json_rows(path, section, ("step", "completion", "reward", "gold"))
    group_sizes: dict[tuple[Any, Any], int] = defaultdict(int)
    for row in rows:
        group_sizes[(row["step"], row.get("prompt"))] += 1
    for i, row in enumerate(rows):
        reward, gold = row.get("reward"), row.get("gold")
        # a file from before `even` was recorded: read as a share of the group (1/G), the listwise and tournament case
        even = row.get("even") or 1 / group_sizes[(row["step"], row.get("prompt"))]
        images = row.get("images") if isinstance(row.get("images"), list) else []
        section.rows.append(
            {
                "id": f"step {row['step']} · {i}",
                "step": row["step"],
                "window": row.get("window"),
                "question": _prompt_text(row.get("prompt")),
                "completion": str(row.get("completion")),
                "reward": reward,
                "gold": gold,
                "even": even,
                "reference": row.get("reference"),
                "reasoning": _reasoning_text(row.get("reasoning")),
                "auditor": row.get("auditor") or "",
                "status": _audit_status(reward, gold, even),
                "confidence": reward,
                "image": thumbs.add(images[0], path.parent) if images else None,
                "category": row.get("auditor") or "",
                "subset": f"window {row.get('window')}",
                "flaw": "",
            }
        )
    _none_read(section, path, "an audited sample (step, completion, reward, gold)")
    return section


def _reasoning_text(reasoning: Any) -> str:
    """The judge's reasoning: one text, or one per verdict behind the reward (a tournament's games)."""
    if isinstance(reasoning, list):
        return (
            "\n\n".join(f"[verdict {i + 1}] {text}" for i, text in enumerate(reasoning))
            if len(reasoning) > 1
            else (str(reasoning[0]) if reasoning else "")
        )
    return "" if reasoning is None else str(reasoning)


def _prompt_text(prompt: Any) -> str:
    """A prompt as text: a chat's messages joined (TRL's conversational prompts), a string as it is."""
    if isinstance(prompt, list):
        parts = []
        for message in prompt:
            content = message.get("content") if isinstance(message, Mapping) else message
            if isinstance(content, list):
                content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
            parts.append(str(content))
        return "\n".join(parts)
    return "" if prompt is None else str(prompt)


READERS: dict[str, Callable[..., Section]] = {
    "pairwise": read_pairwise,
    "verdicts": read_verdicts,
    "bestofn": read_bestofn,
    "audit": read_audit,
}
"""The kinds, by name (`eval.view.recognise` picks one from a path's contents)."""
