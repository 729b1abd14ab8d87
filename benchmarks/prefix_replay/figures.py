"""The JSON line's figures from the workers' results: memory growth with G, step time, longest prompts, goals.

Each function returns its keys in the order the line prints them; the package's docstring says what each means.
"""

from __future__ import annotations

from typing import Any

from benchmarks.prefix_replay.settings import Settings
from benchmarks.prefix_replay.step import METHODS

Runs = dict[str, dict[str, dict[str, Any]]]
"""Worker results by method, then by G (the G sweep) or by prompt length (the G = 8 sweep), as strings."""


def growth(sweep: Runs, method: str, groups: list[int]) -> float | None:
    """Peak at the largest G over the peak at the smallest; None unless both ran."""
    lo, hi = sweep[method].get(str(min(groups))), sweep[method].get(str(max(groups)))
    if not (lo and hi and lo.get("ok") and hi.get("ok")) or lo["peak_mib"] <= 0:
        return None
    return round(hi["peak_mib"] / lo["peak_mib"], 3)


def group_figures(sweep: Runs, groups: list[int]) -> dict[str, Any]:
    """Peak memory and step time by method and G, the sizes that failed (OOM, timeout), and `mem_growth_*`."""
    return {
        "peak_mib": {m: {g: r.get("peak_mib") for g, r in sweep[m].items()} for m in sweep},
        "failed": {m: [int(g) for g, r in sweep[m].items() if not r.get("ok")] for m in sweep},  # OOM, timeout
        "step_s": {m: {g: r.get("step_s") for g, r in sweep[m].items()} for m in sweep},
        "mem_growth_replay": growth(sweep, "replay", groups),
        "mem_growth_plain": growth(sweep, "plain", groups),
        "mem_growth_chunked": growth(sweep, "chunked", groups),
    }


def time_figures(by_prompt: Runs, sweep: Runs, run: Settings) -> dict[str, Any]:
    """`by_prompt_g8`, and chunked replay's step time over replay's at the longest prompt both ran."""
    both = [n for n in run.lengths if by_prompt["replay"][str(n)].get("ok") and by_prompt["chunked"][str(n)].get("ok")]
    clock = "step_s" if run.cuda else "step_cpu_s"  # CPU: the process's CPU time, robust to other load on the cores

    def best_time(method: str, length: int) -> float:
        """The fastest G = 8 step at this length (the G sweep ran it too when P matches): shared CPUs are noisy."""
        runs = [by_prompt[method][str(length)]]
        if length == run.prompt and sweep[method].get("8", {}).get("ok"):
            runs.append(sweep[method]["8"])
        return min(r[clock] for r in runs)

    return {
        "by_prompt_g8": {
            m: {
                n: {k: r.get(k) for k in ("peak_mib", "step_s", "step_cpu_s") if k in r}
                for n, r in by_prompt[m].items()
            }
            for m in METHODS
        },
        "step_time_ratio_chunked": round(best_time("chunked", both[-1]) / best_time("replay", both[-1]), 3)
        if both
        else None,
        "step_time_ratio_at": both[-1] if both else None,
        "step_time_clock": clock,
    }


def search_figures(found: dict[str, dict[str, Any]], run: Settings) -> dict[str, Any]:
    """The longest prompt each method fits under the cap at G = 8 (`longest_prompt`'s answers), and the ratios."""
    fit = {m: f["max_measured"] for m, f in found.items()}
    over = {m: f["first_over_cap"] for m, f in found.items()}
    return {
        "mem_cap_mib": run.cap,
        "max_prompt_plain_g8": fit["plain"],
        "max_prompt_replay_g8": fit["replay"],
        "max_prompt_ratio_g8": round(fit["replay"] / fit["plain"], 2) if fit["plain"] else None,
        "max_prompt_chunked_g8": fit["chunked"],
        "max_prompt_ratio_chunked_g8": round(fit["chunked"] / fit["plain"], 2) if fit["plain"] else None,
        # Plain's true longest prompt lies in [fit, over): the ratio against `over` is a lower bound on the true one.
        "max_prompt_ratio_chunked_g8_low": round(fit["chunked"] / over["plain"], 2) if over["plain"] else None,
        "first_over_cap_g8": over,
        "search_limit": run.limit,
        "chunked_search_limit": run.chunked_limit,
        "chunked_hit_search_limit": over["chunked"] is None,
    }


def goals(record: dict[str, Any]) -> dict[str, bool]:
    """The issue's targets, read off the line's own figures."""
    time_ratio, ratio_low = record["step_time_ratio_chunked"], record["max_prompt_ratio_chunked_g8_low"]
    return {
        "max_prompt_ratio_chunked_g8>=32": ratio_low is not None and ratio_low >= 32,
        "grad_rel_l2_chunked<=1e-5": (record["grad_rel_l2_chunked"] or 1.0) <= 1e-5,
        "grad_cosine_chunked>=0.999999": (record["grad_cosine_chunked"] or 0.0) >= 0.999999,
        "step_time_ratio_chunked<=1.5": time_ratio is not None and time_ratio <= 1.5,
    }
