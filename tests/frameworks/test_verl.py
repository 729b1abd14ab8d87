"""verl 0.9.1 as released, with `judge/integrations/verl.py` as its custom reward function, through verl's own
dataset → agent loop → reward loop → reward manager path (`tests/frameworks/verl_driver.py`, in a subprocess
with the cached install on its path; what it stands in for, and why, is in its docstring).

The judge behind the server is the rule judge with option log-probs (`ScoredRuleBackend`): a response's
listwise reward is the softmax of the `score=N` it carries over its group, so every value can be checked by
hand, and the backend records which candidates and which images each judge call saw.
"""

from __future__ import annotations

import math
import re
import shlex

import pandas as pd
import pytest
from mrjudge.serve_cmd import reward_usage
from PIL import Image

from tests.frameworks.conftest import REPO, VERSIONS, run_driver
from tests.support.reward_server import running
from tests.support.scripted_judge import ScoredRuleBackend

# One subprocess that imports verl and runs four rollouts: ~11 s on 2 cores (not `slow`: under ~30 s).

N = 4
RESPONSE_LENGTH = 32
RED, BLUE = (220, 20, 20), (20, 20, 220)
QUESTIONS = {"What colour is the picture?": "red.png", "Is the shape round?": "blue.png"}
RESPONSES = {
    "What colour is the picture?": ["It is red. score=9", "It is blue. score=2", "Green. score=5", "Red! score=7"],
    "Is the shape round?": ["Yes. score=3", "No. score=8", "Maybe. score=1", "Round. score=4"],
}
VERL_FILE = REPO / "judge" / "integrations" / "verl.py"


def _rows(images: dict[str, str]) -> list[dict]:
    """verl rows as docs/rewards.md says: the question and the judge's images in extra_info, no reference."""
    return [
        {
            "data_source": "colours",
            "prompt": [{"role": "user", "content": question}],
            "reward_model": {"style": "model", "ground_truth": ""},
            "extra_info": {"question": question, "images": [images[question]], "index": i},
        }
        for i, question in enumerate(QUESTIONS)
    ]


def _softmax(scores: list[int]) -> list[float]:
    top = max(scores)
    weights = [math.exp(s - top) for s in scores]
    return [w / sum(weights) for w in weights]


@pytest.fixture(scope="module")
def verl_runs(frameworks_site, tiny_lm_dir, tmp_path_factory):
    """One driver process, four runs: as `mrjudge serve` prints (listwise), without the group size, with a
    missing image, and with the pre-0.7 spelling of the keys. Yields (driver output, backend)."""
    root = tmp_path_factory.mktemp("verl")
    allowed = root / "images"
    allowed.mkdir()
    Image.new("RGB", (28, 28), RED).save(allowed / "red.png")
    Image.new("RGB", (28, 28), BLUE).save(allowed / "blue.png")
    pd.DataFrame(_rows(QUESTIONS)).to_parquet(root / "train.parquet")
    pd.DataFrame(_rows({q: "nowhere/red.png" for q in QUESTIONS})).to_parquet(root / "typo.parquet")
    with running(ScoredRuleBackend(), allow_local_images=str(allowed), group_wait_s=30) as (url, backend):
        usage = reward_usage(url, keyed=False, group_size=N)
        printed = shlex.split(
            next(line for line in usage.splitlines() if "reward.custom_reward_function.path=" in line)
        )
        old = shlex.split(
            next(line for line in usage.splitlines() if line.strip().startswith("custom_reward_function"))
        )
        base = [
            f"actor_rollout_ref.model.path={tiny_lm_dir}",
            "actor_rollout_ref.rollout.name=vllm",  # mandatory in the config; no engine is started
            f"actor_rollout_ref.rollout.n={N}",
            "actor_rollout_ref.rollout.prompt_length=128",
            f"actor_rollout_ref.rollout.response_length={RESPONSE_LENGTH}",
            "data.max_prompt_length=128",
            f"data.max_response_length={RESPONSE_LENGTH}",
        ]
        data = [f"data.train_files={root / 'train.parquet'}", f"data.val_files={root / 'train.parquet'}"]
        typo = [f"data.train_files={root / 'typo.parquet'}", f"data.val_files={root / 'typo.parquet'}"]
        spec = {
            "runs": [
                {"name": "printed", "overrides": [*printed, *base, *data], "responses": RESPONSES},
                {"name": "no_group", "overrides": [*printed[:2], *base, *data], "responses": RESPONSES},
                {"name": "missing_image", "overrides": [*printed, *base, *typo], "responses": RESPONSES},
                {"name": "old_spelling", "overrides": [*old, *base, *data], "responses": RESPONSES},
            ]
        }
        out, _ = run_driver(frameworks_site, "verl_driver.py", spec, root, env={"MRJUDGE_REWARD_URL": url})
        yield out, backend


