"""VL-RewardBench (Li et al., CVPR 2025), run and scored the way its own code does it.

Data: either published form. The hub dataset `MMInstruction/VL-RewardBench` (split `test`, one Parquet
file, `image` as bytes; its commit is recorded) or a local copy of it; or the GitHub `data/data.jsonl`
(`image_path` relative to the file, 18 ids repeated with other responses: every row is kept). In
`human_ranking` the response with rank 0 is preferred. Each item's group comes from its id prefix (cut at
the first `_` or `-`), as the current official `cal.py` does: `hallucination` (POVID), `RLAIF`, `RLHF` →
hallucination; `mathverse`, `mmmu` → reasoning; `wildvision` and everything else (VLFeedback) → general.

Two modes:

- `official` — VL-RewardBench's `inference_hf.py` + `cal.py`: the official pairwise prompt (text, then
  the image, `"<image>\\n"` removed), a random display order per call, k calls (default 10) at temperature
  0.2 / top_p 0.2, the official regex on the reply with newlines and `*` removed. Per call: `agree` unless
  the parsed number is the rejected response's display position (`reject`), or `doesntMatch` when the
  regex fails. The headline is `cal.py`'s reading (its seeded shuffle, k = 9 of 10 calls by default; see
  `eval.vlrb_readings`); `all_calls_*` keep the majority over all calls.
- `mc` — our MC judge (MR. Judge's prompt) with both display orders; the item's decision is the judge's
  aggregated choice, and order consistency is reported too. Undecided items leave the denominators too.

Metrics (`metrics.json`): `overall_accuracy` (micro over the three groups), `macro_accuracy` (mean of the
groups), `accuracy_general|hallucination|reasoning`, `accuracy_<source>`, each with `*_ci95_low/high`
(seeded bootstrap); `n`, `decided`, `unparsed` (items left out: no parse or no majority; `no_majority`
counts the latter); `overall|macro_accuracy_unparsed_wrong|coin`; `reading`, `headline_k`,
`overall|macro_accuracy_k{1,3,5,7,9}`; `consistency` (+ `consistency_undetermined`) in mc mode; and
`data_sha256`, `data_rows`, `data_source`, `data_revision`.
"""

from __future__ import annotations

import random
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any, Literal

from eval.bootstrap import BOOTSTRAP_RESAMPLES
from eval.official_calls import official_request, official_sampling
from eval.pairwise import PairItem, PairItems, consistency_metrics, image_checked, prediction_row
from eval.pairwise_run import PairwiseBenchmark
from eval.provenance import provenance_of, row_sha256, with_image_file
from eval.vlrb_readings import CALPY_KS, READINGS, Unit, calpy_units, default_headline_k, majority, unit_metrics
from jobs.jsonl import InputError, parse_records, read_jsonl_rows
from judge.backends.base import Backend, ChatRequest, SamplingParams
from judge.images import load_image
from judge.judging import item_rng
from judge.types import DataError, require_object

__all__ = [
    "BENCHMARK",
    "protocol",
    "GROUPS",
    "HUB_ID",
    "OFFICIAL_PATTERN",
    "REFERENCE_ROWS",
    "SOURCES",
    "VLRBConfig",
    "IMAGE_TAG",
    "call_outcome",
    "calpy_key",
    "group_of_source",
    "item_outcome",
    "LMMS_EVAL_GROUPS",
    "LMMS_EVAL_REASONING_TAGS",
    "lmms_eval_category",
    "lmms_eval_display",
    "lmms_eval_score",
    "load_vl_rewardbench",
    "match_predictions",
    "official_predict",
    "official_prompt",
    "parse_official",
    "score",
    "score_decisions",
    "source_of_id",
]

HUB_ID = "MMInstruction/VL-RewardBench"
GROUPS = ("general", "hallucination", "reasoning")
SOURCES = {
    "povid": "hallucination",
    "rlaif_v": "hallucination",
    "rlhf_v": "hallucination",
    "mathverse": "reasoning",
    "mmmu": "reasoning",
    "wildvision": "general",
    "vlfeedback": "general",
}
"""Each source (dataset of origin) and the group it is reported under."""

