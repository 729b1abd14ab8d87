"""The benchmark metrics as Hugging Face `evaluate` modules, loadable offline from this folder.

    import evaluate
    from eval.metrics import module_path

    vlrb = evaluate.load(module_path("vl_rewardbench"))
    vlrb.compute(predictions=[0, 1, None], references=[0, 0, 1], ids=["RLAIF-V_1", "mmmu_2", "wildvision_3"])

Each module calls the same scoring function as `mrjudge eval`, so both give the same numbers.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["MODULES", "module_path"]

MODULES = ("vl_rewardbench", "multimodal_rewardbench")


def module_path(name: str) -> str:
    """The folder `evaluate.load` takes for a benchmark's metric module."""
    if name not in MODULES:
        raise ValueError(f"unknown metric module {name!r}; choose one of {MODULES}")
    return str(Path(__file__).parent / name)
