"""Does the judge's reward teach a policy? Policy GRPO on 2 CPU cores, rewarded by a tiny judge in process.

    python -m benchmarks.policy_reward_curve --out runs/policy_reward_curve

Everything is built here from the synthetic world in about three minutes (one thread), with no download; the
bare run took 172 s on 2 CPU cores (docs/policy.md):

- **Judge**: a `tiny` Qwen2.5-VL from the tiny-model factory after a short warm-up SFT (`training.sft`) on
  pairwise world items whose better answer is the *complete* one: the reference answer against the
  world's `incomplete` negative, which leaves out the asked part ("The triangle is at the bottom left."
  for "What colour is the triangle?"), and against malformed answers (word salad, random tokens, a word
  repeated, the reference shuffled, cut short or with junk after it). The trace gives a verdict per option:
  `<think>A: complete. B: malformed.</think><answer>A</answer>`. A preference a tiny judge learns in about
  a minute; judging which colour is right would take it far longer (see `benchmarks/learning_curve.py`).
- **Policy**: another `tiny` Qwen2.5-VL, warm-started by SFT on world answers of which only
  `--complete-share` (25 %) are complete: it mostly answers incompletely.
- **GRPO**: the repository's recipe (`training.policy`, TRL `GRPOTrainer`, a small KL term) with the judge
  in process in pairwise mode against the world's reference answers, so the reward of a completion is the
  judge's probability that it beats the reference (both display orders): about 0.5 for a complete answer
  (the judge cannot tell two complete answers apart), about 0 for an incomplete or malformed one.

What it took (each found by a run of this script): with complete-vs-incomplete pairs only, the policy
learnt word salad the judge had never seen (" in in in in unsafe in…") and was paid as much as the
reference; and with a judge budget shorter than its longest trace (24 tokens), every verdict on a
malformed answer was cut off, undecided, and worth 0.5. A judge is a reward model that can be gamed.

Before and after GRPO, `--heldout` world questions the policy never trained on get `--samples` sampled
completions each (temperature 1, `tiny_world.policy_data.judge_samples`), judged the same way:
`reward_before` / `reward_after` are their mean reward (an unscored one counts 0.5, `tiny_world.heldout`'s rule
for undecided items, as does a held-out pair in `judge_heldout_accuracy`), `forms_before` / `forms_after` the
shares of completions in the complete template, the incomplete one, or neither (a regex per question kind, independent of the judge: it tells learning from reward
hacking). Prints one JSON line; saves the mean training reward per step as PNG beside `--out`.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from benchmarks.kit import rounded
from eval.plots import reward_curve
from judge.prompt import PromptConfig, build_messages
from tiny_world.heldout import mean_reward, reward_choice, score_choices
from tiny_world.policy_data import judge_samples, write_policy_data
from tiny_world.recipe import History, sft_config

COMPACT_PROMPT = PromptConfig(
    instruction="Which candidate answers the question about the image best?",
    criteria=None,
    answer_format="Check each candidate in <think></think>, then answer <answer>X</answer>.",
)
KINDS = ("attribute", "spatial", "ocr", "arithmetic")
"""Question kinds whose world items have an incomplete negative (a count of one often has none)."""

TEMPLATES = {
    "attribute": (r"The \w+ at the [\w ]+ is \w+\.", r"The \w+ is at the [\w ]+\."),
    "spatial": (
        r"The \w+ \w+ is (to the left of|to the right of|above|below) the \w+ \w+\.",
        r"The \w+ \w+ is near the \w+ \w+\.",
    ),
    "ocr": (r'The word "\w+" is written in \w+\.', r'The word "\w+" is written\.'),
    "arithmetic": (r"The numbers are \d+ and \d+, and \d+ \+ \d+ = \d+\.", r"The numbers are \d+ and \d+\."),
}
"""The complete and the incomplete answer template per question kind: judge-independent bookkeeping of what
the policy writes (facts are not checked, only the form)."""


def garbage(reference: str, rng: random.Random, vocabulary: list[str], tokens: list[str]) -> str:
    """A malformed answer, of the kinds a policy drifts into: word salad, random tokens, one word repeated,
    the reference shuffled or cut short, or the reference with junk after it."""
    words = reference.split()
    kind = rng.randrange(6)
    if kind == 0:
        return " ".join(rng.choice(vocabulary) for _ in range(rng.randint(3, 14)))
    if kind == 1:
        return "".join(rng.choice(tokens) for _ in range(rng.randint(3, 24))).strip() or "."
    if kind == 2:
        return " ".join([rng.choice(vocabulary + tokens).strip() or "in"] * rng.randint(3, 16))
    if kind == 3:
        rng.shuffle(words)
        return " ".join(words)
    if kind == 4:
        return " ".join(words[: rng.randint(1, max(1, len(words) - 3))])
    return reference + " " + " ".join(rng.choice(vocabulary) for _ in range(rng.randint(2, 10)))


def make_data(out: Path, args: argparse.Namespace) -> dict[str, Any]:
    """World items with their incomplete negative, split into train and held-out questions; the files."""
    from data_synthesis.world import load_world, scene_negatives, write_world
    from jobs.jsonl import write_jsonl_atomic
    from tiny_world.model import build_tokenizer

    world = write_world(args.world_n, args.seed, out / "world", size=args.image_size)
    rows = []
    for item in load_world(world):
        kind = item.task.kind
        negatives = [n.text for n in scene_negatives(item, 12, random.Random(item.record.id)) if n.flaw == "incomplete"]
        if kind in KINDS and negatives:
            record = item.record
            rows.append({"id": record.id, "image": record.image, "question": record.question,
                         "answer": record.answer, "incomplete": negatives[0], "kind": kind})  # fmt: skip
    heldout, train = rows[: args.heldout], rows[args.heldout :]
    rng = random.Random(args.seed)

    vocabulary = sorted({w for r in train for w in f"{r['answer']} {r['incomplete']}".split()} | set("=+.,0123456789"))
    tokenizer = build_tokenizer()  # the tiny models' tokenizer: random tokens are what a drifting policy writes
    tokens = [t for t in (tokenizer.decode([i]) for i in range(len(tokenizer))) if t and not t.startswith("<|")]
    for row in heldout:  # fresh malformed answers, to check the judge on
        row["malformed"] = garbage(row["answer"], random.Random(row["id"]), vocabulary, tokens)
    judge_sft = []
    for row in train:  # the complete answer against flawed ones, in both display orders, a verdict per option
        flawed = [(row["incomplete"], "incomplete")]
        flawed += [(garbage(row["answer"], rng, vocabulary, tokens), "malformed") for _ in range(args.garbage_pairs)]
        for answer, verdict in flawed:
            for first in (0, 1):
                pair, verdicts = [row["answer"], answer], ["complete", verdict]
                if first == 1:
                    pair, verdicts = pair[::-1], verdicts[::-1]
                trace = f"<think>A: {verdicts[0]}. B: {verdicts[1]}.</think><answer>{'AB'[first]}</answer>"
                messages = build_messages(row["question"], pair, n_images=1, config=COMPACT_PROMPT)
                messages.append({"role": "assistant", "content": trace})
                judge_sft.append({"images": [row["image"]], "messages": messages})
    write_jsonl_atomic(world / "judge_sft.jsonl", judge_sft)
    # The policy's warm start: complete answers with `complete_share`, else the incomplete one; the GRPO
    # prompts are plain world records (question → prompt, answer → reference).
    wrong = lambda row, rng: row["incomplete"]  # noqa: E731
    write_policy_data(train, world, correct_share=args.complete_share, seed=args.seed, wrong_answer=wrong)
    (world / "judge.yaml").write_text(yaml.safe_dump({"prompt": vars(COMPACT_PROMPT)}))
    return {"world": world, "train": train, "heldout": heldout}


def answer_form(kind: str, text: str) -> str:
    """ "complete", "incomplete" or "other", by the templates of the question's kind."""
    complete, incomplete = TEMPLATES[kind]
    text = text.strip()
    return "complete" if re.fullmatch(complete, text) else "incomplete" if re.fullmatch(incomplete, text) else "other"


