"""MM-Vet best-of-N: N candidate answers per question, the judge picks one, MM-Vet's own grader scores it.

MM-Vet (Yu et al., 2023) asks 218 open-ended questions about 200 images and grades each free-form answer
with GPT-4 against a ground truth. MR. Judge reports best-of-N gains on it: a policy answers each question
N times, the judge chooses one answer, and that answer is graded. This module reproduces the grading of
the official evaluator (yuweihao/MM-Vet, `mm-vet_evaluator.py`) exactly:

- the grader sees one user message, no system prompt and no image: `GRADER_PROMPT + "\\n" +
  " | ".join([question, answer with " <AND> "/" <OR> " spaced, prediction, ""])`, so it ends in
  `"prediction | "` and the grader completes the last cell of the few-shot table;
- `max_tokens` 3, temperature 0.0; the grade is `float(text.split(" ")[0].strip())`, valid in [0, 1];
- an unparsable grade is asked again with `RETRY_SUFFIX` appended, at temperature 0.0 for the first retry
  and 0.5 higher for each retry after it; after 5 parsed tries in all (temperatures 0.0, 0.0, 0.5, 1.0,
  1.5) the grade is 0.0. The official script then sends a sixth request (temperature 2.0) whose answer it
  never reads; we do not send it, which changes no score;
- a capability's score is the mean grade over the questions that include it; the total is the mean over
  all questions. `metrics.json` keeps them in [0, 1]; `report.md` shows them × 100 with one decimal, as
  the official table does.

A real `mm-vet.json` entry (images live in `<json dir>/images` by default):

    "v1_0": {"imagename": "v1_0.png", "question": "What is x in the equation?",
             "answer": "-1<AND>-5", "capability": ["ocr", "math"]}

Candidates come as N official-format prediction files (`{"v1_0": "x = -1 or x = -5", ...}`), one per
policy or per sample, or are sampled here by `generate_candidates`. Four selectors are scored side by side:
`first` (candidate 0, i.e. no selection), `random` (seeded), `judge` and `oracle` (the best grade: the
ceiling of best-of-N). A run directory holds:

    OUT/predictions.jsonl  one line per question: candidates, grades, picks per selector, judge votes and
                           raw texts (resumable: finished questions are skipped)
    OUT/grades.jsonl       the grader cache, one line per (question, candidate): score, tries, raw texts
    OUT/metrics.json       {selector}_total, {selector}_{capability}, n, n_candidates, unparsed, ...
    OUT/report.md          selectors × capabilities (× 100), and which grader was used
    OUT/mmvet_by_capability.png

    questions = load_mmvet("mm-vet/mm-vet.json")
    candidates = load_candidates(["policy_s0.json", "policy_s1.json", "policy_s2.json"], questions)
    grader = OpenAIBackend("https://api.openai.com/v1", model_name="gpt-4-0613")
    run_mmvet(Judge(make_backend("runs/judge")), questions, candidates, grader, "runs/mmvet")
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from eval.bootstrap import BOOTSTRAP_RESAMPLES, RatioSet, bootstrap_intervals, interval_keys
from eval.common import (
    bar_chart,
    item_rng,
    markdown_table,
    progress_bar,
    resumable_predictions,
    write_json_atomic,
    write_text_atomic,
)
from eval.provenance import data_provenance, row_sha256, with_image_file
from judge.backends.base import Backend, ChatRequest, SamplingParams
from judge.backends.spec import ModelSpec
from judge.engine import BatchFn, Engine, LocalEngine
from judge.images import load_image
from judge.jobs import JudgeSpec, select_work
from judge.jsonl import InputError, ResumableJsonlWriter, read_complete_rows
from judge.judging import Judge
from judge.prompt import MAX_CANDIDATES
from judge.types import DataError, MCItem, Verdict

__all__ = [
    "CAPABILITIES",
    "GRADER_PROMPT",
    "GRADER_TEMPERATURES",
    "RETRY_SUFFIX",
    "SELECTORS",
    "Grade",
    "MMVetQuestion",
    "generate_candidates",
    "grade_predictions",
    "grader_message",
    "load_candidates",
    "load_mmvet",
    "mmvet_provenance",
    "oracle_pick",
    "parse_grade",
    "random_pick",
    "run_mmvet",
    "save_candidates",
    "score_mmvet",
]

CAPABILITIES = ("rec", "ocr", "know", "gen", "spat", "math")
"""MM-Vet's six core capabilities, in the order of the paper's table (others, e.g. v2's `seq`, follow)."""

SELECTORS = ("first", "random", "judge", "oracle")
"""How one of the N candidates is chosen: candidate 0, a seeded coin, the judge, the best grade."""

GRADER_PROMPT = """Compare the ground truth and prediction from AI models, to give a correctness score for the prediction. <AND> in the ground truth means it is totally right only when all elements in the ground truth are present in the prediction, and <OR> means it is totally right when any one element in the ground truth is present in the prediction. The correctness score is 0.0 (totally wrong), 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, or 1.0 (totally right). Just complete the last space of the correctness score.

Question | Ground truth | Prediction | Correctness
--- | --- | --- | ---
What is x in the equation? | -1 <AND> -5 | x = 3 | 0.0
What is x in the equation? | -1 <AND> -5 | x = -1 | 0.5
What is x in the equation? | -1 <AND> -5 | x = -5 | 0.5
What is x in the equation? | -1 <AND> -5 | x = -5 or 5 | 0.5
What is x in the equation? | -1 <AND> -5 | x = -1 or x = -5 | 1.0
Can you explain this meme? | This meme is poking fun at the fact that the names of the countries Iceland and Greenland are misleading. Despite its name, Iceland is known for its beautiful green landscapes, while Greenland is mostly covered in ice and snow. The meme is saying that the person has trust issues because the names of these countries do not accurately represent their landscapes. | The meme talks about Iceland and Greenland. It's pointing out that despite their names, Iceland is not very icy and Greenland isn't very green. | 0.4
Can you explain this meme? | This meme is poking fun at the fact that the names of the countries Iceland and Greenland are misleading. Despite its name, Iceland is known for its beautiful green landscapes, while Greenland is mostly covered in ice and snow. The meme is saying that the person has trust issues because the names of these countries do not accurately represent their landscapes. | The meme is using humor to point out the misleading nature of Iceland's and Greenland's names. Iceland, despite its name, has lush green landscapes while Greenland is mostly covered in ice and snow. The text 'This is why I have trust issues' is a playful way to suggest that these contradictions can lead to distrust or confusion. The humor in this meme is derived from the unexpected contrast between the names of the countries and their actual physical characteristics. | 1.0
"""
"""The official MM-Vet grader prompt (yuweihao/MM-Vet `mm-vet_evaluator.py`), byte for byte."""

RETRY_SUFFIX = "\nPredict the correctness of the answer (digit): "
"""Appended to the grading message when a grade could not be parsed (official retry rule)."""

GRADER_TEMPERATURES = (0.0, 0.0, 0.5, 1.0, 1.5)
"""Temperature of each try: the plain call, then four retries starting at 0.0 and rising by 0.5."""

GRADER_MAX_TOKENS = 3
"""The official grader reads at most three tokens: a grade such as `0.7`."""

_MAX_LISTED = 20  # problems listed in one InputError before "... and N more"
_ENTRY_HINT = 'write {"imagename": ..., "question": ..., "answer": ..., "capability": [...]}'


# -- data --------------------------------------------------------------------------------------------------


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


def _read_json_object(path: Path, what: str) -> dict[str, Any]:
    """A JSON file whose top level is an object; duplicate keys (which `json` keeps silently) are an error."""
    if not path.is_file():
        raise InputError(f"{path}: file not found — check the path to the {what}")
    duplicates: list[str] = []
    try:
        data = json.loads(path.read_text(encoding="utf-8"), object_pairs_hook=_reject_duplicate_keys(duplicates))
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


def _raise_collected(path: Path | str, problems: list[str]) -> None:
    if not problems:
        return
    shown = problems[:_MAX_LISTED]
    if len(problems) > _MAX_LISTED:
        shown.append(f"... and {len(problems) - _MAX_LISTED} more")
    raise InputError(f"{len(problems)} problem(s) in {path}:\n" + "\n".join(shown))


def _parse_entry(key: str, entry: Any, images_dir: Path, where: str) -> MMVetQuestion:
    """Validate one `mm-vet.json` entry; raise `DataError` naming the first bad field."""
    if not isinstance(entry, Mapping):
        raise DataError("<entry>", f"expected an object, got {type(entry).__name__}", _ENTRY_HINT, where)
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
    json_path: str | Path, images_dir: str | Path | None = None, limit: int | None = None
) -> list[MMVetQuestion]:
    """Read and validate `mm-vet.json`, reporting every bad entry at once.

    Args:
        json_path: the official `mm-vet.json` (`{id: {imagename, question, answer, capability}}`).
        images_dir: where the image files are; default `<json dir>/images`, MM-Vet's own layout.
        limit: keep only the first `limit` questions in file order (quick runs); only those are validated.

    Raises:
        InputError: listing each problem as `FILE entry 'ID': field 'x': problem — fix`.
    """
    if limit is not None and limit < 1:
        raise ValueError(f"limit ({limit}) must be at least 1, or None for every question")
    json_path = Path(json_path)
    images_dir = Path(images_dir) if images_dir is not None else json_path.parent / "images"
    data = _read_json_object(json_path, "MM-Vet entries")
    _refuse_v2(json_path, data)
    keys = list(data)[:limit] if limit is not None else list(data)
    questions, problems = [], []
    for key in keys:
        try:
            questions.append(_parse_entry(key, data[key], images_dir, where=f"{json_path} entry {key!r}"))
        except DataError as exc:
            problems.append(str(exc))
    _raise_collected(json_path, problems)
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
    return data_provenance(hashes, source=source or default)


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
    tables = [_read_json_object(p, "candidate answers") for p in paths]
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
    _raise_collected(", ".join(map(str, paths)), problems)
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
    params = SamplingParams(
        max_new_tokens, temperature, top_p, seed=item_rng(seed, batch[0].id, "candidates").randrange(2**31)
    )
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
    engine: Engine | None = None,
) -> dict[str, list[str]]:
    """Sample `n` answers per question from a policy: the question as one user turn with its image.

    Args:
        backend: the policy's inference engine, or a `ModelSpec` to build it where the batches run.
        questions: from `load_mmvet`.
        n: answers per question (N of best-of-N); more than one needs `temperature > 0`.
        temperature, top_p, max_new_tokens: decoding.
        seed: seeds each batch's sampling (derived from its first question id).
        batch_size: questions per backend call (each makes `n` requests).
        cache_path: a JSONL file (e.g. `OUT/candidates.jsonl`) that makes sampling resumable.
        show_progress: draw a progress bar.
        engine: where sampling runs (default: this process).

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
        rows = resumable_predictions(
            cache_path,
            questions,
            predict,
            batch_size=batch_size,
            description="sampling",
            show_progress=show_progress,
            engine=engine,
        )
    else:
        batches = [questions[start : start + batch_size] for start in range(0, len(questions), batch_size)]
        done: dict[int, list[dict[str, Any]]] = {}
        with progress_bar("sampling", enabled=show_progress) as (set_total, advance):
            set_total(len(questions))
            for index, outputs in (engine or LocalEngine()).map_batches(batches, predict):
                done[index] = outputs
                advance(len(batches[index]))
        rows = [row for index in range(len(batches)) for row in done[index]]
    return {row["id"]: list(row["candidates"]) for row in rows}


# -- grading -----------------------------------------------------------------------------------------------


def grader_message(question: str, answer: str, prediction: str, retry: bool = False) -> str:
    """The grader's user message, exactly as the official evaluator builds it.

    >>> grader_message("What is x?", "-1<AND>-5", "x = -1").splitlines()[-1]
    'What is x? | -1 <AND> -5 | x = -1 | '
    >>> grader_message("Q?", "a", "b", retry=True).endswith("Q? | a | b | " + RETRY_SUFFIX)
    True
    """
    spaced = answer.replace("<AND>", " <AND> ").replace("<OR>", " <OR> ")
    message = GRADER_PROMPT + "\n" + " | ".join([question, spaced, prediction, ""])
    return message + RETRY_SUFFIX if retry else message


def parse_grade(text: str) -> float | None:
    """The grade in a grader reply (official rule: the text before the first space), or `None`.

    >>> [parse_grade(t) for t in ("0.7", "1.0 ", "0.5.", "1.2", "abc", "")]
    [0.7, 1.0, None, None, None, None]
    """
    try:
        score = float(text.split(" ")[0].strip())
    except ValueError:
        return None
    # `not 0 <= score <= 1` also rejects NaN, which the official range check would let through.
    return score if 0.0 <= score <= 1.0 else None


@dataclass
class Grade:
    """The grader's verdict on one prediction, with what it took to get it."""

    score: float
    """In [0, 1]; 0.0 when every try was unparsable."""
    tries: int = 1
    """Grader calls whose answer was read: 1 when the first parsed, at most `len(GRADER_TEMPERATURES)`."""
    raw: list[str] = field(default_factory=list)
    """The grader's reply to each try."""
    failed: bool = False
    """True when no try parsed and the score fell back to 0.0."""


