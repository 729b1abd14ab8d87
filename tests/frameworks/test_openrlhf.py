"""OpenRLHF 0.11.2 as released, with mr-judge as its remote reward on both routes (`--reward.remote_url
http://…/get_reward` and `--reward.remote_url judge/integrations/openrlhf.py`), through its own parser, prompt
dataset, `SingleTurnAgentExecutor`, experience conversion and advantage computation
(`tests/frameworks/openrlhf_driver.py`, in a subprocess; what it stands in for is in its docstring).

The policy is the tiny Qwen2.5-VL (its processor expands the image placeholder in the query, as a real VLM
policy's does); the judge behind the server is the rule judge with option log-probs (`ScoredRuleBackend`),
so a listwise reward is the softmax of the `score=N` each response carries over its prompt's group.
"""

from __future__ import annotations

import json
import re
import statistics

import pytest

from tests.frameworks.conftest import REPO, VERSIONS, run_driver
from tests.support import framework_rollouts as rollouts
from tests.support.reward_server import running
from tiny_world.rule_judge import ScoredRuleBackend

# One subprocess that imports OpenRLHF and runs four rollouts: ~15 s on 2 cores, 5 s of it OpenRLHF's own
# retry loop against a dead server (not `slow`: under ~30 s).

PY_FILE = REPO / "judge" / "integrations" / "openrlhf.py"
SLACK_S = 3.0
"""Scheduling on 2 shared cores, beyond what the retry settings add up to; far below the next bound (180 s)."""


