"""`mrjudge train`: warm-up SFT and judge GRPO recipes over TRL, and policy GRPO with the judge as reward.

    mrjudge train sft    --config configs/judge_sft_tiny.yaml  [key=value …]
    mrjudge train grpo   --config configs/judge_grpo_tiny.yaml [key=value …]
    mrjudge train policy --config configs/policy_grpo_tiny.yaml [key=value …]
    mrjudge train policies --config configs/policies_tiny.yaml [key=value …]

Config files hold `JudgeSFTConfig` / `JudgeGRPOConfig` / `JudgePolicyGRPOConfig` fields (TRL's SFTConfig /
GRPOConfig plus model, LoRA, data and resume fields, and the judge's for `policy`); `key=value` overrides
any of them. `--help-fields` lists them all. `policies` trains several LoRA policies at once over one base
(`training.multi_policy`: a `MultiPolicyConfig` listing `PolicySpec`s).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def add_parser(commands: argparse._SubParsersAction) -> None:
    train = commands.add_parser(
        "train",
        help="train a judge (warm-up SFT, then GRPO), or a policy with the judge as reward (TRL)",
        description=__doc__.split("\n\n")[0],
    )
    stages = train.add_subparsers(dest="stage", metavar="STAGE", required=True)
    for name, what in (
        ("sft", "warm-up SFT on distilled judge traces"),
        ("grpo", "GRPO on MC items with the judge reward"),
        ("policy", "GRPO of a policy on prompts, rewarded by the judge"),
        ("policies", "GRPO of several LoRA policies at once over one base model, in mixed-adapter batches"),
    ):
        p = stages.add_parser(name, help=what, description=f"{what}. Overrides: key=value (values parsed as YAML).")
        p.add_argument("--config", type=Path, help="YAML with the recipe's fields")
        p.add_argument("--help-fields", action="store_true", help="list every config field with its help and exit")
        p.add_argument("overrides", nargs="*", metavar="key=value", help="e.g. max_steps=20 use_lora=true")
        p.set_defaults(run=run, stage=name)


def _config_class(stage: str):
    if stage == "sft":
        from training.sft import JudgeSFTConfig

        return JudgeSFTConfig
    if stage == "policy":
        from training.policy import JudgePolicyGRPOConfig

        return JudgePolicyGRPOConfig
    from training.grpo import JudgeGRPOConfig

    return JudgeGRPOConfig


def _print_fields(*classes: type) -> None:
    import dataclasses

    for cls in classes:
        for f in dataclasses.fields(cls):
            if f.init:
                print(f"{f.name}: {f.metadata.get('help', '')}".strip())


def _run_policies(args: argparse.Namespace) -> int:
    from training.multi_policy import load_multi_policy_config, run_policies
    from training.multi_policy.config import MultiPolicyConfig, PolicySpec

    if args.help_fields:
        _print_fields(MultiPolicyConfig)
        print("\neach policy (PolicySpec):")
        _print_fields(PolicySpec)
        return 0
    try:
        config = load_multi_policy_config(args.config, args.overrides)
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    status = run_policies(config)
    for name, policy in status["policies"].items():
        where = policy["revision"] or "no revision"
        detail = f"failed: {policy['error']}" if policy["error"] else f"→ {where}"
        print(f"{name}: {policy['steps']} steps {detail}")
    return 1 if any(p["error"] for p in status["policies"].values()) else 0  # the others still finished


def run(args: argparse.Namespace) -> int:
    from training.common import close_process_group, load_config

    if args.stage == "policies":
        return _run_policies(args)
    cls = _config_class(args.stage)
    if args.help_fields:
        _print_fields(cls)
        return 0
    try:
        config = load_config(cls, args.config, args.overrides)
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.stage == "sft":
        from training.sft import run_sft as run_stage
    elif args.stage == "policy":
        from training.policy import run_policy as run_stage
    else:
        from training.grpo import run_grpo as run_stage
    result = run_stage(config)
    if int(os.environ.get("RANK", "0")) == 0:  # one line per run, not one per process
        print(f"trained {result.global_step} steps (loss {result.training_loss:.4f}) → {config.output_dir}")
    close_process_group()  # under torchrun / accelerate launch; nothing to do in one process
    return 0
