"""Chunked prompt backward: the same gradient as the plain batched loss, one chunk's activations at a time.

The cases mirror test_replay.py (fp64 text, all loss types, KL, LoRA, left padding, Qwen2.5-VL images, the
hybrid linear-attention models), with chunk sizes that do and do not divide the prompt.
"""

from __future__ import annotations

import pytest
import torch

from tests.support import replay as support
from training.replay import (
    LOSS_TYPES,
    GRPOLoss,
    check_replay_exact,
    replay_backward,
)
from training.replay.chunked import chunk_bounds, chunked_prompt_state
from training.replay.model import _resolve
from training.replay.state import _prompt_inputs, _prompt_state

pytestmark = pytest.mark.usefixtures("one_thread")


def test_chunk_bounds_cover_the_prompt_and_never_split_an_image():
    assert chunk_bounds(9, 3) == [(0, 3), (3, 6), (6, 9)]
    assert chunk_bounds(5, 8) == [(0, 5)]
    image = torch.tensor([0, 1, 1, 1, 0, 0, 1, 1, 0, 0, 0]).bool()
    bounds = chunk_bounds(11, 2, image)
    assert bounds == [(0, 4), (4, 6), (6, 8), (8, 10), (10, 11)]
    for start, _ in bounds[1:]:
        assert not (image[start - 1] and image[start]), (start, bounds)
    with pytest.raises(ValueError, match="prompt_chunk must be >= 1"):
        chunk_bounds(4, 0)


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_chunked_gradient_equals_the_plain_loss(loss_type, lm64, lm_batch):
    # 8 divides neither 39 nor 30: a short last chunk; 13 divides 39 (3 chunks).
    loss = GRPOLoss(loss_type=loss_type, beta=0.04, use_bias_correction_kl=True, max_completion_length=12)
    terms = support.grpo_terms(lm64, lm_batch, seed=1)
    for chunk in (8, 13):
        stats = support.compare(lm64, lm_batch, loss, terms, prompt_chunk=chunk)
        support.assert_exact(stats)
        assert stats["groups"] == [[0, 2, 5], [1, 3, 6]] and stats["plain_rows"] == [4]


@pytest.mark.parametrize("chunk", [1, 10, 39, 100])
def test_chunk_sizes_from_one_token_to_the_whole_prompt(chunk, lm64, lm_batch):
    loss = GRPOLoss(loss_type="dapo", beta=0.04, delta=1.5, epsilon_high=0.28)
    support.assert_exact(
        support.compare(
            lm64, lm_batch, loss, support.grpo_terms(lm64, lm_batch, seed=2), prompt_chunk=chunk, branch_batch=2
        )
    )


def test_the_chunked_state_is_the_single_forward_state(lm64, lm_batch):
    policy = _resolve(lm64)
    prompt = _prompt_inputs(policy, lm_batch, 0)
    with torch.no_grad():
        whole = _prompt_state(policy, prompt).flat()
        chunked = chunked_prompt_state(policy, prompt, 6).prompt_state(prompt, torch.device("cpu")).flat()
    assert len(whole) == len(chunked) and all(torch.allclose(a, b, atol=1e-10) for a, b in zip(whole, chunked))


def test_chunked_log_probs_without_grad(lm64, lm_batch):
    support.assert_logps_equal_plain(lm64, lm_batch, prompt_chunk=7)


def test_chunked_probe_and_bad_chunk(lm64, lm_batch):
    assert check_replay_exact(lm64, prompt_chunk=5) < 1e-8
    with pytest.raises(ValueError, match="prompt_chunk must be >= 0"):
        replay_backward(lm64, lm_batch, lambda rows, lp, ent: lp.sum(), prompt_chunk=-1)


def test_chunked_lora_with_and_without_checkpointing(tiny_lm_dir, lm_batch):
    from peft import LoraConfig

    torch.manual_seed(0)
    config = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q_proj", "k_proj", "v_proj", "up_proj"])
    model = support.lora_lm(tiny_lm_dir, config)
    loss = GRPOLoss(loss_type="dapo", beta=0.04)
    terms = support.grpo_terms(model, lm_batch, seed=3)
    support.assert_exact(support.compare(model, lm_batch, loss, terms, prompt_chunk=9))
    support.assert_exact(support.compare(model, lm_batch, loss, terms, prompt_chunk=9, checkpoint_prompt=True))


