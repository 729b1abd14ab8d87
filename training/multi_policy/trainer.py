"""Concurrent multi-policy GRPO: P LoRA policies over one base model in one process.

    mrjudge train policies --config configs/policies_tiny.yaml

Every step, all live policies' prompts are sampled as one mixed-adapter batch (`rollout.generate_mixed`),
each policy's reward scores its own completions (rewards run in threads: judge calls overlap), and one
backward pass over mixed-adapter forward chunks gives every adapter exactly its own policy's gradient
(the adapters share no trainable weight). Each policy then steps its own AdamW and scheduler, logs its own
GRPO statistics to `OUTPUT_DIR/<policy>/log.jsonl`, and exports revisions to the adapter store.

A policy that fails — unreadable data, a reward that raises or returns NaN, a non-finite loss, gradient or
logits — stops alone; its error is logged and written to `OUTPUT_DIR/policies.json`, and the others go on.
"""

from __future__ import annotations

import json
import math
import random
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from trl.trainer.utils import nanstd

from adapter_revisions.store import ADAPTER_WEIGHTS
from training.grpo_loss import GRPOLoss
from training.multi_policy.config import MultiPolicyConfig, PolicySpec
from training.multi_policy.objective import advantages
from training.multi_policy.rollout import RolloutRequest, generate_mixed, sequence_logps
from training.multi_policy.segments import runs_of

__all__ = ["MultiPolicyTrainer", "PolicyFailure", "PolicyRun", "run_policies"]


def _adapter_of(parameter: str) -> str | None:
    """The adapter a LoRA parameter belongs to (`….lora_A.<adapter>.weight`), else None."""
    parts = parameter.split(".")
    return parts[-2] if len(parts) >= 3 and parts[-3].startswith("lora_") else None


class PolicyFailure(RuntimeError):
    """Something only this policy did wrong: it stops, the others go on."""


@dataclass
class PolicyRun:
    """A policy's live state: data order, reward, optimiser, history and exported revisions."""

    spec: PolicySpec
    rows: list[dict[str, Any]] = field(default_factory=list)
    reward: Any = None
    optimizer: Any = None
    scheduler: Any = None
    params: list[Any] = field(default_factory=list)
    order: list[int] = field(default_factory=list)
    rng: random.Random | None = None
    step: int = 0
    error: str | None = None
    history: list[dict[str, float]] = field(default_factory=list)
    revisions: list[str] = field(default_factory=list)
    exported_step: int = -1
    parent: str | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    def next_rows(self) -> list[dict[str, Any]]:
        """The next `prompts_per_step` rows in this policy's own shuffled order (reshuffled every epoch)."""
        taken = []
        for _ in range(self.spec.prompts_per_step):
            if not self.order:
                self.order = list(range(len(self.rows)))
                self.rng.shuffle(self.order)
            taken.append(self.rows[self.order.pop()])
        return taken


