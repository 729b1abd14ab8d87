"""Load a judge model and its processor from a folder or hub id, VLM or text-only alike.

A PEFT adapter folder (what `use_lora=true` training writes: `adapter_config.json` and adapter weights, no
`config.json`) loads too: its base comes from the adapter's `base_model_name_or_path` (or an explicit
`base=`), and the adapter is merged into the base's weights in memory, so every command that takes a
model takes an adapter folder the same way (`adapter_revisions.merge` writes such a merge to disk).

Before a backend loads anything, `check_model_source` tells a mistyped folder from a hub id, so a missing
folder fails at once instead of after the hub's retries, and says when the folder holds a model that was
never trained (`UNTRAINED_MARKER`, written by `tiny_world.model`): its verdicts would not parse.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "ADAPTER_CONFIG",
    "UNTRAINED_MARKER",
    "AdapterSource",
    "LoadedModel",
    "check_model_source",
    "default_device",
    "load_adapter_onto",
    "load_base_config",
    "load_model",
    "load_processor",
    "mark_untrained",
    "merge_adapter_into",
    "processor_folder",
    "resolve_adapter",
    "set_pixel_range",
    "untrained_marker",
]

logger = logging.getLogger("judge.models")

ADAPTER_CONFIG = "adapter_config.json"
BASE_FIX = (
    "pass the base explicitly (`--base DIR_OR_HUB_ID` on the command line, `base_model_name_or_path=…` in a "
    "training config), or set `base_model_name_or_path` in {config} to where the base is now"
)


@dataclass(frozen=True)
class AdapterSource:
    """A PEFT adapter folder and the base model it applies to."""

    adapter: str
    base: str
    config: dict[str, Any]
    """The adapter's `adapter_config.json`."""


def _looks_local(name: str) -> bool:
    """True for a string that can only be a filesystem path (a hub id is `org/name` or `name`)."""
    return os.path.isabs(name) or name.startswith((".", "~")) or name.count("/") > 1 or "\\" in name


_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")
"""A hub repository id: `owner/name` or a bare canonical `name` (letters, digits, `_ . -`)."""
_PATH_ENDINGS = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf", ".json", ".yaml", ".jsonl")

UNTRAINED_MARKER = "mrjudge_untrained.json"
"""A file in a model folder whose weights are a random initialisation (`tiny_world.model` writes it), with
the SHA-256 of those weights: a folder trained in place no longer matches and is not flagged."""
UNTRAINED_FIX = (
    "its verdicts will not parse (it writes noise). Train it (`mrjudge demo` trains one, into "
    "runs/demo/grpo/model) or judge with a trained model such as runs/demo/grpo/model"
)


