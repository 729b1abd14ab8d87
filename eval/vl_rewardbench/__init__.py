"""VL-RewardBench (Li et al., CVPR 2025), run and scored the way its own code does it.

Data: either published form. The hub dataset `MMInstruction/VL-RewardBench` (split `test`, one Parquet
file, `image` as bytes; its commit is recorded) or a local copy of it; or the GitHub `data/data.jsonl`
(`image_path` relative to the file, 18 ids repeated with other responses: every row is kept). In
`human_ranking` the response with rank 0 is preferred. Each item's group comes from its id prefix (cut at
the first `_` or `-`), as the current official `cal.py` does: `hallucination` (POVID), `RLAIF`, `RLHF` →
hallucination; `mathverse`, `mmmu` → reasoning; `wildvision` and everything else (VLFeedback) → general.

The official rules (`inference_hf.py`, then `cal.py`):

- per item, k calls (default 10), each with its own random display order, at temperature 0.2, top_p 0.2,
  max_tokens 2048; one user turn, the official pairwise prompt (`"<image>\\n"` removed) then the image;
- each reply is read with the official regex (`Overall Judgment|Therefore … Answer N is … better`,
  case-insensitive) on the text with newlines and `*` removed: a call is `reject` when N is the rejected
  response's display position, `doesntMatch` when the regex fails, else `agree`;
- `cal.py` shuffles all calls with `random.seed(1234)` and gives each item its first k shuffled calls, for k
  in 1, 3, 5, 7, 9: the item is `agree`, `reject` or `doesntMatch` when that outcome has more than half of
  them, else `other`;
- group accuracy = agree / (agree + reject): `doesntMatch` and `other` items leave the denominator; overall
  = Σ agree / Σ (agree + reject) over the three groups; macro = the mean of the three group accuracies.

Two modes:

- `official` — the rules above. The headline is `cal.py`'s reading (its seeded shuffle, k = 9 of 10 calls by
  default); `all_calls_*` keep the majority over all calls. Other readings of the same calls can be named
  (`--reading`): the majority of all calls, or lmms-eval 0.7.3's reading of one reply per item.
- `mc` — our MC judge (MR. Judge's prompt) with both display orders; the item's decision is the judge's
  aggregated choice, and order consistency is reported too. Undecided items leave the denominators too.

Metrics (`metrics.json`): `overall_accuracy` (micro over the three groups), `macro_accuracy` (mean of the
groups), `accuracy_general|hallucination|reasoning`, `accuracy_<source>`, each with `*_ci95_low/high`
(seeded bootstrap); `n`, `decided`, `unparsed` (items left out: no parse or no majority; `no_majority`
counts the latter); `overall|macro_accuracy_unparsed_wrong|coin`; `reading`, `headline_k`,
`overall|macro_accuracy_k{1,3,5,7,9}`; `consistency` (+ `consistency_undetermined`) in mc mode; and
`data_sha256`, `data_rows`, `data_source`, `data_revision`.

    items = load_vl_rewardbench("MMInstruction/VL-RewardBench")
    rows = official_predict(backend, items, VLRBConfig())     # k = 10 calls per item
    metrics = score(items, rows)                              # cal.py's reading, k = 9
    metrics = score(items, rows, reading="all-calls")

One idea per module: `data` (both forms of the data read into items, groups from ids, predictions paired back
with their rows), `official` (the official prompt, regex, call and item outcomes, and `official_predict`),
`calpy` (`cal.py`'s majority, seeded shuffle and ks), `accuracy` (scored items into the accuracies),
`readings` (the registry of readings, and the readings of official calls and of decisions),
`lmms_eval_reading` (lmms-eval's reading), `answer_reader` (the optional model that reads what the regex
missed), `scoring` (`score` by a reading's name) and `benchmark` (`BENCHMARK` and the report's protocol line).
Everything public is importable from `eval.vl_rewardbench`.
"""

from eval.vl_rewardbench.accuracy import Unit, unit_metrics
from eval.vl_rewardbench.answer_reader import LLM_PARSE_PROMPT, llm_parse_rows, read_llm_answer
from eval.vl_rewardbench.benchmark import BENCHMARK, REFERENCE_ROWS, protocol
from eval.vl_rewardbench.calpy import CALPY_KS, CALPY_SEED, calpy_units, default_headline_k, majority
from eval.vl_rewardbench.data import (
    GROUPS,
    HUB_ID,
    IMAGE_TAG,
    SOURCES,
    calpy_key,
    group_of_source,
    load_vl_rewardbench,
    match_predictions,
    source_of_id,
)
from eval.vl_rewardbench.lmms_eval_reading import (
    LMMS_EVAL_GROUPS,
    LMMS_EVAL_REASONING_TAGS,
    lmms_eval_category,
    lmms_eval_display,
    lmms_eval_rows,
    lmms_eval_score,
)
from eval.vl_rewardbench.official import (
    OFFICIAL_PATTERN,
    OFFICIAL_PROMPT,
    VLRBConfig,
    call_outcome,
    item_outcome,
    official_predict,
    official_prompt,
    parse_official,
)
from eval.vl_rewardbench.readings import READINGS, Reading, ReadingOptions, reading, reading_named
from eval.vl_rewardbench.scoring import score, score_decisions

__all__ = [
    "BENCHMARK",
    "CALPY_KS",
    "CALPY_SEED",
    "GROUPS",
    "HUB_ID",
    "IMAGE_TAG",
    "LLM_PARSE_PROMPT",
    "LMMS_EVAL_GROUPS",
    "LMMS_EVAL_REASONING_TAGS",
    "OFFICIAL_PATTERN",
    "OFFICIAL_PROMPT",
    "READINGS",
    "REFERENCE_ROWS",
    "SOURCES",
    "Reading",
    "ReadingOptions",
    "Unit",
    "VLRBConfig",
    "call_outcome",
    "calpy_key",
    "calpy_units",
    "default_headline_k",
    "group_of_source",
    "item_outcome",
    "llm_parse_rows",
    "lmms_eval_category",
    "lmms_eval_display",
    "lmms_eval_rows",
    "lmms_eval_score",
    "load_vl_rewardbench",
    "majority",
    "match_predictions",
    "official_predict",
    "official_prompt",
    "parse_official",
    "protocol",
    "read_llm_answer",
    "reading",
    "reading_named",
    "score",
    "score_decisions",
    "source_of_id",
    "unit_metrics",
]
