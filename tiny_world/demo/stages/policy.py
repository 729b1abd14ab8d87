"""The policy stage: the trained judge served on loopback as the reward of a policy's GRPO.

(a) GRPO prompts from training-split records, exact-answer questions from the validation split
(b) a seeing policy (`tiny_world.seeing_policy`): its own perception warm-up, frozen tower, SFT on right
    answers; its exact answers before GRPO (and with the pictures swapped: does it look?)
(c) the judge behind the real reward server (`reward_server`) on 127.0.0.1; the policy GRPO-trained once
    per reward arm: the server (pairwise against the reference) and, beside it, the answer key (the
    oracle arm: what any reward could teach here); exact answers after each
(d) the samples, the history and the charts; the figures
"""

from __future__ import annotations

import json
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reward_server.background import serve_in_thread
from tiny_world.demo.stages.context import Stage, StageContext, fmt
from tiny_world.demo.stages.training import log_stats, with_progress

__all__ = ["POLICY"]

Row = dict[str, Any]


def policy(ctx: StageContext) -> dict[str, Any]:
    """Serve the final judge on loopback; build a seeing policy (its own perception warm-up, frozen tower, SFT
    on right answers); GRPO it with the server as its reward and, beside it, with the answer key (the oracle
    arm: what any reward could teach here). Exact answers on validation questions before and after."""
    from tiny_world.seeing_policy import exact_answers

    config = ctx.config
    train, questions = _questions(ctx)  # (a)
    seeing = _seeing_policy(ctx, train)  # (b)
    before = _exact_answers(ctx, seeing["model"], questions)
    swapped = exact_answers(seeing["model"], questions, ctx.path("negatives"), samples=1, swap_images=True)
    arms = _grpo_arms(ctx, seeing, questions, before)  # (c)
    _write_answers(ctx, questions, before, arms)  # (d)
    plots = _plots(ctx, len(questions), before, arms)
    gain = {arm: round(a["sampled"] - before["sampled"], 4) for arm, a in arms.after.items()}
    first, last = log_stats(arms.logs.get("judge", []), "reward")
    audit = _audit_figures(ctx)
    if audit.get("windows"):
        plots.append(_audit_curve(ctx, audit))
    return {
        "server": "127.0.0.1 (loopback), POST /v1/reward, pairwise vs the reference",
        "served_requests": arms.served,
        "prompts": len(train),
        "heldout_questions": len(questions),
        "warmup_steps": config.policy_vision_warmup_steps,
        "sft_steps": config.policy_sft_max_steps,
        "steps": config.policy_max_steps,
        "train_s": arms.train_s,
        "exact_before": before["sampled"],
        "exact_before_greedy": before["greedy"],
        "exact_swapped_greedy": swapped["greedy"],
        "exact_after": arms.after["judge"]["sampled"],
        "exact_after_greedy": arms.after["judge"]["greedy"],
        "gain": gain["judge"],
        "oracle_exact_after": arms.after["oracle"]["sampled"] if "oracle" in arms.after else None,
        "oracle_gain": gain.get("oracle"),
        "judge_gain_ratio": round(gain["judge"] / gain["oracle"], 3) if gain.get("oracle") else None,
        "train_reward_first": first,
        "train_reward_last": last,
        "sample_after": arms.after["judge"]["answers"]["greedy"][0] if questions else None,
        "audit": {k: v for k, v in audit.items() if k != "windows"},
        "plots": [ctx.rel(path) for path in plots],
    }


def _audit_figures(ctx: StageContext) -> dict[str, Any]:
    """The judge arm's reward audit (the answer key on `policy_audit_rate` of its groups): what it audited, the
    first and last windows' overpay and gold, and the alarm; {} when the audit was off."""
    saved = ctx.folder / "judge" / "audit_summary.json"
    if not ctx.config.policy_audit_rate or not saved.is_file():
        return {}
    summary = json.loads(saved.read_text())
    windows = summary["windows"]
    return {
        "audited": summary["audited"],
        "groups": summary["groups"],
        "overpay_first": windows[0]["overpay"] if windows else None,
        "overpay_last": windows[-1]["overpay"] if windows else None,
        "gold_first": windows[0]["gold_mean"] if windows else None,
        "gold_last": windows[-1]["gold_mean"] if windows else None,
        "alarm": summary["alarm"],
        "windows": windows,
    }


def _audit_curve(ctx: StageContext, audit: dict[str, Any]) -> Path:
    """The judge arm's over-optimisation curve: the judge's reward and the audited gold per window."""
    from eval.plots import audit_curve

    return audit_curve(
        ctx.folder / "overoptimisation.png",
        audit,
        title=f"Policy GRPO against the judge: its reward and the answer key on {audit['audited']} audited groups",
    )


