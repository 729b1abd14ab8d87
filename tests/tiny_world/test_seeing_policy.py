"""The seeing policy and the reward arms it is measured with: each arm's reward is what it claims, and the
policy's answers depend on its picture."""

from __future__ import annotations

import pytest

from tiny_world.seeing_policy import (
    NoisyOracleReward,
    OracleReward,
    RandomReward,
    exact_answers,
    train_seeing_policy,
)


def test_oracle_is_exact_match_to_the_reference():
    oracle = OracleReward()
    completions = [
        "The circle is red.",
        " the circle is  RED ",  # case, spacing and the final full stop do not count
        "The circle is blue.",
        [{"role": "assistant", "content": "The circle is red."}],  # TRL's conversational completions
    ]
    rewards = oracle(prompts=[""] * 4, completions=completions, answer=["The circle is red."] * 4)
    assert rewards == [1.0, 1.0, 0.0, 1.0]
    assert oracle.__name__ == "oracle"


def test_random_reward_does_not_read_the_text():
    texts = ["The circle is red.", "The circle is blue.", "", "x" * 50]
    a, b = RandomReward(seed=3), RandomReward(seed=3)
    first = a(prompts=[""] * 4, completions=texts)
    second = b(prompts=[""] * 4, completions=["other"] * 4)  # other texts, same draw
    assert first == second and len(set(first)) == 4 and all(0 <= r < 1 for r in first)
    assert RandomReward(seed=4)(prompts=[""] * 4, completions=texts) != first


def test_noisy_oracle_errs_at_its_rates_and_not_on_the_same_answers():
    """The answer key with a judge's error rates: wrong answers paid at `false_positive`, right ones refused at
    `false_negative`, drawn afresh on every call (so no answer is overpaid for good)."""
    n = 4000
    completions = ["The circle is red."] * n + ["The circle is blue."] * n
    answers = ["The circle is red."] * (2 * n)
    noisy = NoisyOracleReward(seed=0, false_positive=0.4, false_negative=0.1)
    rewards = noisy(prompts=[""] * (2 * n), completions=completions, answer=answers)
    right, wrong = rewards[:n], rewards[n:]
    assert set(rewards) == {0.0, 1.0} and noisy.__name__ == "oracle_noisy"
    assert sum(right) / n == pytest.approx(0.9, abs=0.02) and sum(wrong) / n == pytest.approx(0.4, abs=0.02)
    again = noisy(prompts=[""] * (2 * n), completions=completions, answer=answers)
    assert again != rewards  # a fresh draw each call: the same wrong answer is not always paid
    exact = NoisyOracleReward(seed=0, false_positive=0.0)(
        prompts=[""] * 3, completions=completions[n - 1 : n + 2], answer=answers[:3]
    )
    assert exact == [1.0, 0.0, 0.0]
    with pytest.raises(ValueError, match=r"false_positive \(1.5\) must be a probability"):
        NoisyOracleReward(seed=0, false_positive=1.5)


def test_persistent_noisy_oracle_pays_the_same_wrong_answer_every_time():
    """`persistent`: each error drawn once per question and answer text, as a judge that prefers an answer keeps
    preferring it; across distinct wrong answers the rate is still `false_positive`."""
    wrong = [f"The circle is {i}." for i in range(2000)]
    answers = ["The circle is red."] * len(wrong)
    fixed = NoisyOracleReward(seed=0, false_positive=0.3, persistent=True)
    first = fixed(prompts=[""] * len(wrong), completions=wrong, answer=answers)
    assert fixed.__name__ == "oracle_noisy_fixed" and sum(first) / len(wrong) == pytest.approx(0.3, abs=0.03)
    again = NoisyOracleReward(seed=0, false_positive=0.3, persistent=True)  # a fresh instance: the same verdicts
    assert again(prompts=[""] * len(wrong), completions=[w.upper() + "  " for w in wrong], answer=answers) == first
    other = NoisyOracleReward(seed=1, false_positive=0.3, persistent=True)
    assert other(prompts=[""] * len(wrong), completions=wrong, answer=answers) != first
    assert fixed(prompts=[""], completions=["The circle is red."], answer=["the circle is red"]) == [1.0]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A shaded two-kind world with its negatives and splits; the training questions, images rebased for
    a policy folder `policy` beside it."""
    from data_synthesis.pipeline import run_negatives
    from tiny_world.policy_data import rebase_images, world_questions
    from tiny_world.recipe import distill_judge_data, write_kind_world

    root = tmp_path_factory.mktemp("seeing")
    data = root / "data"
    write_kind_world(root / "world", data, kinds=["attribute", "count"], n=80, seed=0, image_size=84, shaded=True)
    run_negatives(data, data, generator="scene", n=2, seed=0, show_progress=False)
    distill_judge_data(data, data, val_fraction=0.25, seed=0)
    return data, rebase_images(world_questions(data, data, "train"), data, root / "policy" / "data")


def test_warm_up_sees_only_the_given_questions_pictures(world):
    """Questions a caller holds back (the benchmark's dev split) are not in the perception warm-up either."""
    data, train = world
    kept = train[: len(train) // 2]
    folder = data.parent / "half"  # beside `policy`: the rebased image paths resolve from either
    policy = train_seeing_policy(data, data, kept, folder, warmup_steps=1, sft_max_steps=1, seed=1)
    assert policy["warmup_pictures"] == len(kept) < len(train)


@pytest.mark.slow
def test_seeing_policy_answers_depend_on_its_picture(world):
    """A policy trained by the seeing recipe changes its answers when shown another question's picture (a
    blind one, trained end to end without the warm-up, gives the same answer whatever the picture)."""
    from tiny_world.policy_data import world_questions

    data, train = world
    policy = train_seeing_policy(data, data, train, data.parent / "policy", warmup_steps=60, sft_max_steps=80, seed=1)
    rows = world_questions(data, data, "val")[:24]
    own = exact_answers(policy["model"], rows, data, samples=1)
    swapped = exact_answers(policy["model"], rows, data, samples=1, swap_images=True)
    changed = sum(a != b for a, b in zip(own["answers"]["greedy"], swapped["answers"]["greedy"]))
    # 6 of 24 change at this budget (the demo's blind policy: 0 of 200); a blind one changes none.
    assert changed >= 4, (own["answers"]["greedy"], swapped["answers"]["greedy"])
    assert 0 <= own["greedy"] <= 1 and len(own["per_question"]["sampled"]) == len(rows)
