"""Policy GRPO with the judge as the reward (TRL `GRPOTrainer`), for a text LM or a VLM policy.

    mrjudge train policy --config configs/policy_grpo_tiny.yaml max_steps=20
    accelerate launch --config_file configs/accelerate/zero3.yaml -m mrjudge.cli train policy \\
        --config configs/policy_grpo_qwen2_5_vl_7b.yaml reward.url=http://judge-node:8000

The data are prompts, one JSON object per line: `{"prompt", "image"?, "images"?, "answer"?}`, where
`prompt` is a string or a list of chat messages; the synthetic world's records work as they are
(`{"id", "image", "question", "answer"}`: question → prompt, answer → reference). The reward is
`judge.reward`'s: each prompt's `num_generations` completions are judged against each other (listwise),
against the reference answer (pairwise) or in a tournament, by a reward server (`reward: {transport: http,
url: …}`) or a judge loaded in each training process (`reward: {transport: in_process, model: …}`); the
nested keys are `judge.reward.trl.spec`'s, and the flat `judge_*` keys of before still work (`training.policy_keys`).

Starting from an SFT run's LoRA adapter folder (`model_name_or_path=runs/policy-sft-lora`): `use_lora=true`
continues that adapter, `use_lora=false` merges it and trains all weights; for a fresh LoRA over the SFT
model, `mrjudge adapters merge` it first (docs/lora-handoff.md). `reward.model` takes an adapter folder too.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trl import GRPOConfig

from judge.config import setting
from judge.reward.trl.base import GroupedJudgeReward
from judge.reward.trl.spec import HttpRewardSpec, InProcessRewardSpec, RewardSpec, reward_spec
from judge.reward.wire import RetryPolicy
from training.model_config import JudgeModelArguments
from training.model_loading import load_training_model
from training.policy_keys import nest_reward_keys
from training.recipe import build_trainer, run_recipe
from training.replay_trainer import ReplayArguments
from training.reward_audit import RewardAuditCallback

__all__ = ["JudgePolicyGRPOConfig", "build_policy_trainer", "load_prompt_dataset", "run_policy"]

TEXT_POLICY_IMAGE_COLUMN = "judge_images"
"""Where a text-only policy's dataset keeps the images: the judge sees them, TRL does not feed them to the policy."""