def test_chunked_lora_dropout_replays_each_chunks_masks(tiny_lm_dir, lm_batch):
    """LoRA dropout on: each chunk's recomputation (c) must draw the masks its first pass (a) drew."""
    from peft import LoraConfig

    from training.replay.chunked import chunked_prompt_backward

    model = support.lora_lm(tiny_lm_dir, LoraConfig(r=4, lora_dropout=0.5, target_modules=["k_proj", "v_proj"]))
    policy = _resolve(model)
    prompt = _prompt_inputs(policy, lm_batch, 0)
    params = [p for p in model.parameters() if p.requires_grad]
    # The gradient of <state, w> by chunks equals the single forward's, dropout masks included.
    with torch.no_grad():
        state = chunked_prompt_state(policy, prompt, 8)
    leaves = state.prompt_state(prompt, torch.device("cpu")).leaves()
    weights = [torch.randn(t.shape, generator=torch.Generator().manual_seed(i), dtype=t.dtype)
               for i, t in enumerate(leaves.flat())]  # fmt: skip
    torch.rand(100)
    chunked_prompt_backward(policy, state, [w.clone() for w in weights])  # it accumulates into them
    g_chunked = torch.cat([p.grad.flatten() for p in params])
    model.zero_grad(set_to_none=True)
    # Reference: the stock cache, chunk after chunk with autograd end to end, each from its recorded RNG state.
    from transformers import DynamicCache

    cache = DynamicCache(config=policy.text_config)
    with torch.enable_grad():
        for chunk in state.chunks:
            assert chunk.rng is not None
            with chunk.rng.replay():
                policy.backbone(input_ids=chunk.inputs["ids"], position_ids=chunk.inputs["positions"], cache=cache,
                                use_cache=True)  # fmt: skip
        full = [t for layer in cache.layers for t in (layer.keys, layer.values)]
        sum((t * w).sum() for t, w in zip(full, weights)).backward()
    g_ref = torch.cat([p.grad.flatten() for p in params])
    model.zero_grad(set_to_none=True)
    assert float((g_chunked - g_ref).norm() / g_ref.norm()) < 1e-10


def test_chunked_gradient_with_images(tiny_vlm_dir):
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(tiny_vlm_dir, dtype=torch.float32).train()
    batch, image_token = support.vlm_batch(tiny_vlm_dir)
    policy = _resolve(model)
    prompt = _prompt_inputs(policy, batch, 0)
    types = prompt["types"][: prompt["ids"].size(1) - 1].bool()
    start = int(types.nonzero()[0])
    chunk = start + 2  # the first boundary falls inside the image's tokens: it must move to the image's end
    with torch.no_grad():
        state = chunked_prompt_state(policy, prompt, chunk)
    assert len(state.chunks) >= 2 and state.chunks[0].end == int(types.nonzero()[-1]) + 1
    assert "pixel_values" in state.chunks[0].inputs and "pixel_values" not in state.chunks[1].inputs
    loss = GRPOLoss(loss_type="grpo", beta=0.04)
    terms = support.grpo_terms(model, batch, seed=5)
    for size in (chunk, 3):  # 3: the image starts a chunk of its own, the text after it runs in short chunks
        stats = support.compare(model, batch, loss, terms, branch_batch=2, prompt_chunk=size)
        support.assert_exact(stats)
        assert stats["groups"] == [[0, 2], [1, 5], [3, 6]] and stats["plain_rows"] == [4]
    visual = [p for n, p in model.named_parameters() if "visual" in n]
    assert visual and all(p.grad is None for p in visual)


@pytest.mark.parametrize("kind", ["qwen3_5", "qwen3_next"])
def test_chunked_hybrid_models(kind):
    model = support.hybrid_model(kind)
    # 69 tokens of state: chunks of 32 cross no delta-rule chunk; 50 ends mid-way through one (64-token chunks).
    batch = support.text_batch([70, 45], [(0, 9), (1, 4), (0, 1), (1, 9), (0, 6)], vocab=300, width=9, seed=6)
    terms = support.grpo_terms(model, batch, seed=7)
    for chunk in (32, 50):
        support.assert_exact(
            support.compare(model, batch, GRPOLoss(beta=0.04), terms, branch_batch=2, prompt_chunk=chunk)
        )


