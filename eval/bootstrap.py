"""Seeded percentile bootstrap intervals for accuracies that are ratios of per-item sums.

Every accuracy the benchmarks report is `sum(numerator) / sum(denominator)` over items (VL-RewardBench:
agree over decided items of a group; Multimodal RewardBench: correct over items; MM-Vet: grade over
questions with a capability), or a mean of such ratios (VL-RewardBench's macro). Items are resampled with
replacement `n` times from a `numpy` generator seeded by `seed`, so the interval is the same on every run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

__all__ = ["BOOTSTRAP_RESAMPLES", "RatioSet", "bootstrap_intervals", "interval_keys"]

BOOTSTRAP_RESAMPLES = 1000
LEVEL = 0.95


@dataclass
class RatioSet:
    """Per-item numerators and denominators, one pair of arrays per metric, plus derived means."""

    numerators: dict[str, list[float]] = field(default_factory=dict)
    denominators: dict[str, list[float]] = field(default_factory=dict)
    means: dict[str, Sequence[str]] = field(default_factory=dict)
    """Metrics that are the plain mean of other ratio metrics (e.g. macro = mean of the groups)."""

    def add(self, name: str, numerator: Sequence[float], denominator: Sequence[float]) -> None:
        if len(numerator) != len(denominator):
            raise ValueError(f"{name}: {len(numerator)} numerators for {len(denominator)} denominators")
        if sum(denominator) > 0:  # a metric undefined on the data has no interval either
            self.numerators[name] = list(numerator)
            self.denominators[name] = list(denominator)


def bootstrap_intervals(
    ratios: RatioSet, *, n: int = BOOTSTRAP_RESAMPLES, seed: int = 0, level: float = LEVEL
) -> dict[str, tuple[float, float] | None]:
    """`{metric: (low, high)}`: the percentile interval of each metric over `n` item resamples.

    A resample in which a metric's denominator is zero is left out of that metric's percentiles; a metric
    with no defined resample gets None.
    """
    if not ratios.numerators:
        return {}
    sizes = {len(v) for v in ratios.numerators.values()}
    if len(sizes) != 1:
        raise ValueError(f"every metric needs one value per item, got lengths {sorted(sizes)}")
    items = sizes.pop()
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(items, np.full(items, 1.0 / items), size=n).astype(np.float64)  # (n, items)
    values: dict[str, np.ndarray] = {}
    for name, numerator in ratios.numerators.items():
        top = counts @ np.asarray(numerator, dtype=np.float64)
        bottom = counts @ np.asarray(ratios.denominators[name], dtype=np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            values[name] = np.where(bottom > 0, top / np.where(bottom > 0, bottom, 1.0), np.nan)
    for name, parts in ratios.means.items():
        if all(p in values for p in parts):
            values[name] = np.mean(np.stack([values[p] for p in parts]), axis=0)
    tail = 100.0 * (1.0 - level) / 2.0
    out: dict[str, tuple[float, float] | None] = {}
    for name, samples in values.items():
        defined = samples[~np.isnan(samples)]
        if defined.size == 0:
            out[name] = None
        else:
            low, high = np.percentile(defined, [tail, 100.0 - tail])
            out[name] = (float(low), float(high))
    return out


def interval_keys(intervals: Mapping[str, tuple[float, float] | None]) -> dict[str, float | None]:
    """Flat `metrics.json` keys: `<metric>_ci95_low` and `<metric>_ci95_high`."""
    out: dict[str, float | None] = {}
    for name, bounds in intervals.items():
        out[f"{name}_ci95_low"], out[f"{name}_ci95_high"] = bounds if bounds else (None, None)
    return out
