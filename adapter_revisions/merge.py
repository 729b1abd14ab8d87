"""Merge a PEFT LoRA adapter into its base and write a full model folder every command loads.

    mrjudge adapters merge runs/judge-sft-lora --out runs/judge-sft-merged
    mrjudge adapters merge runs/judge-sft-lora --out runs/judge-sft-merged --base /models/Qwen2.5-VL-7B-Instruct

The folder holds the merged weights (PEFT's `merge_and_unload`, in the base's dtype), `config.json`,
`generation_config.json`, the processor files as the adapter run saved them (or the base's: tokenizer,
image processor, chat template) and `merged_from.json`, which records where the weights came from. It is
written to a temporary folder beside `out` and renamed into place, so `out` is whole or absent.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

__all__ = ["MERGE_RECORD", "PROCESSOR_FILES", "merge_adapter"]

MERGE_RECORD = "merged_from.json"
PROCESSOR_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "chat_template.jinja",
    "chat_template.json",
    "processor_config.json",
    "preprocessor_config.json",
    "video_preprocessor_config.json",
)
"""Processor and tokenizer files a model folder carries (transformers' names), copied byte for byte."""


def _base_dtype(base: str) -> str:
    """The dtype the base's weights are stored in (a merge keeps it: a bf16 7B stays 15 GB, not 30)."""
    import torch
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(base)
    dtype = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype, None)
    return str(dtype).removeprefix("torch.") if isinstance(dtype, torch.dtype) else "float32"


def _copy_processor_files(source: str, dest: Path, processor: Any) -> list[str]:
    """Copy the processor files of a local folder; save the loaded processor when there is none to copy."""
    folder = Path(source)
    names = [name for name in PROCESSOR_FILES if (folder / name).is_file()] if folder.is_dir() else []
    if "tokenizer_config.json" not in names:
        processor.save_pretrained(dest)
        return sorted(p.name for p in dest.iterdir() if p.name in PROCESSOR_FILES)
    for name in names:
        shutil.copy2(folder / name, dest / name)
    return names


def merge_adapter(
    adapter: str | Path,
    out: str | Path,
    *,
    base: str | None = None,
    device: str = "cpu",
    dtype: str | None = None,
) -> Path:
    """Write `adapter` merged into its base as a full model folder at `out`; returns `out`.

    Args:
        adapter: a PEFT adapter folder (`adapter_config.json` and adapter weights).
        out: the folder to create; it must not exist yet.
        base: the base model, instead of the adapter's `base_model_name_or_path`.
        device: where the merge runs ("cuda" is faster for 7B models; the result is the same).
        dtype: weights dtype of the result; default the base's own.

    Raises:
        ValueError: `adapter` is not an adapter folder, its base cannot be found, or `out` exists.
    """
    from judge.models import load_model, load_processor, processor_folder, resolve_adapter

    out = Path(out)
    if out.exists():
        raise ValueError(f"--out {out} already exists; give a new folder (a merge never overwrites one)")
    source = resolve_adapter(str(adapter), base)
    if source is None:
        raise ValueError(
            f"{adapter} is not a PEFT adapter folder (it needs adapter_config.json and no config.json); "
            "a full model folder needs no merge"
        )
    dtype = dtype or _base_dtype(source.base)
    loaded = load_model(str(adapter), device=device, dtype=dtype, base=base)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = out.parent / f".{out.name}.merging-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        loaded.model.save_pretrained(staging)
        files = _copy_processor_files(processor_folder(source), staging, loaded.processor)
        load_processor(str(staging), is_vlm=loaded.is_vlm)  # the folder must load as it will be used
        record = {
            "adapter": source.adapter,
            "base": source.base,
            "peft_type": source.config.get("peft_type"),
            "r": source.config.get("r"),
            "lora_alpha": source.config.get("lora_alpha"),
            "dtype": dtype,
            "processor_files": files,
        }
        (staging / MERGE_RECORD).write_text(json.dumps(record, indent=2) + "\n")
        os.rename(staging, out)  # atomic: readers see no folder or the whole one
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return out