@dataclass
class _Arms:
    """Policy GRPO, reward arm by reward arm (`judge`: the reward server; `oracle`: the answer key)."""

    logs: dict[str, list[dict]] = field(default_factory=dict)
    """arm → its logged GRPO steps."""
    after: dict[str, dict[str, Any]] = field(default_factory=dict)
    """arm → exact answers after its GRPO (`tiny_world.seeing_policy.exact_answers`)."""
    train_s: dict[str, float] = field(default_factory=dict)
    served: int = 0
    """Reward requests the server answered, over all arms."""


def _questions(ctx: StageContext) -> tuple[list[Row], list[Row]]:
    """(a) GRPO prompts from training-split records (their pictures copied under `policy/data`), and the
    exact-answer questions from the validation split."""
    from tiny_world.policy_data import rebase_images, world_questions

    negatives, distill = ctx.path("negatives"), ctx.path("distill")
    train = rebase_images(world_questions(negatives, distill, "train"), negatives, ctx.folder / "data")
    return train, world_questions(negatives, distill, "val")[: ctx.config.policy_heldout]


def _seeing_policy(ctx: StageContext, train: list[Row]) -> dict[str, Any]:
    """(b) A fresh tiny policy that sees: its own perception warm-up, its tower frozen, SFT on right answers."""
    from tiny_world.seeing_policy import train_seeing_policy

    config = ctx.config
    return train_seeing_policy(
        ctx.path("world"),
        ctx.path("distill"),
        train,
        ctx.folder,
        size=config.policy_size,
        seed=config.seed + 1,  # its own warm-up: its misreadings are not the judge's
        warmup_steps=config.policy_vision_warmup_steps,
        sft_max_steps=config.policy_sft_max_steps,
        shaded=config.shaded,
        correct_share=config.policy_correct_share,
        wrap_build=lambda build: with_progress(build, ctx.console, "policy SFT (right answers)"),
    )


def _exact_answers(ctx: StageContext, model: Path, questions: list[Row]) -> dict[str, Any]:
    """The policy `model`'s exact answers to the validation `questions`, sampled and greedy."""
    from tiny_world.seeing_policy import exact_answers

    config = ctx.config
    options = dict(samples=config.policy_samples, max_new_tokens=config.policy_max_completion_length)
    return exact_answers(model, questions, ctx.path("negatives"), seed=config.seed, **options)


def _grpo_arms(ctx: StageContext, seeing: dict[str, Any], questions: list[Row], before: dict[str, Any]) -> _Arms:
    """(c) Serve the trained judge on loopback; GRPO the seeing policy once per reward arm, the same prompts,
    seed and steps; its exact answers after each (`before` where `policy_max_steps` is 0)."""
    from reward_server import create_app
    from reward_server.config import ServerConfig
    from tiny_world.seeing_policy import OracleReward

    config = ctx.config
    judge_batch = 2 * config.policy_per_device_train_batch_size  # one GRPO step's pairwise games in one batch
    judge = config.recipe().judge(ctx.out / ctx.figures("grpo")["model"], image_root=None, batch_size=judge_batch)
    app = create_app(judge, ServerConfig(port=0, max_batch_items=judge_batch, max_candidates=2))
    rewards = {"judge": None, **({"oracle": [OracleReward()]} if config.policy_oracle_arm else {})}
    arms = _Arms()
    with serve_in_thread(app) as url:
        ctx.print(f"reward server on {url} (POST /v1/reward, pairwise against the reference answer)")
        for arm, funcs in rewards.items():
            started = time.perf_counter()
            arms.logs[arm] = (
                _policy_grpo(ctx, seeing["model"], seeing["prompts"], url, arm, funcs)
                if config.policy_max_steps
                else []
            )
            arms.train_s[arm] = round(time.perf_counter() - started, 1)
            arms.after[arm] = _exact_answers(ctx, ctx.folder / arm, questions) if config.policy_max_steps else before
        arms.served = _served_requests(url)
    return arms