@dataclass
class JudgePolicyGRPOConfig(JudgeModelArguments, ReplayArguments, GRPOConfig):
    """TRL's `GRPOConfig`, the policy's model fields, where the judge is and how it rewards, and the replay switch."""

    # Policy and data (the model, LoRA and resume fields are shared with the judge recipes)
    model_name_or_path: str | None = setting(
        None,
        "Policy to train: a folder or hub id, text LM or VLM (e.g. Qwen2.5-VL-7B), or a LoRA adapter "
        "folder from an SFT run (use_lora=true continues that adapter; false merges it and trains all weights).",
    )
    train_file: str | None = setting(
        None, "Prompts: JSONL of {prompt, image?, answer?}, or world records {id, image, question, answer}."
    )
    eval_file: str | None = setting(None, "Optional held-out prompts in the same format.")

    # The judge: where it runs and how it rewards (judge.reward.trl.spec)
    reward: dict[str, Any] | None = setting(
        None,
        "The judge reward, nested: {transport: http, url: http://judge-node:8000, …} (a `mrjudge serve` "
        "server) or {transport: in_process, model: runs/judge, …} (a judge in each training process). "
        f"http keys: {', '.join(HttpRewardSpec.keys())}; in_process keys: {', '.join(InProcessRewardSpec.keys())} "
        f"(judge: JudgeConfig fields); retry: {{{', '.join(RetryPolicy.keys())}}}. One key on the command line: "
        "reward.url=…, reward.retry.max_retries=5.",
    )

    # Generation server hand-off
    adapter_handoff: bool = setting(
        False,
        "With use_lora and vllm_mode=server: hand vLLM only the adapter each step (a store revision "
        "loaded by name) instead of merged full weights; needs adapter_store readable by the server.",
    )

    @staticmethod
    def nest_config_values(values: dict[str, Any]) -> dict[str, Any]:
        """`reward.url=…` overrides and the old flat `judge_*` keys, folded into `reward` (`judge.config` asks)."""
        return nest_reward_keys(values)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.reward_spec: RewardSpec = reward_spec(self.reward)
        audit = self.reward_spec.audit
        if audit is not None and audit.get("auditor") and not audit.get("path"):
            audit["path"] = str(Path(self.output_dir) / "audit.jsonl")  # beside the run's checkpoints
        self.reward = self.reward_spec.to_dict()  # every key's final value, as the resolved config saves it
        local = self.per_device_train_batch_size * self.steps_per_generation
        if self.reward_spec.mode != "pairwise" and local % self.num_generations:
            raise ValueError(
                f"per_device_train_batch_size × steps_per_generation ({self.per_device_train_batch_size} × "
                f"{self.steps_per_generation} = {local}) must be a multiple of num_generations "
                f"({self.num_generations}), or a prompt's completions are split across processes and judged in "
                f"parts; change the batch, or use reward.mode=pairwise"
            )
        if self.adapter_handoff and not (self.use_lora and self.use_vllm and self.vllm_mode == "server"):
            raise ValueError(
                "adapter_handoff hands a LoRA adapter to a vLLM server: set use_lora=true, use_vllm=true and "
                "vllm_mode=server, or drop adapter_handoff"
            )
        if self.adapter_handoff and not self.adapter_store:
            raise ValueError("adapter_handoff writes revisions the server loads: set adapter_store=DIR (shared)")

    def reward_function(self, image_columns: tuple[str, ...] = ("images", "image")) -> GroupedJudgeReward:
        """The judge reward: the async HTTP one for a server (TRL awaits it on its loop), the in-process one else."""
        spec = self.reward_spec
        if isinstance(spec, HttpRewardSpec):  # images go to the judge at the size the policy sees them
            return spec.build(image_columns, min_pixels=self.min_pixels, max_pixels=self.max_pixels)
        return spec.build(image_columns, device=str(self.device))


def load_prompt_dataset(path: str | Path, *, policy_sees_images: bool = True, keep_text_only: bool = False) -> Any:
    """Prompts as a GRPO dataset: `prompt` (chat messages), `images` (PIL, decoded per batch as rows are read)
    and `answer` (the reference); text-only rows beside image rows are dropped unless `keep_text_only`
    (`training.data`: they hang ZeRO-3).

    A world record and the row it becomes:

        {"id": "world-000001", "image": "images/world-000001.png", "question": "How many triangles are there?",
         "answer": "There is 1 triangle, at the middle right.", "source": "world/count"}
        {"prompt": [{"role": "user", "content": "How many triangles are there?"}], "images": [<PIL.Image>],
         "answer": "There is 1 triangle, at the middle right."}

    Args:
        path: the JSONL file; relative image paths are resolved against its folder.
        policy_sees_images: False for a text-only policy: the images go to `judge_images`, which only the
            judge reads (TRL would otherwise hand them to the policy's tokenizer).
        keep_text_only: keep text-only rows beside image rows (a text-only policy always keeps them).
    """
    import datasets

    from jobs.jsonl import read_jsonl
    from judge.types import DataError
    from training.data import ImageDecoder, drop_text_only, resolve_image_ref

    path = Path(path)
    rows: list[dict[str, Any]] = []
    for number, raw in read_jsonl(path):
        where = f"{path} line {number}"
        prompt = raw.get("prompt", raw.get("question"))
        if isinstance(prompt, str) and prompt.strip():
            messages = [{"role": "user", "content": prompt}]
        elif isinstance(prompt, list) and prompt and all(isinstance(m, dict) and "role" in m for m in prompt):
            messages = prompt
        else:
            raise DataError(
                "prompt", "missing or empty", "give a `prompt` (text or chat messages) or a `question`", where
            )
        refs = raw.get("images") or ([raw["image"]] if raw.get("image") else [])
        images = [resolve_image_ref(ref, path.parent, where, "image") for ref in refs]
        answer = raw.get("answer", raw.get("reference"))
        rows.append({"prompt": messages, "images": images, "answer": None if answer is None else str(answer)})
    if not rows:
        raise DataError("<file>", f"{path} holds no prompts", "write one JSON object per line")
    if policy_sees_images and not keep_text_only:
        rows = drop_text_only(rows, "images", path)
    columns: dict[str, list[Any]] = {"prompt": [r["prompt"] for r in rows]}
    if any(r["images"] for r in rows):
        columns["images" if policy_sees_images else TEXT_POLICY_IMAGE_COLUMN] = [r["images"] for r in rows]
    if any(r["answer"] is not None for r in rows):
        columns["answer"] = [r["answer"] for r in rows]
    return datasets.Dataset.from_dict(columns).with_transform(ImageDecoder(("images", TEXT_POLICY_IMAGE_COLUMN)))


