"""Multimodal RewardBench accuracy as an `evaluate` module: the official categories and coin flips.

Inputs, one per item: `predictions` (0 for Output1, 1 for Output2; None or -1 when unparsed — counted as
a coin flip seeded per id, as the official scorer does), `references` (0 when `Better` is Output1, else
1), `ids` and `categories` (the rows' `ID` and `Category`; the id splits safety and reasoning). Returns
the same keys as `metrics.json` of `mrjudge eval multimodal-rewardbench`.
"""

import evaluate

from eval.metrics.decision_info import decision_metric_info
from eval.multimodal_rewardbench import score_decisions

_DESCRIPTION = __doc__
_CITATION = """@article{yasunaga2025multimodal,
  title={Multimodal RewardBench: Holistic Evaluation of Reward Models for Vision Language Models},
  author={Yasunaga, Michihiro and Zettlemoyer, Luke and Ghazvininejad, Marjan},
  journal={arXiv preprint arXiv:2502.14191},
  year={2025}
}"""
_KWARGS_DESCRIPTION = """
Args:
    predictions: list of int or None (0 = Output1, 1 = Output2; None/-1: unparsed).
    references: list of int, the better output's index.
    ids: list of str, the items' `ID`.
    categories: list of str, the items' `Category`.
    seed: int, seeds the coin flips for unparsed items (default 0).
Returns:
    overall_accuracy, accuracy_<category>, the leaderboard columns (accuracy_reasoning and accuracy_safety merged),
    n, unparsed, and per accuracy *_ci95_low/high, *_unparsed_wrong, *_unparsed_coin.
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class MultimodalRewardbench(evaluate.Metric):
    def _info(self):
        return decision_metric_info(
            _DESCRIPTION,
            _CITATION,
            _KWARGS_DESCRIPTION,
            "https://github.com/facebookresearch/multimodal_rewardbench",
            "ids",
            "categories",
        )

    def _compute(self, predictions, references, ids, categories, seed=0):
        return score_decisions(ids, predictions, references, categories, seed=seed)