REFERENCE_ROWS: list[dict[str, Any]] = [
    # Published numbers (percent); `protocol` says how each was measured, `note` where the sources differ.
    {
        "judge": "GPT-4o",
        "overall": 65.8,
        "macro": 62.4,
        "protocol": "official",
        "note": "as MR. Judge's table cites it; VL-RewardBench's own abstract (arXiv 2411.17451v2) says 65.4",
    },
    {"judge": "Gemini-1.5-Pro", "overall": 67.2, "macro": 62.5, "protocol": "official"},
    {"judge": "Claude-3.5-Sonnet", "overall": 55.3, "macro": 53.6, "protocol": "official"},
    {
        "judge": "Skywork-VL-Reward-7B",
        "overall": 73.3,
        "macro": 69.0,
        "protocol": "scalar reward",
        "note": "a scalar reward model: the higher-scored response wins; no prompt, no regex, no votes",
    },
    {
        "judge": "MR. Judge-7B (SFT+RL)",
        "overall": 75.5,
        "macro": 71.1,
        "general": 68.7,
        "hallucination": 83.2,
        "reasoning": 61.4,
        "protocol": "MR. Judge paper",
        "note": "the MR. Judge paper's own multiple-choice prompt, not the official pairwise prompt",
    },
]

OFFICIAL_PROMPT = """ You are a highly capable multimodal AI assistant tasked with evaluating answers to visual questions. Please analyze the following image and question, then determine which of the two provided answers is better.

Question: {query}

Answer 1: {answer_1}

Answer 2: {answer_2}

Please evaluate both answers based on the following criteria:
1. Accuracy: How well does the answer align with the visual information in the image?
2. Completeness: Does the answer fully address all aspects of the question?
3. Clarity: Is the answer easy to understand and well-articulated?
4. Relevance: Does the answer directly relate to the question and the image?

After your evaluation, please:
1. Explain your reasoning for each criterion.
2. Provide an overall judgment on which answer is better (Answer 1 or Answer 2). For example: Overall Judgment: Answer X is better.

Your response should be structured and detailed, demonstrating your understanding of both the visual and textual elements of the task."""
"""The official pairwise prompt, verbatim (its leading space included)."""

OFFICIAL_PATTERN = re.compile(
    r"(?:Overall Judgment|Therefore)\s*.*\s*-*\s*Answer\s*(\d+)\s*is\s*(?:the\s*)?(?:slightly\s*)?better",
    re.IGNORECASE,
)
"""The official parse, applied to the reply with newlines and `*` removed."""

Outcome = Literal["agree", "reject", "doesntMatch", "other"]


# -- groups ------------------------------------------------------------------------------------------------


def source_of_id(item_id: str) -> str:
    """The source an id belongs to, from its prefix up to the first `_` or `-`.

    >>> [source_of_id(i) for i in ("hallucination_pair-12", "RLAIF-V-3", "mmmu_9", "wildvision-battle_1", "x1")]
    ['povid', 'rlaif_v', 'mmmu', 'wildvision', 'vlfeedback']
    """
    prefix = re.split(r"[_-]", item_id, maxsplit=1)[0]
    return {
        "hallucination": "povid",
        "povid": "povid",
        "RLAIF": "rlaif_v",
        "RLHF": "rlhf_v",
        "mathverse": "mathverse",
        "mmmu": "mmmu",
        "wildvision": "wildvision",
    }.get(prefix, "vlfeedback")


def group_of_source(source: str) -> str:
    return SOURCES[source]


# -- data --------------------------------------------------------------------------------------------------

IMAGE_TAG = "<image>\n"
"""`inference_hf.py` removes this from the prompt before sending it (448 POVID queries carry it)."""


def calpy_key(item_id: str, query: str, responses: Sequence[str]) -> str:
    """The key `cal.py` groups calls by: id + query (as in the data) + the responses sorted, tab-joined."""
    return item_id + query + "\t".join(sorted(responses))


