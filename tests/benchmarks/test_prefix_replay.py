"""`benchmarks.prefix_replay`: the longest-prompt search (which `gpu_checks` runs too), the defaults of each kind
of run, the figures, and the whole run on tiny shapes."""

from __future__ import annotations

import json
import time

import pytest

from benchmarks.prefix_replay.__main__ import parse_args
from benchmarks.prefix_replay.figures import goals, search_figures
from benchmarks.prefix_replay.search import longest_prompt, predicted_step_s
from benchmarks.prefix_replay.settings import Settings
from benchmarks.workers import run_benchmark


class LinearStep:
    """A step whose peak memory is 100 + 2 MiB per token, under a cap; `fail_above` runs out of memory."""

    def __init__(self, cap: float, fail_above: int | None = None, step_s: float = 1e-4) -> None:
        self.cap, self.fail_above, self.step_s = cap, fail_above, step_s
        self.calls: list[int] = []

    def __call__(self, prompt: int) -> dict:
        self.calls.append(prompt)
        if self.fail_above and prompt > self.fail_above:
            return {"prompt": prompt, "ok": False, "oom": True, "fits": False}
        peak = 100 + 2 * prompt
        return {"prompt": prompt, "ok": True, "peak_mib": peak, "step_s": self.step_s, "fits": peak <= self.cap}


def test_the_search_doubles_to_the_cap_then_bisects_to_an_eighth_of_the_last_step():
    step = LinearStep(cap=1000.0)  # fits up to P = 450
    found = longest_prompt(step, 64, 4096)
    assert step.calls == [64, 128, 256, 512, 384, 448]  # 448..512 is within 512/8 of the answer: done
    assert found["max_measured"] == 448 and found["first_over_cap"] == 512 and found["limited_by"] == "cap"
    assert [p["prompt"] for p in found["probes"]] == step.calls


def test_the_search_halves_from_a_start_that_does_not_fit():
    step = LinearStep(cap=700.0)  # fits up to P = 300
    found = longest_prompt(step, 512, 4096)
    assert step.calls == [512, 256, 384, 320]
    assert (found["max_measured"], found["first_over_cap"]) == (256, 320)


def test_the_search_reports_zero_when_nothing_down_to_64_tokens_fits():
    found = longest_prompt(LinearStep(cap=150.0), 512, 4096)
    assert (found["max_measured"], found["first_over_cap"], found["limited_by"]) == (0, 64, "cap")


def test_the_search_stops_at_its_limit_with_no_length_over_the_cap():
    step = LinearStep(cap=1e9)
    found = longest_prompt(step, 64, 1000)
    assert step.calls == [64, 128, 256, 512, 1000]  # the last doubling clipped to the limit
    assert (found["max_measured"], found["first_over_cap"], found["limited_by"]) == (1000, None, "limit")


def test_the_search_counts_an_out_of_memory_step_as_over_the_cap():
    found = longest_prompt(LinearStep(cap=1e9, fail_above=300), 64, 4096)
    assert (found["max_measured"], found["first_over_cap"]) == (256, 320)


def test_the_search_starts_no_probe_that_would_pass_the_deadline():
    step = LinearStep(cap=1e9, step_s=10.0)
    seen: list[int] = []
    found = longest_prompt(step, 64, 1024, deadline=time.time() + 30, on_probe=lambda probes: seen.append(len(probes)))
    # The 128 step would take ~40 s (quadratic from 10 s at 64), 60 s with the margin: not started.
    assert step.calls == [64] and seen == [1]
    assert (found["max_measured"], found["first_over_cap"], found["limited_by"]) == (64, None, "time")


def test_step_time_is_predicted_from_a_linear_plus_quadratic_fit_through_the_two_longest():
    step = lambda p: {"prompt": p, "ok": True, "step_s": 1e-3 * p + 1e-7 * p * p}  # noqa: E731
    assert predicted_step_s([step(1000), step(2000)], 4000) == pytest.approx(5.6)
    assert predicted_step_s([step(2000), step(500), step(1000)], 4000) == pytest.approx(5.6)  # bisection's order
    assert predicted_step_s([step(1000)], 4000) == pytest.approx(1.1 * 16)  # one point: quadratic, an upper bound
    over = {"prompt": 8000, "ok": True, "peak_mib": 9e9, "over_cap": True}  # stopped at the cap: no time
    assert predicted_step_s([step(1000), over], 4000) == pytest.approx(1.1 * 16)


