"""Make Qwen2.5-VL processors load on machines without a working torchvision.

transformers' `Qwen2_5_VLProcessor` always builds a *video* processor, and the video processor imports
torchvision. CPU-only machines often have no usable torchvision (the PyPI wheels are CUDA-linked), and
then `AutoProcessor.from_pretrained` quietly returns a bare tokenizer. `ImageOnlyQwen2_5_VLProcessor` is the
same processor without the video half; importing this module registers it under its class name so that
folders written by `tiny_world.model` (whose `processor_config.json` names it) load through `AutoProcessor`.
Folders that name the stock class keep loading the stock processor where torchvision works.
"""

from __future__ import annotations

import importlib.util

from transformers import AutoProcessor, Qwen2_5_VLConfig
from transformers.models.qwen2_5_vl.processing_qwen2_5_vl import Qwen2_5_VLProcessor
from transformers.processing_utils import ProcessorMixin

__all__ = ["ImageOnlyQwen2_5_VLProcessor", "torchvision_usable", "write_stock_processor_config"]


def torchvision_usable() -> bool:
    """True when torchvision is installed *and* imports (a CUDA-linked wheel beside a CPU torch does not)."""
    if importlib.util.find_spec("torchvision") is None:
        return False
    try:
        import torchvision  # noqa: F401
    except Exception:  # noqa: BLE001 - any import failure means "not usable", which is all we ask
        return False
    return True


class ImageOnlyQwen2_5_VLProcessor(Qwen2_5_VLProcessor):
    """`Qwen2_5_VLProcessor` with images and text only: no video processor, so no torchvision.

    Its sub-processors are derived from the `__init__` signature by transformers, so leaving
    `video_processor` out of the signature is what removes the video half.
    """

    def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
        self.image_token = getattr(tokenizer, "image_token", None) or "<|image_pad|>"
        self.video_token = getattr(tokenizer, "video_token", None) or "<|video_pad|>"
        self.image_token_id = tokenizer.convert_tokens_to_ids(self.image_token)
        self.video_token_id = tokenizer.convert_tokens_to_ids(self.video_token)
        ProcessorMixin.__init__(self, image_processor, tokenizer, chat_template=chat_template, **kwargs)


# Registering makes the class findable by name, which is how folders written by `tiny_world.model` refer to
# it. It also becomes AutoProcessor's fallback for Qwen2.5-VL folders that name no processor class at all
# (hub checkpoints always name one, so they keep the stock processor).
AutoProcessor.register(Qwen2_5_VLConfig, ImageOnlyQwen2_5_VLProcessor, exist_ok=True)


def write_stock_processor_config(folder) -> None:
    """Make a folder written by `tiny_world.model` name the stock `Qwen2_5_VLProcessor`, with a video processor config.

    vLLM loads a model's processor with plain transformers in its own process, where
    `ImageOnlyQwen2_5_VLProcessor` is not registered; it also wants the video half that real Qwen2.5-VL
    checkpoints ship. This rewrites `processor_config.json` (and `tokenizer_config.json`'s `processor_class`)
    the way a hub checkpoint reads: the stock class, and a `Qwen2VLVideoProcessor` with the image
    processor's settings. Weights and tokenizer are untouched, and `judge.models.load_processor` still loads
    the folder where torchvision does not import (it falls back to the image-only processor).
    """
    import json
    from pathlib import Path

    folder = Path(folder)
    path = folder / "processor_config.json"
    config = json.loads(path.read_text())
    image = config.get("image_processor")
    if image is None:
        raise ValueError(f"{path} has no image_processor section: not a Qwen2.5-VL folder written by tiny_world.model")
    config["processor_class"] = "Qwen2_5_VLProcessor"
    video = {k: v for k, v in image.items() if k != "image_processor_type"}
    config.setdefault("video_processor", {**video, "video_processor_type": "Qwen2VLVideoProcessor"})
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    tokenizer_path = folder / "tokenizer_config.json"
    if tokenizer_path.exists():
        tokenizer_config = json.loads(tokenizer_path.read_text())
        if "processor_class" in tokenizer_config:
            tokenizer_config["processor_class"] = "Qwen2_5_VLProcessor"
            tokenizer_path.write_text(json.dumps(tokenizer_config, indent=2, sort_keys=True) + "\n")