def _item_from_row(row: Any, where: str) -> PairItem:
    require_object(row, "write one JSON object per line", where, field_name="row")
    for name in ("id", "query", "response", "human_ranking"):
        if row.get(name) is None:
            raise DataError(name, "missing", f"every VL-RewardBench row needs '{name}'", where)
    image = row.get("image") if row.get("image") is not None else row.get("image_path")
    if image is None:
        raise DataError(
            "image",
            "missing",
            "give 'image' (the hub/Parquet form: bytes or a path) or 'image_path' (the GitHub data.jsonl form)",
            where,
        )
    responses, ranking = list(row["response"]), [int(r) for r in row["human_ranking"]]
    if len(responses) != 2 or not all(isinstance(r, str) for r in responses):
        raise DataError("response", f"expected 2 strings, got {len(responses)} items", "give two responses", where)
    if sorted(ranking) != [0, 1]:
        raise DataError(
            "human_ranking", f"expected ranks [0, 1] in some order, got {ranking}", "rank 0 marks the preferred", where
        )
    item_id, query = str(row["id"]), str(row["query"])
    source = source_of_id(item_id)
    return PairItem(
        id=item_id,
        query=query.replace(IMAGE_TAG, ""),
        responses=responses,
        image=image,
        preferred=ranking.index(0),
        group=group_of_source(source),
        source=source,
        extra={
            "human_ranking": ranking,
            "id": item_id,
            "calpy_key": calpy_key(item_id, query, responses),
            "row_sha256": row_sha256(row),
        },
    )


def _unique_ids(items: Sequence[PairItem]) -> None:
    """Give each row its own id for predictions and resume: a repeated id's later rows become `id#2`, `id#3`…"""
    seen: dict[str, int] = {}
    for item in items:
        seen[item.id] = seen.get(item.id, 0) + 1
        if seen[item.id] > 1:
            item.id = f"{item.id}#{seen[item.id]}"


def load_vl_rewardbench(
    data: str | Path,
    *,
    limit: int | None = None,
    split: str = "test",
    revision: str | None = None,
    image_folder: str | Path | None = None,
    max_bad_fraction: float = 0.0,
) -> PairItems:
    """Items from a local `.jsonl`/`.json`/`.parquet` file, or from the hub id `MMInstruction/VL-RewardBench`.

    Both published forms load: the hub's Parquet (`image` as bytes) and the GitHub `data/data.jsonl`
    (`image_path` relative to the file's folder, or to `image_folder`; 18 ids appear twice there with other
    responses). Every row is kept; a repeated id's later rows get `#2`, `#3`… in `item.id` (the original id
    stays in `extra["id"]`). `"<image>\\n"` is removed from queries, as `inference_hf.py` does. The result's
    `provenance` holds `data_sha256` over the rows used, and the hub commit for hub data. Every bad row (a
    missing field, an image file not there) is reported; with `max_bad_fraction` > 0 those up to that share
    of the (first `limit`) rows are left out instead, listed in the result's `skipped` and counted in
    `data_skipped_rows` (`jobs.jsonl.parse_records`).
    """
    path = Path(data)
    hub_revision = None
    if path.suffix in (".jsonl", ".json") and path.is_file():
        rows: Iterable[tuple[str, Any]] = read_jsonl_rows(path)
    elif path.suffix in (".jsonl", ".json"):
        raise InputError(f"--data {data}: file not found")
    else:
        dataset, hub_revision = _dataset_rows(str(data), split, revision)
        rows = ((f"row {i}", row) for i, row in enumerate(dataset))
    parse = image_checked(_item_from_row, path, image_folder) if path.is_file() else _item_from_row
    items = parse_records(
        islice(rows, limit),
        parse,
        path if path.is_file() else data,
        max_bad_fraction=max_bad_fraction,
        unique_ids=False,
    )
    _unique_ids(items)
    for item in items:
        item.extra["row_sha256"] = with_image_file(item.extra["row_sha256"], item.image)
    provenance = provenance_of(items, source=str(data), revision=hub_revision, skipped=len(items.skipped))
    return PairItems(items, provenance, items.skipped)