def _weights_sha256(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(folder.glob("*.safetensors")):
        digest.update(path.name.encode())
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def mark_untrained(folder: str | Path, **about: Any) -> Path:
    """Write `UNTRAINED_MARKER` into a freshly initialised model folder (after its weights are saved)."""
    path = Path(folder) / UNTRAINED_MARKER
    record = {"untrained": True, "weights_sha256": _weights_sha256(Path(folder)), **about}
    path.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return path


def untrained_marker(folder: str | Path) -> dict[str, Any] | None:
    """The folder's `UNTRAINED_MARKER` when its weights are still the ones it was written for, else None."""
    path = Path(folder).expanduser() / UNTRAINED_MARKER
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    if not isinstance(record, dict) or record.get("weights_sha256") != _weights_sha256(path.parent):
        return None
    return record


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def _cached_on_hub(repo_id: str) -> bool:
    """Whether the local hub cache holds the repository's config (what offline loading needs first)."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return True  # no hub client to ask: let the loader say what it finds
    return any(isinstance(try_to_load_from_cache(repo_id, name), str) for name in ("config.json", ADAPTER_CONFIG))


def check_model_source(model: str) -> None:
    """Fail at once when `model` names a folder that is not there, before any hub request is made.

    A folder that exists passes (and is reported when it holds an untrained model: `UNTRAINED_MARKER`). A
    name that is not there is a path, not a hub id, when it starts with `/ ./ ../ ~`, has more than one `/`,
    ends like a path (`/`, a weights or config file), or its first part is a folder here (`runs/judge` with
    `runs/` present); then `FileNotFoundError` names it, and the hub id it would otherwise be. A hub id
    (`owner/name`) passes, unless `HF_HUB_OFFLINE` is set and the hub cache does not hold it.
    """
    local = Path(model).expanduser()
    if local.exists():
        if local.is_dir() and (marker := untrained_marker(local)) is not None:
            size = f"{marker.get('size', '')} {marker.get('kind', '')}".strip()
            logger.warning(
                "warning: %s is an untrained tiny model from the factory (%s, random weights): %s",
                model,
                f"`mrjudge tiny-model`, {size}" if size else "`mrjudge tiny-model`",
                UNTRAINED_FIX,
            )
        return
    hub_id = bool(_HUB_ID.match(model))
    parent = model.split("/", 1)[0] if "/" in model else None
    path_like = (
        _looks_local(model)
        or model.endswith(("/", *_PATH_ENDINGS))
        or not hub_id
        or (parent is not None and Path(parent).expanduser().is_dir())
    )
    where = f"(relative paths count from the current directory, {os.getcwd()})"
    if path_like:
        shadow = (
            f"; as a hub id it would be {model!r}, but the folder {parent}/ here makes it a path"
            if hub_id and parent is not None
            else ""
        )
        raise FileNotFoundError(f"no model folder {model!r} {where}{shadow} — check the path (a hub id is owner/name)")
    if _offline() and not _cached_on_hub(model):
        raise FileNotFoundError(
            f"{model!r} is not a folder here {where}, and HF_HUB_OFFLINE is set, so the hub id can only "
            "come from the hub cache, which does not hold it — fix the path, download it first "
            f"(`hf download {model}`), or unset HF_HUB_OFFLINE"
        )


def _checked_base(base: str, where: str, config_path: Path) -> str:
    if Path(base).expanduser().is_dir():
        return str(Path(base).expanduser().resolve())
    if _looks_local(base):
        raise ValueError(
            f"{where} is {base!r}, which is not a folder here (relative paths count from the current directory, "
            f"{os.getcwd()}): the base moved, or the adapter was written on another machine; "
            + BASE_FIX.format(config=config_path)
        )
    return base  # a hub id: `from_pretrained` fetches or finds it in the cache


def resolve_adapter(path: str, base: str | None = None) -> AdapterSource | None:
    """The adapter and its base when `path` is a PEFT adapter folder; None for a model folder or hub id.

    Args:
        path: what the user named as the model.
        base: the base to use instead of the adapter's `base_model_name_or_path`.

    Raises:
        ValueError: naming `base_model_name_or_path` (or `base`) and the fix, when the base is missing or
            names a folder that does not exist; or when `base` is given for something that is not an adapter.
    """
    folder = Path(path).expanduser()
    config_path = folder / ADAPTER_CONFIG
    if not config_path.is_file() or (folder / "config.json").is_file():
        if base is not None:
            raise ValueError(
                f"a base ({base!r}) was given but {path!r} is not a PEFT adapter folder (no {ADAPTER_CONFIG}); "
                "drop the base, or name the adapter folder as the model"
            )
        return None
    try:
        config = json.loads(config_path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{config_path} is not readable JSON ({exc}); re-save the adapter") from exc
    if base is not None:
        return AdapterSource(str(folder.resolve()), _checked_base(base, "the base given", config_path), config)
    named = config.get("base_model_name_or_path")
    if not named:
        raise ValueError(
            f"{config_path} has no base_model_name_or_path, so the base model is unknown: "
            + BASE_FIX.format(config=config_path)
        )
    where = f"base_model_name_or_path in {config_path}"
    return AdapterSource(str(folder.resolve()), _checked_base(str(named), where, config_path), config)


def processor_folder(source: AdapterSource) -> str:
    """Where an adapter's processor comes from: the adapter folder when training saved one there, else the base."""
    return source.adapter if (Path(source.adapter) / "tokenizer_config.json").is_file() else source.base


@dataclass
class LoadedModel:
    model: Any
    processor: Any
    """A multimodal processor for VLMs, the tokenizer for text-only models."""
    is_vlm: bool
    adapter: AdapterSource | None = None
    """The PEFT adapter merged into `model`, when the model was named by its adapter folder."""

    @property
    def tokenizer(self) -> Any:
        return getattr(self.processor, "tokenizer", self.processor)


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _is_vlm_config(config: Any) -> bool:
    return getattr(config, "vision_config", None) is not None


def load_processor(path: str, *, is_vlm: bool | None = None, config_path: str | None = None) -> Any:
    """`AutoProcessor.from_pretrained`, checked: a VLM gets a real processor, never a bare tokenizer.

    transformers falls back to the tokenizer, silently, when a processor class cannot be built (on CPU
    machines, usually a Qwen2.5-VL video processor without torchvision). We then build the image-only
    Qwen2.5-VL processor from the same files, and fail with a clear message otherwise. `config_path` is the
    folder whose `config.json` describes the model, when `path` holds processor files only (an adapter's).
    """
    from transformers import AutoConfig, AutoProcessor, AutoTokenizer
    from transformers.processing_utils import ProcessorMixin

    import judge.backends.hf_compat  # noqa: F401 - registers the image-only Qwen2.5-VL processor

    config_path = config_path or path
    if is_vlm is None:
        is_vlm = _is_vlm_config(AutoConfig.from_pretrained(config_path))
    if not is_vlm:
        return AutoTokenizer.from_pretrained(path)
    try:
        processor = AutoProcessor.from_pretrained(path)
    except (ImportError, OSError, ValueError):
        processor = None
    if isinstance(processor, ProcessorMixin) and getattr(processor, "image_processor", None) is not None:
        return processor
    config = AutoConfig.from_pretrained(config_path)
    if config.model_type == "qwen2_5_vl":
        return judge.backends.hf_compat.ImageOnlyQwen2_5_VLProcessor.from_pretrained(path)
    raise RuntimeError(
        f"AutoProcessor.from_pretrained({path!r}) did not give a multimodal processor "
        f"(got {type(processor).__name__}). If torchvision fails to import here, install a torchvision that "
        "matches your torch, or use a Qwen2.5-VL model, whose image-only processor mr-judge provides."
    )


def set_pixel_range(processor: Any, *, min_pixels: int | None = None, max_pixels: int | None = None) -> Any:
    """Make a Qwen-VL processor resize images into [`min_pixels`, `max_pixels`]; unset bounds keep its own.

    transformers 5.x keeps the range as the image processor's `size = {"shortest_edge": min_pixels,
    "longest_edge": max_pixels}` (passing min/max_pixels per call is deprecated); setting it on the processor,
    not per call, means TRL's collators and `save_pretrained` use and keep it too. Returns `processor`.
    """
    if min_pixels is None and max_pixels is None:
        return processor
    image_processor = getattr(processor, "image_processor", None)
    if image_processor is None:
        return processor  # a text-only model's tokenizer: it never sees an image
    original = image_processor.size
    size = {k: v for k, v in dict(original or {}).items() if v is not None}
    if "shortest_edge" not in size or "longest_edge" not in size:
        raise ValueError(
            f"min_pixels / max_pixels are Qwen-VL image sizes, but this model's {type(image_processor).__name__} "
            f"sizes images as {size}; leave them unset for this model"
        )
    if min_pixels is not None:
        size["shortest_edge"] = min_pixels
    if max_pixels is not None:
        size["longest_edge"] = max_pixels
    if size["shortest_edge"] > size["longest_edge"]:
        raise ValueError(
            f"pixel range [{size['shortest_edge']}, {size['longest_edge']}] is empty: this model's processor keeps "
            "the other bound, so set min_pixels and max_pixels together"
        )
    image_processor.size = size if isinstance(original, dict) else type(original)(**size)  # SizeDict in 5.x
    return processor


def load_model(
    path: str, *, device: str | None = None, dtype: str | None = None, base: str | None = None
) -> LoadedModel:
    """Load a Qwen2.5-VL-style judge (`AutoModelForImageTextToText`) or a causal LM, in eval mode.

    Args:
        path: local folder or hub id, or a PEFT adapter folder (merged into its base here).
        device: "cpu", "cuda", "cuda:1", …; default: CUDA when available.
        dtype: "float32", "bfloat16", "float16"; default bfloat16 on CUDA, float32 on CPU.
        base: an adapter's base model, instead of its `adapter_config.json`'s `base_model_name_or_path`.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText

    device = device or default_device()
    if dtype is None:
        torch_dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    else:
        torch_dtype = getattr(torch, dtype, None)
        if not isinstance(torch_dtype, torch.dtype):
            raise ValueError(f"dtype must be a torch dtype name such as 'bfloat16', got {dtype!r}")
    source = resolve_adapter(path, base)
    weights = source.base if source else path
    config = load_base_config(source) if source else AutoConfig.from_pretrained(path)
    is_vlm = _is_vlm_config(config)
    auto = AutoModelForImageTextToText if is_vlm else AutoModelForCausalLM
    model = auto.from_pretrained(weights, dtype=torch_dtype)
    if source is None:
        return LoadedModel(model.to(device).eval(), load_processor(path, is_vlm=is_vlm), is_vlm)
    # Merged once here: inference then runs on plain weights, as fast as the base, and a PEFT wrapper never
    # meets the backends' own adapter slots (which treat "no adapter" as "adapters off").
    model = merge_adapter_into(model, source).to(device).eval()
    processor = load_processor(processor_folder(source), is_vlm=is_vlm, config_path=source.base)
    return LoadedModel(model, processor, is_vlm, adapter=source)


def load_base_config(source: AdapterSource) -> Any:
    """The base's `config.json`; a base that will not load is reported as the adapter's problem, with the fix."""
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(source.base)
    except (OSError, ValueError) as exc:
        raise ValueError(
            f"cannot load the base {source.base!r} of the adapter {source.adapter} ({exc}); "
            + BASE_FIX.format(config=Path(source.adapter) / ADAPTER_CONFIG)
        ) from exc


def load_adapter_onto(model: Any, source: AdapterSource, *, trainable: bool = False) -> Any:
    """`model` (the base) wrapped by PEFT with the adapter at `source` (`is_trainable` to keep training it)."""
    from peft import PeftModel

    wrapped = PeftModel.from_pretrained(model, source.adapter, is_trainable=trainable)
    # Outputs saved from here name the base this run really used (an override, or the absolute folder).
    for peft_config in wrapped.peft_config.values():
        peft_config.base_model_name_or_path = source.base
    return wrapped


def merge_adapter_into(model: Any, source: AdapterSource) -> Any:
    """The base `model` with the adapter at `source` merged into its weights (PEFT's `merge_and_unload`)."""
    return load_adapter_onto(model, source).merge_and_unload()
