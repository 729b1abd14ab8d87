"""A best-of-N run: judge each question's candidates, grade every candidate (cached), score, write the report."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from eval.common import bar_chart, resumable_predictions, write_json_atomic, write_text_atomic
from eval.mmvet.data import MAX_LISTED, MMVetQuestion, mmvet_provenance
from eval.mmvet.grade_cache import GradeCache, backend_label, read_rows_by_id
from eval.mmvet.grader import Grade
from eval.mmvet.report import mmvet_report
from eval.mmvet.scoring import SELECTORS, capabilities_in, oracle_pick, random_pick, score_mmvet
from jobs.executor import Executor
from jobs.jsonl import InputError
from jobs.judge_file import JudgeSpec, judge_settings, select_work
from jobs.resumable import discard_output
from judge.backends.base import Backend
from judge.judging import Judge
from judge.prompt import MAX_CANDIDATES
from judge.types import MCItem, Verdict


def _check_candidates(questions: Sequence[MMVetQuestion], candidates: Mapping[str, Sequence[str]]) -> int:
    missing = [q.id for q in questions if q.id not in candidates]
    if missing:
        raise InputError(f"no candidates for question(s) {missing[:MAX_LISTED]} — give every question N answers")
    sizes = {len(candidates[q.id]) for q in questions}
    if len(sizes) != 1 or not 2 <= min(sizes) <= MAX_CANDIDATES:
        raise InputError(
            f"every question needs the same number N of candidates, 2 <= N <= {MAX_CANDIDATES}; got {sorted(sizes)}"
        )
    return sizes.pop()


def _row(
    question: MMVetQuestion,
    candidates: Sequence[str],
    runs: list[list[dict[str, Any]]],
    verdict: Verdict,
    seed: int,
) -> dict[str, Any]:
    grades = runs[0]
    scores = [g["score"] for g in grades]
    mean_scores = [sum(run[j]["score"] for run in runs) / len(runs) for j in range(len(candidates))]
    judge_pick = verdict.choice if verdict.choice is not None else 0  # undecided: fall back to "first"
    bracket = {} if verdict.games is None else {"judge_games": verdict.games}  # a judge that plays pairwise games
    return {
        "id": question.id,
        "question": question.question,
        "answer": question.answer,
        "capabilities": list(question.capabilities),
        "candidates": list(candidates),
        "grades": scores,
        "grade_runs": [[g["score"] for g in run] for run in runs],
        "grader_tries": [g["tries"] for g in grades],
        "grader_failed": [g["failed"] for g in grades],
        "picks": {
            "first": 0,
            "random": random_pick(seed, question.id, len(candidates)),
            "judge": judge_pick,
            "oracle": oracle_pick(mean_scores),
        },
        "judge_choice": verdict.choice,
        "judge_votes": verdict.votes,
        "judge_probs": verdict.probs,
        "judge_raw": verdict.raw,
        "consistent": verdict.consistent,
        **bracket,
    }


def mmvet_settings(judge: Judge | JudgeSpec, seed: int) -> dict[str, Any]:
    """What shapes a best-of-N run's `predictions.jsonl` rows: the judge and the seed of the random pick."""
    return {"judge": judge_settings(judge), "seed": seed}


