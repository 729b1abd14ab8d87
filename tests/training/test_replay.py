"""Exact shared-prompt replay: its gradient equals the plain batched GRPO loss's, and it refuses what it can't match.

Agreement is measured on tiny models built offline, as cosine ≥ 0.999999 and relative L2 ≤ 1e-5 between
the replayed and the plain full-sequence gradient (float64 text models, float32 VLM and MoE), with padded
prompts, uneven and empty completions, images, LoRA, and linear-attention (hybrid) layers. The trainer
tests compare against TRL's own `GRPOTrainer._compute_loss` on a micro-batch TRL itself prepared.
"""

from __future__ import annotations

import json
import random

import pytest
import torch
from PIL import Image

from tests.support.replay import (
    SavedBytes,
    assert_exact,
    assert_logps_equal_plain,
    assert_step_equals_trl,
    assert_two_ddp_processes_agree,
    compare,
    grpo_terms,
    hybrid_model,
    lora_lm,
    perturb_lora,
    push_off_policy,
    text_batch,
    trainer,
    vlm_batch,
)
from training.replay import (
    LOSS_TYPES,
    GRPOLoss,
    ReplayBatch,
    ReplayUnsupportedError,
    check_replay_exact,
    find_groups,
    plain_backward,
    replay_backward,
)

pytestmark = pytest.mark.usefixtures("one_thread")


# -- grouping ---------------------------------------------------------------------------------------------


def test_groups_are_found_by_content_and_the_rest_goes_plain():
    p = torch.tensor([[0, 5, 6], [7, 8, 9], [0, 5, 6], [0, 0, 4], [7, 8, 9], [0, 5, 6], [3, 0, 6], [0, 0, 4]])
    mask = (p > 0).long()
    done = torch.ones(8, 3, dtype=torch.long)
    done[4, 1] = 0  # a hole in a completion mask: padding inside the sequence
    batch = ReplayBatch(p, mask, torch.ones(8, 3, dtype=torch.long), done)
    groups, plain = find_groups(batch)
    # rows 3, 7: a one-token prompt; row 4: the hole; row 6: padding that is not on the left; row 1 alone.
    assert groups == [[0, 2, 5]] and plain == [1, 3, 4, 6, 7]
    assert find_groups(ReplayBatch(p, mask, done, done, unsupported=("token_type_ids",))) == ([], list(range(8)))


def test_rows_with_the_same_ids_but_different_images_are_different_groups():
    ids = torch.tensor([[9, 4, 4, 4, 4, 5, 6]] * 5)  # 4 = the image token: one 2×2-patch image per row
    red, blue = torch.zeros(4, 8), torch.ones(4, 8)
    done = torch.ones(5, 2, dtype=torch.long)
    batch = ReplayBatch(ids, torch.ones_like(ids), done, done, pixel_values=torch.cat([red, blue, red, blue, red]),
                        image_grid_thw=torch.tensor([[1, 2, 2]] * 5), num_images=[1] * 5)  # fmt: skip
    assert find_groups(batch, (4,)) == ([[0, 2, 4], [1, 3]], [])
    assert find_groups(batch, (4,), images=False) == ([], [0, 1, 2, 3, 4])  # a VLM replay can't place images for
    ends_in_image = ReplayBatch(ids[:, :-2], torch.ones_like(ids[:, :-2]), done, done)
    assert find_groups(ends_in_image, (4,)) == ([], [0, 1, 2, 3, 4])


# -- gradient agreement: text ------------------------------------------------------------------------------


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_replay_gradient_equals_the_plain_loss(loss_type, lm64, lm_batch):
    loss = GRPOLoss(loss_type=loss_type, beta=0.04, use_bias_correction_kl=True, max_completion_length=12)
    stats = compare(lm64, lm_batch, loss, grpo_terms(lm64, lm_batch, seed=1))
    assert_exact(stats)
    assert stats["groups"] == [[0, 2, 5], [1, 3, 6]] and stats["plain_rows"] == [4]


@pytest.mark.parametrize(
    "options",
    [
        {"importance_sampling_level": "sequence", "loss_type": "grpo"},  # GSPO
        {"delta": 1.5, "epsilon_high": 0.28},  # two-sided clipping, DAPO's clip-higher
        {"off_policy_mask_threshold": 0.05},  # DeepSeek-V3.2's off-policy sequence mask
    ],
)
@pytest.mark.parametrize("branch_batch", [1, 2, 3])
def test_replay_gradient_with_clipping_variants_and_branch_batches(options, branch_batch, lm64, lm_batch):
    loss = GRPOLoss(beta=0.0, max_completion_length=12, **options)
    assert_exact(compare(lm64, lm_batch, loss, grpo_terms(lm64, lm_batch, seed=2), branch_batch=branch_batch))


