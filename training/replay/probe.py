"""The forward probe before a model's first replay: replayed hidden states must equal a plain forward's.

It catches what a cache API change would make silent, and raises instead of training on wrong gradients.
"""

from __future__ import annotations

import math
import weakref

import torch
from torch import nn

from training.replay.attention import grouped_attention
from training.replay.batch import ReplayBatch
from training.replay.cache import _new_cache
from training.replay.errors import ReplayUnsupportedError
from training.replay.model import _eval_mode, _no_checkpointing, _Policy, _resolve
from training.replay.state import _prompt_inputs, _prompt_state

# The forward probe's tolerance on hidden states (relative L2): rounding differences between a replayed
# chunk and a full forward are ~1e-6 in fp32 and ~1e-2 in bf16; a state that is ignored or mis-positioned
# moves them by O(1).
_PROBE_RTOL = {torch.float64: 1e-4, torch.float32: 1e-3, torch.bfloat16: 5e-2, torch.float16: 5e-2}
_CHECKED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def check_replay_exact(
    model: nn.Module, *, prompt_length: int = 24, completion_length: int = 9, prompt_chunk: int = 0
) -> float:
    """Replay a short random sequence and compare hidden states with a plain forward; raise if they differ.

    Returns the relative L2 error of the replayed hidden states. Catches what a cache API change would make
    silent: a linear-attention layer that restarts from zero on a multi-token chunk, positions restarting
    at 0, a state the continuation does not read. With `prompt_chunk` the prompt state is built chunk by chunk
    (the chunked backward's step (a)), so a chunk that does not continue from the one before is caught too.
    """
    policy = _resolve(model)
    _new_cache(policy)  # refuses unsupported layer types before anything runs
    device = policy.head.weight.device
    generator = torch.Generator().manual_seed(0)
    top = max(min(int(policy.text_config.vocab_size) // 2, 30000), 2)  # low ids: plain text, no image tokens
    ids = torch.randint(0, top, (2, prompt_length + completion_length), generator=generator).to(device)
    ids[1, :prompt_length] = ids[0, :prompt_length]
    batch = ReplayBatch(
        ids[:, :prompt_length],
        torch.ones_like(ids[:, :prompt_length]),
        ids[:, prompt_length:],
        torch.ones_like(ids[:, prompt_length:]),
    )
    with (
        torch.no_grad(),
        _eval_mode(policy.model),
        _no_checkpointing(policy.model),
        grouped_attention(policy.text_config),
    ):
        full = policy.backbone(input_ids=ids, use_cache=False).last_hidden_state[:, prompt_length - 1 : -1]
        prompt = _prompt_inputs(policy, batch, 0)
        if prompt_chunk:
            from training.replay.chunked import chunked_prompt_state

            state = chunked_prompt_state(policy, prompt, prompt_chunk).prompt_state(prompt, device)
        else:
            state = _prompt_state(policy, prompt)
        replayed = policy.backbone(
            input_ids=torch.cat([state.last_token.expand(2, 1), batch.completion_ids[:, :-1]], dim=1),
            position_ids=state.positions(2, completion_length),
            cache=state.cache(policy, 2),
            use_cache=True,
        ).last_hidden_state
    error = float((replayed.float() - full.float()).norm() / full.float().norm().clamp_min(1e-12))
    tolerance = _PROBE_RTOL.get(full.dtype, 5e-2)
    if not math.isfinite(error) or error > tolerance:
        raise ReplayUnsupportedError(
            f"{type(policy.model).__name__}: a prompt replayed from its cache gives hidden states {error:.2e} away "
            f"(relative L2, tolerance {tolerance:.0e}) from the full forward, so this transformers version does not "
            "continue a multi-token chunk from a cached state for this model; replay would return wrong "
            "gradients. Set replay_shared_prompt=false (or upgrade transformers)."
        )
    return error


def _ensure_checked(policy: _Policy, prompt_chunk: int = 0) -> None:
    """The probe once per model (and once more for the chunked state, with chunks that do not divide it)."""
    done = _CHECKED.setdefault(policy.model, {})
    key = 7 if prompt_chunk else 0
    if key not in done:
        done[key] = check_replay_exact(policy.model, prompt_chunk=key)
