"""TRL's `GRPOTrainer` with the loss computed by exact shared-prompt replay (`training.replay`), one flag away.

    mrjudge train policy --config configs/policy_grpo_tiny.yaml replay_shared_prompt=true replay_branch_batch=2

or, with TRL alone: `ReplayGRPOTrainer(model=…, args=GRPOConfig(…), …)` where `GRPOTrainer` was.

What changes: each training micro-batch runs `replay_backward` (the prompt of each group once without
autograd, each completion alone against leaf copies of its state, then the prompt once more with
autograd), so the backward happens inside `training_step`; old-policy and reference log-probs take the
no-grad replay. The gradient is the plain loss's (see `tests/training/test_replay.py`), and so are the
logged metrics (entropy, KL, clip ratios). What is refused, at construction and with the reason: TRL
options whose loss does not split into per-completion terms (`top_entropy_quantile` < 1, the entropy bonus,
MoE load-balancing loss), fp16 loss scaling, DeepSpeed and FSDP (they own the backward).
Plain DDP works: replay's backward passes bypass DDP's hooks, and the gradients are averaged across
processes at each accumulation boundary. `replay_prompt_chunk=N` runs each prompt in chunks of N tokens
and back-propagates them last to first (`training.replay.chunked`): same gradient, one chunk's activations.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch
from trl import GRPOTrainer

from judge.config import setting
from training.config import post_init_next
from training.replay import (
    GRPOLoss,
    ReplayBatch,
    ReplayResult,
    ReplayUnsupportedError,
    replay_backward,
    replay_token_logps,
)

__all__ = ["ReplayArguments", "ReplayGRPOTrainer"]


@dataclass
class ReplayArguments:
    """Config fields that switch GRPO's loss to exact shared-prompt replay (mixed into a `GRPOConfig`)."""

    replay_shared_prompt: bool = setting(
        False,
        "Compute the GRPO loss by replaying each completion against its prompt's cached state: the "
        "same gradient as the batched loss, the prompt's activations held once instead of G times "
        "(long prompts, many images).",
    )
    replay_branch_batch: int = setting(
        1,
        "Completions replayed together. 1 appends each completion into the prompt's key/value buffer "
        "(no copy); more than 1 costs a copy of the prompt's keys and values per completion, so keep 1 for "
        "long prompts and raise it for speed on short ones.",
    )
    replay_prompt_chunk: int = setting(
        0,
        "Run each shared prompt in chunks of this many tokens and back-propagate chunk by chunk (last "
        "to first): the same gradient, with one chunk's activations plus the prompt's keys/values held "
        "instead of the whole prompt's activations, for prompts past the activation wall. Each chunk's "
        "recomputation checkpoints its layers when the model has gradient checkpointing on. 0 runs the "
        "prompt in one piece.",
    )
    replay_offload_prompt_state: bool = setting(
        False,
        "With replay_prompt_chunk, keep the per-chunk linear-attention states (hybrid models) in "
        "pinned CPU memory between uses.",
    )

    def __post_init__(self) -> None:
        post_init_next(self, ReplayArguments)  # the GRPOConfig this is mixed into, if any
        if self.replay_branch_batch < 1:
            raise ValueError(f"replay_branch_batch must be >= 1, got {self.replay_branch_batch}")
        if self.replay_prompt_chunk < 0:
            raise ValueError(
                f"replay_prompt_chunk must be >= 0 (0: the prompt in one piece), got {self.replay_prompt_chunk}"
            )