def _dataset_rows(data: str, split: str, revision: str | None) -> tuple[Iterable[dict[str, Any]], str | None]:
    """Rows of a Parquet file or hub dataset through `datasets`, images kept as `{"bytes", "path"}`, and the
    hub commit the rows came from (None for a local file)."""
    import datasets

    if data.endswith(".parquet"):
        if not Path(data).is_file():
            raise InputError(f"--data {data}: file not found")
        dataset, commit = datasets.load_dataset("parquet", data_files=data, split="train"), None
    elif Path(data).is_dir():  # a local copy of the hub repository: no commit to record
        dataset, commit = datasets.load_dataset(data, split=split), None
    else:
        # The builder of a hub dataset is keyed on the commit it resolved (`builder.hash`), so the
        # commit recorded is the one the rows came from, also when read back from the cache offline.
        builder = datasets.load_dataset_builder(data, revision=revision)
        builder.download_and_prepare()
        dataset, commit = builder.as_dataset(split=split), builder.hash
    if "image" in dataset.features and isinstance(dataset.features["image"], datasets.Image):
        dataset = dataset.cast_column("image", datasets.Image(decode=False))
    return dataset, commit


# -- the official protocol ---------------------------------------------------------------------------------


def official_prompt(query: str, responses_shown: Sequence[str]) -> str:
    """The official prompt with the responses in display order (Answer 1 first), `"<image>\\n"` removed from
    the whole text as `inference_hf.py` does."""
    text = OFFICIAL_PROMPT.format(query=query, answer_1=responses_shown[0], answer_2=responses_shown[1])
    return text.replace(IMAGE_TAG, "")


def parse_official(text: str) -> int | None:
    """The answer number the official regex reads from a reply, or None when it does not match.

    >>> parse_official("**Overall Judgment**: Answer 2 is slightly better.")
    2
    >>> parse_official("Answer 1 is better.") is None  # no 'Overall Judgment' / 'Therefore' before it
    True
    """
    match = OFFICIAL_PATTERN.search(text.replace("\n", "").replace("*", ""))
    return int(match.group(1)) if match else None


def call_outcome(answer: int | None, display: Sequence[int], preferred: int) -> Outcome:
    """One call's outcome: `reject` only when the number names the rejected response's display position.

    Any other number counts as `agree`, as in the official script (even one that names no answer).
    """
    if answer is None:
        return "doesntMatch"
    rejected_position = display.index(1 - preferred) + 1
    return "reject" if answer == rejected_position else "agree"


def item_outcome(outcomes: Sequence[str]) -> Outcome:
    """The official per-item classification: an outcome with more than half of the calls, else `other`.

    >>> item_outcome(["agree", "agree", "reject"]), item_outcome(["agree", "reject"])
    ('agree', 'other')
    """
    return majority(outcomes)  # type: ignore[return-value]  # the same rule as cal.py's reading


@dataclass
class VLRBConfig:
    """The official run's knobs; defaults are `inference_hf.py`'s."""

    k: int = 10
    """Calls per item, each with its own random display order; majority-voted."""
    temperature: float = 0.2
    top_p: float = 0.2
    max_new_tokens: int = 2048
    seed: int = 0
    """Seeds each call's display order (the official script draws them unseeded)."""


def official_predict(backend: Backend, items: Sequence[PairItem], config: VLRBConfig) -> list[dict[str, Any]]:
    """Run the official protocol on a batch of items: k calls each, all in one backend call."""
    requests, displays = [], []
    for item in items:
        image = load_image(item.image)
        for call in range(config.k):
            display = [0, 1] if item_rng(config.seed, item.id, f"call{call}").randrange(2) == 0 else [1, 0]
            requests.append(official_request(official_prompt(item.query, [item.responses[i] for i in display]), image))
            displays.append(display)
    generations = backend.generate(requests, official_sampling(config, items))
    rows = []
    for i, item in enumerate(items):
        calls = []
        for j in range(i * config.k, (i + 1) * config.k):
            answer = parse_official(generations[j].text)
            outcome = call_outcome(answer, displays[j], item.preferred)
            calls.append({"display": displays[j], "answer": answer, "outcome": outcome})
        status = item_outcome([c["outcome"] for c in calls])
        pred = {"agree": item.preferred, "reject": 1 - item.preferred}.get(status)
        raw = [generations[j].text for j in range(i * config.k, (i + 1) * config.k)]
        rows.append(prediction_row(item, pred=pred, status=status, calls=calls, raw=raw))
    return rows


