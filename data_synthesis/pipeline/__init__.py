"""The data engine's stages wired to folders: what `mrjudge synth <stage>` and `synth all` run.

    records/world → negatives → describe → assemble → distill
    records.jsonl   negatives.jsonl  described.jsonl  items.jsonl (+ rl/)  distilled.jsonl (+ sft/)

Each stage reads the previous stage's file from `--input` and writes its own into `--out` (the same
folder is fine and is what `synth all` does); image paths are rewritten relative to the output folder.

The package, one idea per module: `inputs` (a stage's rows from the input folder), `options` (the options
every per-row stage takes, and the call that runs one through `data_synthesis.stage_runner`), `models` (the
model-or-scene choice each stage makes, and how a chosen model is set up), one module per stage runner
(`negatives`, `describe`, `assemble`, `distill`), `config` (`SynthConfig`, the whole chain's settings) and
`chain` (`run_all`, the stages one after the other). What each stage does to a row is in the module of the
same name one floor up (`data_synthesis.negatives`, …).
"""

from data_synthesis.pipeline.assemble import run_assemble
from data_synthesis.pipeline.chain import run_all
from data_synthesis.pipeline.config import SynthConfig, engine_of
from data_synthesis.pipeline.describe import run_describe
from data_synthesis.pipeline.distill import run_distill
from data_synthesis.pipeline.inputs import load_rows
from data_synthesis.pipeline.negatives import run_negatives
from data_synthesis.pipeline.options import DEFAULT_MAX_FAILED_FRACTION, STAGE_DEFAULTS, StageOptions
from judge.backends.spec import ModelSpec

__all__ = [
    "DEFAULT_MAX_FAILED_FRACTION",
    "ModelSpec",
    "STAGE_DEFAULTS",
    "StageOptions",
    "SynthConfig",
    "engine_of",
    "load_rows",
    "run_all",
    "run_assemble",
    "run_describe",
    "run_distill",
    "run_negatives",
]
