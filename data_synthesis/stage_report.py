"""What a synthesis stage says when it ends: a short table of its figures, and whether its output is empty.

The whole summary is a file (`OUT/<stage>.summary.json`); the terminal gets the few figures a person reads
(rows in and out, what was made, what failed and why). A stage that wrote nothing a next stage can use
(no rows, no negatives, no items, an empty split, no traces) is an error unless the caller allows it: a
chain run on empty data used to end with exit 0 and no word, which reads as success.

    lines = stage_table("negatives", summary, Path("runs/synth/negatives.summary.json"))
    problems = empty_parts("negatives", summary)     # ["no negatives were written …"] or []
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["EmptyOutput", "SUMMARY_FILES", "check_not_empty", "empty_parts", "stage_table"]

SUMMARY_FILES = {
    "negatives": "negatives.summary.json",
    "describe": "described.summary.json",
    "assemble": "items.summary.json",
    "distill": "distilled.summary.json",
}
"""Each stage's summary file in its output folder."""


class EmptyOutput(ValueError):
    """A stage's output holds nothing the next stage can use; the message says what, and how to allow it."""


def _counts(counts: Mapping[str, Any]) -> str:
    """`{"a": 2, "b": 0}` → "a 2"; "none" when every count is zero."""
    shown = [f"{key} {value}" for key, value in sorted(counts.items()) if value]
    return ", ".join(shown) or "none"


def _rows(summary: Mapping[str, Any]) -> str:
    now = summary.get("n_processed_now")
    return f"{summary.get('n_in', 0)} in → {summary.get('n_out', 0)} out" + (f" ({now} now)" if now is not None else "")


def _failed(summary: Mapping[str, Any]) -> str:
    failed = summary.get("failed", 0)
    if not failed:
        return "0"
    return f"{failed} ({_counts(summary.get('failed_by_reason', {}))}), listed in {summary.get('failed_file')}"


def stage_table(stage: str, summary: Mapping[str, Any], summary_file: Path) -> list[str]:
    """The stage's figures as aligned `label  value` lines, ending with where the whole summary is."""
    rows: list[tuple[str, str]] = []
    if stage == "assemble":
        splits = summary.get("splits", {})
        rows += [
            ("items", f"{summary.get('items', 0)} ({', '.join(f'{k} {v}' for k, v in splits.items()) or 'no split'})"),
            ("options", _counts({f"k={k}": v for k, v in summary.get("options_histogram", {}).items()})),
            ("skipped", _counts(summary.get("skipped", {}))),
        ]
    else:
        rows.append(("rows", _rows(summary)))
        if stage == "negatives":
            n_out = summary.get("n_out", 0)
            per_row = f"{summary.get('negatives', 0) / n_out:.1f} a row; " if n_out else ""
            rows += [
                (
                    "negatives",
                    f"{summary.get('negatives', 0)} ({per_row}{summary.get('rows_without_negatives', 0)} rows "
                    "without any)",
                ),
                ("by category", _counts(summary.get("negatives_per_paper_category", {}))),
                ("rejected", _counts(summary.get("rejected", {}))),
            ]
        elif stage == "distill":
            kept = summary.get("kept_fraction")
            rows += [
                ("kept", f"{summary.get('kept', 0)}" + ("" if kept is None else f" ({kept:.0%})")),
                ("SFT traces", f"train {summary.get('sft_train', 0)}, val {summary.get('sft_val', 0)}"),
                ("dropped", _counts(summary.get("drop_reasons", {}))),
            ]
        rows.append(("failed", _failed(summary)))
        if summary.get("wall_s") is not None:
            rows.append(("time", f"{summary['wall_s']:.1f} s"))
    rows.append(("summary", str(summary_file)))
    width = max(len(label) for label, _ in rows)
    return [f"{stage if i == 0 else '':<10}  {label:<{width}}  {value}" for i, (label, value) in enumerate(rows)]


def empty_parts(stage: str, summary: Mapping[str, Any], *, val_fraction: float | None = None) -> list[str]:
    """What of the stage's output is empty, each as a phrase naming the likely cause; `[]` when nothing is."""
    problems = []
    if stage == "assemble":
        splits = summary.get("splits", {})
        if not summary.get("items"):
            problems.append("no MC items were assembled (no record had a negative)")
        elif val_fraction and not splits.get("val"):
            groups = summary.get("items", 0)
            problems.append(
                f"the val split is empty (val_fraction {val_fraction:g} of at most {groups} record groups held out "
                "none): raise --val-fraction (synth all: assemble.val_fraction=…) or give more records"
            )
        return problems
    if not summary.get("n_out"):
        problems.append(f"no rows were written ({summary.get('n_in', 0)} came in)")
    elif stage == "negatives" and not summary.get("negatives"):
        problems.append(f"no negatives were written for any of the {summary.get('n_out')} rows")
    elif stage == "distill" and not summary.get("sft_train"):
        problems.append(f"no SFT traces were kept (dropped: {_counts(summary.get('drop_reasons', {}))})")
    return problems


def check_not_empty(stages: Sequence[tuple[str, Mapping[str, Any], Mapping[str, Any]]], *, allow_empty: bool) -> None:
    """Raise one `EmptyOutput` naming everything empty in `(stage, summary, empty_parts options)`, unless
    `allow_empty`: a single stage checks itself, `synth all` its whole chain."""
    problems = [
        f"{stage}: {problem}"
        for stage, summary, options in stages
        for problem in empty_parts(stage, summary, **options)
    ]
    if problems and not allow_empty:
        raise EmptyOutput(f"{'; '.join(problems)} — fix the input, or pass --allow-empty to accept it")
