"""Exact shared-prompt replay: the GRPO loss of G completions of one prompt at the memory of one prompt.

In GRPO the G completions of a prompt share it, and the batched loss holds G copies of the prompt's
activations. Replay runs the prompt once, keeps the state later tokens need (each layer's keys and values,
or a linear-attention layer's conv and recurrent state), and replays each completion alone against it:

    (a) prompt[:-1] forward without autograd            -> the prompt state S
    (b) for each completion (or `branch_batch` of them): a fresh cache from *leaf* copies of S, forward
        [prompt[-1], completion[:-1]], loss, backward    -> parameter gradients, plus dL/dS on the leaves
    (c) prompt[:-1] forward with autograd, backward(S, dL/dS)  -> the prompt's share of the gradient

The sum is the full-sequence gradient (not LongStraw's detached-prompt approximation), and peak memory is
the prompt's activations once plus one branch. Log-probabilities without gradient (TRL's old-policy and
reference log-probs) take (a) and (b) only.

    from training.replay import GRPOLoss, ReplayBatch, replay_backward
    batch = ReplayBatch.from_trl_inputs(inputs)          # TRL's GRPO micro-batch: prompts left-padded
    loss = GRPOLoss(loss_type="dapo", beta=0.04)         # TRL's loss as per-token terms × per-row weights
    weights = loss.row_weights(batch.completion_mask, num_items_in_batch=inputs["num_items_in_batch"])
    loss_fn = loss.loss_fn(weights, batch.completion_mask, inputs["advantages"], old_logps, ref_logps)
    result = replay_backward(model, batch, loss_fn)      # gradients accumulate in the parameters' .grad

Rows are grouped by content (identical prompt ids, mask and images), not by position: TRL shuffles a
generation batch before splitting it into micro-batches. A prompt with a single completion gains nothing,
and rows replay cannot reproduce exactly go through the plain full-sequence forward instead: a completion
mask with holes, a prompt of one token, a prompt ending in an image token, images inside a completion,
images for a VLM other than Qwen2.5-VL, or multimodal inputs other than `pixel_values` + `image_grid_thw`.

Models: decoder LMs whose cache layers are plain full-attention `DynamicLayer`s or linear-attention
`LinearAttentionLayer`s (Qwen2/2.5/3, Llama-style, Qwen3-Next, Qwen3.5), and Qwen2.5-VL with images. Before a model's first replay a probe compares
replayed hidden states with a plain forward on a short random sequence, and anything that disagrees (e.g. a transformers version whose
linear-attention layers restart from zero on a multi-token chunk) raises `ReplayUnsupportedError` instead
of returning wrong gradients. Sliding-window and other cache layouts are refused (so are DeepSpeed and FSDP,
by `training.replay_trainer`). With gradient checkpointing on, the prompt's recomputation (c) checkpoints
each layer (cache writes kept), so it holds layer inputs instead of all activations.

The package, one idea per module: `batch` (the micro-batch and its shared-prompt groups), `model` (the pieces of
the model replay calls, checkpointing and RNG switches), `cache` (the cache layers that record and replay the
prompt state), `state` (the prompt state and its inputs), `logps` (per-token log-probs), `probe` (the exactness
check before first use), `engine` (steps a-c), `chunked` (step c chunk by chunk). TRL's GRPO loss per row,
`GRPOLoss`, is `training.grpo_loss`'s (multi-policy GRPO shares it).
"""

from training.grpo_loss import LOSS_TYPES, GRPOLoss, LossFn
from training.replay.batch import ReplayBatch, find_groups
from training.replay.engine import ReplayResult, plain_backward, replay_backward, replay_token_logps
from training.replay.errors import ReplayUnsupportedError
from training.replay.probe import check_replay_exact

__all__ = [
    "GRPOLoss",
    "LOSS_TYPES",
    "LossFn",
    "ReplayBatch",
    "ReplayResult",
    "ReplayUnsupportedError",
    "check_replay_exact",
    "find_groups",
    "plain_backward",
    "replay_backward",
    "replay_token_logps",
]