def test_the_printed_overrides_are_the_keys_verl_0_9_1_reads(verl_runs):
    out, _ = verl_runs
    assert out["versions"]["verl"] == VERSIONS["verl"]
    read = out["runs"]["printed"]["config"]
    assert read["custom_reward_function"] == {
        "path": str(VERL_FILE),
        "name": "compute_score",
        "reward_kwargs": {"group_size": N},  # '${actor_rollout_ref.rollout.n}', resolved by verl's config
    }
    assert read["reward_manager"] == "naive" and read["rollout_n"] == N


def test_rewards_come_back_one_per_sample_on_the_last_token_judged_listwise_by_prompt(verl_runs):
    out, backend = verl_runs
    run = out["runs"]["printed"]
    assert "error" not in run, run.get("error")
    assert run["reward_manager"] == "NaiveRewardManager" and sum(run["worker_calls"]) == 2 * N  # one call per sample
    assert run["rm_scores_shape"] == [2 * N, RESPONSE_LENGTH]
    assert run["reward_extra_keys"] == ["score", "judge_scored", "judge_group_size"]
    groups: dict[str, list[dict]] = {}
    for row in run["rows"]:
        assert row["reward_positions"] == [row["valid_response_length"] - 1]  # the last response token only
        assert row["reward"] == pytest.approx(row["score"], abs=1e-6)  # float32 in rm_scores
        assert row["judge_scored"] == 1.0 and row["judge_group_size"] == N
        groups.setdefault(row["uid"], []).append(row)
    assert sorted(len(g) for g in groups.values()) == [N, N]
    for rows in groups.values():
        scores = [int(re.search(r"score=(\d+)", r["response"]).group(1)) for r in rows]
        assert [r["score"] for r in rows] == pytest.approx(_softmax(scores), abs=1e-6)  # one listwise verdict
    # Each judge call saw one prompt's four responses together, and that prompt's image from extra_info.
    calls = [c for c in backend.shown if len(c["candidates"]) == N]
    assert len(calls) == 2 * 2  # two prompts, two display orders each (the server's judge)
    for call in calls:
        question = next(q for q, texts in RESPONSES.items() if set(call["candidates"]) == set(texts))
        assert call["image_colours"] == [RED if QUESTIONS[question] == "red.png" else BLUE]


def test_no_group_and_no_reference_is_refused_naming_the_fix(verl_runs):
    run = verl_runs[0]["runs"]["no_group"]
    assert run["config"]["custom_reward_function"].get("reward_kwargs") is None
    assert run["error_type"] == "ValueError"
    assert (
        "reward_kwargs.group_size=${actor_rollout_ref.rollout.n}" in run["error"]
        and "no training signal" in run["error"]
    )


def test_a_missing_image_stops_the_rollout_with_the_servers_message(verl_runs):
    run = verl_runs[0]["runs"]["missing_image"]
    assert run["error_type"] == "RewardRefused"
    assert "HTTP 422" in run["error"] and "labels[0].images[0]" in run["error"] and "nowhere/red.png" in run["error"]


def test_the_pre_0_7_spelling_composes_but_is_never_read(verl_runs):
    """What issue 37 found: verl 0.9.1's main_ppo does not move the old keys, so its default reward runs."""
    run = verl_runs[0]["runs"]["old_spelling"]
    assert run["config"]["custom_reward_function"]["path"] is None
    assert run["error_type"] == "NotImplementedError" and "not implemented for data_source=" in run["error"]
