"""Make Qwen2.5-VL processors load on machines without a working torchvision.

transformers' `Qwen2_5_VLProcessor` always builds a *video* processor, and the video processor imports
torchvision. CPU-only machines often have no usable torchvision (the PyPI wheels are CUDA-linked), and
then `AutoProcessor.from_pretrained` quietly returns a bare tokenizer. `ImageOnlyQwen2_5_VLProcessor` is the
same processor without the video half; importing this module registers it under its class name so that
folders written by `judge.tiny` (whose `processor_config.json` names it) load through `AutoProcessor`.
Folders that name the stock class keep loading the stock processor where torchvision works.
"""

from __future__ import annotations

import importlib.util

from transformers import AutoProcessor, Qwen2_5_VLConfig
from transformers.models.qwen2_5_vl.processing_qwen2_5_vl import Qwen2_5_VLProcessor
from transformers.processing_utils import ProcessorMixin

__all__ = ["ImageOnlyQwen2_5_VLProcessor", "torchvision_usable"]


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


# Registering makes the class findable by name, which is how folders written by `judge.tiny` refer to
# it. It also becomes AutoProcessor's fallback for Qwen2.5-VL folders that name no processor class at all
# (hub checkpoints always name one, so they keep the stock processor).
AutoProcessor.register(Qwen2_5_VLConfig, ImageOnlyQwen2_5_VLProcessor, exist_ok=True)
