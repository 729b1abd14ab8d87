"""The stages of `mrjudge demo`, in order: each is a small function from the config and the earlier stages'
folders to its own folder `OUT/<stage>/` and a dict of key figures (what `stage.json` records).

    world → negatives → distill → heldout → untrained → warmup → sft → pool → grpo → evaluate → best_of_n → policy

The judge is trained by the recipe of `benchmarks/learning_curve.py`, taken from one place
(`tiny_world.recipe.TinyJudgeRecipe`, the steps of `config.recipe()`): shaded world, perception warm-up,
`checks` traces. Evaluation is the real VL-RewardBench scorer (mc mode) and MM-Vet best-of-N runner on sets
in their official formats made from the synthetic world (`tiny_world.synthetic_eval`), scored by flaw with the one
rule for undecided items (`tiny_world.heldout`); the policy's data and judged samples are `tiny_world.policy_data`'s
and it is rewarded by the real reward server (`reward_server`) on a loopback port. Paths in the figures are
relative to OUT, so a finished demo folder can be moved.

Each stage is declared beside its function as a `Stage`: the config fields it reads, the stages it builds
on, its figures in one line. Those fields and the earlier stages' hashes make its hash, and the stage reads
the config through a window that answers only the fields its hash covers (`hashed`): a field read but not
hashed fails the run that reads it, instead of letting a later run reuse a stale stage.

The package, one idea per module: `context` (what a stage is and gets), `hashed` (the config as a stage may
read it), `data` (world, negatives, distill, heldout), `judge` (untrained, warmup, sft, pool, grpo),
`evaluation` (evaluate, best_of_n), `policy` (the judge as the reward server of policy GRPO), and the pieces
they share: `heldout_eval` (a judge on the held-out set) and `training` (a trainer's progress bar and
figures). `STAGES`, here, puts them in order.
"""

from tiny_world.demo.stages.context import Stage, StageContext
from tiny_world.demo.stages.data import DISTILL, HELDOUT, NEGATIVES, WORLD
from tiny_world.demo.stages.evaluation import BEST_OF_N, EVALUATE
from tiny_world.demo.stages.hashed import HashedConfig, UnhashedRead, hashed_fields
from tiny_world.demo.stages.judge import GRPO, POOL, SFT, UNTRAINED, WARMUP
from tiny_world.demo.stages.policy import POLICY

__all__ = ["STAGES", "HashedConfig", "Stage", "StageContext", "UnhashedRead", "hashed_fields"]

STAGES: tuple[Stage, ...] = (
    WORLD,
    NEGATIVES,
    DISTILL,
    HELDOUT,
    UNTRAINED,
    WARMUP,
    SFT,
    POOL,
    GRPO,
    EVALUATE,
    BEST_OF_N,
    POLICY,
)
"""The demo's stages in the order they run; a stage builds only on stages before it."""
