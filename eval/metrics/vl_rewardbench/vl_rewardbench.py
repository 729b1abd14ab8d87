"""VL-RewardBench accuracy as an `evaluate` module: the official grouping and denominators.

Inputs, one per item: `predictions` (index of the response judged better; None or -1 when the judge gave
no answer — such items leave the denominators, as in the official `cal.py`), `references` (index of the
human-preferred response, i.e. where `human_ranking` is 0), `ids` (the item ids, which give the group).
Returns the same keys as `metrics.json` of `mrjudge eval vl-rewardbench`.
"""

import evaluate

from eval.metrics.decision_info import decision_metric_info
from eval.vl_rewardbench import score_decisions

_DESCRIPTION = __doc__
_CITATION = """@inproceedings{li2025vlrewardbench,
  title={VL-RewardBench: A Challenging Benchmark for Vision-Language Generative Reward Models},
  author={Li, Lei and others},
  booktitle={CVPR},
  year={2025}
}"""
_KWARGS_DESCRIPTION = """
Args:
    predictions: list of int or None, the response index judged better (None/-1: unparsed).
    references: list of int, the preferred response index.
    ids: list of str, VL-RewardBench ids (their prefix gives the source and group).
Returns:
    overall_accuracy, macro_accuracy, accuracy_{general,hallucination,reasoning}, accuracy_<source>, n, unparsed,
    each accuracy's seeded 95 % bootstrap interval (*_ci95_low/high), and overall/macro with unparsed items
    counted wrong (*_unparsed_wrong) or as half a point (*_unparsed_coin). Repeated ids are separate rows.
Example:
    metric = evaluate.load(eval.metrics.module_path("vl_rewardbench"))
    metric.compute(predictions=[0, 1], references=[0, 0], ids=["RLAIF-V_1", "mmmu_2"])["overall_accuracy"]  # 0.5
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class VlRewardbench(evaluate.Metric):
    def _info(self):
        return decision_metric_info(
            _DESCRIPTION, _CITATION, _KWARGS_DESCRIPTION, "https://github.com/vl-rewardbench/VL_RewardBench", "ids"
        )

    def _compute(self, predictions, references, ids):
        return score_decisions(ids, predictions, references)