def sft(model: Path, train_file: Path, out: Path, steps: int, args: argparse.Namespace, history: Any) -> None:
    from training.sft import run_sft

    config = sft_config(
        model,
        train_file,
        out,
        max_steps=steps,
        per_device_train_batch_size=args.batch_size,
        learning_rate=args.sft_lr,
        seed=args.seed,
        warmup_fraction=0.05,
        disable_tqdm=True,
    )
    run_sft(config, callbacks=[history.callback()])


def judge_accuracy(reward: Any, rows: list[dict[str, Any]], world: Path, flawed: str) -> float:
    """Held-out pairs won by the complete answer against `row[flawed]` (reward above one half), a pair the
    judge leaves undecided counting one half (`tiny_world.heldout`)."""
    from judge.images import load_image

    rewards = reward(
        prompts=[r["question"] for r in rows],
        completions=[r["answer"] for r in rows],
        image=[load_image(r["image"], world) for r in rows],
        answer=[r[flawed] for r in rows],  # the "reference" the complete answer is judged against
    )
    return score_choices({"choice": reward_choice(r), "label": 0} for r in rewards)["accuracy"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("runs/policy_reward_curve"))
    parser.add_argument("--world-n", type=int, default=800, help="world items drawn (4 of every 5 kinds are used)")
    parser.add_argument("--image-size", type=int, default=56, help="56 px → 4 image tokens per picture")
    parser.add_argument("--heldout", type=int, default=32, help="questions kept out of every training stage")
    parser.add_argument("--samples", type=int, default=4, help="sampled completions per held-out question")
    parser.add_argument("--judge-sft-steps", type=int, default=300)
    parser.add_argument("--policy-sft-steps", type=int, default=150)
    parser.add_argument("--garbage-pairs", type=int, default=2, help="malformed-answer pairs per question (judge)")
    parser.add_argument("--complete-share", type=float, default=0.25, help="complete answers in the policy's SFT")
    parser.add_argument("--sft-lr", type=float, default=3e-3)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--grpo-steps", type=int, default=120)
    parser.add_argument("--grpo-lr", type=float, default=3e-4)
    parser.add_argument("--beta", type=float, default=0.04, help="KL penalty: keeps the policy near its SFT start")
    parser.add_argument("--num-generations", type=int, default=4)
    parser.add_argument("--max-completion-length", type=int, default=24)
    parser.add_argument("--judge-max-new-tokens", type=int, default=28, help="the longest trace is 24 tokens")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the machine is shared)")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


