"""The N candidate answers per question: read from official-format prediction files, written back in that
format, or sampled from a policy (`generate_candidates`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from eval.common import progress_bar, resumable_predictions, write_json_atomic
from eval.mmvet.data import MAX_LISTED, MMVetQuestion, read_json_object
from jobs.executor import BatchFn, Executor, LocalExecutor
from jobs.jsonl import InputError, raise_problems
from judge.backends.base import Backend, ChatRequest, SamplingParams
from judge.backends.spec import ModelSpec
from judge.images import load_image
from judge.judging import batch_seed
from judge.prompt import MAX_CANDIDATES


def load_candidates(
    files: Sequence[str | Path], questions: Sequence[MMVetQuestion] | None = None
) -> dict[str, list[str]]:
    """Read N official-format prediction files (`{id: answer}`); candidate j of a question comes from file j.

    With `questions`, every question asked must have an answer in every file (a question missing from
    some or all files is an error naming the file and id) and ids in the files that were not asked are
    ignored, so the full-benchmark files work with `load_mmvet(..., limit=...)`. Without `questions`, the
    ids are those of any file, and each must be in all of them.

    Returns:
        `{id: [answer from file 0, answer from file 1, ...]}`, in the order of `questions` (or of file 0).

    Raises:
        InputError: fewer than two files, a file that is not a JSON object, a missing id or a non-string
            answer; all problems are listed together.
    """
    paths = [Path(f) for f in files]
    if not 2 <= len(paths) <= MAX_CANDIDATES:
        raise InputError(
            f"best-of-N needs 2 to {MAX_CANDIDATES} candidate files (one per policy or sample), got {len(paths)}"
        )
    tables = [read_json_object(p, "candidate answers") for p in paths]
    if questions is not None:
        ids = [q.id for q in questions]
    else:
        ids = list(dict.fromkeys(key for table in tables for key in table))
    problems = []
    for qid in ids:
        absent = [p for p, table in zip(paths, tables) if qid not in table]
        if len(absent) == len(paths):
            problems.append(f"id {qid!r}: in none of the candidate files — every question needs an answer in each")
        else:
            problems += [
                f"{p}: id {qid!r}: missing — add an answer for {qid!r} (candidate files must align)" for p in absent
            ]
        for p, table in zip(paths, tables):
            if qid in table and not isinstance(table[qid], str):
                problems.append(f"{p}: id {qid!r}: expected the answer as a string, got {table[qid]!r}")
    raise_problems(", ".join(map(str, paths)), problems, max_listed=MAX_LISTED)
    return {qid: [table[qid] for table in tables] for qid in ids}


def save_candidates(
    candidates: Mapping[str, Sequence[str]], out_dir: str | Path, prefix: str = "candidates"
) -> list[Path]:
    """Write candidates as N official-format files `{prefix}_{j}.json`, readable by `load_candidates` and by
    the official evaluator (each file is a complete MM-Vet prediction set)."""
    sizes = {len(c) for c in candidates.values()}
    if len(sizes) != 1:
        raise ValueError(f"every question needs the same number of candidates, got sizes {sorted(sizes)}")
    paths = []
    for j in range(sizes.pop()):
        path = Path(out_dir) / f"{prefix}_{j}.json"
        write_json_atomic(path, {qid: answers[j] for qid, answers in candidates.items()})
        paths.append(path)
    return paths


def _sample_candidates(
    backend: Backend,
    batch: Sequence[MMVetQuestion],
    *,
    n: int,
    temperature: float,
    top_p: float,
    max_new_tokens: int,
    seed: int,
) -> list[dict[str, Any]]:
    """`n` answers per question of one batch, seeded by the batch's first question id."""
    requests = [ChatRequest.user(q.question, [load_image(str(q.image))]) for q in batch for _ in range(n)]
    params = SamplingParams(max_new_tokens, temperature, top_p, seed=batch_seed(seed, batch, "candidates"))
    texts = [g.text for g in backend.generate(requests, params)]
    if len(texts) != len(requests):
        raise RuntimeError(f"backend {backend.name} returned {len(texts)} results for {len(requests)} requests")
    return [{"id": q.id, "candidates": texts[i * n : (i + 1) * n]} for i, q in enumerate(batch)]


def _candidate_sampler(spec: ModelSpec, sampling: dict[str, Any]) -> Any:
    return partial(_sample_candidates, spec.build(), **sampling)


def generate_candidates(
    backend: Backend | ModelSpec,
    questions: Sequence[MMVetQuestion],
    n: int,
    *,
    temperature: float = 0.7,
    top_p: float = 1.0,
    max_new_tokens: int = 512,
    seed: int = 0,
    batch_size: int = 8,
    cache_path: str | Path | None = None,
    show_progress: bool = True,
    engine: Executor | None = None,
    overwrite: bool = False,
) -> dict[str, list[str]]:
    """Sample `n` answers per question from a policy: the question as one user turn with its image.

    Args:
        backend: the policy's inference engine, or a `ModelSpec` to build it where the batches run.
        questions: from `load_mmvet`.
        n: answers per question (N of best-of-N); more than one needs `temperature > 0`.
        temperature, top_p, max_new_tokens: decoding.
        seed: seeds each batch's sampling (derived from its first question id).
        batch_size: questions per backend call (each makes `n` requests).
        cache_path: a JSONL file (e.g. `OUT/candidates.jsonl`) that makes sampling resumable; the policy and
            decoding are recorded beside it, and resuming it with others is refused (`SettingsChanged`).
        show_progress: draw a progress bar.
        engine: where sampling runs (default: this process).
        overwrite: discard the candidates an earlier run left in `cache_path` and sample them all again.

    Returns:
        `{id: [answer, ...]}` in the order of `questions`.
    """
    if n < 1:
        raise ValueError(f"n ({n}) must be at least 1")
    if n > 1 and temperature == 0:
        raise ValueError(f"n ({n}) > 1 with temperature 0 repeats one greedy answer; set temperature > 0 (e.g. 0.7)")
    SamplingParams(max_new_tokens, temperature, top_p)  # validates the decoding fields early

    sampling = dict(n=n, temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens, seed=seed)
    if isinstance(backend, ModelSpec):
        predict = BatchFn.on_models(partial(_candidate_sampler, backend, sampling), backend, name="sampling")
    elif engine is not None and engine.name != "local":
        raise ValueError(
            f"a loaded backend samples only on the local engine; give the {engine.name} engine a ModelSpec"
        )
    else:
        predict = BatchFn.of(partial(_sample_candidates, backend, **sampling), "sampling")
    if cache_path is not None:
        policy = backend.settings() if isinstance(backend, ModelSpec) else {"backend": backend.name}
        rows = resumable_predictions(
            cache_path,
            questions,
            predict,
            batch_size=batch_size,
            description="sampling",
            show_progress=show_progress,
            engine=engine,
            settings={"policy": policy, "sampling": sampling},
            overwrite=overwrite,
        )
    else:
        batches = [questions[start : start + batch_size] for start in range(0, len(questions), batch_size)]
        done: dict[int, list[dict[str, Any]]] = {}
        with progress_bar("sampling", enabled=show_progress) as (set_total, advance):
            set_total(len(questions))
            for index, outputs in (engine or LocalExecutor()).map_batches(batches, predict):
                done[index] = outputs
                advance(len(batches[index]))
        rows = [row for index in range(len(batches)) for row in done[index]]
    return {row["id"]: list(row["candidates"]) for row in rows}
