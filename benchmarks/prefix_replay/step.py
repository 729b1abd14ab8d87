"""One step of each method on a random-weight Qwen2: the model, the batch of G completions, the loss, the step.

A step is one forward and backward of the GRPO (DAPO) loss of G completions of R tokens sharing one P-token
prompt, by one of three methods: `plain` (the batched loss), `replay` (`training.replay`), `chunked` (replay
with the prompt's backward in chunks). The benchmark's workers and `benchmarks.gpu_checks`' long-prompt part
both measure this step, so their figures are of the same thing.
"""

from __future__ import annotations

from typing import Any

from benchmarks.workers import qwen2_lm_config

METHODS = ("chunked", "replay", "plain")

# Qwen2-family shapes (hidden, layers, heads, kv heads, intermediate, vocab, tied embeddings).
MODEL_SIZES: dict[str, tuple[int, int, int, int, int, int, bool]] = {
    "small": (128, 4, 4, 2, 256, 2048, False),  # tiny_world.model's "small": minutes on a CPU
    "0.5b": (896, 24, 14, 2, 4864, 151936, True),  # Qwen2.5-0.5B
    "1.5b": (1536, 28, 12, 2, 8960, 151936, True),  # Qwen2.5-1.5B
    "3b": (2048, 36, 16, 2, 11008, 151936, True),  # Qwen2.5-3B
}


def build_model(size: str, device: str, dtype: Any, seed: int, max_positions: int) -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    config = qwen2_lm_config(*MODEL_SIZES[size], max_positions=max(max_positions, 4096))
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return model.train()


def make_batch(group: int, prompt: int, completion: int, vocab: int, device: str, seed: int) -> Any:
    import torch

    from training.replay import ReplayBatch

    g = torch.Generator().manual_seed(seed)
    prompt_ids = torch.randint(3, vocab, (1, prompt), generator=g).expand(group, prompt).contiguous()
    completion_ids = torch.randint(3, vocab, (group, completion), generator=g)
    ones = torch.ones(group, completion, dtype=torch.long)
    return ReplayBatch(prompt_ids.to(device), torch.ones_like(prompt_ids).to(device), completion_ids.to(device),
                       ones.to(device))  # fmt: skip


def loss_for(batch: Any, seed: int) -> Any:
    import torch

    from training.replay import GRPOLoss

    g = torch.Generator().manual_seed(seed + 1)
    advantages = torch.randn(batch.size, generator=g).to(batch.completion_ids.device)
    spec = GRPOLoss(loss_type="dapo")
    mask = batch.completion_mask
    return spec.loss_fn(spec.row_weights(mask, num_items_in_batch=mask.sum()), mask, advantages)


def run_step(model: Any, batch: Any, method: str, branch_batch: int, prompt_chunk: int = 0,
             chunk_checkpoint: bool | None = None) -> None:  # fmt: skip
    from training.replay import plain_backward, replay_backward

    loss_fn = loss_for(batch, 0)
    if method == "plain":
        plain_backward(model, batch, loss_fn, entropy=False)
    else:
        chunked = method == "chunked"
        # None: replay's own default, per-layer checkpointing of the prompt's recomputation exactly when the model
        # has gradient checkpointing on; on/off forces it for the chunked method.
        replay_backward(model, batch, loss_fn, entropy=False, branch_batch=branch_batch,
                        prompt_chunk=prompt_chunk if chunked else 0,
                        checkpoint_prompt=chunk_checkpoint if chunked else None)  # fmt: skip


def uneven_completions(batch: Any, completion: int) -> None:
    """Cut each row's completion shorter than the one before (3 tokens a row), so padding is part of a gradient
    check."""
    for row in range(batch.size):
        batch.completion_mask[row, max(1, completion - 3 * row) :] = 0
