"""What a part leaves behind: its record, saved at every step, and the machine its figures come from."""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path
from typing import Any


class Record(dict):
    """A part's record that writes itself to `<out>/<part>.json` at every `save()`: a part killed at its
    time share still leaves what it had measured."""

    def __init__(self, path: Path, **fields: Any) -> None:
        super().__init__(**fields)
        self.path = path

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self, indent=1, default=str) + "\n")
        tmp.replace(self.path)


def environment(device: str) -> dict[str, Any]:
    """Versions and the accelerator, so a figure can be read against the machine that made it."""
    from importlib import metadata

    import torch

    versions = {}
    for name in ("torch", "transformers", "trl", "datasets", "peft", "accelerate", "safetensors", "tokenizers"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    env: dict[str, Any] = {"python": platform.python_version(), "machine": platform.machine(), **versions}
    env["cpus"] = os.cpu_count()
    if device.startswith("cuda") and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(torch.device(device))
        env.update(gpu=props.name, gpu_mem_gib=round(props.total_memory / 2**30, 1), cuda=torch.version.cuda)
    return env
