"""The judge as the reward in TRL, verl and OpenRLHF, against a real `mrjudge serve` on loopback.

The server is the CLI in a subprocess over the tiny parrot judge (a trained tiny VLM; its rewards come from
option-letter log-probs, so they move with everything in its context, images included). The integration
files are loaded by path, as the frameworks load them (`importlib.util.spec_from_file_location`: OpenRLHF's
`SingleTurnAgentExecutor` under the name "reward_func", verl's `load_extern_object` under a derived name),
with the server address and key from the environment, as `mrjudge serve` prints them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.util
import json
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from PIL import Image

from judge.loopback import wait_until_ready
from judge.reward.planner import NEUTRAL_REWARD
from judge.reward.trl.http import HttpJudgeReward

KEY = "integration-key"
QUESTION = "What colour is the picture?"
RESPONSES = ["It is red.", "It is blue.", "It is green, I think.", "Red."]
SYSTEM = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
VLM_PROMPT = f"{SYSTEM}<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>{QUESTION}<|im_end|>\n<|im_start|>assistant\n"
TEXT_PROMPT = f"{SYSTEM}<|im_start|>user\n{QUESTION}<|im_end|>\n<|im_start|>assistant\n"
pytestmark = pytest.mark.slow  # a model server in a subprocess, generating on CPU: about a minute in all

PADS = 16
"""How many `<|image_pad|>` tokens the policy's processor expanded the placeholder to (OpenRLHF's query)."""


def vlm_query(response: str) -> str:
    """What OpenRLHF decodes for a VLM policy: the placeholder expanded, the response ending in <|im_end|>."""
    expanded = VLM_PROMPT.replace("<|image_pad|>", "<|image_pad|>" * PADS)
    return f"{expanded}{response}<|im_end|>"


def load_by_path(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("allowed-images")
    Image.new("RGB", (28, 28), (220, 20, 20)).save(root / "red.png")
    Image.new("RGB", (28, 28), (20, 20, 220)).save(root / "blue.png")
    return root


@pytest.fixture(scope="module")
def serve(parrot_dir, images, tmp_path_factory):
    """`mrjudge serve` on a free port (--port 0) with groups of 4; yields (usage text, base URL)."""
    log = tmp_path_factory.mktemp("serve") / "out.txt"
    command = [sys.executable, "-m", "mrjudge.cli", "serve", "--model", str(parrot_dir), "--device", "cpu"]
    command += ["--port", "0", "--api-key", KEY, "--max-new-tokens", "24", "--log-level", "warning"]
    command += ["--group-size", "4", "--group-wait-s", "2", "--allow-local-images", str(images), "--max-wait-ms", "1"]
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 180
        while "--reward.remote_url" not in log.read_text():
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "mrjudge serve printed no usage lines"
            time.sleep(0.2)
        usage = log.read_text()
        url = re.search(r"server on (http://\S+)", usage).group(1)
        # the usage is printed once bound; wait until it answers
        wait_until_ready(f"{url}/health", process=process, timeout_s=deadline - time.monotonic(), output=log.read_text)
        yield usage, url
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        finally:
            if process.poll() is None:
                process.kill()


@pytest.fixture
def env(serve, monkeypatch):
    """The environment the usage lines tell a training job to set."""
    usage, url = serve
    monkeypatch.setenv("MRJUDGE_REWARD_URL", url)
    monkeypatch.setenv("MRJUDGE_SERVER_API_KEY", KEY)
    return usage, url


def _paths(usage: str) -> tuple[str, str]:
    verl_path = re.search(r"custom_reward_function\.path=(\S+)", usage).group(1)
    openrlhf_path = re.search(r"--reward\.remote_url (\S+\.py)", usage).group(1)
    return verl_path, openrlhf_path


def _post(url: str, path: str, body: dict) -> dict:
    response = httpx.post(f"{url}{path}", json=body, headers={"Authorization": f"Bearer {KEY}"}, timeout=120)
    assert response.status_code == 200, response.text
    return response.json()


def _concurrently(fn, args_list: list) -> list:
    """Call `fn(*args)` for each args from its own thread, as OpenRLHF's executor does per sample."""
    out: list = [None] * len(args_list)

    def run(i: int) -> None:
        out[i] = fn(*args_list[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(args_list))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return out


def _metric(url: str, name: str) -> float:
    text = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {KEY}"}, timeout=10).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


# -- the start-up lines --------------------------------------------------------------------------------------


def test_serve_prints_the_lines_for_trl_verl_and_openrlhf(serve):
    usage, url = serve
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+", url) and not url.endswith(":0")  # the port really bound
    assert f'AsyncHttpJudgeReward("{url}")' in usage
    assert f"export MRJUDGE_REWARD_URL={url}" in usage and "MRJUDGE_SERVER_API_KEY" in usage
    verl_path, openrlhf_path = _paths(usage)
    assert Path(verl_path).is_file() and Path(openrlhf_path).is_file()
    # verl >= 0.7 (0.9.1's keys), and the batch manager of verl <= 0.6.
    assert (
        f"reward.custom_reward_function.path={verl_path} reward.custom_reward_function.name=compute_score "
        "'+reward.custom_reward_function.reward_kwargs.group_size=${actor_rollout_ref.rollout.n}'"
    ) in usage
    assert "custom_reward_function.name=compute_score_batch reward_model.reward_manager=batch" in usage
    assert "--rollout.n_samples_per_prompt 4" in usage


# -- OpenRLHF ------------------------------------------------------------------------------------------------


def test_openrlhf_one_sample_requests_form_a_listwise_group(env):
    _, url = env
    bodies = [
        ([{"query": [TEXT_PROMPT + r + "<|im_end|>"], "prompts": [TEXT_PROMPT], "labels": [""]}]) for r in RESPONSES
    ]
    answers = _concurrently(lambda body: _post(url, "/get_reward", body), bodies)
    rewards = [a["rewards"][0] for a in answers]
    assert sum(rewards) == pytest.approx(1.0, abs=1e-5)  # one listwise verdict shared by the 4 samples
    assert all(
        a["extra_logs"]["judge_group_size"] == [4.0] and a["extra_logs"]["judge_scored"] == [1.0] for a in answers
    )
    direct = _post(url, "/v1/reward", {"prompt": QUESTION, "responses": RESPONSES})  # template and <|im_end|> gone
    assert rewards == pytest.approx(direct["rewards"], abs=1e-6)


def test_openrlhf_vlm_queries_with_expanded_placeholders_and_images_in_the_label(env):
    _, url = env
    images_before = _metric(url, "mrjudge_reward_images_total")
    label = '{"images": ["red.png"]}'
    bodies = [[{"query": [vlm_query(r)], "prompts": [VLM_PROMPT], "labels": [label]}] for r in RESPONSES]
    rewards = [a["rewards"][0] for a in _concurrently(lambda b: _post(url, "/get_reward", b), bodies)]
    direct = _post(url, "/v1/reward", {"prompt": QUESTION, "responses": RESPONSES, "images": ["red.png"]})
    assert rewards == pytest.approx(direct["rewards"], abs=1e-6)  # split at the prompt despite 16 pads
    assert _metric(url, "mrjudge_reward_images_total") >= images_before + 4  # the label's image was judged
    # The image reaches the judge: another picture moves the parrot's log-probs, so the rewards.
    blue = _post(url, "/v1/reward", {"prompt": QUESTION, "responses": RESPONSES, "images": ["blue.png"]})
    assert blue["rewards"] != pytest.approx(direct["rewards"], abs=1e-6)


def test_openrlhf_py_route_and_the_empty_label_rule(env):
    usage, url = env
    module = load_by_path(_paths(usage)[1], "reward_func")  # as SingleTurnAgentExecutor loads it
    calls = [([vlm_query(r)], [VLM_PROMPT], ['{"images": ["red.png"]}']) for r in RESPONSES]
    got = _concurrently(module.reward_func, calls)
    direct = _post(url, "/v1/reward", {"prompt": QUESTION, "responses": RESPONSES, "images": ["red.png"]})
    assert [float(g["rewards"][0]) for g in got] == pytest.approx(direct["rewards"], abs=1e-6)
    assert all(
        set(g) == {"rewards", "scores", "extra_logs"} and float(g["extra_logs"]["judge_scored"][0]) == 1 for g in got
    )

    # Alone with an empty label: nothing to compare with. After --group-wait-s, the neutral reward, flagged.
    unscored_before = _metric(url, 'mrjudge_rewards_total{endpoint="/get_reward",outcome="no_reference"}')
    [lone] = _concurrently(module.reward_func, [([TEXT_PROMPT + "Blue.<|im_end|>"], [TEXT_PROMPT], [""])])
    assert float(lone["rewards"][0]) == NEUTRAL_REWARD and float(lone["extra_logs"]["judge_scored"][0]) == 0
    assert _metric(url, 'mrjudge_rewards_total{endpoint="/get_reward",outcome="no_reference"}') == unscored_before + 1
    # Alone with a reference label: judged pairwise against it.
    [paired] = _concurrently(module.reward_func, [([TEXT_PROMPT + "Blue.<|im_end|>"], [TEXT_PROMPT], ["It is blue."])])
    assert float(paired["extra_logs"]["judge_scored"][0]) == 1
    direct = _post(url, "/v1/reward", {"prompt": QUESTION, "responses": ["Blue."], "reference": "It is blue."})
    assert float(paired["rewards"][0]) == pytest.approx(direct["rewards"][0], abs=1e-6)


def test_openrlhf_py_route_without_a_server_raises_after_the_retries(env, monkeypatch):
    usage, _ = env
    module = load_by_path(_paths(usage)[1], "reward_func")
    monkeypatch.setattr(module, "RETRY", dataclasses.replace(module.RETRY, max_retries=0))
    monkeypatch.setenv("MRJUDGE_REWARD_URL", "http://127.0.0.1:9")  # discard port: connection refused
    with pytest.raises(module.wire.RewardUnavailable, match="ConnectionRefusedError|Connection refused"):
        module.reward_func([TEXT_PROMPT + "Red."], [TEXT_PROMPT], [""])


def test_openrlhf_py_route_runs_where_only_the_standard_library_is(tmp_path):
    """On a training node without mr-judge (`python -I -S`: no site-packages, no repository on the path), the
    file still loads: it reads `judge/reward/wire.py` by path for the environment names, the retry policy and
    the errors it raises."""
    path = Path(__file__).resolve().parents[2] / "judge" / "integrations" / "openrlhf.py"
    script = (
        "import dataclasses, importlib.util, json, os, sys\n"
        f"spec = importlib.util.spec_from_file_location('reward_func', {str(path)!r})\n"
        "module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)\n"
        "assert 'judge' not in sys.modules and module.RETRY.max_retries == 4, module.RETRY\n"
        "module.RETRY = dataclasses.replace(module.RETRY, max_retries=0)\n"
        "os.environ[module.wire.REWARD_URL_ENV] = 'http://127.0.0.1:9'\n"
        "try:\n"
        "    module.reward_func(['Q Red.'], ['Q'], [''])\n"
        "except module.wire.RewardUnavailable as exc:\n"
        "    print(json.dumps({'raised': type(exc).__name__}))\n"
    )
    done = subprocess.run([sys.executable, "-I", "-S", "-c", script], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"raised": "RewardUnavailable"}


# -- verl ----------------------------------------------------------------------------------------------------


def test_verl_per_sample_against_the_reference_or_unscored(env):
    usage, url = env
    verl = load_by_path(_paths(usage)[0], f"custom_module_{hash(_paths(usage)[0])}")  # as load_extern_object
    extra = {"question": QUESTION, "images": ["red.png"], "index": 3}

    def score(ground_truth: str, **kwargs):
        return asyncio.run(verl.compute_score("colours", "Red.", ground_truth, extra, **kwargs))

    direct = _post(
        url, "/v1/reward", {"prompt": QUESTION, "responses": ["Red."], "reference": "It is red.", "images": ["red.png"]}
    )
    assert score("It is red.") == {
        "score": pytest.approx(direct["rewards"][0], abs=1e-6),
        "judge_scored": 1.0,
        "judge_group_size": 1.0,
    }
    # No reference and no group: refused, naming the fix (verl would otherwise train on 0.5 everywhere).
    with pytest.raises(ValueError, match=r"reward_kwargs\.group_size"):
        score("")
    # A group that never fills (--group-wait-s 2) and no reference: the neutral value, flagged (verl has no skip).
    assert score("", group_size=2) == {"score": NEUTRAL_REWARD, "judge_scored": 0.0, "judge_group_size": 1.0}
    with pytest.raises(ValueError, match=r"extra_info\['question'\]"):
        asyncio.run(verl.compute_score("colours", "Red.", "", {}, group_size=2))


def test_verl_per_sample_calls_of_a_prompt_are_judged_listwise_on_the_server(env):
    usage, url = env
    verl = load_by_path(_paths(usage)[0], "custom_module_grouped")
    extra = {"question": QUESTION, "images": ["red.png"]}

    async def rollouts():
        return await asyncio.gather(*(verl.compute_score("x", r, "", extra, group_size=4) for r in RESPONSES))

    got = asyncio.run(rollouts())
    direct = _post(url, "/v1/reward", {"prompt": QUESTION, "responses": RESPONSES, "images": ["red.png"]})
    assert [g["score"] for g in got] == pytest.approx(direct["rewards"], abs=1e-6)
    assert all(g["judge_group_size"] == 4.0 and g["judge_scored"] == 1.0 for g in got)


def test_verl_batch_scores_each_prompts_rollouts_listwise(env):
    usage, url = env
    verl = load_by_path(_paths(usage)[0], "custom_module_batch")
    red, other = {"question": QUESTION, "images": ["red.png"]}, {"question": "Is it dark?"}
    solutions = [RESPONSES[0], "Yes.", RESPONSES[1], RESPONSES[2], "No.", RESPONSES[3]]
    extras = [red, other, red, red, other, red]  # verl interleaves nothing, but order must not matter
    got = verl.compute_score_batch(
        data_sources=["colours"] * 6, solution_strs=solutions, ground_truths=[""] * 6, extra_infos=extras
    )
    direct = _post(url, "/v1/reward", {"prompt": QUESTION, "responses": RESPONSES, "images": ["red.png"]})
    assert [got[i]["score"] for i in (0, 2, 3, 5)] == pytest.approx(direct["rewards"], abs=1e-6)
    assert [g["judge_group_size"] for g in got] == [4.0, 2.0, 4.0, 4.0, 2.0, 4.0]
    assert got[1]["score"] + got[4]["score"] == pytest.approx(1.0, abs=1e-5) and all(
        g["judge_scored"] == 1 for g in got
    )


# -- one planner: the same inputs, the same rewards --------------------------------------------------------


def test_trl_verl_openrlhf_and_v1_reward_agree(env, images):
    usage, url = env
    verl_path, openrlhf_path = _paths(usage)
    v1 = _post(url, "/v1/reward", {"prompt": QUESTION, "responses": RESPONSES, "images": ["red.png"]})["rewards"]
    # TRL: a conversational prompt with the image in the dataset's column, sent as a PNG data URL.
    trl = HttpJudgeReward(url, api_key=KEY, image_root=str(images))
    prompt = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": QUESTION}]}]
    from_trl = trl([prompt] * 4, [[{"role": "assistant", "content": r}] for r in RESPONSES], images=[["red.png"]] * 4)
    trl.close()
    from_verl = [
        d["score"]
        for d in load_by_path(verl_path, "custom_module_same").compute_score_batch(
            data_sources=["x"] * 4, solution_strs=RESPONSES, ground_truths=[""] * 4,
            extra_infos=[{"question": QUESTION, "images": ["red.png"]}] * 4,
        )
    ]  # fmt: skip
    openrlhf = load_by_path(openrlhf_path, "reward_func")
    calls = [([vlm_query(r)], [VLM_PROMPT], ['{"images": ["red.png"], "reference": null}']) for r in RESPONSES]
    from_openrlhf = [float(d["rewards"][0]) for d in _concurrently(openrlhf.reward_func, calls)]
    assert len(set(v1)) > 1  # a real spread, not a uniform fallback
    for other in (from_trl, from_verl, from_openrlhf):
        assert other == pytest.approx(v1, abs=1e-6)