class _UnscoredRowsAreCounted(logging.Filter):
    """TRL warns once per completion that no reward function scored, printing the whole row (a raw PIL image
    included). The judge reward counts and logs its unscored verdicts itself (`/v1/reward: N of M responses
    unscored (why)`), so TRL's row dump is dropped; every other TRL message passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "All reward functions returned None" not in record.getMessage()  # accelerate prefixes "[RANK 0] "


def _quiet_unscored_rows() -> None:
    trl_logger = logging.getLogger("trl.trainer.grpo_trainer")
    if not any(isinstance(f, _UnscoredRowsAreCounted) for f in trl_logger.filters):
        trl_logger.addFilter(_UnscoredRowsAreCounted())


def build_policy_trainer(
    config: JudgePolicyGRPOConfig,
    *,
    callbacks: list[Any] | None = None,
    checkpoint: str | None = None,
    reward_funcs: list[Any] | None = None,
) -> Any:
    """A `GRPOTrainer` for the policy, with the judge reward wired in (built lazily: nothing is judged yet).

    `reward_funcs` replaces the judge with other TRL reward functions (a benchmark's oracle or noise arm),
    everything else unchanged."""
    from trl import GRPOTrainer

    from training.replay_trainer import ReplayGRPOTrainer

    if reward_funcs is None:
        _quiet_unscored_rows()
    loaded = load_training_model(config, checkpoint, left_pad=True)  # TRL left-pads prompts
    is_vlm = getattr(loaded[0].config, "vision_config", None) is not None
    options = dict(policy_sees_images=is_vlm, keep_text_only=config.keep_text_only_rows)
    image_columns = ("images", "image") if is_vlm else (TEXT_POLICY_IMAGE_COLUMN,)
    trainer_class = ReplayGRPOTrainer if config.replay_shared_prompt else GRPOTrainer  # same loss, less memory
    reward_funcs = reward_funcs or [config.reward_function(image_columns)]
    audits = [r.audit for r in reward_funcs if getattr(r, "audit", None) is not None]
    trainer = build_trainer(
        trainer_class,
        config,
        loaded,
        lambda path: load_prompt_dataset(path, **options),
        callbacks=[*(callbacks or []), *(RewardAuditCallback(a, config.output_dir) for a in audits)],
        reward_funcs=reward_funcs,
    )
    if config.adapter_handoff:
        from training.handoff import AdapterHandoff, install_adapter_handoff

        url = config.vllm_server_base_url or f"http://{config.vllm_server_host}:{config.vllm_server_port}"
        policy = config.adapter_policy or Path(config.output_dir).name
        install_adapter_handoff(trainer, AdapterHandoff(url, config.adapter_store, f"{policy}-rollout"))
    return trainer


def run_policy(config: JudgePolicyGRPOConfig, *, callbacks: list[Any] | None = None) -> Any:
    """Train (resuming when `config.resume`); save the policy and its processor."""
    return run_recipe(build_policy_trainer, config, callbacks)