@pytest.mark.parametrize("kind", ["lm", "qwen3_5"])
def test_gradient_checkpointing_keeps_the_cache_and_the_gradient(kind, tiny_lm_dir):
    """With checkpointing on, the prompt's recomputation (c) is checkpointed per layer, cache writes included."""
    from transformers import AutoModelForCausalLM

    if kind == "lm":
        model = AutoModelForCausalLM.from_pretrained(tiny_lm_dir, dtype=torch.float64).train()
        batch = text_batch(
            [40, 31, 20], [(0, 12), (1, 5), (0, 9), (1, 2), (2, 7)], vocab=model.config.vocab_size, width=12, seed=9
        )  # row 4 alone: plain, checkpointed by HF
    else:
        model = hybrid_model("qwen3_5")
        batch = text_batch([70, 45], [(0, 9), (1, 4), (0, 1), (1, 9)], vocab=300, width=9, seed=9)
    model.gradient_checkpointing_enable({"use_reentrant": False})
    assert_exact(compare(model, batch, GRPOLoss(beta=0.04), grpo_terms(model, batch, seed=10)))
    layers = [m for m in model.modules() if getattr(m, "gradient_checkpointing", False)]
    assert layers and all("forward" not in m.__dict__ for m in layers), "checkpointing restored as it was"


def test_replayed_log_probs_without_grad_equal_the_plain_forward(lm64, lm_batch):
    logps = assert_logps_equal_plain(lm64, lm_batch, branch_batch=2)
    assert (logps[lm_batch.completion_mask == 0] == 0).all(), "padding scores 0, as in TRL"


def test_lora_gradients_match(tiny_lm_dir, lm_batch):
    from peft import LoraConfig

    torch.manual_seed(0)
    config = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q_proj", "k_proj", "v_proj", "up_proj"])
    model = lora_lm(tiny_lm_dir, config)
    assert sum(p.requires_grad for p in model.parameters()) == 16
    loss = GRPOLoss(loss_type="dapo", beta=0.04)
    assert_exact(compare(model, lm_batch, loss, grpo_terms(model, lm_batch, seed=3)))


def test_lora_dropout_uses_the_same_masks_for_the_prompt_twice(tiny_lm_dir, lm_batch):
    """With dropout on, the prompt's recomputation (c) must see the masks its first pass (a) drew."""
    from peft import LoraConfig

    model = lora_lm(tiny_lm_dir, LoraConfig(r=4, lora_dropout=0.5, target_modules=["k_proj", "v_proj"]))
    rows = ReplayBatch(lm_batch.prompt_ids[[0, 2]], lm_batch.prompt_mask[[0, 2]], lm_batch.completion_ids[[0, 2]],
                       lm_batch.completion_mask[[0, 2]])  # fmt: skip
    from training.replay.model import _resolve, _RngReplay
    from training.replay.state import _prompt_inputs, _prompt_state

    policy = _resolve(model)
    prompt = _prompt_inputs(policy, rows, 0)
    rng = _RngReplay(torch.device("cpu"))
    with torch.no_grad():
        first = _prompt_state(policy, prompt).flat()
    torch.rand(100)  # the branches draw from the generator in between
    with rng.replay():
        again = _prompt_state(policy, prompt).flat()
    assert all(torch.equal(a, b) for a, b in zip(first, again))


# -- gradient agreement: images ----------------------------------------------------------------------------


def test_replay_gradient_equals_the_plain_loss_with_images(tiny_vlm_dir):
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(tiny_vlm_dir, dtype=torch.float32).train()
    batch, _ = vlm_batch(tiny_vlm_dir)
    loss = GRPOLoss(loss_type="grpo", beta=0.04)
    stats = compare(model, batch, loss, grpo_terms(model, batch, seed=5), branch_batch=2)
    assert_exact(stats)
    assert stats["groups"] == [[0, 2], [1, 5], [3, 6]] and stats["plain_rows"] == [4]
    visual = [p for n, p in model.named_parameters() if "visual" in n]
    assert visual and all(p.grad is None for p in visual), "compare() leaves no gradients behind"