def _text_request(text: str) -> ChatRequest:
    # A plain string as content, as the official evaluator sends it (no parts list, no image).
    return ChatRequest(messages=[{"role": "user", "content": text}])


def grade_predictions(backend: Backend, pairs: Sequence[tuple[MMVetQuestion, str]]) -> list[Grade]:
    """Grade each (question, prediction) pair with the official prompt and retry rule.

    Each round is one `backend.generate` call: all pairs first, then every still-unparsed pair with
    `RETRY_SUFFIX` at the next temperature of `GRADER_TEMPERATURES`.
    """
    messages = [grader_message(q.question, q.answer, prediction) for q, prediction in pairs]
    raws: list[list[str]] = [[] for _ in pairs]
    scores: list[float | None] = [None] * len(pairs)
    pending = list(range(len(pairs)))
    for attempt, temperature in enumerate(GRADER_TEMPERATURES):
        if not pending:
            break
        suffix = RETRY_SUFFIX if attempt else ""
        requests = [_text_request(messages[i] + suffix) for i in pending]
        generations = backend.generate(requests, SamplingParams(GRADER_MAX_TOKENS, temperature))
        if len(generations) != len(requests):
            raise RuntimeError(
                f"grader backend {backend.name} returned {len(generations)} results for {len(requests)} requests"
            )
        still = []
        for i, generation in zip(pending, generations):
            raws[i].append(generation.text)
            scores[i] = parse_grade(generation.text)
            if scores[i] is None:
                still.append(i)
        pending = still
    return [
        Grade(score=0.0 if s is None else s, tries=len(raw), raw=raw, failed=s is None) for s, raw in zip(scores, raws)
    ]


