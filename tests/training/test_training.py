"""A few real SFT and GRPO steps on a tiny judge, LoRA and a frozen vision tower, and resume."""

from __future__ import annotations

import json

import pytest
import torch
from mrjudge.cli import main
from safetensors.torch import load_file
from transformers import TrainerCallback

from tests.support.training import CPU, grpo_config, sft_config
from training.grpo import run_grpo
from training.sft import run_sft


def test_sft_cli_trains_and_writes_its_config(tiny_vlm_dir, synth_data, tmp_path, capsys):
    out = tmp_path / "sft"
    args = ["train", "sft", f"model_name_or_path={tiny_vlm_dir}", f"train_file={synth_data / 'sft' / 'train.jsonl'}",
            f"output_dir={out}", "max_steps=3", "per_device_train_batch_size=4", "save_strategy=no", *CPU,
            "report_to=tensorboard"]  # fmt: skip
    assert main(args) == 0
    assert list(out.rglob("events.out.tfevents.*")), "TensorBoard logs are written offline"
    assert "trained 3 steps" in capsys.readouterr().out
    assert (out / "model.safetensors").exists() and (out / "processor_config.json").exists()
    assert "max_steps: 3" in (out / "mrjudge_config.yaml").read_text()


def test_frozen_vision_with_full_fine_tuning(tiny_vlm_dir, synth_data, tmp_path):
    before = load_file(str(tiny_vlm_dir / "model.safetensors"))
    run_sft(sft_config(tiny_vlm_dir, synth_data, tmp_path, "max_steps=2", "save_strategy=no", "freeze_vision=true"))
    after = load_file(str(tmp_path / "model.safetensors"))
    vision = [k for k in before if "visual" in k]
    text = [k for k in before if k.endswith("layers.0.self_attn.q_proj.weight") and "visual" not in k]
    assert vision and text
    assert all(torch.equal(before[k], after[k]) for k in vision)
    assert not torch.equal(before[text[0]], after[text[0]])


def test_vision_learning_rate_is_its_own_optimizer_group(tiny_vlm_dir, synth_data, tmp_path):
    from training.sft import build_sft_trainer

    config = sft_config(
        tiny_vlm_dir, synth_data, tmp_path, "max_steps=2", "save_strategy=no", "vision_learning_rate=0.0"
    )
    trainer = build_sft_trainer(config)
    optimizer = trainer.create_optimizer()
    names = {id(p): n for n, p in trainer.model.named_parameters()}
    rates = {("visual" in names[id(p)], group["lr"]) for group in optimizer.param_groups for p in group["params"]}
    assert rates == {(False, 0.001), (True, 0.0)}
    assert sum(len(g["params"]) for g in optimizer.param_groups) == len(list(trainer.model.parameters()))

    before = load_file(str(tiny_vlm_dir / "model.safetensors"))
    trainer.train()  # the scheduler scales the vision group from its own rate: 0 stays 0
    trainer.save_model()
    after = load_file(str(tmp_path / "model.safetensors"))
    assert all(torch.equal(before[k], after[k]) for k in before if "visual" in k)
    assert any(not torch.equal(before[k], after[k]) for k in before if "visual" not in k)


def test_grpo_takes_the_vision_learning_rate_too(tiny_vlm_dir, synth_data, tmp_path):
    from trl import GRPOTrainer

    from training.grpo import build_grpo_trainer

    args = ["max_steps=1", "max_completion_length=8", "learning_rate=0.001"]
    plain = build_grpo_trainer(grpo_config(tiny_vlm_dir, synth_data, tmp_path, *args))
    assert type(plain) is GRPOTrainer  # no vision rate: TRL's own class, untouched
    trainer = build_grpo_trainer(grpo_config(tiny_vlm_dir, synth_data, tmp_path, *args, "vision_learning_rate=0.0001"))
    assert isinstance(trainer, GRPOTrainer) and type(trainer).__name__ == "GRPOTrainer"
    names = {id(p): n for n, p in trainer.model.named_parameters()}
    optimizer = trainer.create_optimizer()
    rates = {("visual" in names[id(p)], group["lr"]) for group in optimizer.param_groups for p in group["params"]}
    assert rates == {(False, 0.001), (True, 0.0001)}


def test_lora_trains_only_language_adapters(tiny_vlm_dir, synth_data, tmp_path):
    run_sft(
        sft_config(tiny_vlm_dir, synth_data, tmp_path, "max_steps=2", "save_strategy=no", "use_lora=true", "lora_r=4")
    )
    adapter = load_file(str(tmp_path / "adapter_model.safetensors"))
    assert adapter and all("lora_" in k for k in adapter)
    assert not any("visual" in k for k in adapter), "the vision tower's projections share names; they get no adapter"