# -- memory ----------------------------------------------------------------------------------------------


def test_replay_holds_the_prompt_once_whatever_the_group_size(tiny_lm_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_lm_dir, dtype=torch.float32).train()
    vocab = model.config.vocab_size
    peaks: dict[tuple[str, int], int] = {}
    for g in (2, 8):
        batch = text_batch([384], [(0, 8)] * g, vocab=vocab, width=8, seed=g)
        loss = GRPOLoss(loss_type="dapo")
        fn = loss.loss_fn(loss.row_weights(batch.completion_mask, num_items_in_batch=8 * g), batch.completion_mask,
                          torch.ones(g))  # fmt: skip
        for name, run in (("plain", plain_backward), ("replay", replay_backward)):
            with SavedBytes(model) as meter:
                run(model, batch, fn)
            model.zero_grad(set_to_none=True)
            peaks[name, g] = meter.peak
    assert peaks["replay", 8] <= 1.05 * peaks["replay", 2], peaks  # the prompt once, one branch at a time
    assert peaks["plain", 8] >= 3.0 * peaks["plain", 2], peaks  # G copies of the prompt
    assert peaks["replay", 8] <= 0.3 * peaks["plain", 8], peaks


# -- hybrid (linear-attention) models ----------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["qwen3_5", "qwen3_next"])
def test_hybrid_models_replay_the_recurrent_state_exactly(kind):
    model = hybrid_model(kind)
    # 70 > the delta rule's 64-token chunks: the prompt state carries across a chunk boundary.
    batch = text_batch([70, 45], [(0, 9), (1, 4), (0, 1), (1, 9), (0, 6)], vocab=300, width=9, seed=6)
    assert_exact(compare(model, batch, GRPOLoss(beta=0.04), grpo_terms(model, batch, seed=7), branch_batch=2))


def test_a_linear_attention_layer_that_restarts_from_zero_is_refused(monkeypatch):
    """What older transformers did on a multi-token chunk (initial_state dropped): detected, never trained on."""
    from transformers.models.qwen3_5 import modeling_qwen3_5

    original = modeling_qwen3_5.torch_chunk_gated_delta_rule
    monkeypatch.setattr(
        modeling_qwen3_5,
        "torch_chunk_gated_delta_rule",
        lambda *args, initial_state=None, **kwargs: original(*args, initial_state=None, **kwargs),
    )
    model = hybrid_model("qwen3_5")
    with pytest.raises(ReplayUnsupportedError, match="does not continue a multi-token chunk"):
        check_replay_exact(model)
    batch = text_batch([30], [(0, 4), (0, 4)], vocab=300, width=4, seed=8)
    with pytest.raises(ReplayUnsupportedError):
        replay_backward(model, batch, lambda rows, lp, ent: lp.sum())
    assert all(p.grad is None for p in model.parameters())


def test_sliding_window_caches_are_refused():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, use_sliding_window=True, sliding_window=16,
                         max_window_layers=0)  # fmt: skip
    with pytest.raises(ReplayUnsupportedError, match="DynamicSlidingWindowLayer"):
        check_replay_exact(Qwen2ForCausalLM(config))


