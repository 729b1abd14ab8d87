"""A policy that can learn from a reward, and the rewards a researcher compares the judge with.

A reward can only teach a policy whose answers depend on the picture. A tiny policy trained end to end
from random weights in a few hundred steps does not look: shown another question's picture it gives the same
answer, and no reward can teach it much. A *seeing* policy is built as the judge is (`tiny_world.recipe`):

- a perception warm-up of its own vision tower (`tiny_world.vision_warmup`, its own seed, so its misreadings
  are not the judge's), then the tower is frozen;
- SFT on right answers only (`write_policy_data(correct_share=1.0)`), so its templates are right and its
  errors are reading errors, the kind a judge can tell apart.

`exact_answers` is the measurement: the share of greedy and of sampled answers equal to the reference
(`tiny_world.synthetic_eval.normalize`), per question, so arms can be compared pairwise. The reward arms of
`benchmarks/judge_as_reward.py` besides the judge: `OracleReward` (exact match to the reference, the best a
reward can do here) and `RandomReward` (uniform noise, independent of the text: what no signal does).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "SEEING_POLICY_VERSION",
    "NoisyOracleReward",
    "OracleReward",
    "RandomReward",
    "exact_answers",
    "policy_grpo_config",
    "train_seeing_policy",
]

Row = dict[str, Any]

SEEING_POLICY_VERSION = 2
"""Bumped when `train_seeing_policy` changes what it trains on (2: the warm-up sees only the pictures of the
questions it is given, not the whole training split): benchmarks key their cached policies by it."""


class OracleReward:
    """TRL reward function: 1.0 for a completion equal to the reference answer (normalised), else 0.0."""

    __name__ = "oracle"

    def __call__(self, prompts: list[Any], completions: list[Any], answer: list[str], **kwargs: Any) -> list[float]:
        from judge.reward.inputs import completion_text
        from tiny_world.synthetic_eval import normalize

        return [float(normalize(completion_text(c)) == normalize(a)) for c, a in zip(completions, answer)]


class RandomReward:
    """TRL reward function: uniform noise in [0, 1) from its own seeded generator, whatever the text says."""

    __name__ = "random"

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(f"{seed}:random-reward")

    def __call__(self, prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
        return [self.rng.random() for _ in completions]


class NoisyOracleReward:
    """TRL reward function: the answer key with a judge's error rates: a wrong completion is paid 1.0 with
    probability `false_positive`, a right one 0.0 with `false_negative`.

    Beside a judge with the same rates it tells how often the judge errs from *which* answers it errs on. By
    default the errors are drawn afresh on every call (noise: no answer is overpaid for good); `persistent`
    draws them once per question and answer text, so the same wrong answer is always paid or never, as a judge
    that prefers it would, and a policy can find it again.
    """

    def __init__(self, seed: int, false_positive: float, false_negative: float = 0.0, persistent: bool = False):
        for name, rate in (("false_positive", false_positive), ("false_negative", false_negative)):
            if not 0.0 <= rate <= 1.0:
                raise ValueError(f"{name} ({rate}) must be a probability in [0, 1]")
        self.false_positive, self.false_negative, self.persistent = false_positive, false_negative, persistent
        self.__name__ = "oracle_noisy_fixed" if persistent else "oracle_noisy"
        self.seed = seed
        self.rng = random.Random(f"{seed}:noisy-oracle")
        self.key = OracleReward()

    def __call__(self, prompts: list[Any], completions: list[Any], answer: list[str], **kwargs: Any) -> list[float]:
        from judge.reward.inputs import completion_text
        from tiny_world.synthetic_eval import normalize

        right = self.key(prompts, completions, answer)
        rewards = []
        for r, completion, reference in zip(right, completions, answer):
            if self.persistent:  # one draw per (question, answer): str seeds hash the same in every process
                draw = random.Random(f"{self.seed}:{normalize(reference)}:{normalize(completion_text(completion))}")
            else:
                draw = self.rng
            rewards.append(1.0 - r if draw.random() < (self.false_negative if r else self.false_positive) else r)
        return rewards


def train_seeing_policy(
    records_dir: str | Path,
    items_dir: str | Path,
    train: Sequence[Row],
    out: str | Path,
    *,
    size: str = "tiny",
    seed: int = 1,
    warmup_steps: int = 600,
    sft_max_steps: int = 400,
    sft_learning_rate: float = 3e-3,
    shaded: bool = True,
    correct_share: float = 1.0,
    progress: Any = None,
    wrap_build: Any = None,
) -> dict[str, Any]:
    """Warm up a fresh tiny policy's vision tower on the pictures of `train`, freeze it, SFT it on right
    answers; returns the model folder, the prompt file for GRPO and the wall times.

    `train` are `tiny_world.policy_data.world_questions` rows with image paths relative to `out/data`;
    `correct_share` below 1 mixes in wrong answers (the row's negatives); `progress(step, figures)` follows
    the warm-up and `wrap_build(build)` wraps the SFT trainer's builder (the demo's progress bar)."""
    import time

    from tiny_world.model import build_tiny_model
    from tiny_world.policy_data import write_policy_data
    from tiny_world.recipe import sft_config, warmup_rows
    from tiny_world.vision_warmup import VisionWarmupConfig, warm_up_vision
    from training.recipe import run_recipe
    from training.sft import build_sft_trainer

    out = Path(out)
    files = write_policy_data(train, out / "data", correct_share=correct_share, seed=seed)
    base = build_tiny_model(out / "untrained", size=size, seed=seed)
    start = time.perf_counter()
    # Only the given questions' pictures: questions a caller holds back (a dev split) stay unseen.
    ids = {row["id"] for row in train}
    pictures = [row for row in warmup_rows(records_dir, items_dir) if row["id"] in ids]
    warm = warm_up_vision(
        base,
        pictures,
        image_root=records_dir,
        out_dir=out / "seeing",
        config=VisionWarmupConfig(steps=warmup_steps, seed=seed, cell_head=shaded),
        progress=progress,
    )
    warm_s = time.perf_counter() - start
    start = time.perf_counter()
    config = sft_config(
        out / "seeing",
        files["sft"],
        out / "sft",
        max_steps=sft_max_steps,
        learning_rate=sft_learning_rate,
        seed=seed,
        freeze_vision=True,
    )
    run_recipe(wrap_build(build_sft_trainer) if wrap_build else build_sft_trainer, config)
    return {
        "model": out / "sft",
        "prompts": files["prompts"],
        "warmup_s": round(warm_s, 1),
        "warmup_pictures": len(pictures),
        "warmup_accuracy": {k.removesuffix("_accuracy"): v for k, v in warm.items() if k.endswith("_accuracy")},
        "sft_s": round(time.perf_counter() - start, 1),
    }


POLICY_GRPO_FIELDS = (
    "max_steps",
    "per_device_train_batch_size",
    "num_generations",
    "max_completion_length",
    "learning_rate",
    "beta",
)
"""The policy GRPO settings a run chooses (the demo as `policy_<name>`, the benchmark as `--<name>`)."""


def policy_grpo_fields(settings: Any, prefix: str = "") -> dict[str, Any]:
    """`POLICY_GRPO_FIELDS` read from `settings` (a config or parsed flags) as `prefix + name`."""
    return {name: getattr(settings, prefix + name) for name in POLICY_GRPO_FIELDS}


def policy_grpo_config(
    start: str | Path,
    prompts: str | Path,
    out: str | Path,
    url: str,
    *,
    listwise: bool = False,
    cap_at_reference: bool = False,
    audit: dict[str, Any] | None = None,
    **fields: Any,
) -> Any:
    """The seeing policy's GRPO (`training.policy.JudgePolicyGRPOConfig`) from `start` on `prompts` into `out`,
    rewarded by the server at `url`: pairwise against the reference, or `listwise` (no reference: a prompt's
    completions judged together, in knock-out games of two); pairwise, `cap_at_reference` pays a tie with the
    reference in full and nothing more for beating it; `audit` is the reward's `reward.audit` mapping
    (`judge.reward.audit.AuditConfig`; its `path` defaults to `out/audit.jsonl`). TRL's `grpo` loss,
    temperature 1, the tower frozen; `fields` (max_steps, learning_rate, beta, …) are `JudgePolicyGRPOConfig`
    fields and win."""
    from tiny_world.recipe import TRAINER_DEFAULTS
    from training.policy import JudgePolicyGRPOConfig

    mode = {"mode": "listwise", "reference_column": None} if listwise else {"mode": "pairwise"}
    if cap_at_reference:
        mode["cap_at_reference"] = True
    if audit is not None:
        mode["audit"] = dict(audit)
    settings = dict(temperature=1.0, loss_type="grpo", logging_steps=1, freeze_vision=True, **TRAINER_DEFAULTS)
    return JudgePolicyGRPOConfig(
        model_name_or_path=str(start),
        train_file=str(prompts),
        output_dir=str(out),
        reward={"transport": "http", "url": url, "max_options": 2, **mode},
        **{**settings, **fields},
    )


def exact_answers(
    policy: str | Path,
    rows: Sequence[Row],
    image_root: str | Path,
    *,
    samples: int = 4,
    max_new_tokens: int = 24,
    seed: int = 0,
    swap_images: bool = False,
) -> dict[str, Any]:
    """The policy's greedy answer and `samples` sampled answers (temperature 1) to each question, and how
    many equal the reference: `greedy` and `sampled` shares, `per_question` (greedy 0/1, sampled share) for
    paired comparisons, and the answers. `swap_images` shows each question the next question's picture
    (a policy that sees changes its answers)."""
    from judge.backends.base import ChatRequest, SamplingParams
    from judge.backends.hf import TransformersBackend
    from judge.images import load_image
    from tiny_world.synthetic_eval import normalize

    backend = TransformersBackend(str(policy), device="cpu", max_batch_size=64)
    images = [load_image(r["image"], image_root) for r in rows]
    if swap_images:
        images = images[1:] + images[:1]
    questions = [ChatRequest.user(r["question"], [im]) for r, im in zip(rows, images)]
    greedy = [g.text for g in backend.generate(questions, SamplingParams(max_new_tokens=max_new_tokens))]
    params = SamplingParams(max_new_tokens=max_new_tokens, temperature=1.0, seed=seed)
    sampled_flat = [g.text for g in backend.generate([q for q in questions for _ in range(samples)], params)]
    sampled = [sampled_flat[i * samples : (i + 1) * samples] for i in range(len(rows))]
    right_greedy = [float(normalize(g) == normalize(r["answer"])) for g, r in zip(greedy, rows)]
    right_sampled = [
        sum(normalize(s) == normalize(r["answer"]) for s in group) / samples for group, r in zip(sampled, rows)
    ]
    n = max(1, len(rows))
    return {
        "greedy": round(sum(right_greedy) / n, 4),
        "sampled": round(sum(right_sampled) / n, 4),
        "per_question": {"greedy": right_greedy, "sampled": right_sampled},
        "answers": {"greedy": greedy, "sampled": sampled},
    }
