"""A stand-in photo and Qwen2.5-VL's visual-token arithmetic, for the image-size tests (tests/judge, tests/vllm)."""

from __future__ import annotations

import numpy as np
from PIL import Image

from judge.images import fitted_size

CAP = 200_704  # 256·28·28: a 1600x1200 photo becomes 504x364, 234 visual tokens
PHOTO = (1600, 1200)


def visual_tokens(width: int, height: int, **bounds: int) -> int:
    """Tokens Qwen2.5-VL spends on an image: one per 28x28 block of its resized size."""
    w, h = fitted_size(width, height, **bounds)
    return (w // 28) * (h // 28)


def photo(size=PHOTO, seed: int = 0) -> Image.Image:
    """A seeded stand-in photo: smooth gradients plus noise, so it neither compresses away nor repeats."""
    rng = np.random.default_rng(seed)
    w, h = size
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([x * 255 / w, y * 255 / h, (x + y) * 127 / (w + h)], axis=-1)
    noise = rng.normal(0, 24, size=(h, w, 3))
    return Image.fromarray(np.clip(base + noise, 0, 255).astype(np.uint8), "RGB")
