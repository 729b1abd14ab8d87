"""The trainers' logged losses and rewards, recorded for the curves and the stages' first/last figures."""

from __future__ import annotations

from typing import Any

__all__ = ["History"]


class History:
    """A TrainerCallback-like recorder of logged losses and rewards, for the curves."""

    def __init__(self) -> None:
        self.logs: list[dict[str, float]] = []

    def callback(self) -> Any:
        from transformers import TrainerCallback

        history = self

        class Record(TrainerCallback):
            def on_log(self, args, state, control, logs=None, **kwargs):
                if logs:
                    history.logs.append(
                        {"step": state.global_step, **{k: v for k, v in logs.items() if isinstance(v, (int, float))}}
                    )

        return Record()