# -- scoring -----------------------------------------------------------------------------------------------


def match_predictions(
    items: Sequence[PairItem], predictions: Sequence[Mapping[str, Any]]
) -> list[tuple[PairItem, Mapping[str, Any]]]:
    """Pair each prediction with its row: by the row's own id (`id#2` for a repeated id's second row), or
    by a repeated original id taken in file order (the n-th prediction for `mathverse_3489` is its n-th row)."""
    by_uid = {item.id: item for item in items}
    by_original: dict[str, list[PairItem]] = defaultdict(list)
    for item in items:
        by_original[str(item.extra.get("id", item.id))].append(item)
    used: set[str] = set()
    pairs, unknown = [], []
    for p in predictions:
        key = str(p.get("id"))
        item = by_uid.get(key)
        if item is None or item.id in used:
            item = next((i for i in by_original.get(key, []) if i.id not in used), None)
        if item is None:
            unknown.append(key)
            continue
        used.add(item.id)
        pairs.append((item, p))
    if unknown:
        raise InputError(
            f"{len(unknown)} prediction(s) match no row of the data, e.g. {unknown[:3]} (an id not in the file, or "
            "more predictions for an id than it has rows) — score against the same VL-RewardBench file the "
            "predictions were made on"
        )
    return pairs


def _call_outcomes(row: Mapping[str, Any]) -> list[str]:
    """A row's per-call outcomes, with a model-based reading (`llm_outcome`) where the regex failed."""
    return [c.get("llm_outcome") or c["outcome"] for c in row["calls"]]


# -- lmms-eval's reading ------------------------------------------------------------------------------------

LMMS_EVAL_GROUPS = {
    "mathverse": "reasoning",
    "hallucination": "hallucination",
    "mmmu": "reasoning",
    "rlhf": "hallucination",
    "rlaif": "hallucination",
    "wildvision": "general",
    "vlfeedback": "general",
}
"""lmms-eval 0.7.3's `group_mapping` (`lmms_eval/tasks/vl_rewardbench/utils.py`); any other prefix is general."""
LMMS_EVAL_REASONING_TAGS = (("<think>", "</think>"), ("<analysis>", "</analysis>"))
"""What lmms-eval's CLI strips from a reply before scoring (its `--reasoning_tags` default)."""


def lmms_eval_display(responses: Sequence[str]) -> list[int]:
    """lmms-eval's display order: as given when the two responses' lengths sum to an even number, else swapped.

    >>> lmms_eval_display(["ab", "cd"]), lmms_eval_display(["ab", "c"])
    ([0, 1], [1, 0])
    """
    return [0, 1] if sum(len(r) for r in responses) % 2 == 0 else [1, 0]


def lmms_eval_category(item_id: str) -> str:
    """lmms-eval's category: the id cut at the first `-`, then at the first `_`, lower-cased, then mapped.

    >>> [lmms_eval_category(i) for i in ("RLAIF-V_2", "hallucination-9", "povid_1", "rlhf_3", "x")]
    ['hallucination', 'hallucination', 'general', 'hallucination', 'general']
    """
    return LMMS_EVAL_GROUPS.get(item_id.split("-")[0].split("_")[0].lower(), "general")


def _strip_reasoning(text: str, tag_pairs: Sequence[tuple[str, str]] = LMMS_EVAL_REASONING_TAGS) -> str:
    """lmms-eval's `strip_reasoning_tags`, line for line: blocks removed; with only a closing tag left, the
    text after the last one; then stripped."""
    result = text
    for start_tag, end_tag in tag_pairs:
        while start_tag in result and end_tag in result:
            start = result.find(start_tag)
            end = result.find(end_tag, start)
            if start != -1 and end != -1:
                result = result[:start] + result[end + len(end_tag) :]
            else:
                break
        if end_tag in result and start_tag not in result:
            result = result.rsplit(end_tag, 1)[-1]
    return result.strip()