class Heldout(NamedTuple):
    """Sampled completions on the held-out questions, judged: the mean reward, each answer form's share, and the
    samples themselves."""

    reward: float
    forms: dict[str, float]
    samples: list[dict[str, Any]]


def heldout_reward(
    policy: Path, reward: Any, rows: list[dict[str, Any]], world: Path, args: argparse.Namespace
) -> Heldout:
    """Mean judge reward and the share of each answer form, of sampled completions on questions the policy never
    trained on."""
    samples = judge_samples(
        policy, reward, rows, world, samples=args.samples, max_new_tokens=args.max_completion_length, seed=args.seed
    )
    forms = [answer_form(s["kind"], s["completion"]) for s in samples]
    shares = {form: forms.count(form) / len(forms) for form in ("complete", "incomplete", "other")}
    kept = [{"question": s["question"], "completion": s["completion"], "form": f, "reward": s["reward"]}
            for s, f in zip(samples, forms)]  # fmt: skip
    return Heldout(mean_reward(s["reward"] for s in samples), shares, kept)


@contextmanager
def timed(seconds: dict[str, float], key: str) -> Iterator[None]:
    """`seconds[key]`: the wall time of the block, to a tenth of a second."""
    began = time.perf_counter()
    yield
    seconds[key] = round(time.perf_counter() - began, 1)


def judge_reward(judge: Path, args: argparse.Namespace) -> Any:
    """The trained judge in process, pairwise against the reference answer in both display orders."""
    from judge.judging import JudgeConfig
    from judge.reward.trl.local import InProcessJudgeReward

    judge_config = JudgeConfig(orders=2, max_new_tokens=args.judge_max_new_tokens, batch_size=32, prompt=COMPACT_PROMPT)
    return InProcessJudgeReward(str(judge), judge_config=judge_config, mode="pairwise", reference_column="answer",
                                backend_kwargs={"device": "cpu", "max_batch_size": 64})  # fmt: skip


def grpo_config(out: Path, world: Path, args: argparse.Namespace) -> Any:
    """The policy's GRPO from its SFT start on the world's prompts, rewarded by the judge in process."""
    from training.policy import JudgePolicyGRPOConfig

    return JudgePolicyGRPOConfig(
        model_name_or_path=str(out / "policy-sft"),
        train_file=str(world / "prompts.jsonl"),
        output_dir=str(out / "policy-grpo"),
        reward={
            "transport": "in_process",
            "model": str(out / "judge"),
            "config_file": str(world / "judge.yaml"),
            "mode": "pairwise",
            "judge": {"orders": 2, "max_new_tokens": args.judge_max_new_tokens, "batch_size": 32},
        },
        max_steps=args.grpo_steps,
        per_device_train_batch_size=args.batch_size,
        num_generations=args.num_generations,
        max_completion_length=args.max_completion_length,
        temperature=1.0,
        learning_rate=args.grpo_lr,
        beta=args.beta,
        logging_steps=1,
        use_cpu=True,
        bf16=False,
        report_to="none",
        save_strategy="no",
        seed=args.seed,
        disable_tqdm=True,
    )


