"""How a stage shows and sums up a trainer: one rich progress bar in place of TRL's, and the mean of a logged
figure over the first and the last tenth of the steps."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["log_stats", "with_progress"]


def with_progress(build: Callable[..., Any], console: Any, label: str) -> Callable[..., Any]:
    """A trainer builder for `training.recipe.run_recipe` whose trainer shows one rich progress bar (step,
    latest loss or reward) instead of TRL's tqdm bar and its printed log dicts."""
    from transformers import PrinterCallback, ProgressCallback, TrainerCallback

    class RichProgress(TrainerCallback):
        def __init__(self) -> None:
            self.progress: Any = None
            self.task: Any = None

        def on_train_begin(self, args, state, control, **kwargs):
            from jobs.progress import new_progress

            self.progress = new_progress(console=console, enabled=console is not None)
            self.progress.start()
            self.task = self.progress.add_task(label, total=state.max_steps)

        def on_step_end(self, args, state, control, **kwargs):
            self.progress.update(self.task, completed=state.global_step)

        def on_log(self, args, state, control, logs=None, **kwargs):
            shown = [f"{k} {logs[k]:.3g}" for k in ("loss", "reward") if isinstance((logs or {}).get(k), (int, float))]
            if shown:
                self.progress.update(self.task, description=f"{label} ({', '.join(shown)})")

        def on_train_end(self, args, state, control, **kwargs):
            self.progress.stop()

    def quiet_build(config: Any, **kwargs: Any) -> Any:
        trainer = build(config, **kwargs)
        trainer.remove_callback(ProgressCallback)
        trainer.remove_callback(PrinterCallback)
        trainer.add_callback(RichProgress())
        return trainer

    return quiet_build


def log_stats(logs: list[dict[str, Any]], key: str, share: float = 0.1) -> tuple[float | None, float | None]:
    """Mean of `key` over the first and the last `share` of the logged steps (at least one step each).

    >>> log_stats([{"loss": x} for x in range(10)], "loss", share=0.2)
    (0.5, 8.5)
    """
    values = [r[key] for r in logs if key in r]
    if not values:
        return None, None
    k = max(1, int(len(values) * share + 1e-9))  # 0.1 × 30 must be 3, whatever the float
    return sum(values[:k]) / k, sum(values[-k:]) / k
