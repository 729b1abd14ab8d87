"""Evidence that a multi-process run split its data and kept its data-parallel replicas equal (`rank_fingerprints`).

`parameter_fingerprint` hashes a model's tensors; `RankFingerprintCallback` writes each process's fingerprints at
train start and end, for comparing across ranks (docs/multi-node.md).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

__all__ = ["RankFingerprintCallback", "parameter_fingerprint"]


def parameter_fingerprint(model: Any) -> str:
    """sha256 over a model's (or state dict's) tensors: names, dtypes, shapes and bytes, in name order."""
    import hashlib

    import torch

    state = model.state_dict() if hasattr(model, "state_dict") else model
    digest = hashlib.sha256()
    for name in sorted(state):
        tensor = state[name].detach().to("cpu").contiguous().reshape(-1)
        digest.update(f"{name}|{tensor.dtype}|{tuple(state[name].shape)}\n".encode())
        digest.update(tensor.view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


class RankFingerprintCallback(TrainerCallback):
    """Writes `output_dir/rank_fingerprints/rank{R}.json`: this process's parameter fingerprint at train start
    and end, with its rank, world size, backend, steps and batches per epoch — the evidence that a
    multi-process run really split the data and ended with the same weights on every data-parallel rank.
    Under DeepSpeed ZeRO-3 or FSDP each rank holds a shard, so the fingerprints differ by design.
    """

    def __init__(self) -> None:
        self.start: str | None = None
        self.batches_per_epoch: int | None = None

    def on_train_begin(self, args, state, control, model=None, train_dataloader=None, **kwargs):
        self.start = parameter_fingerprint(model)
        self.batches_per_epoch = len(train_dataloader) if train_dataloader is not None else None

    def on_train_end(self, args, state, control, model=None, **kwargs):
        import torch.distributed as dist

        record = {
            "rank": args.process_index,
            "world_size": args.world_size,
            "backend": dist.get_backend() if dist.is_available() and dist.is_initialized() else None,
            "global_step": state.global_step,
            "epoch": state.epoch,
            "batches_per_epoch": self.batches_per_epoch,
            "start": self.start,
            "end": parameter_fingerprint(model),
        }
        folder = Path(args.output_dir) / "rank_fingerprints"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"rank{args.process_index}.json").write_text(json.dumps(record, indent=2) + "\n")
