"""Training on TRL: the judge (SFT, then GRPO on its own reward) and a policy (GRPO with the judge as reward).

A recipe is a config that subclasses TRL's (`SFTConfig` / `GRPOConfig`) with our field mixins, a builder that
wires TRL's trainer, and `run_recipe`, which runs it:

    config = load_config(JudgeSFTConfig, "configs/judge_sft_tiny.yaml", ["max_steps=20"])  # training.config
    run_sft(config)  # run_recipe(build_sft_trainer, config): resume, train, save (training.recipe)

One idea per module:
- the recipes: `sft` (judge SFT), `grpo` (judge GRPO) and its reward `judge_reward`, `policy` (policy GRPO with
  the judge as reward) and its `reward` keys `policy_keys`; `data` reads the judge's training files;
- what they share: `model_config` (`JudgeModelArguments`, the fields they add to TRL's config, and
  `get_peft_config`), `model_loading` (the model, its processor, an adapter continued or merged), `config`
  (YAML and overrides in, the resolved config out), `recipe` (the run's lifecycle: build, resume, train, save,
  close), `vision_learning_rate` (the vision tower's optimizer groups), `rank_fingerprints` (evidence that data-
  parallel ranks agree);
- LoRA runs: `adapter_export` (each save becomes an adapter store revision) and `handoff` (only the adapter goes
  to a vLLM generation server);
- GRPO's loss: `grpo_loss` (TRL's loss as per-row terms), `replay_trainer` and the `replay` package (the same
  loss at one prompt's memory); `multi_policy` trains several LoRA policies over one resident base.
"""