def test_each_kind_of_run_takes_its_own_defaults_and_a_flag_overrides_them():
    bare = Settings.from_args(parse_args([]))
    assert (bare.model_size, bare.prompt, bare.groups, bare.lengths, bare.grad_prompt) == ("small", 2048, [2, 8],
                                                                                          [2048], 1024)  # fmt: skip
    assert (bare.cap, bare.start, bare.limit, bare.chunked_limit, bare.chunk) == (128.0, 512, 4096, 64 * 4096, 512)
    assert bare.base["dtype"] == "float32" and bare.base["mmap_threshold"] == 65536 and not bare.checkpointing
    full = Settings.from_args(parse_args(["--full"]))
    assert (full.prompt, full.groups, full.lengths, full.grad_prompt) == (8192, [2, 4, 8, 16], [2048, 4096, 8192], 2048)
    assert (full.cap, full.limit, full.chunked_limit) == (512.0, 32768, 64 * 32768)
    cuda = Settings.from_args(parse_args(["--device", "cuda", "--prompt-length", "4096", "--mem-cap-mib", "80000"]))
    assert (cuda.model_size, cuda.prompt, cuda.lengths, cuda.grad_prompt) == ("1.5b", 4096, [1024, 2048, 4096], 2048)
    assert (cuda.cap, cuda.start, cuda.limit, cuda.chunked_limit, cuda.chunk) == (80000.0, 4096, 1 << 20, 1 << 22, 4096)
    assert cuda.checkpointing and cuda.base["dtype"] == "bfloat16" and cuda.base["mmap_threshold"] == 0


def test_the_chunked_ratio_against_plains_first_length_over_the_cap_is_the_goals_lower_bound():
    found = {"plain": {"max_measured": 256, "first_over_cap": 320}, "replay": {"max_measured": 3072,
             "first_over_cap": 3328}, "chunked": {"max_measured": 15360, "first_over_cap": None}}  # fmt: skip
    figures = search_figures(found, Settings.from_args(parse_args([])))
    assert figures["max_prompt_ratio_g8"] == 12.0 and figures["max_prompt_ratio_chunked_g8"] == 60.0
    assert figures["max_prompt_ratio_chunked_g8_low"] == 48.0 and figures["chunked_hit_search_limit"]
    record = {**figures, "step_time_ratio_chunked": 1.6, "grad_rel_l2_chunked": 3e-7, "grad_cosine_chunked": None}
    assert goals(record) == {"max_prompt_ratio_chunked_g8>=32": True, "grad_rel_l2_chunked<=1e-5": True,
                             "grad_cosine_chunked>=0.999999": False, "step_time_ratio_chunked<=1.5": False}  # fmt: skip


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_whole_run_on_tiny_shapes_prints_every_figure(tmp_path):
    flags = ["--prompt-length", "64", "--completion-length", "8", "--groups", "2", "--prompt-lengths", "64"]
    flags += ["--prompt-chunk", "16", "--grad-prompt-length", "32", "--search-start", "64", "--search-limit", "128"]
    flags += ["--chunked-search-limit", "256", "--mem-cap-mib", "4096", "--log", str(tmp_path / "runs.json")]
    line = run_benchmark("prefix_replay", *flags, timeout=580, stderr_tail=3000)
    assert line["benchmark"] == "prefix_replay" and line["failed"] == {"chunked": [], "replay": [], "plain": []}
    assert line["grad_rel_l2"] < 1e-4 and line["grad_rel_l2_chunked"] < 1e-4
    # Everything fits under 4 GiB: each search stops at its limit, chunked's from replay's longest.
    assert (line["max_prompt_plain_g8"], line["max_prompt_replay_g8"], line["max_prompt_chunked_g8"]) == (128, 128, 256)
    assert line["first_over_cap_g8"] == {"plain": None, "replay": None, "chunked": None}
    assert set(line["by_prompt_g8"]["chunked"]["64"]) == {"peak_mib", "step_s", "step_cpu_s"}
    runs = json.loads((tmp_path / "runs.json").read_text())["runs"]
    assert len(runs) == 3 + 3 + 2 + 2 + 2 and all(run["ok"] for run in runs)