# -- the TRL trainer ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_trainer_gradient_and_metrics_equal_trl_compute_loss(lora, tiny_vlm_dir, tmp_path):
    from trl import GRPOTrainer

    tr = trainer(tiny_vlm_dir, tmp_path, lora=lora, gradient_checkpointing=True)
    model = tr.model
    if lora:
        perturb_lora(model)  # the adapters matter, so the reference (adapters off) differs
    model.train()
    inputs = tr._prepare_inputs(next(iter(tr.get_train_dataloader())))  # generation, rewards, old + ref log-probs
    assert {"old_per_token_logps", "ref_per_token_logps", "pixel_values"} <= set(inputs)
    # The replayed no-grad log-probs TRL stored agree with its plain path.
    seq = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
    mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
    kwargs = {k: inputs[k] for k in ("pixel_values", "image_grid_thw", "num_images", "mm_token_type_ids")}
    with torch.no_grad():
        plain, plain_entropy, _ = GRPOTrainer._get_per_token_logps_and_entropies(
            tr, model, seq, mask, seq.size(1) - inputs["prompt_ids"].size(1), compute_entropy=True, **kwargs
        )
        replayed, entropy, _ = tr._get_per_token_logps_and_entropies(
            model, seq, mask, seq.size(1) - inputs["prompt_ids"].size(1), compute_entropy=True, **kwargs
        )
    assert torch.allclose(plain, replayed, atol=1e-5) and torch.allclose(plain_entropy, entropy, atol=1e-5)
    assert torch.allclose(plain, inputs["old_per_token_logps"], atol=1e-5)
    if lora:
        assert (inputs["ref_per_token_logps"] - inputs["old_per_token_logps"]).abs().max() > 1e-3

    push_off_policy(inputs)  # off-policy and uneven, so clipping, KL and padding all act
    for i, n in enumerate([8, 3, 5, 1, 8, 2, 0, 6, 7]):
        inputs["completion_mask"][i, n:] = 0
    tr.current_gradient_accumulation_steps = 2
    for loss_type in ("dapo", "grpo", "dr_grpo", "vespo"):  # vespo: its own metric (phi), no clip ratios
        tr.loss_type = tr.args.loss_type = loss_type
        tr.replay_loss = tr._replay_loss_spec()
        trl_metrics, ours = assert_step_equals_trl(tr, inputs)
        assert ours.pop("replay/groups") == 3.0 and ours.pop("replay/plain_rows") == 0.0
        assert ours.keys() == trl_metrics.keys() and all(
            ours[k] == pytest.approx(trl_metrics[k], abs=1e-6) for k in ours
        )


def test_trainer_refuses_what_replay_cannot_reproduce(tiny_vlm_dir, tmp_path):
    with pytest.raises(ReplayUnsupportedError) as info:
        trainer(tiny_vlm_dir, tmp_path, top_entropy_quantile=0.5, entropy_coef=0.01)
    message = str(info.value)
    assert "top_entropy_quantile" in message and "entropy bonus" in message
    assert "replay_shared_prompt=false" in message


def test_replay_branch_batch_must_be_positive():
    from tests.support.training import CPU_LOAD
    from training.config import load_config
    from training.policy import JudgePolicyGRPOConfig

    with pytest.raises(ValueError, match="replay_branch_batch must be >= 1, got 0"):
        load_config(JudgePolicyGRPOConfig, None, ["model_name_or_path=m", "train_file=t", "output_dir=o",
                                                   "reward.model=j", "replay_shared_prompt=true",
                                                   "replay_branch_batch=0", *CPU_LOAD])  # fmt: skip


def test_two_policy_steps_with_replay_from_the_cli(tiny_vlm_dir, tmp_path, capsys):
    from mrjudge.cli import main

    from tests.support.training import CPU

    rng = random.Random(0)
    rows = []
    for i in range(4):
        image = tmp_path / f"img{i}.png"
        Image.new("RGB", (56, 56), (rng.randrange(256), rng.randrange(256), 0)).save(image)
        rows.append(
            {"prompt": "What colour is the picture?" + " Answer briefly." * i, "image": image.name, "answer": "red"}
        )
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "policy"
    args = ["train", "policy", f"model_name_or_path={tiny_vlm_dir}", f"reward.model={tiny_vlm_dir}",
            "reward.judge={max_new_tokens: 4, orders: 1}", f"train_file={prompts}", f"output_dir={out}", "max_steps=2",
            "per_device_train_batch_size=8", "num_generations=4", "max_completion_length=6", "learning_rate=0.001",
            "use_vllm=false", "replay_shared_prompt=true", "replay_branch_batch=2", "save_steps=2",
            "torch_empty_cache_steps=1", *CPU]  # fmt: skip
    assert main(args) == 0
    assert "trained 2 steps" in capsys.readouterr().out
    config = (out / "mrjudge_config.yaml").read_text()
    assert "replay_shared_prompt: true" in config and "replay_branch_batch: 2" in config
    logs = json.loads((out / "checkpoint-2" / "trainer_state.json").read_text())["log_history"]
    # Each step replayed the 2 prompts of its micro-batch (4 completions each); nothing fell back.
    assert [row["replay/groups"] for row in logs if "replay/groups" in row] == [2.0, 2.0]
    assert all(row["replay/plain_rows"] == 0.0 for row in logs if "replay/plain_rows" in row)


@pytest.mark.slow
def test_two_ddp_processes_average_replayed_gradients(tiny_lm_dir, tmp_path):
    """Replay's backward passes bypass DDP's hooks; the trainer averages at each accumulation boundary instead."""
    assert_two_ddp_processes_agree(tiny_lm_dir, tmp_path)
