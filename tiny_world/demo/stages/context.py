"""What a stage is and what it gets: `Stage`, its declaration (the config fields it reads, the stages it
builds on, how it runs, its figures in one line), and `StageContext` (the config as the stage may read it,
the demo folder, its own folder and the earlier stages' records). `fmt` writes one figure of a line."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tiny_world.demo.config import DemoConfig
from tiny_world.demo.stages.hashed import HashedConfig

__all__ = ["Stage", "StageContext", "fmt"]


@dataclass
class StageContext:
    """What a stage gets: the config, the demo folder, its own folder, and the earlier stages' figures."""

    config: HashedConfig
    """The demo's config as this stage may read it: the fields its hash covers (`HashedConfig`)."""
    out: Path
    folder: Path
    done: dict[str, dict[str, Any]] = field(default_factory=dict)
    """stage name → its `stage.json` record (for the stages before this one)."""
    console: Any = None

    def path(self, stage: str, *parts: str) -> Path:
        return self.out.joinpath(stage, *parts)

    def figures(self, stage: str) -> dict[str, Any]:
        return self.done[stage]["figures"]

    def rel(self, path: Path) -> str:
        return os.path.relpath(path, self.out)

    def print(self, *args: Any, **kwargs: Any) -> None:
        if self.console is not None:
            self.console.print(*args, **kwargs)


@dataclass(frozen=True)
class Stage:
    """One step of the demo: what it reads from the config, which stages it builds on, how it runs."""

    name: str
    title: str
    fields: tuple[str, ...]
    """Config fields the stage reads (hashed into its `stage.json`). It can read no others, but for those of
    the stages it builds on, whose hashes are part of its own (`HashedConfig`)."""
    after: tuple[str, ...]
    """Earlier stages whose output it reads (their hashes are part of its hash)."""
    run: Callable[[StageContext], dict[str, Any]]
    line: Callable[[dict[str, Any]], str]
    """The key figures in one line, for the terminal and the summary table."""
    budget: Callable[[DemoConfig], str] = lambda config: ""
    """The budget in steps or items, printed before the stage runs."""


def fmt(value: float | None, digits: int = 3) -> str:
    """A figure in a line: `digits` decimals, or a dash where there is none."""
    return "–" if value is None else f"{value:.{digits}f}"