def _grade_key(question_id: str, index: int, text: str, run: int = 0) -> str:
    """Stable cache key: a changed candidate text gets a new key, so a stale grade is never reused; grading
    run r > 0 (`--num-runs`) adds `#run{r}`, so run 0 keeps the key older caches have."""
    key = f"{question_id}#{index}#{hashlib.sha256(text.encode('utf-8')).hexdigest()[:16]}"
    return key if run == 0 else f"{key}#run{run}"


def _read_rows(*paths: Path) -> dict[str, dict[str, Any]]:
    """Rows of JSONL files by id (the first wins), dropping torn or unparsable lines (a crash mid-write)."""
    rows: dict[str, dict[str, Any]] = {}
    for path in paths:
        for row in read_complete_rows(path):
            rows.setdefault(row["id"], row)
    return rows


def _backend_label(backend: Backend) -> str:
    model = getattr(backend, "model_name", None)
    return str(model) if model else backend.name


class _GradeCache:
    """`OUT/grades.jsonl` as a cache: only (question, candidate) pairs not graded before reach the grader."""

    def __init__(self, path: Path, backend: Backend, runs: int = 1) -> None:
        self.backend = backend
        self.runs = runs
        self.rows = _read_rows(path, path.with_name(path.name + ".partial"))
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
        grader = _backend_label(self.backend)  # known after the first call even when not given
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


