"""The report charts, with matplotlib set up in one place: headless (Agg), saved as 120-dpi PNG, closed.

Eval reports, the demo and the benchmarks draw through these; `saved_figure` is the one setup for any
other chart.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = [
    "audit_curve",
    "bar_chart",
    "curves_by_run",
    "overoptimisation_curve",
    "reward_curve",
    "saved_figure",
    "training_curves",
]


@contextmanager
def saved_figure(
    path: str | Path, *, figsize: tuple[float, float], ncols: int | None = None
) -> Iterator[tuple[Any, Any]]:
    """`(fig, axes)` to draw on; on exit the figure is laid out, saved to `path` (folders made) and closed.
    `axes` is one Axes, or a list of `ncols` side by side when `ncols` is given."""
    import matplotlib

    matplotlib.use("Agg")  # no display: reports are written on servers and in CI
    import matplotlib.pyplot as plt

    if ncols is None:
        fig, axes = plt.subplots(figsize=figsize)
    else:
        fig, grid = plt.subplots(1, ncols, figsize=figsize, squeeze=False)
        axes = list(grid[0])
    try:
        yield fig, axes
        fig.tight_layout()
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=120)
    finally:
        plt.close(fig)


def _fitted(title: str, *, width_in: float) -> str:
    """The title wrapped to the figure's width (about 11 characters an inch at the title's size), so it is
    never cut off at the edges."""
    import textwrap

    return textwrap.fill(title, width=max(30, int(11 * width_in)))


def bar_chart(
    path: str | Path,
    series: dict[str, dict[str, float | None]],
    *,
    title: str,
    ylabel: str = "accuracy (%)",
    ylim: tuple[float, float] | None = (0, 100),
) -> Path:
    """Grouped bars: one group per category, one bar per series (e.g. this run and reference judges)."""
    categories = list(dict.fromkeys(c for values in series.values() for c in values))
    width = 0.8 / max(len(series), 1)
    with saved_figure(path, figsize=(max(5, 1.3 * len(categories) + 2), 3.8)) as (_, ax):
        for i, (name, values) in enumerate(series.items()):
            xs = [j + (i - (len(series) - 1) / 2) * width for j in range(len(categories))]
            heights = [values.get(c) for c in categories]
            bars = ax.bar(xs, [h if h is not None else 0 for h in heights], width, label=name)
            for bar, h in zip(bars, heights):
                if h is not None:
                    centre = bar.get_x() + bar.get_width() / 2
                    if h == 0:  # a zero bar has no height: mark it, so it reads as 0 and not as missing
                        ax.plot([bar.get_x(), bar.get_x() + bar.get_width()], [0, 0], lw=3, c=bar.get_facecolor())
                    ax.annotate(f"{h:.1f}", (centre, h), ha="center", va="bottom", fontsize=7)
        ax.set_xticks(range(len(categories)), categories, rotation=20, ha="right")
        ax.set_ylabel(ylabel)
        ax.set_title(_fitted(title, width_in=max(5, 1.3 * len(categories) + 2)), fontsize=10)
        if ylim:
            ax.set_ylim(*ylim)
        if len(series) > 1:
            ax.legend(fontsize=8)
    return Path(path)


def training_curves(
    path: str | Path,
    *,
    sft: Sequence[Mapping[str, Any]] | None = None,
    grpo: Sequence[Mapping[str, Any]] | None = None,
) -> Path:
    """SFT loss (log scale) and/or GRPO mean reward per step, side by side, from logged rows
    (`tiny_world.recipe.History.logs`: `{"step", "loss" | "reward", ...}`)."""
    panels = [name for name, logs in (("sft", sft), ("grpo", grpo)) if logs is not None]
    with saved_figure(path, figsize=(5.5 * len(panels), 4), ncols=len(panels)) as (_, axes):
        for ax, name in zip(axes, panels):
            if name == "sft":
                points = [(r["step"], r["loss"]) for r in sft or () if "loss" in r]
                ax.set_xlabel("SFT step"), ax.set_ylabel("loss"), ax.set_yscale("log")
                if points:  # markers: a run of one logged step is still a point
                    ax.plot(*zip(*points), marker=".", label="SFT loss"), ax.legend()
            else:
                points = [(r["step"], r["reward"]) for r in grpo or () if "reward" in r]
                ax.set_xlabel("GRPO step"), ax.set_ylabel("reward"), ax.set_ylim(-0.03, 1.03)  # 0 and 1 stay visible
                if points:
                    ax.plot(*zip(*points), marker=".", label="GRPO mean reward"), ax.legend()
    return Path(path)


def reward_curve(
    path: str | Path,
    logs: Sequence[Mapping[str, Any]],
    *,
    before: float,
    after: float,
    xlabel: str = "policy GRPO step",
    window: int = 0,
    ylim: tuple[float, float] = (0, 1),
    legend_loc: str = "upper left",
) -> Path:
    """Mean judge reward per policy-GRPO step (and its moving average over `window` steps, when > 1), with
    the held-out reward before and after training as horizontal lines."""
    points = [(r["step"], r["reward"]) for r in logs if "reward" in r]
    with saved_figure(path, figsize=(7, 4)) as (_, ax):
        if points:
            steps, rewards = zip(*points)
            ax.plot(steps, rewards, marker=None if window > 1 else ".", alpha=0.35 if window > 1 else 1.0,
                    label="mean judge reward per step (training batch)")  # fmt: skip
            if window > 1:
                smooth = [
                    sum(rewards[max(0, i - window + 1) : i + 1]) / len(rewards[max(0, i - window + 1) : i + 1])
                    for i in range(len(rewards))
                ]
                ax.plot(steps, smooth, label=f"moving average ({window} steps)")
        ax.axhline(before, ls=":", c="grey", label=f"held-out before: {before:.3f}")
        ax.axhline(after, ls="--", c="black", label=f"held-out after: {after:.3f}")
        ax.set_xlabel(xlabel), ax.set_ylabel("judge reward (pairwise vs reference)"), ax.set_ylim(*ylim)
        ax.legend(loc=legend_loc, fontsize=8)
    return Path(path)


def overoptimisation_curve(
    path: str | Path,
    windows: Sequence[Mapping[str, Any]],
    *,
    alarm_step: int | None = None,
    kept_step: int | None = None,
    title: str = "",
) -> Path:
    """The judge's reward and the audited gold per audit window, against the step and (where the trainer
    logged it) against the KL to the start policy, as Gao et al. (2022) draw over-optimisation; the guard's
    alarm and the checkpoint `keep-best` kept as vertical lines. `windows` are `audit_windows.jsonl` rows
    (`judge.reward.audit`)."""
    rows = [w for w in windows if w.get("judge_mean") is not None and w.get("gold_mean") is not None]
    with_kl = [w for w in rows if w.get("kl") is not None]
    with saved_figure(path, figsize=(11 if with_kl else 6.5, 4), ncols=2 if with_kl else 1) as (fig, axes):
        panels = [(axes[0], "last_step", "training step")]
        if with_kl:
            panels.append((axes[1], "kl", "KL to the start policy"))
        for ax, key, label in panels:
            shown = rows if key == "last_step" else sorted(with_kl, key=lambda w: w["kl"])  # KL need not grow
            xs = [w[key] for w in shown]
            ax.plot(xs, [w["judge_mean"] for w in shown], marker=".", label="judge reward (proxy)")
            ax.plot(xs, [w["gold_mean"] for w in shown], marker=".", label="audited gold")
            if key == "last_step" and alarm_step is not None:
                ax.axvline(alarm_step, ls="--", c="red", label=f"alarm (step {alarm_step})")
            if key == "last_step" and kept_step is not None:
                ax.axvline(kept_step, ls=":", c="green", label=f"kept checkpoint (step {kept_step})")
            ax.set_xlabel(label), ax.set_ylabel("mean over the window's audited samples"), ax.set_ylim(-0.03, 1.03)
            ax.legend(fontsize=8)
        if title:
            fig.suptitle(_fitted(title, width_in=11 if with_kl else 6.5), fontsize=10)
    return Path(path)


def audit_curve(path: str | Path, summary: Mapping[str, Any], *, title: str = "") -> Path:
    """`overoptimisation_curve` of a reward audit's summary (`audit_summary.json`'s shape): its windows, its alarm
    when it fired, and the checkpoint `keep-best` kept, if any."""
    alarm, kept = summary["alarm"], summary.get("kept")
    return overoptimisation_curve(
        path,
        summary["windows"],
        alarm_step=alarm.get("step") if alarm["fired"] else None,
        kept_step=kept["step"] if kept else None,
        title=title,
    )


def curves_by_run(
    path: str | Path,
    runs: Mapping[str, Sequence[Mapping[str, Any]]],
    *,
    key: str = "reward",
    title: str,
    xlabel: str = "GRPO step",
    ylabel: str = "mean reward (training batch)",
) -> Path:
    """One line per run of a logged figure (`key`) against the step, with markers, so a run of one step
    still shows (each run's rewards are on its own scale: an oracle's 0/1, a judge's pairwise share)."""
    with saved_figure(path, figsize=(7, 4)) as (_, ax):
        for name, logs in runs.items():
            points = [(r["step"], r[key]) for r in logs if isinstance(r.get(key), (int, float)) and r[key] == r[key]]
            if points:
                ax.plot(*zip(*points), marker=".", label=name)
            else:  # every step unscored (NaN) or none logged: say so rather than leave the run out silently
                ax.plot([], [], marker=".", label=f"{name}: no step scored")
        ax.set_xlabel(xlabel), ax.set_ylabel(ylabel), ax.set_title(_fitted(title, width_in=7), fontsize=10)
        if runs:
            ax.legend(fontsize=8)
    return Path(path)