class CrashAt(TrainerCallback):
    """Stands in for a killed process: stops the run with an exception right after step `step` is saved."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_save(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            raise KeyboardInterrupt(f"simulated crash after step {self.step}")


def _losses(folder):
    state = json.loads((folder / "trainer_state.json").read_text())
    return [row["loss"] for row in state["log_history"] if "loss" in row]


def test_sft_resumes_from_its_last_checkpoint(tiny_vlm_dir, synth_data, tmp_path):
    settings = ("max_steps=6", "save_steps=3", "save_strategy=steps")
    whole = tmp_path / "whole"
    run_sft(sft_config(tiny_vlm_dir, synth_data, whole, *settings))

    crashed = tmp_path / "crashed"
    with pytest.raises(KeyboardInterrupt):
        run_sft(sft_config(tiny_vlm_dir, synth_data, crashed, *settings), callbacks=[CrashAt(3)])
    assert (crashed / "checkpoint-3" / "optimizer.pt").exists() and (
        crashed / "checkpoint-3" / "rng_state.pth"
    ).exists()
    result = run_sft(sft_config(tiny_vlm_dir, synth_data, crashed, *settings, "resume=true"))
    assert result.global_step == 6
    assert _losses(crashed / "checkpoint-6") == pytest.approx(_losses(whole / "checkpoint-6"), rel=1e-4)
    a, b = load_file(str(whole / "model.safetensors")), load_file(str(crashed / "model.safetensors"))
    assert all(torch.allclose(a[k], b[k], atol=1e-5) for k in a)


def test_grpo_steps_with_the_judge_reward(tiny_vlm_dir, synth_data, tmp_path):
    config = grpo_config(
        tiny_vlm_dir, synth_data, tmp_path, "max_steps=2", "max_completion_length=16", "save_strategy=no"
    )
    seen: list[dict] = []

    class Record(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            seen.append(dict(logs or {}))

    result = run_grpo(config, callbacks=[Record()])
    assert result.global_step == 2
    rewards = [row["rewards/judge_reward/mean"] for row in seen if "rewards/judge_reward/mean" in row]
    assert len(rewards) == 2 and all(0.0 <= r <= 1.0 for r in rewards)
    assert config.reward().max_completion_tokens == 16  # the budget defaults to max_completion_length
    assert (tmp_path / "model.safetensors").exists()


@pytest.mark.parametrize("use_lora", [False, True])
def test_full_logits_loss_equals_trls_fused_head(tiny_vlm_dir, synth_data, tmp_path, use_lora):
    """The tiny judge's default (full logits, small vocabulary) gives TRL's loss, gradients and metrics
    (no LoRA dropout: its random masks would differ between the two forwards)."""
    from training.sft import build_sft_trainer

    trainers = {}
    for full in (False, True):
        extra = [
            "max_steps=1",
            "save_strategy=no",
            f"full_logits_loss={str(full).lower()}",
            f"use_lora={use_lora}",
            "lora_dropout=0.0",
        ]
        trainers[full] = build_sft_trainer(sft_config(tiny_vlm_dir, synth_data, tmp_path / str(full), *extra))
    assert [t.full_logits for t in trainers.values()] == [False, True]
    default = build_sft_trainer(sft_config(tiny_vlm_dir, synth_data, tmp_path / "default", "max_steps=1"))
    assert default.full_logits  # a 2k vocabulary: full logits unless asked otherwise

    batch = next(iter(trainers[True].get_train_dataloader()))
    results = {}
    for full, trainer in trainers.items():
        trainer.model.train()
        loss = trainer.compute_loss(trainer.model, dict(batch), num_items_in_batch=None)
        loss.backward()
        grads = {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None}
        results[full] = loss.detach(), grads, {k: v[-1] for k, v in trainer._metrics["train"].items()}
    (fused_loss, fused_grads, fused_metrics), (full_loss, full_grads, full_metrics) = results[False], results[True]
    torch.testing.assert_close(full_loss, fused_loss, rtol=1e-5, atol=1e-6)
    assert fused_grads.keys() == full_grads.keys() and fused_grads
    for name in fused_grads:
        torch.testing.assert_close(full_grads[name], fused_grads[name], rtol=1e-4, atol=1e-6)
    assert fused_metrics.keys() == full_metrics.keys() == {"entropy", "mean_token_accuracy", "num_tokens"}
    for key in fused_metrics:
        assert full_metrics[key] == pytest.approx(fused_metrics[key], rel=1e-5)
