"""Part 2, `handoff`: `benchmarks.adapter_handoff`'s measurement on a 4B-shaped model, against its goal.

Adapter-only against merged full weights, end to end (bf16, random weights from a config). Goal:
`time_ratio_measured` >= `HANDOFF_GOAL`; the part passes when the adapter side answers as the trainer does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.gpu_checks.plans import HANDOFF_GOAL
from benchmarks.gpu_checks.record import Record


def part_handoff(device: str, plan: dict[str, Any], work: Path, record: Record) -> None:
    from benchmarks import adapter_handoff

    args = adapter_handoff.parse_args(["--shape", plan["handoff_shape"], "--device", device, "--repeats",
                                       str(plan["handoff_repeats"]), "--workdir", str(work / "handoff")])  # fmt: skip
    measured = adapter_handoff.measure(args)
    ratio = measured["time_ratio_measured"]
    record.update(
        goal_time_ratio=HANDOFF_GOAL,
        time_ratio_measured=ratio,
        meets_goal=ratio >= HANDOFF_GOAL,
        answers_match=measured["answers_match"],
        measurement=measured,
        ok=bool(measured["answers_match"]),
    )
