"""MM-Vet's questions: `mm-vet.json` read and validated (through `jobs.jsonl.parse_records`, as every
benchmark's rows are), and the data hash a run records.

A real `mm-vet.json` entry (images live in `<json dir>/images` by default):

    "v1_0": {"imagename": "v1_0.png", "question": "What is x in the equation?",
             "answer": "-1<AND>-5", "capability": ["ocr", "math"]}
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from eval.provenance import data_provenance, row_sha256, with_image_file
from jobs.jsonl import InputError, Records, parse_records
from judge.types import DataError, require_object

CAPABILITIES = ("rec", "ocr", "know", "gen", "spat", "math")
"""MM-Vet's six core capabilities, in the order of the paper's table (others, e.g. v2's `seq`, follow)."""

MAX_LISTED = 20  # problems listed in one InputError before "... and N more"
_ENTRY_HINT = 'write {"imagename": ..., "question": ..., "answer": ..., "capability": [...]}'


@dataclass(frozen=True)
class MMVetQuestion:
    """One MM-Vet question, validated and with its image path resolved."""

    id: str
    """The key in `mm-vet.json`, e.g. `v1_0`; predictions and grades carry it."""
    image: Path
    """The image file (`images_dir / imagename`)."""
    question: str
    """What the policy is asked; also the first cell of the grader's table row."""
    answer: str
    """The ground truth; `<AND>` joins parts that must all appear, `<OR>` parts of which one suffices."""
    capabilities: tuple[str, ...]
    """Capabilities the question tests (duplicates dropped, as the official `set(capability)` does)."""


def _reject_duplicate_keys(duplicates: list[str]) -> Any:
    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        for key, value in pairs:
            if key in seen:
                duplicates.append(key)
            seen[key] = value
        return seen

    return hook


def read_json_object(path: Path, what: str) -> dict[str, Any]:
    """A JSON file whose top level is an object; duplicate keys (which `json` keeps silently) are an error."""
    if not path.is_file():
        raise InputError(f"{path}: file not found — check the path to the {what}")
    duplicates: list[str] = []
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"), object_pairs_hook=_reject_duplicate_keys(duplicates))
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})") from exc
    if not isinstance(data, dict):
        raise InputError(
            f"{path}: expected a JSON object keyed by question id ({what}), got {type(data).__name__} — "
            'write {"v1_0": ..., "v1_1": ...} as MM-Vet does'
        )
    if duplicates:
        listed = ", ".join(repr(k) for k in dict.fromkeys(duplicates))
        raise InputError(f"{path}: duplicate key(s) {listed} — JSON keeps only the last; give each key once")
    return data


def _parse_entry(row: tuple[str, Any], *, where: str, images_dir: Path) -> MMVetQuestion:
    """Validate one `mm-vet.json` entry, a `(key, entry)` pair; raise `DataError` naming the first bad field."""
    key, entry = row
    require_object(entry, _ENTRY_HINT, where, field_name="<entry>")
    for name, fix in (
        ("imagename", f'add the image file name, e.g. "imagename": "{key}.png"'),
        ("question", "add the question text"),
        ("answer", "add the ground-truth answer (use <AND> / <OR> between parts)"),
        ("capability", 'add the capabilities tested, e.g. "capability": ["rec", "ocr"]'),
    ):
        if name not in entry:
            raise DataError(name, "missing", fix, where)
    for name in ("imagename", "question", "answer"):
        value = entry[name]
        if not isinstance(value, str) or (name == "imagename" and not value):
            expected = "a file name" if name == "imagename" else "a string"
            raise DataError(name, f"expected {expected}, got {value!r}", "write it as a JSON string", where)
    capability = entry["capability"]
    if not isinstance(capability, list) or not all(isinstance(c, str) and c for c in capability):
        raise DataError(
            "capability",
            f"expected a list of capability names, got {capability!r}",
            f'write a list such as ["rec", "ocr"] (MM-Vet capabilities: {", ".join(CAPABILITIES)})',
            where,
        )
    image = images_dir / entry["imagename"]
    if not image.is_file():
        raise DataError(
            "imagename",
            f"image file not found: {image}",
            "unpack MM-Vet's images there or pass images_dir= the folder that holds them",
            where,
        )
    return MMVetQuestion(
        id=key,
        image=image,
        question=entry["question"],
        answer=entry["answer"],
        capabilities=tuple(dict.fromkeys(capability)),
    )


def load_mmvet(
    json_path: str | Path,
    images_dir: str | Path | None = None,
    limit: int | None = None,
    *,
    max_bad_fraction: float = 0.0,
) -> Records:
    """Read and validate `mm-vet.json`, reporting every bad entry at once.

    Args:
        json_path: the official `mm-vet.json` (`{id: {imagename, question, answer, capability}}`).
        images_dir: where the image files are; default `<json dir>/images`, MM-Vet's own layout.
        limit: keep only the first `limit` questions in file order (quick runs); only those are validated.
        max_bad_fraction: leave out bad entries up to this share (listed in the result's `skipped`, counted
            in `data_skipped_rows`) instead of failing (`jobs.jsonl.parse_records`).

    Raises:
        InputError: listing each problem as `FILE entry 'ID': field 'x': problem — fix`.
    """
    if limit is not None and limit < 1:
        raise ValueError(f"limit ({limit}) must be at least 1, or None for every question")
    json_path = Path(json_path)
    images_dir = Path(images_dir) if images_dir is not None else json_path.parent / "images"
    data = read_json_object(json_path, "MM-Vet entries")
    _refuse_v2(json_path, data)
    keys = list(data)[:limit] if limit is not None else list(data)
    entries = ((f"entry {key!r}", (key, data[key])) for key in keys)
    parse = partial(_parse_entry, images_dir=images_dir)
    questions = parse_records(entries, parse, json_path, max_errors=MAX_LISTED, max_bad_fraction=max_bad_fraction)
    if not questions:
        raise InputError(f"{json_path}: no questions — expected MM-Vet's {{id: entry}} object with at least one entry")
    return questions


def mmvet_provenance(questions: Sequence[MMVetQuestion], source: str | None = None) -> dict[str, Any]:
    """`data_sha256` over the questions used: each entry's fields as read and its image file's bytes."""
    hashes = [
        with_image_file(
            row_sha256(
                {
                    "id": q.id,
                    "imagename": q.image.name,
                    "question": q.question,
                    "answer": q.answer,
                    "capability": list(q.capabilities),
                }
            ),
            str(q.image),
        )
        for q in questions
    ]
    default = str(questions[0].image.parent) if questions else ""
    skipped = len(getattr(questions, "skipped", ()))  # `load_mmvet`'s bad entries left out
    return data_provenance(hashes, source=source or default, skipped=skipped)


def _refuse_v2(path: Path, data: Mapping[str, Any]) -> None:
    """MM-Vet v2 interleaves several images inside the question (`<IMG>name.png<IMG>`), has no `imagename`,
    and its evaluator grades with another prompt (`<image>` marks, a Markdown table): refuse it by name."""
    entries = [e for e in data.values() if isinstance(e, Mapping)]
    if any("imagename" not in e and "<IMG>" in str(e.get("question", "")) for e in entries):
        raise InputError(
            f"{path}: this is MM-Vet v2 (questions with <IMG>-separated images, no 'imagename'), which is not "
            "supported: it needs interleaved multi-image prompts and v2's own grader prompt "
            "(MM-Vet v2/mm-vet-v2_evaluator.py). Use MM-Vet v1's mm-vet.json, or grade v2 with its official evaluator."
        )
