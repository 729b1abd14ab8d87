"""Does the judge's vision tower still see? Its image features' response to one changed shape."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["vision_sensitivity"]


def vision_sensitivity(model_dir: str | Path, *, image_size: int = 84, shaded: bool = False) -> dict[str, float]:
    """How much the judge's image features move when one shape changes colour, kind or size.

    A one-shape picture and three variants of it; each figure is the relative change of the image token
    that covers the shape (`|f' - f| / |f|`). A randomly built judge moves by 0.5–0.85; a vision tower
    whose features have collapsed to a constant (they stop depending on the picture) moves by ~0, and
    its judge can then only decide flaws that the text alone gives away. `shaded`: pictures drawn as a
    shaded world draws them (`Scene.shaded`).
    """
    import torch
    from transformers import AutoModelForImageTextToText

    import judge.backends.hf_compat  # noqa: F401  (the image-only processor where torchvision does not import)
    from data_synthesis.world import Scene, Shape, render
    from judge.models import load_processor
    from tiny_world.vision_warmup import image_token_features

    processor = load_processor(str(model_dir), is_vlm=True)
    model = AutoModelForImageTextToText.from_pretrained(str(model_dir)).eval()
    centre = image_size // 6  # the top-left cell of the 3x3 grid

    def features(kind: str, colour: str, size: str) -> Any:
        picture = render(Scene(image_size, image_size, [Shape(kind, colour, size, centre, centre)], shaded=shaded))
        with torch.no_grad():
            return image_token_features(model, processor, [picture])[0][0]

    base = features("circle", "red", "large")
    variants = {
        "colour": ("circle", "blue", "large"),
        "kind": ("square", "red", "large"),
        "size": ("circle", "red", "small"),
    }
    return {name: round(float((features(*v) - base).norm() / base.norm()), 4) for name, v in variants.items()}
