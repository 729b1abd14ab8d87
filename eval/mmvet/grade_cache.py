"""`OUT/grades.jsonl` as the grader's cache: a (question, candidate, grading run) is sent to the grader once,
even across crashes and reruns."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from eval.mmvet.data import MMVetQuestion
from eval.mmvet.grader import grade_predictions
from jobs.jsonl import ResumableJsonlWriter, read_complete_rows
from judge.backends.base import Backend


def _grade_key(question_id: str, index: int, text: str, run: int = 0) -> str:
    """Stable cache key: a changed candidate text gets a new key, so a stale grade is never reused; grading
    run r > 0 (`--num-runs`) adds `#run{r}`, so run 0 keeps the key older caches have."""
    key = f"{question_id}#{index}#{hashlib.sha256(text.encode('utf-8')).hexdigest()[:16]}"
    return key if run == 0 else f"{key}#run{run}"


def read_rows_by_id(*paths: Path) -> dict[str, dict[str, Any]]:
    """Rows of JSONL files by id (the first wins), dropping torn or unparsable lines (a crash mid-write)."""
    rows: dict[str, dict[str, Any]] = {}
    for path in paths:
        for row in read_complete_rows(path):
            rows.setdefault(row["id"], row)
    return rows


def backend_label(backend: Backend) -> str:
    """The grader's model name where the backend knows it (recorded with each grade), else the backend's."""
    model = getattr(backend, "model_name", None)
    return str(model) if model else backend.name


class GradeCache:
    """`OUT/grades.jsonl` as a cache: only (question, candidate) pairs not graded before reach the grader."""

    def __init__(self, path: Path, backend: Backend, runs: int = 1) -> None:
        self.backend = backend
        self.runs = runs
        self.rows = read_rows_by_id(path, path.with_name(path.name + ".partial"))
        self.writer = ResumableJsonlWriter(path)

    def grades(self, question: MMVetQuestion, candidates: Sequence[str], run: int = 0) -> list[dict[str, Any]]:
        return [self.rows[_grade_key(question.id, j, c, run)] for j, c in enumerate(candidates)]

    def fill(self, jobs: Sequence[tuple[MMVetQuestion, Sequence[str]]]) -> None:
        todo = [
            (question, j, text, run)
            for run in range(self.runs)
            for question, candidates in jobs
            for j, text in enumerate(candidates)
            if _grade_key(question.id, j, text, run) not in self.rows
        ]
        if not todo:
            return
        grades = grade_predictions(self.backend, [(q, text) for q, _, text, _ in todo])
        grader = backend_label(self.backend)  # known after the first call even when not given
        new = [
            {
                "id": _grade_key(q.id, j, text, run),
                "question_id": q.id,
                "candidate": j,
                "run": run,
                "score": g.score,
                "tries": g.tries,
                "failed": g.failed,
                "raw": g.raw,
                "grader": grader,
            }
            for (q, j, text, run), g in zip(todo, grades)
        ]
        self.writer.write(new)
        self.rows.update((row["id"], row) for row in new)
