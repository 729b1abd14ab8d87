"""The tiny world: everything `mrjudge demo` needs to run the judge's whole life on a CPU with no download.

- `model`: the tiny Qwen2.5-VL factory (also what every test builds its models with).
- `recipe`, `vision_warmup`: the tiny judge's training recipe (perception warm-up, SFT, GRPO budgets).
- `policy_data`, `heldout`, `synthetic_eval`: the policy's prompts and the demo's held-out measurements.
- `demo/`: the demo's config, its stages and the resumable runner.
- `servers/`: loopback stand-ins for what a real run reaches over HTTP (an OpenAI-compatible server over a
  local model, a scripted reasoning model, an MM-Vet grader), used by the demo's checks, tests and benchmarks.

It stands on every floor below (`judge`, `jobs`, `data_synthesis`, `training`, `eval`); nothing below imports it.
"""
