"""Export a LoRA run's adapter to the adapter store at every checkpoint save and at the end.

    mrjudge train grpo --config configs/judge_grpo_tiny.yaml use_lora=true \
        adapter_store=runs/adapters adapter_policy=judge

Each export is a revision of `adapter_policy` carrying the step, the last logged metrics and the revision
it continues from (`parent`), so `mrjudge adapters list` reads as the run's history and `promote` /
`rollback` move a server between its steps. The base model is fingerprinted once, at the start; the
base weights never leave the trainer.
"""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback

from adapter_revisions.store import AdapterStore, Revision

__all__ = ["AdapterExportCallback"]

_LOGGED = ("loss", "reward", "eval_loss", "eval_reward", "mean_token_accuracy", "learning_rate")


class AdapterExportCallback(TrainerCallback):
    """A `TrainerCallback` that writes the PEFT adapter as a store revision on every save and at train end.

    Args:
        store: the adapter store (or its folder).
        policy: the policy name revisions go under.
        parent: the revision the run starts from (`policy@rev`), if it continues one.
        base_fingerprint: the base's fingerprint when it cannot be computed here (sharded weights).
    """

    def __init__(
        self,
        store: AdapterStore | str,
        policy: str,
        *,
        parent: str | None = None,
        base_fingerprint: str | None = None,
    ) -> None:
        self.store = store if isinstance(store, AdapterStore) else AdapterStore(store)
        self.policy = policy
        self.parent = parent
        self.base_fingerprint = base_fingerprint
        self.exported: list[Revision] = []

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        if not hasattr(model, "peft_config"):
            raise ValueError("adapter export needs a LoRA run: set use_lora=true (full fine-tuning has no adapter)")
        if self.base_fingerprint is None:
            from adapter_revisions.fingerprint import base_fingerprint

            self.base_fingerprint = base_fingerprint(model)

    def on_save(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        self._export(state, model)

    def on_train_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        if not self.exported or self.exported[-1].step != state.global_step:
            self._export(state, model)

    def _export(self, state: Any, model: Any) -> None:
        if not state.is_world_process_zero:
            return
        metrics: dict[str, float] = {}
        for record in state.log_history:
            metrics.update({k: float(v) for k, v in record.items() if k in _LOGGED and isinstance(v, (int, float))})
        revision = self.store.save(
            self.policy,
            model,
            adapter_name=getattr(model, "active_adapter", "default"),
            base_fingerprint=self.base_fingerprint,
            step=state.global_step,
            metrics=metrics,
            parent=self.exported[-1].ref if self.exported else self.parent,
        )
        self.exported.append(revision)
