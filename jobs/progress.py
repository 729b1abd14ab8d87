"""The toolkit's one progress bar: label, bar, done/total, an optional note, time left.

Every long job draws the same rich bar (judging, evaluating, synthesis stages, the demo's world and training
steps), so the columns are chosen here once. `progress_bar` is the context-manager form for a loop;
`new_progress` gives the bare `rich.progress.Progress` for code that starts and stops it from callbacks
(a trainer callback). Bars go to stderr through rich's console, never into an output file.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

__all__ = ["Bar", "new_progress", "progress_bar"]


def new_progress(
    label: str = "{task.description}", *, enabled: bool = True, console: Any = None, note: bool = False
) -> Any:
    """A `rich.progress.Progress` with the toolkit's columns; `label` is the text left of the bar.

    Args:
        label: a fixed text, or `"{task.description}"` to show each task's (changing) description.
        enabled: False draws nothing (rich's `disable`).
        console: the rich console to draw on (default: rich's own, on the terminal).
        note: add a `{task.fields[note]}` column (e.g. tokens/s, failures) before the time left.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    columns: list[Any] = [TextColumn(label), BarColumn(), MofNCompleteColumn()]
    if note:
        columns.append(TextColumn("{task.fields[note]}"))
    columns.append(TimeRemainingColumn())
    return Progress(*columns, console=console, disable=not enabled)


class Bar(NamedTuple):
    """A running bar as two callables; unpacks as `(set_total, advance)`."""

    set_total: Callable[[int | None], None]
    """Set (or change) how many units the job has."""
    advance: Callable[..., None]
    """`advance(n, note=None)`: n more units done; `note` replaces the note column's text when given."""


@contextmanager
def progress_bar(
    label: str, *, total: int | None = None, completed: int = 0, enabled: bool = True, console: Any = None
) -> Iterator[Bar]:
    """A bar for one loop, open while the block runs; a bar that draws nothing when not `enabled`.

    >>> with progress_bar("rows", total=3, enabled=False) as bar:
    ...     bar.advance(2, note="2 left")
    ...     bar.set_total(4)
    """
    with new_progress(label, enabled=enabled, console=console, note=True) as progress:
        task = progress.add_task(label, total=total, completed=completed, note="")

        def set_total(n: int | None) -> None:
            progress.update(task, total=n)

        def advance(n: int = 1, note: str | None = None) -> None:
            if note is None:
                progress.advance(task, n)
            else:
                progress.update(task, advance=n, note=note)

        yield Bar(set_total, advance)
