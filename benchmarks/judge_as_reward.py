"""Does a policy learn from the served judge about as well as from the answer key?

A *seeing* policy (`tiny_world.seeing_policy`: its own perception warm-up, frozen tower, SFT on right
answers) is trained by TRL GRPO in four arms (three more on request) from the same start, with the same prompts,
seeds and steps:

- `oracle`: exact match to the reference (the answer key; the most any reward can teach here);
- `judge`: the judge behind the real reward server on loopback, pairwise against the reference, as users
  run it (`POST /v1/reward`, `judge.reward.trl.http`);
- `judge_listwise`: the same server, no reference: a prompt's completions judged together;
- `random`: uniform noise, independent of the text (what no signal does);
- `judge_capped` (only when asked for in `--arms`): pairwise, capped at the reference's own reward
  (`cap_at_reference`: a tie pays in full, fooling the judge past the reference nothing more);
- `oracle_noisy` (only when asked for): the answer key with the judge's own error rates on the start policy's
  answers (`judge_overpaid_start`, `judge_underpaid_start`), its errors drawn at random on every call: what
  the judge would teach if its errors were noise rather than a preference the policy can find again;
- `oracle_noisy_fixed` (only when asked for): the same rates, each error drawn once per question and answer
  text, so a wrong answer once overpaid is always overpaid, as by a judge that prefers it.
  `--noise-false-positive` sets the rate of both in place of the judge's.

Before and after each arm: exact answers to every validation question, greedy and sampled (4 per question,
temperature 1). `gain` is the sampled share's rise (what GRPO optimises: the expected exact answer at the
policy's own temperature), `gain_greedy` the greedy one's; intervals are paired bootstraps over questions.
`judge_gain_ratio` = judge gain / oracle gain. On the policy's own samples (first and last): how often the
judge agrees with the answer key (a wrong answer rewarded below one half, a right one at one half or above)
and `judge_overpaid` (wrong answers rewarded above one half: the judge preferred them to the reference); the
end figures per pairwise arm in `judge_overpaid_end_by_arm`, every arm's gain over the oracle's in `gain_ratio`.
Choices (steps, learning rate) are made with `--report dev` (training-split questions held back from the
policy's SFT and GRPO); the validation split that is reported is never looked at for them. `--select-every N`
makes one more choice the same way, per arm: the saved step (every N) whose policy answers the dev questions
best, reported beside the last step (`selected`), as a run that picks its checkpoint on a referenced dev set.

    python -m benchmarks.judge_as_reward --out runs/judge_as_reward                 # trains a judge first
    python -m benchmarks.judge_as_reward --demo runs/demo --out runs/judge_as_reward  # the demo's world and judge
    python -m benchmarks.judge_as_reward --demo runs/demo --judge runs/demo/sft/model --arms oracle,judge

Prints one JSON line; writes `exact.png` (exact answers before and after each arm) and `rewards.png`.
Run time: 1,082 s for the four arms at 200 steps with `--demo` and a reused seeing policy (`OUT/policy/
seeing.json`), on 2 cores; the judge arms take 380–500 s of it (`--refresh-steps 300`: 120 s more). `--max-steps 600`
(what dev chose for the oracle arm to reach +0.08) triples the arms' time; bare, the demo's judge training
comes first (about 900 s).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.kit import add_names_flag, known_names
from benchmarks.policy_start import (
    Start,
    add_policy_args,
    demo_and_judge,
    grpo_settings,
    plain_paths,
    reward_app,
    seeing_policy,
    split_questions,
)
from benchmarks.workers import cluster_share_ci95, paired_bootstrap
from reward_server.background import serve_in_thread
from tiny_world.recipe import History
from tiny_world.seeing_policy import (
    NoisyOracleReward,
    OracleReward,
    RandomReward,
    exact_answers,
    policy_grpo_config,
    policy_grpo_fields,
)

ARMS = ("oracle", "judge", "judge_listwise", "random", "judge_capped", "oracle_noisy", "oracle_noisy_fixed")
DEFAULT_ARMS = ARMS[:4]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("runs/judge_as_reward"))
    add_names_flag(parser, "--arms", ARMS, DEFAULT_ARMS)
    add_policy_args(parser, max_steps=200, max_steps_help="GRPO steps per arm (600 on dev: oracle +0.086)")
    parser.add_argument(
        "--refresh-steps",
        type=int,
        default=0,
        help="first refresh the judge with this many SFT steps on the start policy's own wrong answers to its "
        "training questions (tiny_world.judge_refresh; 0: serve the judge as it is)",
    )
    parser.add_argument("--refresh-questions", type=int, default=800, help="training questions the refresh samples")
    parser.add_argument("--refresh-learning-rate", type=float, default=1e-4)
    parser.add_argument("--agreement-questions", type=int, default=64, help="questions whose samples the judge scores")
    parser.add_argument("--seed", type=int, default=0, help="GRPO and sampling seed (the same for every arm)")
    parser.add_argument(
        "--noise-false-positive",
        type=float,
        help="the oracle_noisy arms' rate of paying a wrong answer (default: the judge's, judge_overpaid_start)",
    )
    parser.add_argument(
        "--select-every",
        type=int,
        default=0,
        help="also save each arm every N steps, pick the step whose policy answers the dev questions best "
        "(sampled exact answers) and report it beside the last (`selected`); needs --report val",
    )
    parser.add_argument("--bootstrap", type=int, default=2000)
    args = parser.parse_args(argv)
    if args.noise_false_positive is not None and not 0.0 <= args.noise_false_positive <= 1.0:
        parser.error(f"--noise-false-positive ({args.noise_false_positive}) must be a probability in [0, 1]")
    args.arms = known_names(parser, "--arms", args.arms, ARMS)
    if args.select_every and args.report != "val":
        raise SystemExit(
            "--select-every picks each arm's step on the dev questions: report on the others (--report val)"
        )
    return args


def agreement(samples: dict[str, Any], rows: list[dict[str, Any]], reward: Any, image_root: Path) -> dict[str, Any]:
    """The judge's pairwise rewards on the policy's own sampled answers, against the answer key: `agreement`,
    `overpaid` (wrong answers above one half; `overpaid_ci95` resamples questions, whose answers are not
    independent), `underpaid` (right answers below a quarter)."""
    from judge.images import load_image
    from tiny_world.synthetic_eval import normalize

    completions, answers, images, questions = [], [], [], []
    for number, (row, group) in enumerate(zip(rows, samples["answers"]["sampled"])):
        image = load_image(row["image"], image_root)
        for text in group:
            completions.append(text)
            answers.append(row["answer"])
            images.append(image)
            questions.append(number)
    rewards = reward(prompts=[""] * len(completions), completions=completions, image=images, answer=answers)
    right = [normalize(c) == normalize(a) for c, a in zip(completions, answers)]
    scored = [(r, ok) for r, ok in zip(rewards, right) if r is not None]
    wrong = [r for r, ok in scored if not ok]
    matched = [r for r, ok in scored if ok]
    paid = {number: [0, 0] for number in range(len(rows))}  # per question: wrong answers paid, wrong answers
    for r, ok, number in zip(rewards, right, questions):
        if r is not None and not ok:
            paid[number][0] += r > 0.5
            paid[number][1] += 1
    return {
        "agreement": round(sum((r >= 0.5) == ok for r, ok in scored) / len(scored), 4) if scored else None,
        "overpaid": round(sum(r > 0.5 for r in wrong) / len(wrong), 4) if wrong else None,
        "overpaid_ci95": cluster_share_ci95([(h, n) for h, n in paid.values()], resamples=1000, seed=0),
        # a right answer ties the reference: its de-biased reward straddles one half; below a quarter the judge
        # clearly preferred the reference to an answer equal to it
        "underpaid": round(sum(r < 0.25 for r in matched) / len(matched), 4) if matched else None,
        "unscored": len(rewards) - len(scored),
        "wrong_share": round(1 - sum(right) / max(1, len(right)), 4),
    }


def after_figures(before: dict[str, Any], after: dict[str, Any], bootstrap: int, seed: int) -> dict[str, Any]:
    """An arm's exact answers after training against `before` (both from `exact_answers` on the same
    questions): sampled and greedy shares, their gains, and the sampled gain's paired interval."""
    low, high = paired_bootstrap(before["per_question"]["sampled"], [after["per_question"]["sampled"]], bootstrap, seed)
    return {
        "exact_after": after["sampled"],
        "exact_after_greedy": after["greedy"],
        "gain": round(after["sampled"] - before["sampled"], 4),
        "gain_greedy": round(after["greedy"] - before["greedy"], 4),
        "gain_ci95": (low, high),
    }


