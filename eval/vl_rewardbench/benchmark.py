"""VL-RewardBench as the shared pairwise runner (`eval.pairwise_run`) sees it: `BENCHMARK` (its name, groups,
scorer and the published numbers the report sets beside a run) and `protocol`, the report's line on how a
number was made."""

from __future__ import annotations

from typing import Any

from eval.pairwise_run import PairwiseBenchmark
from eval.vl_rewardbench.data import GROUPS, SOURCES
from eval.vl_rewardbench.official import VLRBConfig
from eval.vl_rewardbench.scoring import score

__all__ = ["BENCHMARK", "REFERENCE_ROWS", "protocol"]

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
