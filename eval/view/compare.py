"""Two runs side by side: items matched by id, each pair named by what changed.

The question a person asks of a new judge (the GRPO one after the SFT one, a new prompt, a larger model) is
not "how much better" but "better where, and worse where": which items it now gets right, which it lost,
and where both are wrong but for different reasons.
"""

from __future__ import annotations

from typing import Any

from eval.view.readers import Section
from eval.view.summary import compare_header

__all__ = ["CHANGES", "compare_sections"]

CHANGES = ("right → wrong", "wrong → right", "both wrong, other picks", "both wrong, same pick", "both right", "other")
"""What happened to an item from run A to run B (undecided counts as wrong; `other` is an unlabelled pair)."""


def _change(a: dict[str, Any], b: dict[str, Any]) -> str:
    if a["correct"] is None and a["status"] != "undecided" or b["correct"] is None and b["status"] != "undecided":
        return "other"
    right_a, right_b = bool(a["correct"]), bool(b["correct"])
    if right_a and right_b:
        return "both right"
    if right_a:
        return "right → wrong"
    if right_b:
        return "wrong → right"
    return "both wrong, same pick" if a["pick"] == b["pick"] else "both wrong, other picks"


def compare_sections(a: Section, b: Section, name: str | None = None) -> Section:
    """A `compare` section: one row per id both runs judged, holding both rows."""
    by_id = {row["id"]: row for row in b.rows}
    ids_a = {row["id"] for row in a.rows}
    rows = []
    for row_a in a.rows:
        row_b = by_id.get(row_a["id"])
        if row_b is None:
            continue
        rows.append(
            {
                "id": row_a["id"],
                "status": _change(row_a, row_b),
                "question": row_a["question"],
                "image": row_a["image"] or row_b["image"],
                "category": row_a["category"],
                "subset": row_a["subset"],
                "flaw": row_a["flaw"],
                "confidence": row_b.get("confidence"),
                "a": row_a,
                "b": row_b,
            }
        )
    section = Section(
        name=name or f"{a.name} → {b.name}",
        kind="compare",
        source=f"{a.source} → {b.source}",
        rows=rows,
        benchmark=a.benchmark,
    )
    section.header = compare_header(rows, len(ids_a - set(by_id)), len(set(by_id) - ids_a))
    section.header["names"] = [a.name, b.name]
    return section