def run_mmvet(
    judge: Judge | JudgeSpec,
    questions: Sequence[MMVetQuestion],
    candidates: Mapping[str, Sequence[str]],
    grader_backend: Backend,
    out_dir: str | Path,
    *,
    seed: int = 0,
    batch_size: int = 32,
    show_progress: bool = True,
    engine: Executor | None = None,
    num_runs: int = 1,
    data_source: str | None = None,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Best-of-N on MM-Vet: judge each question's candidates, grade every candidate, score each selector.

    Every candidate is graded (the oracle needs all grades). A run in an existing `out_dir` resumes:
    finished questions are read back from `predictions.jsonl` and graded candidates from `grades.jsonl`,
    so no judge or grader call is repeated. An `out_dir` belongs to one configuration (judge, candidates,
    seed): the judge's settings and the seed are recorded beside `predictions.jsonl`, and a rerun with
    others is refused (`jobs.resumable.SettingsChanged`) unless `overwrite`, which starts the folder's
    predictions and grades over.

    Args:
        judge: the judge (`judge.select` decides among the N candidates); a `JudgeSpec` to build it where
            the batches run (needed for `engine=RayExecutor(…)`).
        questions: from `load_mmvet`.
        candidates: `{id: [N answers]}` from `load_candidates` or `generate_candidates`.
        grader_backend: the grader, in practice `OpenAIBackend(url, model_name="gpt-4-0613")`.
        out_dir: the run directory (see the module docstring).
        seed: seeds the `random` selector.
        batch_size: questions judged and graded per step; a crash loses at most one step.
        show_progress: draw a progress bar.
        engine: where the judge runs (default: this process). Grading stays in this process: the grader is
            an HTTP endpoint, called concurrently, with its answers cached in `grades.jsonl`.
        num_runs: independent gradings of every candidate (the MM-Vet paper: 5); scores are their mean,
            `*_total_std` their spread. A later run with more gradings adds only the missing ones.
        data_source: recorded as `data_source` beside `data_sha256` (default: the questions' image folder).
        overwrite: discard the predictions and grades an earlier run left in `out_dir` and make them again.

    Returns:
        The metrics written to `metrics.json` (see `score_mmvet`).
    """
    if not questions:
        raise InputError("no MM-Vet questions to evaluate")
    _check_candidates(questions, candidates)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    by_id = {q.id: q for q in questions}
    predictions = out / "predictions.jsonl"
    if overwrite:
        discard_output(predictions)
        discard_output(out / "grades.jsonl")
    for qid, row in read_rows_by_id(predictions, predictions.with_name(predictions.name + ".partial")).items():
        if qid in by_id and row.get("candidates") != list(candidates[qid]):
            raise InputError(
                f"{predictions}: question {qid!r} was judged on other candidates in an earlier run — "
                "use a fresh output folder for new candidates"
            )
    if num_runs < 1:
        raise InputError(f"--num-runs {num_runs}: give at least 1 grading run (the MM-Vet paper uses 5)")
    cache = GradeCache(out / "grades.jsonl", grader_backend, runs=num_runs)

    def graded_runs(q: MMVetQuestion) -> list[list[dict[str, Any]]]:
        return [cache.grades(q, candidates[q.id], run) for run in range(num_runs)]

    items = [
        MCItem(id=q.id, question=q.question, candidates=list(candidates[q.id]), image=str(q.image)) for q in questions
    ]

    def grade(batch: Sequence[MCItem], verdicts: list[Verdict]) -> list[dict[str, Any]]:
        asked = [by_id[item.id] for item in batch]
        cache.fill([(q, candidates[q.id]) for q in asked])
        return [_row(q, candidates[q.id], graded_runs(q), v, seed) for q, v in zip(asked, verdicts)]

    try:
        rows = resumable_predictions(
            predictions,
            items,
            select_work(judge, engine),
            batch_size=batch_size,
            description="MM-Vet best-of-N",
            show_progress=show_progress,
            engine=engine,
            finish=grade,
            settings=mmvet_settings(judge, seed),
        )
        cache.fill([(by_id[row["id"]], candidates[row["id"]]) for row in rows])  # runs added to an old folder
        cache.writer.finish()
    finally:
        cache.writer.close()
    metrics = score_mmvet(
        [by_id[row["id"]] for row in rows],
        {
            row["id"]: [
                Grade(s, t, failed=f) for s, t, f in zip(row["grades"], row["grader_tries"], row["grader_failed"])
            ]
            for row in rows
        },
        {selector: {row["id"]: row["picks"][selector] for row in rows} for selector in SELECTORS},
        judge_undecided=[row["id"] for row in rows if row["judge_choice"] is None],
        judge_consistent={row["id"]: row["consistent"] for row in rows},
        grade_runs={row["id"]: [[g["score"] for g in run] for run in graded_runs(by_id[row["id"]])] for row in rows},
        seed=seed,
    )
    metrics.update(mmvet_provenance(questions, data_source))
    write_json_atomic(out / "metrics.json", metrics)

    capabilities = capabilities_in(questions)
    graders = sorted({row.get("grader", "?") for row in cache.rows.values()}) or [backend_label(grader_backend)]
    endpoint = getattr(grader_backend, "base_url", None)
    grader = ", ".join(f"`{g}`" for g in graders) + (f" at {endpoint}" if endpoint else f" ({grader_backend.name})")
    if len(graders) > 1:
        grader += " (WARNING: grades from more than one grader model are mixed in this folder)"
    judge_name = judge.model.backend_name if isinstance(judge, JudgeSpec) else judge.backend.name
    write_text_atomic(out / "report.md", mmvet_report(metrics, capabilities, grader, judge_name))
    bar_chart(
        out / "mmvet_by_capability.png",
        {selector: {c: 100 * metrics[f"{selector}_{c}"] for c in [*capabilities, "total"]} for selector in SELECTORS},
        title=f"MM-Vet best-of-{metrics['n_candidates']} by capability",
        ylabel="MM-Vet score",
        ylim=(0, 110),  # headroom for the value labels on bars at 100
    )
    return metrics