class MultiPolicyTrainer:
    """Holds the base, the P adapters and each policy's state; `train()` runs them (see the module doc)."""

    def __init__(self, config: MultiPolicyConfig) -> None:
        from peft import get_peft_model, set_peft_model_state_dict
        from safetensors.torch import load_file
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.config = config
        self.out = Path(config.output_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        device = config.device or ("cuda" if torch.cuda.is_available() else "cpu")
        dtype = torch.bfloat16 if config.dtype == "bfloat16" else torch.float32
        self.tokenizer = AutoTokenizer.from_pretrained(config.model_name_or_path)
        base = AutoModelForCausalLM.from_pretrained(config.model_name_or_path, dtype=dtype).to(device)
        if getattr(base.config, "vision_config", None) is not None:
            raise ValueError(
                f"{config.model_name_or_path} is a vision-language model: multi-policy GRPO samples text policies "
                "(a causal LM); train a VLM policy with `mrjudge train policy`"
            )
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        self.eos_id = self.tokenizer.eos_token_id
        from adapter_revisions.fingerprint import base_fingerprint

        self.fingerprint = base_fingerprint(base)
        self.model = None
        self.parents: dict[str, str] = {}  # policy → the revision it continues (init_from)
        self.start_errors: dict[str, str] = {}  # policy → why its init_from revision cannot be used
        for spec in config.policies:  # each adapter's init depends on its own seed alone
            torch.manual_seed(spec.seed)
            lora, revision = self._start(spec)
            if self.model is None:
                self.model = get_peft_model(base, lora, adapter_name=spec.name)
            else:
                self.model.add_adapter(spec.name, lora)
            if revision is not None:
                weights = load_file(str(revision.path / ADAPTER_WEIGHTS), device=str(device))
                set_peft_model_state_dict(self.model, weights, adapter_name=spec.name)
                self.parents[spec.name] = revision.ref
        self.model.eval()  # PEFT mixes adapters only outside training mode; dropout is off (lora_dropout=0)
        for name, param in self.model.named_parameters():
            param.requires_grad_(_adapter_of(name) is not None)
        self.runs = [self._setup(spec) for spec in config.policies]

    # -- set-up -----------------------------------------------------------------------------------------------

    def _start(self, spec: PolicySpec) -> tuple[Any, Any]:
        """`(LoRA config, init_from revision or None)`: the spec's shape, or the revision's. A revision that
        cannot be used leaves its error for `_setup` (the policy fails alone) and a fresh adapter in its place."""
        from peft import LoraConfig

        fresh = LoraConfig(
            r=spec.lora_r,
            lora_alpha=spec.lora_alpha,
            lora_dropout=0.0,
            target_modules=spec.lora_target_modules,
            task_type="CAUSAL_LM",
        )
        if not spec.init_from:
            return fresh, None
        from adapter_revisions.store import AdapterStore, check_base

        try:
            revision = AdapterStore(self.config.store_root).resolve(spec.init_from)
            check_base(revision, self.fingerprint)
            lora = LoraConfig.from_pretrained(str(revision.path))
        except Exception as exc:
            self.start_errors[spec.name] = f"init_from {spec.init_from!r}: {type(exc).__name__}: {exc}"
            return fresh, None
        lora.inference_mode, lora.lora_dropout = False, 0.0
        return lora, revision

    def _setup(self, spec: PolicySpec) -> PolicyRun:
        from transformers import get_scheduler

        from training.multi_policy.rewards import resolve_reward
        from training.policy import load_prompt_dataset

        run = PolicyRun(spec=spec, rng=random.Random(spec.seed))
        run.params = [p for n, p in self.model.named_parameters() if _adapter_of(n) == spec.name]
        if spec.name in self.start_errors:
            self._fail(run, f"set-up: {self.start_errors[spec.name]}")
            return run
        run.parent = self.parents.get(spec.name)
        try:
            data = load_prompt_dataset(spec.train_file, policy_sees_images=False)
            run.rows = [data[i] for i in range(len(data))]
            for row in run.rows:
                row["prompt_ids"] = self._encode(spec, row["prompt"])
            run.reward = resolve_reward(spec)
        except Exception as exc:  # bad data or reward: this policy never starts, the others do
            self._fail(run, f"set-up: {type(exc).__name__}: {exc}")
            return run
        run.optimizer = torch.optim.AdamW(run.params, lr=spec.learning_rate, weight_decay=spec.weight_decay)
        run.scheduler = get_scheduler(
            spec.lr_scheduler_type,
            run.optimizer,
            num_warmup_steps=spec.warmup_steps_for(self.config.max_steps),
            num_training_steps=self.config.max_steps,
        )
        return run

    def _encode(self, spec: PolicySpec, messages: Any) -> list[int]:
        text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return ids[-spec.max_prompt_length :]

    # -- the loop ---------------------------------------------------------------------------------------------

    def train(self) -> dict[str, Any]:
        """Train every policy for `max_steps` (together, or one after another); returns the status summary."""
        started = time.perf_counter()
        groups = [self.runs] if self.config.concurrent else [[run] for run in self.runs]
        for group in groups:
            for _ in range(self.config.max_steps):
                live = [run for run in group if run.error is None]
                if not live:
                    break
                self._step(live)
            for run in group:
                if run.error is None and run.exported_step != run.step:
                    self._export(run)
        return self._write_status(time.perf_counter() - started)

    def _step(self, runs: list[PolicyRun]) -> None:
        batches = {run.name: run.next_rows() for run in runs}
        requests = [
            RolloutRequest(
                adapter=run.name,
                prompt_ids=[row["prompt_ids"] for row in batches[run.name] for _ in range(run.spec.num_generations)],
                max_new_tokens=run.spec.max_completion_length,
                temperature=run.spec.temperature,
                seed=run.spec.seed * 1_000_003 + run.step,  # per policy and step: independent of the batch
            )
            for run in runs
        ]
        generate_mixed(self.model, requests, pad_id=self.pad_id, eos_id=self.eos_id)
        scored: dict[str, tuple[RolloutRequest, torch.Tensor, list[float | None]]] = {}
        with ThreadPoolExecutor(max_workers=len(runs)) as pool:
            futures = {
                run.name: pool.submit(self._score, run, batches[run.name], req) for run, req in zip(runs, requests)
            }
        for run, request in zip(runs, requests):
            try:
                if request.error:
                    raise PolicyFailure(request.error)
                rewards = futures[run.name].result()
                scored[run.name] = (
                    request,
                    advantages(rewards, run.spec.num_generations, run.spec.scale_rewards),
                    rewards,
                )
            except Exception as exc:
                self._fail(run, f"step {run.step + 1}: {type(exc).__name__}: {exc}")
        live = [run for run in runs if run.name in scored]
        if live:
            stats = self._optimise(live, scored)
            for run in live:
                if run.error is None:
                    self._finish_step(run, scored[run.name][2], scored[run.name][0], stats[run.name])

    def _score(self, run: PolicyRun, rows: list[dict[str, Any]], request: RolloutRequest) -> list[float | None]:
        group = run.spec.num_generations
        texts = self.tokenizer.batch_decode(request.completions, skip_special_tokens=True)
        columns = {
            key: [row[key] for row in rows for _ in range(group)]
            for key in rows[0]
            if key not in ("prompt", "prompt_ids")
        }
        rewards = run.reward(
            prompts=[row["prompt"] for row in rows for _ in range(group)],
            completions=[[{"role": "assistant", "content": text}] for text in texts],
            completion_ids=request.completions,
            **columns,
        )
        rewards = list(rewards)
        if len(rewards) != len(texts):
            raise PolicyFailure(f"reward returned {len(rewards)} values for {len(texts)} completions")
        bad = [r for r in rewards if r is not None and not math.isfinite(float(r))]
        if bad:
            raise PolicyFailure(f"reward returned a non-finite value ({bad[0]}): fix the reward or its data")
        return rewards

    def _optimise(self, runs: list[PolicyRun], scored: dict[str, Any]) -> dict[str, dict[str, float]]:
        """One backward over mixed-adapter chunks, then each policy's own clip and optimiser step."""
        rows = []  # (run, prompt ids, completion ids, advantage, weight)
        losses = {run.name: GRPOLoss.from_config(run.spec) for run in runs}
        for run in runs:
            request, adv, _ = scored[run.name]
            lengths = torch.tensor([len(c) for c in request.completions])
            step_mask = torch.arange(int(lengths.max())) < lengths[:, None]  # the step's completions, right-padded
            # One process, one optimiser step per generation batch: TRL's dapo count is the step's tokens.
            weights = losses[run.name].row_weights(step_mask, num_items_in_batch=step_mask.sum())
            rows += [
                (run, p, c, adv[i], weights[i]) for i, (p, c) in enumerate(zip(request.prompt_ids, request.completions))
            ]
        chunk = self.config.forward_batch_rows or max(run.spec.rows_per_step for run in runs)
        loss = {run.name: 0.0 for run in runs}
        kl_sum = {run.name: 0.0 for run in runs}
        for start in range(0, len(rows), chunk):
            part = [r for r in rows[start : start + chunk] if r[0].error is None]
            if not part:
                continue
            names = [r[0].name for r in part]
            args = ([r[1] for r in part], [r[2] for r in part])
            temps = [r[0].spec.temperature for r in part]
            ref = None
            if any(r[0].spec.beta for r in part):
                with torch.no_grad():
                    ref, _ = sequence_logps(self.model, *args, ["__base__"] * len(part), temps, pad_id=self.pad_id)
            logps, mask = sequence_logps(self.model, *args, names, temps, pad_id=self.pad_id)
            by_run: dict[str, Any] = {}
            start_row = 0
            for name, count in runs_of(names):  # the chunk's rows come grouped by policy
                rows_of = slice(start_row, start_row + count)
                start_row += count
                value, kl = losses[name].rows_loss(  # on-policy: one optimisation pass per generation
                    logps[rows_of],
                    mask[rows_of],
                    torch.stack([r[3] for r in part[rows_of]]).to(logps.device, logps.dtype),
                    torch.stack([r[4] for r in part[rows_of]]).to(logps.device),
                    ref_logps=None if ref is None else ref[rows_of],
                )
                by_run[name] = by_run.get(name, 0.0) + value
                if kl is not None:
                    kl_sum[name] += float((kl.detach() * mask[rows_of]).sum())
            finite = []
            for run in runs:
                if run.name in by_run and run.error is None:
                    value = float(by_run[run.name].detach())
                    if not math.isfinite(value):
                        self._fail(run, f"step {run.step + 1}: non-finite loss ({value})")
                        continue
                    loss[run.name] += value
                    finite.append(by_run[run.name])
            if finite:
                torch.stack([f.float() for f in finite]).sum().backward()
        stats = {}
        for run in runs:
            if run.error is not None:
                for p in run.params:
                    p.grad = None
                continue
            norm = torch.nn.utils.clip_grad_norm_(run.params, run.spec.max_grad_norm or float("inf"))
            if not torch.isfinite(norm):
                self._fail(run, f"step {run.step + 1}: non-finite gradient norm ({float(norm)})")
                for p in run.params:
                    p.grad = None
                continue
            lr = run.scheduler.get_last_lr()[0]
            run.optimizer.step()
            run.scheduler.step()
            run.optimizer.zero_grad(set_to_none=True)
            tokens = sum(len(c) for c in scored[run.name][0].completions)
            stats[run.name] = {"loss": loss[run.name], "grad_norm": float(norm), "learning_rate": lr}
            if run.spec.beta:
                stats[run.name]["kl"] = kl_sum[run.name] / max(tokens, 1)
        return stats

    def _finish_step(self, run: PolicyRun, rewards: list, request: RolloutRequest, stats: dict[str, float]) -> None:
        run.step += 1
        values = torch.tensor([math.nan if r is None else float(r) for r in rewards])
        grouped_std = torch.nan_to_num(nanstd(values.view(-1, run.spec.num_generations), dim=1), nan=0.0)
        record = {
            "step": run.step,
            **stats,
            "reward": float(torch.nanmean(values)) if not values.isnan().all() else math.nan,
            "reward_std": float(torch.nan_to_num(nanstd(values), nan=0.0)),
            "frac_reward_zero_std": float((grouped_std < 1e-8).float().mean()),
            "completion_length": sum(len(c) for c in request.completions) / max(len(request.completions), 1),
        }
        run.history.append(record)
        folder = self.out / run.name
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / "log.jsonl", "a") as handle:
            handle.write(json.dumps(record) + "\n")
        every = self.config.logging_steps
        if every and run.step % every == 0:
            print(f"[{run.name}] step {run.step}: loss {record['loss']:.4f} reward {record['reward']:.3f}", flush=True)
        if self.config.save_steps and run.step % self.config.save_steps == 0:
            self._export(run)

    # -- export and status ------------------------------------------------------------------------------------

    def _export(self, run: PolicyRun) -> None:
        from adapter_revisions.store import AdapterStore

        store = AdapterStore(self.config.store_root)
        metrics = {k: float(v) for k, v in (run.history[-1] if run.history else {}).items() if k != "step"}
        revision = store.save(
            run.name,
            self.model,
            adapter_name=run.name,
            base_fingerprint=self.fingerprint,
            step=run.step,
            metrics={k: v for k, v in metrics.items() if math.isfinite(v)},
            parent=run.revisions[-1] if run.revisions else run.parent,
            base_model=self.config.model_name_or_path,
        )
        run.revisions.append(revision.ref)
        run.exported_step = run.step

    def _fail(self, run: PolicyRun, error: str) -> None:
        run.error = error
        print(f"[{run.name}] stopped: {error}", flush=True)

    def _write_status(self, wall_s: float) -> dict[str, Any]:
        status = {
            "wall_s": wall_s,
            "concurrent": self.config.concurrent,
            "policies": {
                run.name: {
                    "status": "failed" if run.error else "done",
                    "error": run.error,
                    "steps": run.step,
                    "revision": run.revisions[-1] if run.revisions else None,
                    "last": run.history[-1] if run.history else None,
                }
                for run in self.runs
            },
        }
        (self.out / "policies.json").write_text(json.dumps(status, indent=2) + "\n")
        return status


def run_policies(config: MultiPolicyConfig) -> dict[str, Any]:
    """Build the trainer and train; returns the status summary also written to OUTPUT_DIR/policies.json."""
    return MultiPolicyTrainer(config).train()