# -- selection and scores ----------------------------------------------------------------------------------


def oracle_pick(scores: Sequence[float]) -> int:
    """The candidate with the highest grade; ties go to the lowest index.

    >>> oracle_pick([0.5, 1.0, 1.0])
    1
    """
    return max(range(len(scores)), key=lambda j: (scores[j], -j))


def random_pick(seed: int, question_id: str, n: int) -> int:
    """A seeded candidate index that depends only on (seed, question id), not on batching or order."""
    return item_rng(seed, question_id, "random").randrange(n)


def _capabilities_in(questions: Sequence[MMVetQuestion]) -> list[str]:
    present = {c for q in questions for c in q.capabilities}
    return [c for c in CAPABILITIES if c in present] + sorted(present - set(CAPABILITIES))


def _mean(values: Sequence[float]) -> float | None:
    # A plain left-to-right sum divided by the count, as the official evaluator accumulates scores.
    return sum(values) / len(values) if values else None


def score_mmvet(
    questions: Sequence[MMVetQuestion],
    grades_by_question: Mapping[str, Sequence[Grade | float]],
    picks: Mapping[str, Mapping[str, int]],
    *,
    judge_undecided: Collection[str] = (),
    judge_consistent: Mapping[str, bool | None] | None = None,
    grade_runs: Mapping[str, Sequence[Sequence[float]]] | None = None,
    seed: int = 0,
    resamples: int = BOOTSTRAP_RESAMPLES,
) -> dict[str, Any]:
    """Flat MM-Vet metrics for each selector: the grade of the picked candidate, averaged.

    With `grade_runs` (`{id: [[grade per candidate] per grading run]}`, from `--num-runs`), every score is
    the mean over the runs, as the official evaluator's `--num_run` reports it, and `{selector}_total_std`
    is the standard deviation of the per-run totals (numpy's population std, as the official script) with
    `{selector}_total_runs` the per-run totals. Each score has a seeded 95 % bootstrap interval over
    questions (`*_ci95_low/high`).

    Args:
        questions: the questions scored.
        grades_by_question: each question's grade per candidate (a `Grade`, or a bare score for one that
            parsed at the first try).
        picks: `{selector: {question id: candidate index}}`, e.g. for `first`, `random`, `judge`, `oracle`.
        judge_undecided: ids where the judge gave no choice (its pick fell back to candidate 0).
        judge_consistent: `Verdict.consistent` per id (`None` where fewer than two display orders parsed:
            counted as not consistent, as in the pairwise benchmarks, and in `judge_consistency_undetermined`).

    Returns:
        `{selector}_total` (mean over all questions) and `{selector}_{capability}` (mean over the questions
        that include it, for each capability present), all in [0, 1]; `n`; `n_candidates`; `unparsed`
        (judge undecided, a count); `judge_consistency` (share of all questions with a consistent verdict); `grader_retried` and `grader_failed` (counts over all graded
        candidates).
    """
    sizes = {len(grades_by_question[q.id]) for q in questions}
    if len(sizes) > 1:
        raise ValueError(f"every question needs the same number of graded candidates, got sizes {sorted(sizes)}")
    grades = {
        q.id: [g if isinstance(g, Grade) else Grade(float(g)) for g in grades_by_question[q.id]] for q in questions
    }
    metrics: dict[str, Any] = {"n": len(questions), "n_candidates": sizes.pop() if sizes else 0}
    capabilities = _capabilities_in(questions)
    ordered = [s for s in SELECTORS if s in picks] + sorted(set(picks) - set(SELECTORS))
    runs = grade_runs or {q.id: [[g.score for g in grades[q.id]]] for q in questions}
    n_runs = {len(runs[q.id]) for q in questions}
    if len(n_runs) > 1:
        raise ValueError(f"every question needs the same number of grading runs, got {sorted(n_runs)}")
    metrics["grading_runs"] = n_runs.pop() if n_runs else 1
    ratios = RatioSet()
    for selector in ordered:
        per_run: dict[str, list[float]] = {}
        for q in questions:
            index = picks[selector].get(q.id)
            if index is None or not 0 <= index < len(grades[q.id]):
                raise ValueError(f"selector {selector!r}: no valid pick for question {q.id!r} (got {index!r})")
            per_run[q.id] = [run[index] for run in runs[q.id]]
        chosen = {qid: sum(v) / len(v) for qid, v in per_run.items()}
        metrics[f"{selector}_total"] = _mean([chosen[q.id] for q in questions])
        totals = [_mean([per_run[q.id][r] for q in questions]) for r in range(metrics["grading_runs"])]
        metrics[f"{selector}_total_runs"] = totals
        metrics[f"{selector}_total_std"] = float(np.std(totals)) if questions else None
        ratios.add(f"{selector}_total", [chosen[q.id] for q in questions], [1.0] * len(questions))
        for capability in capabilities:
            metrics[f"{selector}_{capability}"] = _mean(
                [chosen[q.id] for q in questions if capability in q.capabilities]
            )
            ratios.add(
                f"{selector}_{capability}",
                [chosen[q.id] if capability in q.capabilities else 0.0 for q in questions],
                [float(capability in q.capabilities) for q in questions],
            )
    metrics.update(interval_keys(bootstrap_intervals(ratios, n=resamples, seed=seed)))
    metrics["bootstrap_resamples"], metrics["bootstrap_seed"] = resamples, seed
    ids = {q.id for q in questions}
    metrics["unparsed"] = len(ids & set(judge_undecided))
    given = {qid: f for qid, f in (judge_consistent or {}).items() if qid in ids}
    metrics["judge_consistency"] = _mean([float(given.get(q.id) is True) for q in questions]) if given else None
    metrics["judge_consistency_undetermined"] = sum(given.get(q.id) is None for q in questions) if given else 0
    every = [g for q in questions for g in grades[q.id]]
    metrics["grader_retried"] = sum(g.tries > 1 for g in every)
    metrics["grader_failed"] = sum(g.failed for g in every)
    return metrics