def _served_requests(url: str, endpoint: str = "/v1/reward") -> int:
    """Answered (200) requests to `endpoint`, read from the server's Prometheus `/metrics`."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:  # noqa: S310 - loopback URL we made
        text = response.read().decode()
    prefix = f'mrjudge_requests_total{{endpoint="{endpoint}",status="200"}} '
    return sum(int(float(line[len(prefix) :])) for line in text.splitlines() if line.startswith(prefix))


def _policy_grpo(ctx: StageContext, start: Path, prompts: Path, url: str, arm: str, funcs: Any) -> list[dict]:
    """One policy GRPO run from the seeing policy `start` into `policy/<arm>`: rewarded by the server (`funcs`
    None) or by `funcs` (the answer key), the same prompts, seed and steps; returns the logged history."""
    from tiny_world.recipe import History
    from tiny_world.seeing_policy import policy_grpo_config, policy_grpo_fields
    from training.policy import build_policy_trainer
    from training.recipe import run_recipe

    config = ctx.config
    history = History()

    def build(trainer_config: Any, **kwargs: Any) -> Any:
        return build_policy_trainer(trainer_config, reward_funcs=funcs, **kwargs)

    run_recipe(
        with_progress(build, ctx.console, f"policy GRPO ({arm})"),
        policy_grpo_config(
            start,
            prompts,
            ctx.folder / arm,
            url,
            seed=config.seed,
            audit=_audit_setting(config) if arm == "judge" else None,
            **policy_grpo_fields(config, "policy_"),
        ),
        [history.callback()],
    )
    return history.logs


def _audit_setting(config: Any) -> dict[str, Any] | None:
    """The judge arm's audit: the answer key on `policy_audit_rate` of the groups, in windows of a tenth of the
    run (at least 5 steps); None when the rate is 0."""
    if not config.policy_audit_rate:
        return None
    window = max(5, config.policy_max_steps // 10)
    return {"auditor": "answer_key", "audit_rate": config.policy_audit_rate, "window": window, "min_samples": 4}


def _write_answers(ctx: StageContext, questions: list[Row], before: dict[str, Any], arms: _Arms) -> None:
    """(d) `history.json` (each arm's logged GRPO steps) and `samples.json` (the questions, their references,
    and the policy's answers before GRPO and after each arm's)."""
    (ctx.folder / "history.json").write_text(json.dumps(arms.logs))
    answers = {"questions": [r["question"] for r in questions], "references": [r["answer"] for r in questions]}
    samples = {"before": before["answers"], **{arm: a["answers"] for arm, a in arms.after.items()}}
    (ctx.folder / "samples.json").write_text(json.dumps({**answers, **samples}, indent=1))


def _plots(ctx: StageContext, questions: int, before: dict[str, Any], arms: _Arms) -> list[Path]:
    """(d) Exact answers before and after each arm's GRPO, and each arm's mean reward per step."""
    from eval.plots import bar_chart, curves_by_run

    chart = bar_chart(
        ctx.folder / "exact_answers.png",
        {
            "before GRPO": {"sampled": 100 * before["sampled"], "greedy": 100 * before["greedy"]},
            **{
                f"after GRPO ({arm} reward)": {"sampled": 100 * a["sampled"], "greedy": 100 * a["greedy"]}
                for arm, a in arms.after.items()
            },
        },
        title=f"Policy: exact answers on {questions} validation questions",
        ylabel="exact answers (%)",
    )
    curves = curves_by_run(
        ctx.folder / "reward_curve.png",
        {f"{arm} reward": rows for arm, rows in arms.logs.items()},
        title="Policy GRPO: mean reward per step (judge: pairwise vs the reference; oracle: exact match)",
    )
    return [chart, curves]


def _audit_line(audit: dict[str, Any]) -> str:
    if not audit:
        return ""
    alarm = audit["alarm"]
    said = f"alarm at step {alarm['step']}" if alarm["fired"] else "no alarm"
    return (
        f"; audit: {audit['audited']} of {audit['groups']} groups, overpay {fmt(audit['overpay_first'], 2)} → "
        f"{fmt(audit['overpay_last'], 2)}, gold {fmt(audit['gold_first'], 2)} → {fmt(audit['gold_last'], 2)}, {said}"
    )


POLICY = Stage(
    name="policy",
    title="a seeing policy, GRPO-trained with the judge behind the reward server as its reward (TRL GRPOTrainer)",
    fields=(
        "seed",
        "policy_size",
        "policy_vision_warmup_steps",
        "policy_sft_max_steps",
        "policy_correct_share",
        "policy_max_steps",
        "policy_per_device_train_batch_size",
        "policy_num_generations",
        "policy_max_completion_length",
        "policy_learning_rate",
        "policy_beta",
        "policy_heldout",
        "policy_samples",
        "policy_oracle_arm",
        "policy_audit_rate",
        "judge_max_new_tokens",
    ),
    after=("grpo", "negatives", "distill", "world"),
    run=policy,
    line=lambda f: (
        f"{f['steps']} steps, {f['served_requests']} reward requests served; exact answers (sampled) "
        f"{f['exact_before']:.0%} → {f['exact_after']:.0%} with the judge's reward ({f['gain']:+.3f})"
        + (
            f", → {f['oracle_exact_after']:.0%} with the answer key ({f['oracle_gain']:+.3f}; judge/oracle "
            f"{fmt(f['judge_gain_ratio'], 2)})"
            if f.get("oracle_gain") is not None
            else ""
        )
        + _audit_line(f.get("audit") or {})
    ),
    budget=lambda c: (
        f"{c.policy_vision_warmup_steps} warm-up + {c.policy_sft_max_steps} SFT steps, then "
        f"{1 + c.policy_oracle_arm} × {c.policy_max_steps} GRPO steps × "
        f"{c.policy_per_device_train_batch_size // c.policy_num_generations} prompts × {c.policy_num_generations} completions"
    ),
)
