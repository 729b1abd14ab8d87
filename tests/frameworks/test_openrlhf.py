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
import math
import re
import statistics

import pytest
from PIL import Image

from tests.frameworks.conftest import REPO, VERSIONS, run_driver
from tests.support.reward_server import running
from tests.support.scripted_judge import ScoredRuleBackend

# One subprocess that imports OpenRLHF and runs three rollouts: ~10 s on 2 cores (not `slow`: under ~30 s).

N = 4
RED, BLUE = (220, 20, 20), (20, 20, 220)
IMAGES = {"What colour is the picture?": "red.png", "Is the shape round?": "blue.png"}
RESPONSES = {
    "What colour is the picture?": ["It is red. score=9", "It is blue. score=2", "Green. score=5", "Red! score=7"],
    "Is the shape round?": ["Yes. score=3", "No. score=8", "Maybe. score=1", "Round. score=4"],
}
PY_FILE = REPO / "judge" / "integrations" / "openrlhf.py"


def _prompts(path, allowed, label_image: dict[str, str]) -> str:
    """The prompt dataset docs/rewards.md shows: the policy's image, and the judge's label with its own."""
    rows = [
        {
            "input": [{"role": "user", "content": f"<image>{question}"}],
            "images": [str(allowed / image)],
            "judge_label": json.dumps({"images": [label_image[question]], "reference": None}),
        }
        for question, image in IMAGES.items()
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.fixture(scope="module")
def openrlhf_runs(frameworks_site, tiny_vlm_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("openrlhf")
    allowed = root / "images"
    allowed.mkdir()
    Image.new("RGB", (28, 28), RED).save(allowed / "red.png")
    Image.new("RGB", (28, 28), BLUE).save(allowed / "blue.png")
    good = _prompts(root / "prompts.jsonl", allowed, IMAGES)
    typo = _prompts(root / "typo.jsonl", allowed, {q: f"nowhere/{i}" for q, i in IMAGES.items()})
    flags = [
        *("--rollout.n_samples_per_prompt", str(N), "--data.label_key", "judge_label"),  # what mrjudge serve prints
        *("--data.input_key", "input", "--data.image_key", "images", "--data.apply_chat_template"),
        *("--algo.advantage.estimator", "group_norm", "--actor.model_name_or_path", str(tiny_vlm_dir)),
    ]
    # OpenRLHF sends one sample per request: the server holds a prompt's N samples and judges them together.
    with running(ScoredRuleBackend(), allow_local_images=str(allowed), group_size=N, group_wait_s=30) as (url, backend):
        spec = {
            "model": str(tiny_vlm_dir),
            "responses": RESPONSES,
            "flags": flags,
            "runs": [
                {"name": "http", "remote_url": f"{url}/get_reward", "data": good},
                {"name": "py", "remote_url": str(PY_FILE), "data": good},
                {"name": "py_missing_image", "remote_url": str(PY_FILE), "data": typo},
            ],
        }
        out, _ = run_driver(frameworks_site, "openrlhf_driver.py", spec, root, env={"MRJUDGE_REWARD_URL": url})
        yield out, backend


def _softmax(scores: list[int]) -> list[float]:
    top = max(scores)
    weights = [math.exp(s - top) for s in scores]
    return [w / sum(weights) for w in weights]


@pytest.mark.parametrize("route", ["http", "py"])
def test_both_routes_give_listwise_rewards_through_openrlhfs_own_code(openrlhf_runs, route):
    out, _ = openrlhf_runs
    assert out["versions"]["openrlhf"] == VERSIONS["openrlhf"]
    run = out["runs"][route]
    assert "error" not in run and "advantages_error" not in run, run
    assert run["args"]["n_samples_per_prompt"] == N and run["args"]["label_key"] == "judge_label"
    assert run["images_to_policy"] == [1] * (2 * N)  # the policy's own image went through its processor
    by_prompt: dict[str, list[dict]] = {}
    for row in run["rows"]:
        # Experience.rewards = torch.tensor([reward]): the HTTP route's list [r] becomes [[r]], the file's tensor
        # [r] stays [r]; the experience maker flattens both (torch.cat, then a reshape to (-1, N)).
        assert row["reward_shape"] == ([1, 1] if route == "http" else [1])
        assert row["extra_logs"] == {"judge_scored": 1.0, "judge_group_size": N}
        assert {"reward", "score", "judge_scored", "judge_group_size"} <= set(row["info"])  # logged per sample
        by_prompt.setdefault(row["prompt_question"], []).append(row)
    assert sorted(len(rows) for rows in by_prompt.values()) == [N, N]
    for question, rows in by_prompt.items():
        assert sorted(r["response"] for r in rows) == sorted(RESPONSES[question])
        rewards = [r["reward"][0] for r in rows]
        scores = [int(re.search(r"score=(\d+)", r["response"]).group(1)) for r in rows]
        assert rewards == pytest.approx(_softmax(scores), abs=1e-6)  # one listwise verdict over the group
        # group_norm: (r - mean) / (std + 1e-9) within the prompt, on every action token (gamma 1, no KL).
        mean, std = statistics.fmean(rewards), statistics.stdev(rewards)
        for row, reward in zip(rows, rewards):
            assert row["advantages"] == pytest.approx([(reward - mean) / (std + 1e-9)], abs=1e-4)
    if route == "py":
        assert all(row["reward_type"] == "Tensor" for row in run["rows"])  # the file returns tensors


def test_the_judge_saw_each_prompts_group_and_its_label_image(openrlhf_runs):
    _, backend = openrlhf_runs
    groups = [c for c in backend.shown if len(c["candidates"]) == N]
    assert len(groups) == 2 * 2 * 2  # two routes, two prompts, two display orders each
    for call in groups:
        question = next(q for q, texts in RESPONSES.items() if set(call["candidates"]) == set(texts))
        assert call["image_colours"] == [RED if IMAGES[question] == "red.png" else BLUE]


def test_a_missing_image_is_raised_loudly_and_the_step_cannot_go_on(openrlhf_runs):
    """The .py route raises the server's refusal; OpenRLHF 0.11.2 catches it (logging at INFO) and leaves the
    sample without a reward, so computing the advantages fails: nothing is trained on a made-up reward."""
    run = openrlhf_runs[0]["runs"]["py_missing_image"]
    assert all(row["reward"] is None for row in run["rows"])
    assert "advantages_error" in run
    errors = [line for line in run["mrjudge_logs"] if line.startswith("mrjudge.openrlhf ERROR")]
    assert len(errors) == 2 * N
    assert all("HTTP 422" in e and "labels[0].images[0]" in e and "nowhere/" in e for e in errors)
