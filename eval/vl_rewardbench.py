"""VL-RewardBench (Li et al., CVPR 2025), run and scored the way its own code does it.

Data: the hub dataset `MMInstruction/VL-RewardBench` (split `test`) or a local Parquet/JSONL with the
same fields (`id`, `query`, `response` (2), `image`, `human_ranking`; in `human_ranking` the response with
the lower rank is preferred). Each item's group comes from its id prefix (cut at the first `_` or `-`),
as the current official `cal.py` intends: `hallucination` (POVID), `RLAIF`, `RLHF` → hallucination;
`mathverse`, `mmmu` → reasoning; `wildvision` and everything else (VLFeedback) → general.

Two modes:

- `official` — VL-RewardBench's `inference_hf.py` + `cal.py`: the official pairwise prompt (text, then
  the image), a random display order per call, k calls (default 10) at temperature 0.2 / top_p 0.2, the
  official regex on the reply with newlines and `*` removed. Per call: `agree` unless the parsed number
  is the rejected response's display position (`reject`), or `doesntMatch` when the regex fails. Per item:
  `agree`/`reject`/`doesntMatch` when that outcome has more than half of the calls, else `other`.
  Only `agree` and `reject` items enter the denominators.
- `mc` — our MC judge (MR. Judge's prompt) with both display orders; the item's decision is the judge's
  aggregated choice, and order consistency is reported too. Undecided items leave the denominators too.

Metrics (`metrics.json`): `overall_accuracy` (micro over the three groups), `macro_accuracy` (mean of the
groups), `accuracy_general`, `accuracy_hallucination`, `accuracy_reasoning`, `accuracy_<source>` for
povid, rlaif_v, rlhf_v, mathverse, mmmu, wildvision, vlfeedback, `n`, `unparsed` (items left out because
no answer parsed, or no outcome had a majority — `no_majority` counts the latter), and `consistency` in
mc mode.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from eval.pairwise import PairItem, group_accuracies, resolve_image_paths
from eval.pairwise_run import PairwiseBenchmark
from judge.backends.base import Backend, ChatRequest, SamplingParams
from judge.images import load_image
from judge.jsonl import InputError, parse_records, read_records
from judge.judging import item_rng
from judge.types import DataError

__all__ = [
    "BENCHMARK",
    "protocol",
    "GROUPS",
    "HUB_ID",
    "OFFICIAL_PATTERN",
    "REFERENCE_ROWS",
    "SOURCES",
    "VLRBConfig",
    "call_outcome",
    "group_of_source",
    "item_outcome",
    "load_vl_rewardbench",
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
    # Published numbers (percent), official protocol; group columns where the papers give them.
    {"judge": "GPT-4o", "overall": 65.8, "macro": 62.4},
    {"judge": "Gemini-1.5-Pro", "overall": 67.2, "macro": 62.5},
    {"judge": "Claude-3.5-Sonnet", "overall": 55.3, "macro": 53.6},
    {"judge": "Skywork-VL-Reward-7B", "overall": 73.3, "macro": 69.0},
    {
        "judge": "MR. Judge-7B (SFT+RL)",
        "overall": 75.5,
        "macro": 71.1,
        "general": 68.7,
        "hallucination": 83.2,
        "reasoning": 61.4,
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


def _item_from_row(row: Any, where: str) -> PairItem:
    if not isinstance(row, Mapping):
        raise DataError("row", f"expected an object, got {type(row).__name__}", "write one JSON object per line", where)
    for name in ("id", "query", "response", "image", "human_ranking"):
        if row.get(name) is None:
            raise DataError(name, "missing", f"every VL-RewardBench row needs '{name}'", where)
    responses, ranking = list(row["response"]), [int(r) for r in row["human_ranking"]]
    if len(responses) != 2 or not all(isinstance(r, str) for r in responses):
        raise DataError("response", f"expected 2 strings, got {len(responses)} items", "give two responses", where)
    if sorted(ranking) != [0, 1]:
        raise DataError(
            "human_ranking", f"expected ranks [0, 1] in some order, got {ranking}", "rank 0 marks the preferred", where
        )
    item_id = str(row["id"])
    source = source_of_id(item_id)
    return PairItem(
        id=item_id,
        query=str(row["query"]),
        responses=responses,
        image=row["image"],
        preferred=ranking.index(0),
        group=group_of_source(source),
        source=source,
        extra={"human_ranking": ranking},
    )


def load_vl_rewardbench(data: str | Path, *, limit: int | None = None, split: str = "test") -> list[PairItem]:
    """Items from a local `.jsonl`/`.json`/`.parquet` file, or from the hub id `MMInstruction/VL-RewardBench`.

    In JSONL, `image` may be a path (relative to the file's folder), a data URL, or `{"bytes", "path"}`;
    every bad line is reported with its number, field and fix before anything runs.
    """
    path = Path(data)
    if path.suffix in (".jsonl", ".json") and path.is_file():
        items = read_records(path, _item_from_row)
        resolve_image_paths(items, path)
    else:
        rows = _dataset_rows(str(data), split)
        items = parse_records(((f"row {i}", row) for i, row in enumerate(rows)), _item_from_row, data)
    return items[:limit] if limit is not None else items


def _dataset_rows(data: str, split: str) -> Iterable[dict[str, Any]]:
    """Rows of a Parquet file or hub dataset through `datasets`, images kept as `{"bytes", "path"}`."""
    import datasets

    if data.endswith(".parquet"):
        if not Path(data).is_file():
            raise InputError(f"--data {data}: file not found")
        dataset = datasets.load_dataset("parquet", data_files=data, split="train")
    else:
        dataset = datasets.load_dataset(data, split=split)
    if "image" in dataset.features and isinstance(dataset.features["image"], datasets.Image):
        dataset = dataset.cast_column("image", datasets.Image(decode=False))
    return dataset


# -- the official protocol ---------------------------------------------------------------------------------


def official_prompt(query: str, responses_shown: Sequence[str]) -> str:
    """The official prompt with the responses in display order (Answer 1 first)."""
    return OFFICIAL_PROMPT.format(query=query, answer_1=responses_shown[0], answer_2=responses_shown[1])


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
    half = len(outcomes) / 2
    for outcome in ("agree", "reject", "doesntMatch"):
        if outcomes.count(outcome) > half:
            return outcome  # type: ignore[return-value]
    return "other"


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
            text = official_prompt(item.query, [item.responses[i] for i in display])
            # The official client sends the text part first, then the image.
            messages = [{"role": "user", "content": [{"type": "text", "text": text}, {"type": "image"}]}]
            requests.append(ChatRequest(messages=messages, images=[image]))
            displays.append(display)
    params = SamplingParams(
        max_new_tokens=config.max_new_tokens,
        temperature=config.temperature,
        top_p=config.top_p,
        seed=item_rng(config.seed, items[0].id, "sampling").randrange(2**31) if items else None,
    )
    generations = backend.generate(requests, params)
    rows = []
    for i, item in enumerate(items):
        calls = []
        for j in range(i * config.k, (i + 1) * config.k):
            answer = parse_official(generations[j].text)
            outcome = call_outcome(answer, displays[j], item.preferred)
            calls.append({"display": displays[j], "answer": answer, "outcome": outcome})
        status = item_outcome([c["outcome"] for c in calls])
        pred = {"agree": item.preferred, "reject": 1 - item.preferred}.get(status)
        rows.append(
            {
                "id": item.id,
                "group": item.group,
                "source": item.source,
                "preferred": item.preferred,
                "pred": pred,
                "status": status,
                "calls": calls,
                "raw": [generations[j].text for j in range(i * config.k, (i + 1) * config.k)],
            }
        )
    return rows


# -- scoring -----------------------------------------------------------------------------------------------


def score(items: Sequence[PairItem], predictions: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Metrics from one decision per item: `pred` is the index of the response judged better, or None.

    Items without a decision leave the denominators (as the official `cal.py` leaves out `doesntMatch`
    and `other`). A prediction whose `status` is `other` counts in `no_majority`; `consistent` flags, when
    present, give `consistency` (share of all scored items whose display orders agreed).
    """
    by_id = {item.id: item for item in items}
    unknown = [str(p.get("id")) for p in predictions if str(p.get("id")) not in by_id]
    if unknown:
        raise InputError(
            f"{len(unknown)} prediction id(s) are not in the data, e.g. {unknown[:3]} — score against the same "
            "VL-RewardBench file the predictions were made on"
        )
    decisions_source, decisions_group = [], []
    no_majority, flags = 0, defaultdict(list)
    for p in predictions:
        item = by_id[str(p["id"])]
        pred = p.get("pred")
        if pred is not None and pred not in (0, 1):
            raise InputError(f"prediction for {item.id}: field 'pred' must be 0, 1 or null, got {pred!r}")
        correct = None if pred is None else pred == item.preferred
        decisions_source.append((item.source, correct))
        decisions_group.append((item.group, correct))
        no_majority += p.get("status") == "other"
        if "consistent" in p:
            flags[item.group].append(bool(p["consistent"]))
    groups = group_accuracies(decisions_group)
    sources = group_accuracies(decisions_source)
    agree = sum(g.agree for g in groups.values())
    decided = agree + sum(g.reject for g in groups.values())
    present = [groups[g].accuracy for g in GROUPS if g in groups and groups[g].accuracy is not None]
    metrics: dict[str, Any] = {
        "overall_accuracy": agree / decided if decided else None,
        "macro_accuracy": sum(present) / len(present) if present else None,
        "n": len(predictions),
        "decided": decided,
        "unparsed": len(predictions) - decided,
        "no_majority": no_majority,
    }
    for group in GROUPS:
        metrics[f"accuracy_{group}"] = groups[group].accuracy if group in groups else None
        metrics[f"n_{group}"] = (
            (groups[group].agree + groups[group].reject + groups[group].undecided) if group in groups else 0
        )
    for source in SOURCES:
        if source in sources:
            metrics[f"accuracy_{source}"] = sources[source].accuracy
    if flags:
        metrics["consistency"] = sum(sum(f) for f in flags.values()) / len(predictions)
        metrics.update({f"consistency_{g}": sum(f) / len(f) for g, f in flags.items()})
    metrics.update(_by_k(items, predictions))
    return metrics


def _by_k(items: Sequence[PairItem], predictions: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Official-mode runs also report the first k calls of each item, k in 1, 3, 5, 7, 9, as `cal.py` does."""
    calls = [p.get("calls") for p in predictions]
    if not predictions or not all(isinstance(c, list) and c for c in calls):
        return {}
    by_id = {item.id: item for item in items}
    out: dict[str, Any] = {}
    for k in (1, 3, 5, 7, 9):
        if k >= min(len(c) for c in calls):
            break
        rows = []
        for p, c in zip(predictions, calls):
            status = item_outcome([call["outcome"] for call in c[:k]])
            preferred = by_id[str(p["id"])].preferred
            rows.append({"id": p["id"], "pred": {"agree": preferred, "reject": 1 - preferred}.get(status)})
        metrics = score(items, rows)
        out[f"overall_accuracy_k{k}"] = metrics["overall_accuracy"]
        out[f"macro_accuracy_k{k}"] = metrics["macro_accuracy"]
    return out


def score_decisions(ids: Sequence[str], predictions: Sequence[int | None], references: Sequence[int]) -> dict[str, Any]:
    """`score` from plain lists (what the `evaluate` module gets); a prediction of None or -1 is unparsed."""
    items = [
        PairItem(id=str(i), query="", responses=["", ""], image=None, preferred=int(ref), group="", source="")
        for i, ref in zip(ids, references)
    ]
    for item in items:
        item.source = source_of_id(item.id)
        item.group = group_of_source(item.source)
    rows = [{"id": str(i), "pred": None if p is None or p < 0 else int(p)} for i, p in zip(ids, predictions)]
    return score(items, rows)


def protocol(mode: str, config: VLRBConfig | None = None, *, orders: int = 2) -> str:
    """One line saying how a number was made, for the report."""
    if mode == "official":
        config = config or VLRBConfig()
        return (
            f"official (VL-RewardBench inference_hf.py + cal.py): official pairwise prompt, k={config.k} calls per "
            f"item each with a random display order, temperature {config.temperature}, top_p {config.top_p}, "
            "official regex, per-item majority; doesntMatch/no-majority items left out of the denominators."
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
