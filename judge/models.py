"""Load a judge model and its processor from a folder or hub id, VLM or text-only alike."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["LoadedModel", "default_device", "load_model", "load_processor", "set_pixel_range"]


@dataclass
class LoadedModel:
    model: Any
    processor: Any
    """A multimodal processor for VLMs, the tokenizer for text-only models."""
    is_vlm: bool

    @property
    def tokenizer(self) -> Any:
        return getattr(self.processor, "tokenizer", self.processor)


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _is_vlm_config(config: Any) -> bool:
    return getattr(config, "vision_config", None) is not None


def load_processor(path: str, *, is_vlm: bool | None = None) -> Any:
    """`AutoProcessor.from_pretrained`, checked: a VLM gets a real processor, never a bare tokenizer.

    transformers falls back to the tokenizer, silently, when a processor class cannot be built (on CPU
    machines, usually a Qwen2.5-VL video processor without torchvision). We then build the image-only
    Qwen2.5-VL processor from the same files, and fail with a clear message otherwise.
    """
    from transformers import AutoConfig, AutoProcessor, AutoTokenizer
    from transformers.processing_utils import ProcessorMixin

    import judge.hf_compat  # noqa: F401 - registers the image-only Qwen2.5-VL processor

    if is_vlm is None:
        is_vlm = _is_vlm_config(AutoConfig.from_pretrained(path))
    if not is_vlm:
        return AutoTokenizer.from_pretrained(path)
    try:
        processor = AutoProcessor.from_pretrained(path)
    except (ImportError, OSError, ValueError):
        processor = None
    if isinstance(processor, ProcessorMixin) and getattr(processor, "image_processor", None) is not None:
        return processor
    config = AutoConfig.from_pretrained(path)
    if config.model_type == "qwen2_5_vl":
        return judge.hf_compat.ImageOnlyQwen2_5_VLProcessor.from_pretrained(path)
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


def load_model(path: str, *, device: str | None = None, dtype: str | None = None) -> LoadedModel:
    """Load a Qwen2.5-VL-style judge (`AutoModelForImageTextToText`) or a causal LM, in eval mode.

    Args:
        path: local folder or hub id.
        device: "cpu", "cuda", "cuda:1", …; default: CUDA when available.
        dtype: "float32", "bfloat16", "float16"; default bfloat16 on CUDA, float32 on CPU.
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
    config = AutoConfig.from_pretrained(path)
    is_vlm = _is_vlm_config(config)
    auto = AutoModelForImageTextToText if is_vlm else AutoModelForCausalLM
    model = auto.from_pretrained(path, dtype=torch_dtype).to(device).eval()
    return LoadedModel(model=model, processor=load_processor(path, is_vlm=is_vlm), is_vlm=is_vlm)