def _prompts(path, allowed, label_image: dict[str, str]) -> str:
    """The prompt dataset docs/rewards.md shows: the policy's image, and the judge's label with its own."""
    rows = [
        {
            "input": [{"role": "user", "content": f"<image>{question}"}],
            "images": [str(allowed / image)],
            "judge_label": json.dumps({"images": [label_image[question]], "reference": None}),
        }
        for question, image in rollouts.IMAGES.items()
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.fixture(scope="module")
def openrlhf_runs(frameworks_site, tiny_vlm_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("openrlhf")
    allowed = rollouts.write_images(root / "images")
    good = _prompts(root / "prompts.jsonl", allowed, rollouts.IMAGES)
    typo = _prompts(root / "typo.jsonl", allowed, {q: f"nowhere/{i}" for q, i in rollouts.IMAGES.items()})
    flags = [
        *(
            "--rollout.n_samples_per_prompt",
            str(rollouts.N),
            "--data.label_key",
            "judge_label",
        ),  # what mrjudge serve prints
        *("--data.input_key", "input", "--data.image_key", "images", "--data.apply_chat_template"),
        *("--algo.advantage.estimator", "group_norm", "--actor.model_name_or_path", str(tiny_vlm_dir)),
    ]
    # OpenRLHF sends one sample per request: the server holds a prompt's N samples and judges them together.
    with running(ScoredRuleBackend(), allow_local_images=str(allowed), group_size=rollouts.N, group_wait_s=30) as (
        url,
        backend,
    ):
        spec = {
            "model": str(tiny_vlm_dir),
            "responses": rollouts.RESPONSES,
            "flags": flags,
            "runs": [
                {"name": "http", "remote_url": f"{url}/get_reward", "data": good},
                {"name": "py", "remote_url": str(PY_FILE), "data": good},
                {"name": "py_missing_image", "remote_url": str(PY_FILE), "data": typo},
                {
                    "name": "http_dead",
                    "remote_url": f"http://127.0.0.1:{rollouts.dead_port()}/get_reward",
                    "data": good,
                },
            ],
        }
        out, _ = run_driver(frameworks_site, "openrlhf_driver.py", spec, root, env={"MRJUDGE_REWARD_URL": url})
        yield out, backend


@pytest.mark.parametrize("route", ["http", "py"])
def test_both_routes_give_listwise_rewards_through_openrlhfs_own_code(openrlhf_runs, route):
    out, _ = openrlhf_runs
    assert out["versions"]["openrlhf"] == VERSIONS["openrlhf"]
    run = out["runs"][route]
    assert "error" not in run and "advantages_error" not in run, run
    assert run["args"]["n_samples_per_prompt"] == rollouts.N and run["args"]["label_key"] == "judge_label"
    assert run["images_to_policy"] == [1] * (2 * rollouts.N)  # the policy's own image went through its processor
    by_prompt: dict[str, list[dict]] = {}
    for row in run["rows"]:
        # Experience.rewards = torch.tensor([reward]): the HTTP route's list [r] becomes [[r]], the file's tensor
        # [r] stays [r]; the experience maker flattens both (torch.cat, then a reshape to (-1, N)).
        assert row["reward_shape"] == ([1, 1] if route == "http" else [1])
        assert row["extra_logs"] == {"judge_scored": 1.0, "judge_group_size": rollouts.N}
        assert {"reward", "score", "judge_scored", "judge_group_size"} <= set(row["info"])  # logged per sample
        by_prompt.setdefault(row["prompt_question"], []).append(row)
    assert sorted(len(rows) for rows in by_prompt.values()) == [rollouts.N, rollouts.N]
    for question, rows in by_prompt.items():
        assert sorted(r["response"] for r in rows) == sorted(rollouts.RESPONSES[question])
        rewards = [r["reward"][0] for r in rows]
        expected = rollouts.listwise_rewards([r["response"] for r in rows])
        assert rewards == pytest.approx(expected, abs=1e-6)  # one listwise verdict over the group
        # group_norm: (r - mean) / (std + 1e-9) within the prompt, on every action token (gamma 1, no KL).
        mean, std = statistics.fmean(rewards), statistics.stdev(rewards)
        for row, reward in zip(rows, rewards):
            assert row["advantages"] == pytest.approx([(reward - mean) / (std + 1e-9)], abs=1e-4)
    if route == "py":
        assert all(row["reward_type"] == "Tensor" for row in run["rows"])  # the file returns tensors


def test_the_judge_saw_each_prompts_group_and_its_label_image(openrlhf_runs):
    _, backend = openrlhf_runs
    groups = [c for c in backend.shown if len(c["candidates"]) == rollouts.N]
    assert len(groups) == 2 * 2 * 2  # two routes, two prompts, two display orders each
    for call in groups:
        assert call["image_colours"] == [rollouts.image_colour(call["candidates"])]


def test_a_missing_image_is_raised_loudly_and_the_step_cannot_go_on(openrlhf_runs):
    """The .py route raises the server's refusal; OpenRLHF 0.11.2 catches it (logging at INFO) and leaves the
    sample without a reward, so computing the advantages fails: nothing is trained on a made-up reward."""
    run = openrlhf_runs[0]["runs"]["py_missing_image"]
    assert all(row["reward"] is None for row in run["rows"])
    assert "advantages_error" in run
    errors = [line for line in run["mrjudge_logs"] if line.startswith("mrjudge.openrlhf ERROR")]
    assert len(errors) == 2 * rollouts.N
    assert all("HTTP 422" in e and "labels[0].images[0]" in e and "nowhere/" in e for e in errors)


def _http_route_settings(site) -> dict[str, float]:
    """OpenRLHF 0.11.2's own HTTP reward client, read from its source (`SingleTurnAgentExecutor.
    _fetch_rewards_via_http`): its tries, the sleep after each failed one, and the timeout of each try."""
    source = (site / "openrlhf" / "utils" / "agent.py").read_text()
    client = source[source.index("async def _fetch_rewards_via_http") :]
    tries = re.search(r"def _post_request\(url, data, try_max_times=(\d+)\)", client)
    sleep = re.search(r"await asyncio\.sleep\(([\d.]+)\)", client)
    timeout = re.search(r"aiohttp\.ClientTimeout\(total=(\d+)\)", client)
    assert tries and sleep and timeout, "OpenRLHF's HTTP reward client changed: read it again"
    return {"tries": int(tries.group(1)), "sleep_s": float(sleep.group(1)), "timeout_s": float(timeout.group(1))}


def test_a_killed_server_ends_openrlhfs_http_route_in_bounded_time_without_rewards(openrlhf_runs, frameworks_site):
    """The reward server killed (its port refuses connections) under OpenRLHF 0.11.2's own HTTP route: each
    sample's request tries 5 times, sleeping 1 s after each (read from its source), then raises; the executor
    logs that at INFO and leaves the sample without a reward, and computing the advantages fails. Nothing of
    ours runs on this route. A server that accepts and never answers is not run: each try then waits out
    `aiohttp.ClientTimeout(total=180)`, a constant in that function that no flag sets (5 x 180 + 5 s)."""
    settings = _http_route_settings(frameworks_site)
    assert settings == {"tries": 5, "sleep_s": 1.0, "timeout_s": 180.0}  # what docs/rewards.md states
    # Refused connections fail at once, so only the sleeps count; the sleep closes the loop body, after the
    # last try too (5 s, not 4: the lower bound checks it).
    least = settings["tries"] * settings["sleep_s"]
    run = openrlhf_runs[0]["runs"]["http_dead"]
    assert "error" not in run, run
    assert len(run["reward_calls"]) == 2 * rollouts.N  # one per sample, concurrently
    for call in run["reward_calls"]:
        assert call["end"] == "RuntimeError: Request error for 5 times, returning None. Please check the API server."
        assert least <= call["s"] <= least + SLACK_S, call
    assert least <= run["first_reward_call_to_end_s"] <= least + SLACK_S
    assert all(row["reward"] is None for row in run["rows"])
    assert run["advantages_error"].startswith("AttributeError: 'NoneType' object")  # the step cannot go on
    tried = [line for line in run["openrlhf_logs"] if "Request error, please check: Cannot connect" in line]
    assert len(tried) == settings["tries"] * 2 * rollouts.N  # each try refused, logged at INFO
    failed = [line for line in run["openrlhf_logs"] if "Failed to fetch reward from remote RM" in line]
    assert len(failed) == 2 * rollouts.N and all(line.startswith("openrlhf.utils.agent INFO ") for line in failed)
