"""The vision tower's own learning rate (`vision_learning_rate`): its parameters in their own optimizer groups.

`with_vision_learning_rate` mixes `VisionLearningRateMixin` into a TRL trainer class only when a config sets the
rate, so a run without it trains with the trainer as TRL ships it.
"""

from __future__ import annotations

import functools
from typing import Any

__all__ = ["VisionLearningRateMixin", "with_vision_learning_rate"]


def _is_vision(name: str) -> bool:
    return "visual." in name or name.startswith("visual")


class VisionLearningRateMixin:
    """Put the vision tower's parameters in their own optimizer groups at `args.vision_learning_rate`.

    Mixed in before a `transformers.Trainer` subclass. The scheduler is built on top of these groups, so it
    scales both rates alike (warm-up, decay).
    """

    def create_optimizer(self, model: Any = None) -> Any:
        optimizer = super().create_optimizer(model)  # type: ignore[misc]
        vision_lr = getattr(self.args, "vision_learning_rate", None)  # type: ignore[attr-defined]
        if vision_lr is None or vision_lr == self.args.learning_rate:  # type: ignore[attr-defined]
            return optimizer
        names = {id(p): n for n, p in (model or self.model).named_parameters()}  # type: ignore[attr-defined]
        groups = []
        for group in optimizer.param_groups:
            settings = {k: v for k, v in group.items() if k != "params"}
            vision = [p for p in group["params"] if _is_vision(names.get(id(p), ""))]
            language = [p for p in group["params"] if not _is_vision(names.get(id(p), ""))]
            groups += [{**settings, "params": language}] if language else []
            groups += [{**settings, "params": vision, "lr": vision_lr}] if vision else []
        optimizer.param_groups.clear()
        for group in groups:
            optimizer.add_param_group(group)
        return optimizer


def with_vision_learning_rate(trainer_class: type, args: Any) -> type:
    """`trainer_class` (a TRL trainer), with `VisionLearningRateMixin` mixed in when `args` sets a
    `vision_learning_rate` (under the same name); unchanged otherwise."""
    if getattr(args, "vision_learning_rate", None) is None:
        return trainer_class
    return _with_mixin(trainer_class)


@functools.cache
def _with_mixin(trainer_class: type) -> type:
    return type(trainer_class.__name__, (VisionLearningRateMixin, trainer_class), {})
