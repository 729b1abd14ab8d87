"""The config as one stage sees it: only the fields its hash covers.

A stage's hash (`tiny_world.demo.runner.stage_hash`) covers the config fields its `Stage` lists and, through
their hashes, those of every stage it builds on. Were a stage to read a field its hash does not cover, a
later run with another value of that field would reuse the stage's stale output. So the runner hands each
stage the config through `HashedConfig`, which answers only the covered fields: any other read fails at
once with `UnhashedRead`, naming the stage and the field, in the first run that takes that path (the quick
demo of `tests/tiny_world/test_demo.py` takes every stage's). The recipe's steps and properties read through
it too: `config.recipe()` is the same window, and `config.recipe().judge(...)` or `config.max_new_tokens`
run the recipe's code with this window as `self`.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from dataclasses import fields
from types import MethodType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tiny_world.demo.config import DemoConfig
    from tiny_world.demo.stages.context import Stage

__all__ = ["HashedConfig", "UnhashedRead", "hashed_fields"]


class UnhashedRead(RuntimeError):
    """A stage read a config field its hash does not cover. (Not an AttributeError: `getattr(config, name,
    default)` must not quietly answer the default.)"""


def hashed_fields(name: str, stages: Iterable[Stage]) -> frozenset[str]:
    """The config fields stage `name`'s hash covers: its own and, through their hashes, every field of the
    stages it builds on, and of theirs."""
    by_name = {stage.name: stage for stage in stages}

    def covered(stage: Stage) -> frozenset[str]:
        return frozenset(stage.fields).union(*(covered(by_name[earlier]) for earlier in stage.after))

    return covered(by_name[name])


class HashedConfig:
    """`config` as stage `stage` may read it: the fields in `covered`, the methods and properties of its class
    (run with this window as `self`, so their reads are checked too), and `recipe()`, which is this window."""

    def __init__(self, config: DemoConfig, stage: str, covered: Iterable[str]) -> None:
        self._config = config
        self._stage = stage
        self._covered = frozenset(covered)
        self._fields = frozenset(f.name for f in fields(config))

    def recipe(self) -> HashedConfig:
        """The judge recipe's steps, reading through this window (a `DemoConfig` is a `TinyJudgeRecipe`;
        `DemoConfig.recipe()` itself would copy every recipe field)."""
        return self

    def __getattr__(self, name: str) -> Any:
        # Only what normal lookup does not find lands here: the config's fields, methods and properties.
        if name.startswith("_"):  # private or special (`__deepcopy__`), or this window's own not yet set
            raise AttributeError(name)
        if name in self._fields:
            if name not in self._covered:
                raise UnhashedRead(
                    f"stage {self._stage!r} read config.{name}, which its hash does not cover: add {name!r} to the "
                    f"fields of its Stage (tiny_world/demo/stages/), or the stage would be reused after {name} changed"
                )
            return getattr(self._config, name)
        attribute = inspect.getattr_static(type(self._config), name)  # AttributeError for an unknown name
        if isinstance(attribute, property):
            return attribute.fget(self)
        if inspect.isfunction(attribute):
            return MethodType(attribute, self)
        return getattr(self._config, name)

    def __repr__(self) -> str:
        return f"HashedConfig({self._stage!r}, {sorted(self._covered)})"