def save_curves(out: Path, histories: dict[str, History], before: Heldout, after: Heldout) -> None:
    """The GRPO reward curve as PNG, every stage's logs, and the held-out samples before and after."""
    reward_curve(out / "policy_reward_curve.png", histories["grpo"].logs, before=before.reward, after=after.reward,
                 xlabel="GRPO step", window=10, ylim=(0, 0.7), legend_loc="lower right")  # fmt: skip
    (out / "history.json").write_text(json.dumps({k: h.logs for k, h in histories.items()}))
    (out / "heldout_samples.json").write_text(json.dumps({"before": before.samples, "after": after.samples}, indent=1))


def figures(args: argparse.Namespace, accuracy: dict[str, float], questions: int, before: Heldout, after: Heldout,
            curve: list[float]) -> dict[str, Any]:  # fmt: skip
    """The JSON line's figures: the judge and the policy, their held-out measures (to 4 decimals), the training
    reward's first and last tenth, and the GRPO settings."""
    tenth = max(1, len(curve) // 10)
    measured = {
        "benchmark": "policy_reward_curve",
        "judge": f"tiny Qwen2.5-VL, {args.judge_sft_steps} SFT steps on world pairs (complete vs incomplete / "
        "malformed); in process, pairwise vs the reference answer, 2 display orders",
        "policy": f"tiny Qwen2.5-VL, {args.policy_sft_steps} SFT steps on world answers "
        f"({args.complete_share:.0%} complete)",
        "judge_heldout_accuracy": {f"complete_vs_{k}": v for k, v in accuracy.items()},
        "heldout_questions": questions,
        "samples_per_question": args.samples,
        "reward_before": before.reward,
        "reward_after": after.reward,
        "forms_before": before.forms,
        "forms_after": after.forms,
        "train_reward_first_10pct": sum(curve[:tenth]) / tenth,
        "train_reward_last_10pct": sum(curve[-tenth:]) / tenth,
    }
    return {
        **rounded(measured, 4),
        "steps": len(curve),
        "grpo_lr": args.grpo_lr,
        "beta": args.beta,
        "batch": f"{args.batch_size // args.num_generations} prompts × {args.num_generations} completions",
    }


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)

    import torch

    from tiny_world.model import build_tiny_model
    from training.policy import run_policy

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    start = time.perf_counter()
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    data = make_data(out, args)
    world, heldout = data["world"], data["heldout"]
    histories = {"judge_sft": History(), "policy_sft": History(), "grpo": History()}
    seconds: dict[str, float] = {}
    judge_base = build_tiny_model(out / "judge-untrained", size="tiny", seed=args.seed)
    policy_base = build_tiny_model(out / "policy-untrained", size="tiny", seed=args.seed + 1)

    with timed(seconds, "judge_sft_s"):
        sft(judge_base, world / "judge_sft.jsonl", out / "judge", args.judge_sft_steps, args, histories["judge_sft"])
    reward = judge_reward(out / "judge", args)
    accuracy = {flawed: judge_accuracy(reward, heldout, world, flawed) for flawed in ("incomplete", "malformed")}

    with timed(seconds, "policy_sft_s"):
        sft(policy_base, world / "policy_sft.jsonl", out / "policy-sft", args.policy_sft_steps, args,
            histories["policy_sft"])  # fmt: skip
    before = heldout_reward(out / "policy-sft", reward, heldout, world, args)

    config = grpo_config(out, world, args)
    with timed(seconds, "grpo_s"):
        run_policy(config, callbacks=[histories["grpo"].callback()])
    after = heldout_reward(out / "policy-grpo", reward, heldout, world, args)

    save_curves(out, histories, before, after)
    curve = [r["reward"] for r in histories["grpo"].logs if "reward" in r]
    result = {
        **figures(args, accuracy, len(heldout), before, after, curve),
        **seconds,
        "wall_s": round(time.perf_counter() - start, 1),
        "threads": args.threads,
        "sample_before": before.samples[0]["completion"],
        "sample_after": after.samples[0]["completion"],
        "curve": str(out / "policy_reward_curve.png"),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
