"""The `MetricInfo` both benchmark metric modules declare: one decision and one reference index per item,
plus the per-item string columns their scorer reads."""

from __future__ import annotations

import datasets
import evaluate

__all__ = ["decision_metric_info"]


def decision_metric_info(
    description: str, citation: str, inputs_description: str, reference_url: str, *text_inputs: str
) -> evaluate.MetricInfo:
    """Int32 `predictions` and `references`, then one string column per name in `text_inputs`."""
    columns = {"predictions": datasets.Value("int32"), "references": datasets.Value("int32")}
    columns.update({name: datasets.Value("string") for name in text_inputs})
    return evaluate.MetricInfo(
        description=description,
        citation=citation,
        inputs_description=inputs_description,
        features=datasets.Features(columns),
        reference_urls=[reference_url],
    )
