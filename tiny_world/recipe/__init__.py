"""The recipe that teaches a tiny judge on a CPU: the data it sees, its prompt, its warm-up, SFT and GRPO.

`benchmarks/learning_curve.py` measures this recipe; `mrjudge demo` runs it end to end. Both take it from
here (`TinyJudgeRecipe`, its defaults and its steps), so the demo's judge is trained exactly the way the
benchmark's numbers were made (docs/learning.md):

- a `small` judge from the tiny-model factory, on synthetic-world questions of a few kinds (attribute,
  count and spatial by default), 84 px pictures (9 image tokens), each grid cell on its own pale
  background (`shaded`), so positions show in the pixels;
- the compact judge prompt (`COMPACT_PROMPT`): the model is tiny and the CPU slow, so every prompt token
  costs steps;
- a perception warm-up of the vision tower (`tiny_world.vision_warmup`), which is then frozen;
- `checks` scene-reasoner traces: the picture's facts keyed by shape, then every option checked fact by fact;
- TRL SFT at lr 1e-3 with warmup-stable-decay, batch 16, no gradient checkpointing; then a short GRPO.

    from tiny_world.recipe import TinyJudgeRecipe
    recipe = TinyJudgeRecipe(sft_max_steps=400)

Each setting has one name from the YAML to TRL: a field that a trainer reads is named as TRL names it
(`num_generations`, `per_device_train_batch_size`), with its stage in front where SFT and GRPO each have
one (`sft_max_steps` → SFT's `max_steps`, `grpo_learning_rate` → GRPO's `learning_rate`). `RENAMED` keeps
the old names readable, with a warning.

The package, one idea per module: `settings` (`TinyJudgeRecipe`: every choice, its checks and its steps,
each a call into the modules below with the choices filled in), `data` (the world, the distilled SFT data,
the warm-up's pictures), `trainers` (the TRL configs of SFT and GRPO with the measured settings, and the
judge on a CPU), `history` (a recorder of the trainers' logs, for the curves) and `diagnostics` (does the
judge's vision tower still see?).
"""

from judge.prompt import COMPACT_PROMPT
from tiny_world.recipe.data import (
    DESCRIBE_PROMPT,
    TRACES,
    check_traces,
    distill_judge_data,
    warmup_rows,
    world_size_for,
    write_kind_world,
)
from tiny_world.recipe.diagnostics import vision_sensitivity
from tiny_world.recipe.history import History
from tiny_world.recipe.settings import RENAMED, TRACE_TOKENS, TinyJudgeRecipe
from tiny_world.recipe.trainers import TRAINER_DEFAULTS, check_group, grpo_config, recipe_judge, sft_config

__all__ = [
    "COMPACT_PROMPT",
    "DESCRIBE_PROMPT",
    "History",
    "RENAMED",
    "TRACE_TOKENS",
    "TRACES",
    "TRAINER_DEFAULTS",
    "TinyJudgeRecipe",
    "check_group",
    "check_traces",
    "distill_judge_data",
    "grpo_config",
    "recipe_judge",
    "sft_config",
    "vision_sensitivity",
    "warmup_rows",
    "world_size_for",
    "write_kind_world",
]