def test_chunked_peak_does_not_grow_with_the_prompt_beyond_the_state(tiny_lm_dir):
    """Autograd's held bytes, measured at two prompt lengths: unchunked replay grows with the prompt's
    activations, chunked replay by the (measured) key/value state once (attention saves views of the one
    buffer: no concatenated or head-repeated copies) plus the chunk's additive mask (chunk × prompt)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_lm_dir, dtype=torch.float32).train()
    vocab = model.config.vocab_size
    peaks: dict[tuple[str, int], int] = {}
    state_bytes: dict[int, int] = {}
    for length in (256, 1024):
        batch = support.text_batch([length], [(0, 8)] * 2, vocab=vocab, width=8, seed=length)
        loss = GRPOLoss(loss_type="dapo")
        fn = loss.loss_fn(loss.row_weights(batch.completion_mask, num_items_in_batch=16), batch.completion_mask,
                          torch.ones(2))  # fmt: skip
        policy = _resolve(model)
        with torch.no_grad():
            state = _prompt_state(policy, _prompt_inputs(policy, batch, 0))
        state_bytes[length] = sum(t.numel() * t.element_size() for t in state.flat())
        for name, chunk in (("replay", 0), ("chunked", 64)):
            with support.SavedBytes(model) as meter:
                replay_backward(model, batch, fn, prompt_chunk=chunk)
            model.zero_grad(set_to_none=True)
            peaks[name, length] = meter.peak
    growth_state = state_bytes[1024] - state_bytes[256]
    growth_replay = peaks["replay", 1024] - peaks["replay", 256]
    growth_chunked = peaks["chunked", 1024] - peaks["chunked", 256]
    assert growth_chunked <= 2 * growth_state, (peaks, state_bytes)  # measured: 1.52× (3.0× with cat + repeat_kv)
    assert growth_chunked <= 0.12 * growth_replay, (peaks, state_bytes)  # measured: 0.083×


def test_trainer_with_prompt_chunks_equals_trl_compute_loss(tiny_vlm_dir, tmp_path, monkeypatch):
    """The config field reaches both replay calls: TRL's stored log-probs and its loss's gradient are unchanged."""

    from training.replay import chunked as replay_chunked

    chunk_counts: list[int] = []
    original = replay_chunked.chunked_prompt_state

    def counted(*args, **kwargs):
        state = original(*args, **kwargs)
        chunk_counts.append(len(state.chunks))
        return state

    monkeypatch.setattr(replay_chunked, "chunked_prompt_state", counted)
    tr = support.trainer(tiny_vlm_dir, tmp_path)
    tr.args.replay_prompt_chunk = 6  # image prompts of ~30 tokens: several chunks, one holding the image
    tr.model.train()
    inputs = tr._prepare_inputs(next(iter(tr.get_train_dataloader())))
    support.push_off_policy(inputs)
    tr.current_gradient_accumulation_steps = 2
    support.assert_step_equals_trl(tr, inputs)
    assert tr.last_replay.groups and not tr.last_replay.plain_rows
    assert len(chunk_counts) >= 6 and min(chunk_counts) >= 3, chunk_counts  # old log-probs and the step, chunked


def test_replay_prompt_chunk_must_not_be_negative():
    from tests.support.training import CPU_LOAD
    from training.config import load_config
    from training.policy import JudgePolicyGRPOConfig

    base = ["model_name_or_path=m", "train_file=t", "output_dir=o", "reward.model=j", "replay_shared_prompt=true",
            *CPU_LOAD]  # fmt: skip
    with pytest.raises(ValueError, match="replay_prompt_chunk must be >= 0"):
        load_config(JudgePolicyGRPOConfig, None, [*base, "replay_prompt_chunk=-4"])
    assert load_config(JudgePolicyGRPOConfig, None, [*base, "replay_prompt_chunk=512"]).replay_prompt_chunk == 512


@pytest.mark.slow
def test_two_ddp_processes_with_prompt_chunks(tiny_lm_dir, tmp_path):
    """DDP + gradient accumulation 2 with chunked prompts: the same audit as the unchunked DDP test."""
    support.assert_two_ddp_processes_agree(tiny_lm_dir, tmp_path, prompt_chunk=8)