# -- the run -----------------------------------------------------------------------------------------------


def _check_candidates(questions: Sequence[MMVetQuestion], candidates: Mapping[str, Sequence[str]]) -> int:
    missing = [q.id for q in questions if q.id not in candidates]
    if missing:
        raise InputError(f"no candidates for question(s) {missing[:_MAX_LISTED]} — give every question N answers")
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
    }


def _report(metrics: Mapping[str, Any], capabilities: Sequence[str], grader: str, judge_name: str) -> str:
    headers = ["selector", *capabilities, "total", "total 95 % CI", "total std (runs)"]

    def interval(selector: str) -> str:
        low, high = metrics.get(f"{selector}_total_ci95_low"), metrics.get(f"{selector}_total_ci95_high")
        return "–" if low is None or high is None else f"{100 * low:.1f}–{100 * high:.1f}"

    rows = [
        [selector, *(100 * metrics[f"{selector}_{c}"] for c in [*capabilities, "total"])]
        + [interval(selector), 100 * (metrics.get(f"{selector}_total_std") or 0.0)]
        for selector in SELECTORS
        if f"{selector}_total" in metrics
    ]
    n, k = metrics["n"], metrics["n_candidates"]
    consistency = metrics["judge_consistency"]
    lines = [
        "# MM-Vet best-of-N",
        "",
        f"{n} questions, {k} candidates each; the judge ({judge_name}) picks one, MM-Vet's grader scores it. "
        "Scores × 100: mean grade over the questions that include each capability, and over all questions.",
        "",
        markdown_table(headers, rows),
        "",
        "`first` = candidate 0 (no selection), `random` = a seeded pick, `oracle` = the best-graded candidate "
        f"(the ceiling of best-of-N). Every candidate was graded {metrics.get('grading_runs', 1)} time(s); scores "
        "are the mean over those gradings and `std` the standard deviation of the per-run totals (the official "
        "evaluator's --num_run; the MM-Vet paper uses 5). 95 % CI: percentile bootstrap over questions "
        f"({metrics.get('bootstrap_resamples')} resamples, seed {metrics.get('bootstrap_seed')}).",
        "",
        f"- judge undecided (fell back to candidate 0): {metrics['unparsed']} of {n}",
        "- judge consistent across display orders: "
        + (
            "n/a"
            if consistency is None
            else f"{100 * consistency:.1f} % of all questions (one with fewer than two parsed orders counts as not "
            f"consistent: {metrics.get('judge_consistency_undetermined', 0)} such)"
        ),
        f"- grades that needed a retry: {metrics['grader_retried']} of {n * k}; fell back to 0: "
        f"{metrics['grader_failed']}",
        "",
        "Grading followed the official MM-Vet grader prompt and retry rule (yuweihao/MM-Vet "
        "`mm-vet_evaluator.py`: few-shot prompt, max_tokens 3, temperature 0; an unparsable grade is asked again "
        "with “Predict the correctness of the answer (digit):” at temperatures 0.0, 0.5, 1.0, 1.5, then scored "
        f"0). Grader: {grader}. Published MM-Vet numbers use gpt-4-0613; another grader's scores are not "
        "directly comparable to them.",
        "",
    ]
    if "data_sha256" in metrics:
        lines += [f"Data: `{metrics['data_source']}`, {metrics['data_rows']} questions, data_sha256 "
                  f"`{metrics['data_sha256']}`.", ""]  # fmt: skip
    return "\n".join(lines)


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
    engine: Engine | None = None,
    num_runs: int = 1,
    data_source: str | None = None,
) -> dict[str, Any]:
    """Best-of-N on MM-Vet: judge each question's candidates, grade every candidate, score each selector.

    Every candidate is graded (the oracle needs all grades). A run in an existing `out_dir` resumes:
    finished questions are read back from `predictions.jsonl` and graded candidates from `grades.jsonl`,
    so no judge or grader call is repeated. An `out_dir` belongs to one configuration (judge, candidates,
    seed): rows already written keep their picks.

    Args:
        judge: the judge (`judge.select` decides among the N candidates); a `JudgeSpec` to build it where
            the batches run (needed for `engine=RayEngine(…)`).
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
    for qid, row in _read_rows(predictions, predictions.with_name(predictions.name + ".partial")).items():
        if qid in by_id and row.get("candidates") != list(candidates[qid]):
            raise InputError(
                f"{predictions}: question {qid!r} was judged on other candidates in an earlier run — "
                "use a fresh output folder for new candidates"
            )
    if num_runs < 1:
        raise InputError(f"--num-runs {num_runs}: give at least 1 grading run (the MM-Vet paper uses 5)")
    cache = _GradeCache(out / "grades.jsonl", grader_backend, runs=num_runs)

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

    capabilities = _capabilities_in(questions)
    graders = sorted({row.get("grader", "?") for row in cache.rows.values()}) or [_backend_label(grader_backend)]
    endpoint = getattr(grader_backend, "base_url", None)
    grader = ", ".join(f"`{g}`" for g in graders) + (f" at {endpoint}" if endpoint else f" ({grader_backend.name})")
    if len(graders) > 1:
        grader += " (WARNING: grades from more than one grader model are mixed in this folder)"
    judge_name = judge.model.backend_name if isinstance(judge, JudgeSpec) else judge.backend.name
    write_text_atomic(out / "report.md", _report(metrics, capabilities, grader, judge_name))
    bar_chart(
        out / "mmvet_by_capability.png",
        {selector: {c: 100 * metrics[f"{selector}_{c}"] for c in [*capabilities, "total"]} for selector in SELECTORS},
        title=f"MM-Vet best-of-{metrics['n_candidates']} by capability",
        ylabel="MM-Vet score",
        ylim=(0, 110),  # headroom for the value labels on bars at 100
    )
    return metrics
