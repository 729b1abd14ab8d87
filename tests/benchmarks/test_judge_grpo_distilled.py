"""`judge_grpo_gain --traces distilled` end to end on a quick demo distilled from descriptions with errors, the
error-rate curve drawn from such runs, and the same run's judges sampled (`judge_sampled`): the keys the issue
asks for, and the checks on mismatched flags and folders."""

from __future__ import annotations

import json

import pytest

from benchmarks import judge_grpo_curve, judge_grpo_gain, judge_sampled
from judge.types import MCItem, Verdict

TINY = ["--seeds", "0", "--pool-n", "30", "--heldout-n", "12", "--grpo-max-steps", "1", "--num-generations", "2"]
TINY += ["--per-device-train-batch-size", "4", "--bootstrap", "50"]


@pytest.fixture(scope="module")
def distilled_demo(tmp_path_factory):
    from tiny_world.demo.config import load_demo_config
    from tiny_world.demo.runner import run_stages

    out = tmp_path_factory.mktemp("distilled") / "demo"
    config = load_demo_config(overrides={"traces": "distilled", "describe_error_rate": 0.3}, quick=True)
    run_stages(config, out, until="grpo")
    return out


@pytest.mark.slow
@pytest.mark.timeout(600)  # under 60 s alone; the machine may be shared
def test_distilled_traces_are_reported_and_drawn(distilled_demo, tmp_path):
    result = judge_grpo_gain.main(["--demo", str(distilled_demo), "--out", str(tmp_path / "gain"), *TINY])
    assert result["traces"] == "distilled" and result["describe_error_rate"]["set"] == 0.3
    assert result["reasoner_hint"] == "lean"
    assert 0.15 < result["describe_error_rate"]["measured"] < 0.45
    kept = result["traces_kept"]
    assert kept["pool"] + sum(kept["pool_drop_reasons"].values()) == kept["pool_items"]
    assert result["grpo_on_dropped_items"] == sum(kept["pool_drop_reasons"].values())  # GRPO keeps them
    assert 0 < result["traces_false_fact_share"]["sft"] <= 1
    for key in ("heldout_sft_ci95", "heldout_sft_more_ci95", "grpo_vs_sft_more_ci95"):
        assert len(result[key]) == 2, key
    credits = json.loads((tmp_path / "gain" / "credits.json").read_text())
    assert len(credits["sft"]) == result["report_pairs"] == len(credits["ids"])
    curve = judge_grpo_curve.main([str(tmp_path / "gain"), "--out", str(tmp_path / "curve"), "--bootstrap", "50"])
    assert curve["points"][0]["interval"] == "bootstrap" and (tmp_path / "curve" / "curve.png").is_file()

    sampled = judge_sampled.main([str(tmp_path / "gain"), "--samples", "2", "--bootstrap", "50"])
    assert sampled["pairs"] == result["report_pairs"] and sampled["temperature"] == result["grpo"]["temperature"]
    assert set(sampled["judges"]) == {"sft", "grpo-0", "sft_more"} and set(sampled["sampled_gain"]) == {
        "grpo-0",
        "grpo",
        "sft_more",
    }
    sft = sampled["judges"]["sft"]
    assert sft["greedy"] == pytest.approx(sum(credits["sft"]) / len(credits["sft"]), abs=1e-4)  # the run's own
    for figures in sampled["judges"].values():
        assert 0 <= figures["sampled"] <= 1 and 0 <= figures["one_answer_share"] <= 1
    assert (tmp_path / "gain" / "sampled" / "sampled.json").is_file()
    assert (tmp_path / "gain" / "sampled" / "sampled.png").is_file()

    credits["ids"] = credits["ids"][::-1]  # a folder whose pairs are not the rebuilt ones is refused
    (tmp_path / "gain" / "credits.json").write_text(json.dumps(credits))
    with pytest.raises(SystemExit, match="are not the run's"):
        judge_sampled.main([str(tmp_path / "gain"), "--samples", "2"])


def test_flags_that_contradict_the_demo_are_refused(distilled_demo, tmp_path):
    with pytest.raises(SystemExit, match="--traces exact: .* was made with distilled"):
        judge_grpo_gain.main(["--demo", str(distilled_demo), "--out", str(tmp_path), "--traces", "exact", *TINY])
    with pytest.raises(SystemExit, match="--reasoner-hint ignore: .* was made with lean"):
        judge_grpo_gain.main(
            ["--demo", str(distilled_demo), "--out", str(tmp_path), "--reasoner-hint", "ignore", *TINY]
        )


def test_sampled_credits_score_every_call():
    """A pair's sampled credit is the share of its calls that chose the label (an unparsed call earns 0, as in
    GRPO's reward); the majority verdict is scored as the gain benchmark scores one (undecided: one half)."""
    pairs = [MCItem(id=i, question="q", candidates=["a", "b"], label=label) for i, label in enumerate((0, 1, 0))]
    verdicts = [
        Verdict(id=0, choice=0, probs=None, consistent=False, votes=[0, 0, 1, None], reasoning="", raw=[]),
        Verdict(id=1, choice=1, probs=None, consistent=True, votes=[1, 1, 1, 1], reasoning="", raw=[]),
        Verdict(id=2, choice=None, probs=None, consistent=None, votes=[None, None, None, None], reasoning="", raw=[]),
    ]
    shares, majority, agree = judge_sampled.sampled_credits(pairs, verdicts)
    assert shares == [0.5, 1.0, 0.0] and majority == [1.0, 1.0, 0.5] and agree == [False, True, True]