def by_arm(figures: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """`after_figures` of every arm as the JSON line's dicts keyed by arm, `judge_gain_ratio`, and every other
    arm's gain over the oracle's (`gain_ratio`)."""
    keyed: dict[str, Any] = {
        key: {arm: f[key] for arm, f in figures.items()}
        for key in ("exact_after", "exact_after_greedy", "gain", "gain_greedy")
    }
    keyed["gain_ci95_low"] = {arm: f["gain_ci95"][0] for arm, f in figures.items()}
    keyed["gain_ci95_high"] = {arm: f["gain_ci95"][1] for arm, f in figures.items()}
    oracle, judge = (figures.get(arm, {}).get("gain") for arm in ("oracle", "judge"))
    keyed["judge_gain_ratio"] = round(judge / oracle, 3) if judge is not None and oracle else None
    keyed["gain_ratio"] = {
        arm: round(f["gain"] / oracle, 3) for arm, f in figures.items() if arm != "oracle" and oracle
    }
    return keyed


def best_step(dev_exact: dict[int, float]) -> int:
    """The step whose policy answered the dev questions best; the earliest of equals (the least drift)."""
    return max(sorted(dev_exact), key=lambda step: dev_exact[step])


def select_on_dev(
    arm_dir: Path, max_steps: int, dev_rows: list[dict[str, Any]], image_root: Path, evaluate: dict[str, Any]
) -> dict[str, Any]:
    """Score every saved step of an arm (`checkpoint-N`, and the last step's model in `arm_dir`) by its sampled
    exact answers on the dev questions, which the reported ones never include, and pick the best (`best_step`)."""
    saved = {int(p.name.split("-")[1]): p for p in arm_dir.glob("checkpoint-*") if p.name.split("-")[1].isdigit()}
    saved.setdefault(max_steps, arm_dir)
    dev_exact = {step: exact_answers(path, dev_rows, image_root, **evaluate)["sampled"] for step, path in saved.items()}
    step = best_step(dev_exact)
    return {"step": step, "model": saved[step], "dev_exact": {s: dev_exact[s] for s in sorted(dev_exact)}}


def refreshed_judge(args: argparse.Namespace, recipe: Any, demo: Path, judge: Path, policy: Path,
                    train: list[dict[str, Any]], data: Path, out: Path, policy_key: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
    """The judge refreshed on the start policy's wrong answers to its own training questions; a finished
    refresh of the same judge, policy (`policy_key`, the seeing policy's cache key) and settings is reused
    (`OUT/refresh/figures.json`)."""
    from data_synthesis.pipeline import load_rows
    from tiny_world.judge_refresh import refresh_for_policy

    key = {"judge": str(Path(judge).resolve()), "policy": policy_key, "seed": args.seed}
    key.update(steps=args.refresh_steps, questions=args.refresh_questions, learning_rate=args.refresh_learning_rate)
    record = out / "figures.json"
    if record.is_file() and json.loads(record.read_text())["key"] == key:
        return json.loads(record.read_text())["figures"]
    worlds = {row["id"]: row["world"] for row in load_rows(demo / "world", "records", demo / "world")}
    judge_sft = demo / "distill" / "sft" / "train.jsonl"
    settings = dict(questions=args.refresh_questions, steps=args.refresh_steps, seed=args.seed)
    settings.update(learning_rate=args.refresh_learning_rate, max_new_tokens=args.max_completion_length)
    figures = refresh_for_policy(recipe, judge, policy, train, worlds, data, judge_sft, out, **settings)
    record.write_text(json.dumps({"key": key, "figures": figures}))
    return figures


@dataclass(frozen=True)
class ArmsRun:
    """What `run_arms` measured."""

    results: dict[str, Any]  # each arm's figures
    histories: dict[str, list[dict[str, Any]]]  # each arm's training logs
    agree_start: dict[str, Any]  # `agreement` on the start policy's samples
    noise_rates: tuple[float, float]  # the noisy oracles' false positive and false negative rates


def arm_rewards(args: argparse.Namespace, noise_rates: tuple[float, float]) -> dict[str, list[Any] | None]:
    """Each arm's reward functions; None: the config's own reward, the server (pairwise against the reference,
    listwise, or pairwise capped at the reference's own reward)."""
    return {
        "oracle": [OracleReward()],
        "random": [RandomReward(args.seed)],
        **{
            arm: [NoisyOracleReward(args.seed, *noise_rates, persistent=arm == "oracle_noisy_fixed")]
            for arm in ("oracle_noisy", "oracle_noisy_fixed")
        },
        "judge": None,
        "judge_listwise": None,
        "judge_capped": None,
    }


def train_arm(
    arm: str, start: Start, args: argparse.Namespace, url: str, reward_funcs: list[Any] | None, **fields: Any
) -> tuple[Path, list[dict[str, Any]]]:
    """One arm's GRPO from the start policy into `OUT/arms/ARM` (rewarded by `reward_funcs`, or the server at `url`
    as `policy_grpo_config` sets it); `fields` are more `JudgePolicyGRPOConfig` fields (they win, `seed` too).
    Returns the arm's folder and its training logs."""
    from training.policy import build_policy_trainer
    from training.recipe import run_recipe

    arm_dir = args.out / "arms" / arm
    config = policy_grpo_config(start.model, start.prompts, arm_dir, url, listwise=arm == "judge_listwise",
                                cap_at_reference=arm == "judge_capped",
                                **{"seed": args.seed, **policy_grpo_fields(args), **fields})  # fmt: skip
    history = History()

    def build(config: Any, **kwargs: Any) -> Any:
        return build_policy_trainer(config, reward_funcs=reward_funcs, **kwargs)

    run_recipe(build, config, [history.callback()])
    return arm_dir, history.logs


def run_arm(
    arm: str, start: Start, args: argparse.Namespace, url: str, reward_funcs: list[Any] | None, pairwise: Any
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One arm's GRPO from the start policy (`train_arm`), then its figures: exact answers after it (and at the
    step the dev questions choose, with `--select-every`), and for the pairwise judge arms the judge's own
    (uncapped) view of the trained policy's answers (`agree_end`); and the arm's training logs."""
    save = dict(save_strategy="steps", save_steps=args.select_every, save_only_model=True) if args.select_every else {}
    began = time.perf_counter()
    arm_dir, logs = train_arm(arm, start, args, url, reward_funcs, **save)
    after = exact_answers(arm_dir, start.report_rows, start.image_root, **start.evaluate)
    figures = {
        **after_figures(start.before, after, args.bootstrap, args.seed),
        "train_s": round(time.perf_counter() - began, 1),
    }
    if args.select_every:
        chosen = select_on_dev(arm_dir, args.max_steps, start.dev_rows, start.image_root, start.evaluate)
        picked = exact_answers(chosen["model"], start.report_rows, start.image_root, **start.evaluate)
        figures["selected"] = {
            **after_figures(start.before, picked, args.bootstrap, args.seed),
            "step": chosen["step"],
            "dev_exact_by_step": chosen["dev_exact"],
        }
    if arm in ("judge", "judge_capped"):
        answers = exact_answers(arm_dir, start.agree_rows, start.image_root, **start.evaluate)
        figures["agree_end"] = agreement(answers, start.agree_rows, pairwise, start.image_root)
    return figures, logs


def run_arms(args: argparse.Namespace, start: Start, judge: Any) -> ArmsRun:
    """Every arm in turn, the judge served on loopback: each arm's figures and training logs, the judge's
    agreement with the answer key on the start policy's samples, and the noisy oracles' error rates."""
    from judge.reward.trl.http import HttpJudgeReward

    results: dict[str, Any] = {}
    histories: dict[str, list[dict[str, Any]]] = {}
    with serve_in_thread(reward_app(judge, args.per_device_train_batch_size)) as url:
        pairwise = HttpJudgeReward(url, mode="pairwise", reference_column="answer", max_options=2)
        samples = exact_answers(start.model, start.agree_rows, start.image_root, **start.evaluate)
        agree_start = agreement(samples, start.agree_rows, pairwise, start.image_root)
        noise_rates = (
            (agree_start["overpaid"] or 0.0) if args.noise_false_positive is None else args.noise_false_positive,
            agree_start["underpaid"] or 0.0,
        )
        rewards = arm_rewards(args, noise_rates)
        for arm in args.arms:
            results[arm], histories[arm] = run_arm(arm, start, args, url, rewards[arm], pairwise)
            print(f"{arm}: {results[arm]}", file=sys.stderr)
        pairwise.close()
    return ArmsRun(results, histories, agree_start, noise_rates)


def report(args: argparse.Namespace, start: Start, arms: ArmsRun, served: dict[str, Any], wall_s: float) -> dict:
    """The JSON line: the start, every arm's figures keyed by arm, the judge's agreement, the settings; `served`
    holds the line's `policy`, `judge_model` and `refresh`."""
    results, agree_start, noise_rates = arms.results, arms.agree_start, arms.noise_rates
    agree_ends = {arm: r.pop("agree_end") for arm, r in results.items() if "agree_end" in r}
    agree_end = agree_ends.get("judge")
    result = {
        "benchmark": "judge_as_reward",
        "report_set": args.report,
        "questions": len(start.report_rows),
        "exact_before": start.before["sampled"],
        "exact_before_greedy": start.before["greedy"],
        "exact_before_swapped_greedy": start.swapped["greedy"],
        **by_arm(results),
        "agreement_start": agree_start["agreement"],
        "agreement_end": agree_end["agreement"] if agree_end else None,
        "judge_overpaid_start": agree_start["overpaid"],
        "judge_overpaid_end": agree_end["overpaid"] if agree_end else None,
        "judge_overpaid_end_by_arm": {arm: a["overpaid"] for arm, a in agree_ends.items()},
        "judge_underpaid_start": agree_start["underpaid"],
        "noise_rates": {"false_positive": noise_rates[0], "false_negative": noise_rates[1]},
        **served,
        "grpo": {**grpo_settings(args), "train_s": {arm: r["train_s"] for arm, r in results.items()}},
        "wall_s": round(wall_s, 1),
    }
    if args.select_every:  # each arm at the step the dev questions chose, beside its last step above
        selected = {arm: r["selected"] for arm, r in results.items()}
        result["selected"] = {
            "every": args.select_every,
            "step": {arm: r["step"] for arm, r in selected.items()},
            "dev_exact_by_step": {arm: r["dev_exact_by_step"] for arm, r in selected.items()},
            **by_arm(selected),
        }
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    began = time.perf_counter()
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    demo, judge_model, recipe = demo_and_judge(args)
    data = out / "policy" / "data"
    train, dev_rows, report_rows = split_questions(demo, data, args)
    policy, policy_key = seeing_policy(args, demo, recipe, train)

    negatives = demo / "negatives"
    evaluate = dict(samples=args.samples, max_new_tokens=args.max_completion_length, seed=args.seed)
    before = exact_answers(policy["model"], report_rows, negatives, **evaluate)
    swapped = exact_answers(policy["model"], report_rows, negatives, **evaluate, swap_images=True)
    print(
        f"seeing policy: exact greedy {before['greedy']}, sampled {before['sampled']} "
        f"(swapped pictures: {swapped['greedy']}); {policy}",
        file=sys.stderr,
    )
    start = Start(policy["model"], policy["prompts"], negatives, report_rows, dev_rows,
                  report_rows[: args.agreement_questions], evaluate, before, swapped)  # fmt: skip

    refresh = None
    if args.refresh_steps:
        refresh = refreshed_judge(
            args, recipe, demo, judge_model, start.model, train, data, out / "refresh", policy_key
        )
        judge_model = Path(refresh["model"])
    judge = recipe.judge(judge_model, image_root=None, batch_size=2 * args.per_device_train_batch_size)
    arms = run_arms(args, start, judge)

    served = {"policy": plain_paths(policy), "judge_model": str(judge_model), "refresh": refresh}
    result = report(args, start, arms, served, time.perf_counter() - began)
    (out / "history.json").write_text(json.dumps(arms.histories))
    (out / "result.json").write_text(json.dumps(result, indent=1))
    _plots(out, result, arms.histories)
    print(json.dumps(result))
    return result


def _plots(out: Path, result: dict[str, Any], histories: dict[str, list[dict[str, Any]]]) -> None:
    from eval.plots import bar_chart, curves_by_run

    bar_chart(
        out / "exact.png",
        {
            "sampled": {
                "start": 100 * result["exact_before"],
                **{a: 100 * v for a, v in result["exact_after"].items()},
            },
            "greedy": {
                "start": 100 * result["exact_before_greedy"],
                **{a: 100 * v for a, v in result["exact_after_greedy"].items()},
            },
        },
        title=f"Exact answers on {result['questions']} {result['report_set']} questions, by reward arm",
        ylabel="%",
    )
    curves_by_run(out / "rewards.png", histories, title="Policy GRPO: mean reward per step, by arm")


if __name__ == "__main__":
    main()