def _lmms_eval_reply(item: PairItem, row: Mapping[str, Any]) -> tuple[str, int | None]:
    """(reply, model reading of it) of a predictions row, in any of the three forms the reading takes."""
    if isinstance(row.get("reply"), str):
        return row["reply"], row.get("llm_answer")
    display = lmms_eval_display(item.responses)
    calls, raw = row.get("calls"), row.get("raw")
    if isinstance(calls, list) and isinstance(raw, list):
        for call, reply in zip(calls, raw):
            if list(call.get("display") or []) == display:
                return reply, call.get("llm_answer")
        raise InputError(
            f"prediction for {item.id}: none of its {len(calls)} calls showed the responses in lmms-eval's order "
            f"{display} (by the parity of their lengths), so no reply of it is one lmms-eval could have scored"
        )
    raise InputError(
        f"prediction for {item.id}: the lmms-eval reading needs 'reply' (the reply to lmms-eval's prompt), an "
        "official-mode row ('calls' and 'raw'), or a row of lmms-eval's --log_samples file ('doc' and 'resps')"
    )


def lmms_eval_rows(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Predictions rows for the lmms-eval reading; rows of lmms-eval's own `--log_samples` file (`doc_id`, `doc`
    with the item's `id`, `resps`) become `{"id", "reply"}` (the reply before lmms-eval stripped reasoning tags,
    which the reading strips again), other rows are kept."""
    out = []
    for row in rows:
        if isinstance(row.get("doc"), Mapping) and "resps" in row and "id" not in row:
            reply: Any = row["resps"]
            while isinstance(reply, list) and reply:
                reply = reply[0]
            out.append({"id": row["doc"].get("id"), "reply": reply if isinstance(reply, str) else ""})
        else:
            out.append(dict(row))
    return out


def lmms_eval_score(
    pairs: Sequence[tuple[PairItem, Mapping[str, Any]]], *, seed: int = 0
) -> tuple[list[Unit], dict[str, Any]]:
    """lmms-eval 0.7.3's `vlrewardbench_process_results` and `vlrewardbench_aggregate_results` on one reply per
    item: the reasoning tags stripped, the official regex's number (else the stored model reading, `llm_answer`,
    which stands for its gpt-4o-mini call; else `random.Random(seed).choice([1, 2])`, drawn in file order)
    against `human_ranking.index(0 if parity == 0 else 1) + 1`; per category the mean score, then the mean over
    the categories present. Returns the units (every item decided) and the `lmms_eval_*` keys."""
    rng = random.Random(seed)
    by_category: dict[str, list[float]] = {}
    expected: dict[str, list[float]] = {}  # coin flips at their expected value, free of the draw
    units, coins, read, other_number = [], 0, 0, 0
    for item, row in pairs:
        reply, llm_answer = _lmms_eval_reply(item, row)
        answer = parse_official(_strip_reasoning(reply))
        flipped = False
        if answer is None and llm_answer in (1, 2):
            answer, read = llm_answer, read + 1
        elif answer is None:
            answer, coins, flipped = rng.choice([1, 2]), coins + 1, True
        elif answer not in (1, 2):
            other_number += 1
        parity = sum(len(r) for r in item.responses) % 2
        ranking = list(item.extra.get("human_ranking") or ([0, 1] if item.preferred == 0 else [1, 0]))
        correct = answer == ranking.index(0 if parity == 0 else 1) + 1
        category = lmms_eval_category(str(item.extra.get("id", item.id)))
        by_category.setdefault(category, []).append(1.0 if correct else 0.0)
        expected.setdefault(category, []).append(0.5 if flipped else float(correct))
        units.append(Unit(category, item.source, "agree" if correct else "reject"))
    means = {category: sum(scores) / len(scores) for category, scores in by_category.items()}
    extra: dict[str, Any] = {
        "lmms_eval_score": sum(means.values()) / len(means) if means else None,
        **{f"lmms_eval_{category}": mean for category, mean in means.items()},
        "lmms_eval_score_coin_expected": (
            sum(sum(v) / len(v) for v in expected.values()) / len(expected) if expected else None
        ),
        "lmms_eval_coin_flips": coins,
        "lmms_eval_llm_read": read,
        "lmms_eval_other_number": other_number,
    }
    return units, extra


def score(
    items: Sequence[PairItem],
    predictions: Sequence[Mapping[str, Any]],
    *,
    reading: str = "cal.py",
    headline_k: int | None = None,
    seed: int = 0,
    resamples: int = BOOTSTRAP_RESAMPLES,
) -> dict[str, Any]:
    """Metrics of a run: official-mode rows (with `calls`) by `reading` (`cal.py` at `headline_k`, default the
    largest k of 1, 3, 5, 7, 9 the calls cover; or `all-calls`), other rows by their `pred` (index of the
    response judged better, or None). See `eval.vlrb_readings` for the readings and what each key means.
    """
    if reading not in READINGS:
        raise InputError(f"reading {reading!r}: choose one of {', '.join(READINGS)}")
    if reading == "lmms-eval":
        pairs = match_predictions(items, lmms_eval_rows(predictions))
        units, extra = lmms_eval_score(pairs, seed=seed)
        metrics = {"reading": "lmms-eval", "n": len(pairs)}
        metrics.update(unit_metrics(units, tuple(SOURCES), seed=seed, resamples=resamples))
        metrics.update(extra)
        return metrics
    pairs = match_predictions(items, predictions)
    with_calls = bool(pairs) and all(isinstance(p.get("calls"), list) and p["calls"] for _, p in pairs)
    flags: dict[str, list[bool | None]] = defaultdict(list)
    for item, p in pairs:
        if "consistent" in p:
            flags[item.group].append(p["consistent"])
    extra: dict[str, Any] = {}
    if with_calls:
        calls = min(len(p["calls"]) for _, p in pairs)
        if reading == "cal.py":
            k = headline_k or default_headline_k(calls)
            if k not in CALPY_KS or k > calls:
                raise InputError(f"headline k={k}: cal.py reports k in {CALPY_KS}; this run has {calls} calls per item")
            flat = [
                (item.extra.get("calpy_key", item.id), item.group, item.source, outcome)
                for item, p in pairs
                for outcome in _call_outcomes(p)
            ]
            by_k = calpy_units(flat, [x for x in CALPY_KS if x <= calls])
            units = by_k[k]
            for x, xs in by_k.items():
                m = unit_metrics(xs, tuple(SOURCES), resamples=0)
                extra[f"overall_accuracy_k{x}"], extra[f"macro_accuracy_k{x}"] = (
                    m["overall_accuracy"],
                    m["macro_accuracy"],
                )
            extra["headline_k"] = k
        else:
            units = [Unit(item.group, item.source, item_outcome(_call_outcomes(p))) for item, p in pairs]
            extra["headline_k"] = calls
        all_calls = unit_metrics(
            [Unit(item.group, item.source, item_outcome(_call_outcomes(p))) for item, p in pairs], (), resamples=0
        )
        extra["all_calls_overall_accuracy"] = all_calls["overall_accuracy"]
        extra["all_calls_macro_accuracy"] = all_calls["macro_accuracy"]
        extra["calls_per_item"] = calls
        extra["llm_parsed_calls"] = sum(bool(c.get("llm_outcome")) for _, p in pairs for c in p["calls"])
    else:
        units = []
        for item, p in pairs:
            pred = p.get("pred")
            if pred is not None and pred not in (0, 1):
                raise InputError(f"prediction for {item.id}: field 'pred' must be 0, 1 or null, got {pred!r}")
            outcome = "doesntMatch" if pred is None else ("agree" if pred == item.preferred else "reject")
            units.append(Unit(item.group, item.source, "other" if p.get("status") == "other" else outcome))
    metrics: dict[str, Any] = {"reading": reading if with_calls else "decisions", "n": len(pairs)}
    metrics.update(unit_metrics(units, tuple(SOURCES), seed=seed, resamples=resamples))
    metrics.update(extra)
    metrics.update(consistency_metrics(flags))
    return metrics


def score_decisions(ids: Sequence[str], predictions: Sequence[int | None], references: Sequence[int]) -> dict[str, Any]:
    """`score` from plain lists (what the `evaluate` module gets); a prediction of None or -1 is unparsed."""
    items = []
    for i, ref in zip(ids, references):
        source = source_of_id(str(i))
        items.append(
            PairItem(
                id=str(i),
                query="",
                responses=["", ""],
                image=None,
                preferred=int(ref),
                group=group_of_source(source),
                source=source,
                extra={"id": str(i)},
            )
        )
    _unique_ids(items)
    rows = [{"id": str(i), "pred": None if p is None or p < 0 else int(p)} for i, p in zip(ids, predictions)]
    return score(items, rows)


def protocol(mode: str, config: VLRBConfig | None = None, *, orders: int = 2, reading: str = "cal.py") -> str:
    """One line saying how a number was made, for the report."""
    if mode == "official":
        config = config or VLRBConfig()
        how = (
            "cal.py's reading: its random.seed(1234) shuffle of the calls, each item decided by the majority of "
            "its first k shuffled calls (headline k below)"
            if reading == "cal.py"
            else "all-calls reading: each item decided by the majority of all its calls"
        )
        return (
            f"official (VL-RewardBench inference_hf.py + cal.py): official pairwise prompt, k={config.k} calls per "
            f"item each with a random display order, temperature {config.temperature}, top_p {config.top_p}, "
            f"official regex; {how}; doesntMatch/no-majority items left out of the denominators."
        )
    if mode == "mc":
        return (
            f"mc (MR. Judge multiple-choice prompt): {orders} display orders per item, majority of the orders "
            "(ties by option probabilities, then a seeded coin); undecided items left out of the denominators."
        )
    return f"scored from a predictions file ({mode}); undecided items left out of the denominators."


BENCHMARK = PairwiseBenchmark(
    name="vl_rewardbench",
    title="VL-RewardBench",
    score=score,
    groups=GROUPS,
    summary_keys=("overall_accuracy", "macro_accuracy"),
    sources=tuple(SOURCES),
    references=REFERENCE_ROWS,
)


# -- a model-based answer reader (optional) ----------------------------------------------------------------

LLM_PARSE_PROMPT = """
You are given a pairwise judgement for two responses. Please return the better response according to the judgement.
Return the Answer X ONLY. e.g., Answer 1 or Answer 2.