class ReplayGRPOTrainer(GRPOTrainer):
    """`GRPOTrainer` whose loss replays shared prompts: same gradient, one prompt's activations per group."""

    def __init__(self, *args: Any, replay_branch_batch: int | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.replay_branch_batch = replay_branch_batch or getattr(self.args, "replay_branch_batch", 1)
        self.replay_loss = self._replay_loss_spec()
        self.last_replay: ReplayResult | None = None

    def _replay_loss_spec(self) -> GRPOLoss:
        """TRL's loss settings as a `GRPOLoss`; everything replay cannot reproduce is refused, all at once."""
        from accelerate.utils import DistributedType

        args = self.args
        problems = []
        if self.top_entropy_quantile < 1.0:
            problems.append("top_entropy_quantile < 1 (its token mask is a batch-wide quantile)")
        if getattr(self, "_entropy_bonus_enabled", False):
            problems.append("the entropy bonus (entropy_coef / adaptive entropy)")
        if self.aux_loss_enabled:
            problems.append("the MoE load-balancing loss (set router_aux_loss_coef=0: it is a batch-wide statistic)")
        kind = self.accelerator.distributed_type
        if kind != DistributedType.NO and not str(kind.value).startswith("MULTI_"):
            problems.append(f"{kind.value} (it owns the backward pass or the parameters; use DDP)")
        if self.accelerator.scaler is not None:
            problems.append("fp16 loss scaling (use bf16)")
        if args.n_gpu > 1:
            problems.append("torch DataParallel (launch one process per GPU)")
        if problems:
            raise ReplayUnsupportedError(
                "replay_shared_prompt=true cannot reproduce: " + "; ".join(problems) + ". Change these or set "
                "replay_shared_prompt=false."
            )
        return GRPOLoss.from_config(args)

    def _replay_options(self) -> dict[str, Any]:
        """What the log-prob pass and the loss's backward both run replay with: the sampling temperature,
        branch batch, LM-head precision and prompt chunk."""
        return {
            "temperature": self.temperature,
            "branch_batch": self.replay_branch_batch,
            "head_fp32": self.args.cast_lm_head_to_fp32,
            "prompt_chunk": getattr(self.args, "replay_prompt_chunk", 0),
        }

    # -- log-probs without autograd (old policy, reference, evaluation) ----------------------------------

    def _get_per_token_logps_and_entropies(
        self,
        model: Any,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        logits_to_keep: int,
        batch_size: int | None = None,
        compute_entropy: bool = False,
        compute_aux_loss: bool = False,
        **multimodal: Any,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        if torch.is_grad_enabled() or compute_aux_loss:
            return super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy, compute_aux_loss,
                **multimodal,
            )  # fmt: skip
        batch = ReplayBatch.from_sequences(input_ids, attention_mask, logits_to_keep, **multimodal)
        with self.accelerator.autocast():
            logps, entropy = replay_token_logps(model, batch, entropy=compute_entropy, **self._replay_options())
        return logps, entropy, None

    # -- the training step -------------------------------------------------------------------------------

    def training_step(self, model: Any, inputs: dict[str, Any], num_items_in_batch: Any = None) -> torch.Tensor:
        """`Trainer.training_step` with the backward done by replay (TRL's step timing kept)."""
        start = time.perf_counter()
        model.train()
        if hasattr(self.optimizer, "train") and callable(self.optimizer.train):
            self.optimizer.train()
        inputs = self._prepare_inputs(inputs)
        with self.compute_loss_context_manager():
            loss = self.replay_step(model, inputs)
        del inputs
        steps = self.args.torch_empty_cache_steps
        if steps is not None and self.state.global_step % steps == 0:
            from accelerate.utils.memory import clear_device_cache

            clear_device_cache()
        self._average_gradients_across_processes()
        self._step += 1
        self._current_train_step_time += time.perf_counter() - start
        if self._step % self.current_gradient_accumulation_steps == 0:
            self._metrics["train"]["step_time"].append(self._current_train_step_time)
            self._current_train_step_time = 0.0
        return loss.detach()

    def replay_step(self, model: Any, inputs: dict[str, Any]) -> torch.Tensor:
        """Forward and backward of TRL's GRPO loss on one prepared micro-batch; returns the loss value."""
        mask = inputs["completion_mask"]
        if "tool_mask" in inputs:
            mask = mask * inputs["tool_mask"]
        spec = self.replay_loss
        weights = spec.row_weights(
            mask,
            accumulation_steps=self.current_gradient_accumulation_steps,
            num_items_in_batch=inputs.get("num_items_in_batch"),
            num_processes=self.accelerator.num_processes,
            steps_per_generation=self.args.steps_per_generation,
            training=True,
        )
        ratio = (
            inputs.get("importance_sampling_ratio")
            if self.use_vllm and self.vllm_importance_sampling_correction
            else None
        )
        loss_fn = spec.loss_fn(
            weights,
            mask,
            inputs["advantages"],
            inputs.get("old_per_token_logps"),
            inputs.get("ref_per_token_logps"),
            ratio,
            inputs.get("sampling_per_token_logps"),
        )
        with self.accelerator.autocast():
            result = replay_backward(
                model,
                ReplayBatch.from_trl_inputs(inputs),
                loss_fn,
                entropy=True,
                offload_prompt_state=getattr(self.args, "replay_offload_prompt_state", False),
                **self._replay_options(),
            )
        self.last_replay = result
        self._log_replay_metrics(result, inputs, mask, ratio)
        return result.loss.float()

    def _average_gradients_across_processes(self) -> None:
        """DDP's hooks only fire after a DDP forward, which replay never runs: average here, at sync steps."""
        if self.accelerator.num_processes == 1 or not self.accelerator.sync_gradients:
            return
        import torch.distributed as dist

        params = [p for p in self.model.parameters() if p.requires_grad]
        for p in params:
            if p.grad is None:  # every rank must join every all-reduce, in the same order
                p.grad = torch.zeros_like(p)
        buckets: dict[tuple[Any, Any], list[torch.Tensor]] = {}
        for p in params:
            buckets.setdefault((p.grad.device, p.grad.dtype), []).append(p.grad)
        for grads in buckets.values():
            flat = torch.cat([g.reshape(-1) for g in grads])
            dist.all_reduce(flat)
            flat /= self.accelerator.num_processes
            offset = 0
            for g in grads:
                g.copy_(flat[offset : offset + g.numel()].view_as(g))
                offset += g.numel()

    def _log_replay_metrics(
        self, result: ReplayResult, inputs: dict[str, Any], mask: torch.Tensor, ratio: torch.Tensor | None
    ) -> None:
        """The metrics TRL's `_compute_loss` logs, from the replayed (detached) log-probs."""
        from trl.trainer.utils import nanmax, nanmin

        mode = "train"
        logps = result.logps.to(mask.device)
        advantages = inputs["advantages"]
        advantages = advantages.unsqueeze(1) if advantages.dim() == 1 else advantages
        with torch.no_grad():
            _, coef_1, kl = self.replay_loss.per_token(
                logps,
                inputs.get("old_per_token_logps"),
                inputs.get("ref_per_token_logps"),
                advantages,
                mask.to(logps.dtype),
                ratio,
                inputs.get("sampling_per_token_logps"),
            )

        def masked_seq_mean(x: torch.Tensor) -> torch.Tensor:
            return x.squeeze(1) if x.shape[1] == 1 else (x * mask).sum(-1) / mask.sum(-1)

        def global_masked_mean(x: torch.Tensor) -> float:
            if x.shape[1] == 1:
                local_sum, local_count = x.sum(), torch.tensor(float(x.shape[0]), device=x.device)
            else:
                local_sum, local_count = (x * mask).sum(), mask.sum().float()
            totals = self.accelerator.reduce(torch.stack([local_sum, local_count]), reduction="sum")
            return (totals[0] / totals[1].clamp(min=1.0)).item()

        if kl is not None:
            self._metrics[mode]["kl"].append(global_masked_mean(kl))
        if result.entropy is not None:
            self._metrics[mode]["entropy"].append(global_masked_mean(result.entropy.to(mask.device)))
        if self.loss_type == "cispo":
            clipped = ((coef_1 > self.epsilon_high) & (advantages > 0)).float()
            self._metrics[mode]["cispo_clip_ratio"].append(global_masked_mean(clipped))
        elif self.loss_type == "vespo":  # per_token's weight is vespo's gamma weight φ
            self._metrics[mode]["vespo/phi_seq_mean"].append(global_masked_mean(coef_1))
        elif self.loss_type != "sapo":
            low = ((coef_1 < 1 - self.epsilon_low) & (advantages < 0)).float()
            high = ((coef_1 > 1 + self.epsilon_high) & (advantages > 0)).float()
            self._metrics[mode]["clip_ratio/low_mean"].append(global_masked_mean(low))
            self._metrics[mode]["clip_ratio/high_mean"].append(global_masked_mean(high))
            self._metrics[mode]["clip_ratio/region_mean"].append(global_masked_mean(torch.maximum(low, high)))
            self._metrics[mode]["clip_ratio/low_min"].append(
                nanmin(self.accelerator.gather(masked_seq_mean(low))).item()
            )
            self._metrics[mode]["clip_ratio/high_max"].append(
                nanmax(self.accelerator.gather(masked_seq_mean(high))).item()
            )
        self._metrics[mode]["replay/groups"].append(float(len(result.groups)))
        self._metrics[mode]["replay/plain_rows"].append(float(len(result.plain_rows)))
