"""`mrjudge train`: warm-up SFT and judge GRPO recipes over TRL, and policy GRPO with the judge as reward.

    mrjudge train sft    --config configs/judge_sft_tiny.yaml  --max-steps 200
    mrjudge train grpo   --config configs/judge_grpo_tiny.yaml max_steps=20     # key=value: the same as the flag
    mrjudge train policy --config configs/policy_grpo_tiny.yaml [--FIELD VALUE …] [key=value …]
    mrjudge train policies --config configs/policies_tiny.yaml [--FIELD VALUE …] [key=value …]

Config files hold `JudgeSFTConfig` / `JudgeGRPOConfig` / `JudgePolicyGRPOConfig` fields (TRL's SFTConfig /
GRPOConfig plus model, LoRA, data and resume fields, and the judge's for `policy`); every field is a flag
over the file (`--max-steps`, `--use-lora`), and any field (a mapping too) can be given as `key=value`.
`--help-fields` lists them all. `policies` trains several LoRA policies at once over one base
(`training.multi_policy`: a `MultiPolicyConfig` listing `PolicySpec`s). The flags of a stage are added when
it runs or shows its help: importing TRL takes seconds.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from pathlib import Path
from typing import Any

from mrjudge.config_flags import ConfigFlags, LazyFlagsParser, add_key_values

RECIPES = {
    "sft": ("training.sft", "JudgeSFTConfig", "run_sft", "warm-up SFT on distilled judge traces"),
    "grpo": ("training.grpo", "JudgeGRPOConfig", "run_grpo", "GRPO on MC items with the judge reward"),
    "policy": ("training.policy", "JudgePolicyGRPOConfig", "run_policy", "GRPO of a policy on prompts, rewarded by the judge"),
    "policies": (
        "training.multi_policy",
        "MultiPolicyConfig",
        "run_policies",
        "GRPO of several LoRA policies at once over one base model, in mixed-adapter batches",
    ),
}  # fmt: skip
"""stage → (module, config class, run function, what it does)."""


def _stage_attr(stage: str, index: int) -> Any:
    import importlib

    module, *names, _ = RECIPES[stage]
    return getattr(importlib.import_module(module), names[index])


def _flags(stage: str) -> ConfigFlags:
    return ConfigFlags(_stage_attr(stage, 0))


def add_parser(commands: argparse._SubParsersAction) -> None:
    train = commands.add_parser(
        "train",
        help="train a judge (warm-up SFT, then GRPO), or a policy with the judge as reward (TRL)",
        description=__doc__.split("\n\n")[0],
    )
    stages = train.add_subparsers(dest="stage", metavar="STAGE", required=True, parser_class=LazyFlagsParser)
    for name, (_, cls, _, what) in RECIPES.items():
        p = stages.add_parser(
            name,
            help=what,
            description=f"{what}. Field default < --config YAML < flags and key=value.",
            add_flags=lambda parser, name=name, cls=cls: _flags(name).add_to(
                parser.add_argument_group(f"{cls} fields (also as key=value)")
            ),
        )
        p.add_argument("--config", type=Path, help="YAML with the recipe's fields; the flags override it")
        p.add_argument("--help-fields", action="store_true", help="list every config field with its help and exit")
        add_key_values(p, "max_steps=20 use_lora=true")
        p.set_defaults(run=run, stage=name)


def _print_fields(*classes: type) -> None:
    for cls in classes:
        for f in dataclasses.fields(cls):
            if f.init:
                print(f"{f.name}: {f.metadata.get('help', '')}".strip())


def _run_policies(config: Any) -> int:
    from training.multi_policy import run_policies

    status = run_policies(config)
    for name, policy in status["policies"].items():
        where = policy["revision"] or "no revision"
        detail = f"failed: {policy['error']}" if policy["error"] else f"→ {where}"
        print(f"{name}: {policy['steps']} steps {detail}")
    return 1 if any(p["error"] for p in status["policies"].values()) else 0  # the others still finished


def _audit_report(output_dir: Path) -> None:
    """After a policy run whose reward was audited: the over-optimisation curve, and the alarm in one line."""
    import json

    summary_file = output_dir / "audit_summary.json"
    if not summary_file.is_file():
        return
    from eval.plots import audit_curve

    summary = json.loads(summary_file.read_text())
    alarm = summary["alarm"]
    png = audit_curve(
        output_dir / "overoptimisation.png",
        summary,
        title=f"Judge reward and audited gold ({summary['auditor']}, {summary['audited']} groups audited)",
    )
    said = f"alarm at step {alarm['step']}: {alarm['reason']}" if alarm["fired"] else "no alarm"
    kept = f"; best audited checkpoint {summary['kept']['checkpoint']}" if summary.get("kept") else ""
    print(f"reward audit: {summary['audited']} groups audited, {said}{kept} → {png}")


def run(args: argparse.Namespace) -> int:
    cls = _stage_attr(args.stage, 0)
    if args.help_fields:
        _print_fields(cls)
        if args.stage == "policies":
            from training.multi_policy.config import PolicySpec

            print("\neach policy (PolicySpec):")
            _print_fields(PolicySpec)
        return 0
    values = _flags(args.stage).values(args)
    if args.stage == "policies":
        from training.multi_policy import load_multi_policy_config

        return _run_policies(load_multi_policy_config(args.config, values))
    from training.config import load_config
    from training.recipe import close_process_group

    config = load_config(cls, args.config, values)
    result = _stage_attr(args.stage, 1)(config)
    if int(os.environ.get("RANK", "0")) == 0:  # one line per run, not one per process
        print(f"trained {result.global_step} steps (loss {result.training_loss:.4f}) → {config.output_dir}")
        _audit_report(Path(config.output_dir))
    close_process_group()  # under torchrun / accelerate launch; nothing to do in one process
    return 0