Judgement: {judgement}
"""
"""`cal.py`'s `PARSE_PROMPT` (the same text as lmms-eval's `LLM_PARSE_ANSWER_PROMPT`), verbatim."""


def read_llm_answer(text: str) -> int | None:
    """`cal.py`'s reading of the parser model's reply: "answer 1" anywhere wins, then "answer 2".

    >>> read_llm_answer("Answer 2"), read_llm_answer("answer 1."), read_llm_answer("neither")
    (2, 1, None)
    """
    lowered = text.lower()
    if "answer 1" in lowered:
        return 1
    if "answer 2" in lowered:
        return 2
    return None


def llm_parse_rows(backend: Backend, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Ask a model which answer each regex-missed call chose (`cal.py`'s `use_llm_parse`, lmms-eval's
    fallback): text only, temperature 0, 32 tokens. Each such call gains `llm_answer` and `llm_outcome`
    (None when the reply names no answer); calls already read are not asked again."""
    todo = [
        (row, j)
        for row in rows
        for j, call in enumerate(row.get("calls") or [])
        if call["outcome"] == "doesntMatch" and "llm_answer" not in call
    ]
    if not todo:
        return rows
    requests = [
        ChatRequest(messages=[{"role": "user", "content": LLM_PARSE_PROMPT.format(judgement=row["raw"][j])}])
        for row, j in todo
    ]
    generations = backend.generate(requests, SamplingParams(max_new_tokens=32, temperature=0.0))
    for (row, j), generation in zip(todo, generations):
        call = row["calls"][j]
        answer = read_llm_answer(generation.text)
        call["llm_answer"] = answer
        call["llm_outcome"] = None if answer is None else call_outcome(answer, call["display"], row["preferred"])
    return rows
