"""`mrjudge synth all --config FILE`: the whole chain's settings, checked before any stage runs, and the
engine they name."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from data_synthesis.pipeline.models import check_kind
from data_synthesis.pipeline.options import DEFAULT_MAX_FAILED_FRACTION
from data_synthesis.sampling import DEFAULT_CONCURRENCY, MODEL_ROLES, sampling_for
from jobs.executor import Executor
from judge.backends.spec import ModelSpec
from judge.config import fold_dotted_keys

__all__ = ["NESTED_FIELDS", "SynthConfig", "engine_of", "spec_of"]

NESTED_FIELDS = ("model", "reasoner_model", "rewriter_model", "fields", "assemble", "ray") + tuple(
    f"{role}_sampling" for role in MODEL_ROLES
)
"""The mapping fields: set whole in YAML, or one key at a time on the command line (`model.model=…`)."""


@dataclass
class SynthConfig:
    """The whole chain for `mrjudge synth all --config FILE` (YAML with these fields)."""

    out: str = "runs/synth"
    # Input: a source (file, folder or hub id) or, when `source` is null, the synthetic world.
    source: str | None = None
    world_n: int = 200
    world_seed: int = 0
    # How the source is read: the options of `mrjudge synth records` (data_synthesis.sources.write_records).
    split: str = "train"
    """Split of a DatasetDict or hub dataset."""
    dataset_config: str | None = None
    """Hub dataset: config (subset) name, as `load_dataset`'s `name`."""
    revision: str | None = None
    """Hub dataset: branch, tag or commit; pin it for reproducible runs."""
    limit: int | None = None
    """Read at most this many source rows."""
    fields: dict[str, Any] = field(default_factory=dict)
    """Source column names (`FieldMap` fields: id, image, question, answer; `fields.image=picture`), unset ones
    taking the usual spellings; `text_only: true` for a set without images."""
    image_root: str | None = None
    """Folder that relative image paths are resolved against (default: the source's folder)."""
    source_name: str | None = None
    """The records' `source` and the prefix of derived ids (default: the file or dataset name)."""
    max_bad_fraction: float = 0.05
    """Bad rows are skipped (listed in records.summary.json) up to this share; above it the run stops."""
    image_workers: int | None = None
    """Threads decoding the source's images (default: one per core, at most 16)."""
    # Stages
    negatives_generator: str = "scene"
    negatives_n: int = 3
    negatives_max_attempts: int = 3
    """Model calls per record before settling for fewer negatives (`synth negatives --max-attempts`)."""
    negatives_max_new_tokens: int | None = None
    """Same as `generator_sampling.max_tokens` (kept for older configs); unset: the generator's 2048."""
    describer: str = "scene"
    describe_max_new_tokens: int | None = None
    """Same as `describer_sampling.max_tokens` (kept for older configs); unset: the describer's 2048."""
    reasoner: str = "scene"
    reasoner_style: str = "diff"
    """The scene reasoner's trace layout: one of `data_synthesis.world.REASONER_STYLES` (see `scene_reasoner`)."""
    rewriter: str = "rules"
    model: dict[str, Any] | None = None
    """ModelSpec fields for the MLLM stages (model negatives, model describer)."""
    reasoner_model: dict[str, Any] | None = None
    """ModelSpec fields for the text reasoning model (and the rewriter, unless `rewriter_model`)."""
    rewriter_model: dict[str, Any] | None = None
    assemble: dict[str, Any] = field(default_factory=dict)
    """AssembleConfig fields."""
    seed: int = 0
    batch_size: int = 16
    engine: str = "local"
    """Where the per-row stages run: "local" (this process) or "ray" (Ray Data; see `ray`)."""
    ray: dict[str, Any] = field(default_factory=dict)
    """RayConfig fields for `engine: ray` (address, workers, num_cpus_per_worker, num_gpus_per_worker)."""
    # Model stages: decoding, requests in flight, tolerated failures (data_synthesis.sampling)
    reasoner_sampling: dict[str, Any] = field(default_factory=dict)
    """temperature / top_p / max_tokens / seed for the reasoner; unset fields: 0.6 / 0.95 / 32768 / none."""
    rewriter_sampling: dict[str, Any] = field(default_factory=dict)
    """The same for the model rewriter; unset fields: 0.6 / 0.95 / 32768 / none."""
    describer_sampling: dict[str, Any] = field(default_factory=dict)
    """The same for the model describer; unset fields: 0.0 / 1.0 / 2048 / none."""
    generator_sampling: dict[str, Any] = field(default_factory=dict)
    """The same for the model negatives generator; unset fields: 0.7 / 0.8 / 2048 / `seed`."""
    concurrency: int = DEFAULT_CONCURRENCY
    """Requests in flight to an HTTP endpoint (model stages whose models are all behind HTTP)."""
    max_failed_fraction: float = DEFAULT_MAX_FAILED_FRACTION
    """A stage with more failed rows than this share of its input stops the chain (exit status 2)."""
    assemble_with_failures: bool = False
    """Assemble although negatives/describe left failed rows. Off: the chain stops before assemble, because
    letter balancing spans every row, so assembling now and again after the retry would change items."""

    @staticmethod
    def nest_config_values(values: dict[str, Any]) -> dict[str, Any]:
        """`model.model=http://…/v1`, `fields.image=picture`: one key of a nested field at a time (`judge.config`
        asks)."""
        return fold_dotted_keys(values, NESTED_FIELDS)

    def __post_init__(self) -> None:
        for role in MODEL_ROLES:
            sampling_for(role, getattr(self, f"{role}_sampling"))  # unknown keys or bad values fail here
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {self.concurrency}")
        if not 0.0 <= self.max_failed_fraction <= 1.0:
            raise ValueError(f"max_failed_fraction must be in [0, 1], got {self.max_failed_fraction}")
        if self.engine not in ("local", "ray"):
            raise ValueError(f"engine must be 'local' or 'ray', got {self.engine!r}")
        from jobs.executor import RayConfig

        try:
            RayConfig(**self.ray)
        except TypeError as exc:
            raise ValueError(
                f"ray: {exc} (fields: address, workers, num_cpus_per_worker, num_gpus_per_worker)"
            ) from exc
        for name in ("negatives_generator", "describer", "reasoner"):
            check_kind(name, getattr(self, name))
        check_kind("rewriter", self.rewriter, free="rules")
        needed = {
            "negatives_generator": ("model", self.model),
            "describer": ("model", self.model),
            "reasoner": ("reasoner_model", self.reasoner_model),
            "rewriter": ("rewriter_model", self.rewriter_model or self.reasoner_model),
        }
        for name, (model_field, spec) in needed.items():
            if getattr(self, name) == "model" and spec is None:
                raise ValueError(
                    f"{name} is 'model' but `{model_field}` is not set: give it as {model_field}.model=URL_OR_FOLDER "
                    f"(e.g. {model_field}.model=http://127.0.0.1:8000/v1) or as `{model_field}: {{model: …}}` in "
                    "the --config YAML"
                )
        from data_synthesis.source_rows import FieldMap

        try:
            FieldMap(**self.fields)
        except TypeError as exc:
            raise ValueError(f"fields: {exc} (fields: id, image, question, answer, text_only)") from exc
        if not 0.0 <= self.max_bad_fraction <= 1.0:
            raise ValueError(f"max_bad_fraction must be in [0, 1], got {self.max_bad_fraction}")
        if self.source is not None and "scene" in (self.negatives_generator, self.describer, self.reasoner):
            raise ValueError(
                "scene generators only work on the synthetic world: set the model stages, or leave `source` null"
            )


def engine_of(config: SynthConfig) -> Executor:
    """The engine a config names (a Ray engine is built here, Ray itself starts on first use)."""
    from jobs.executor import RayConfig, make_executor

    return make_executor(config.engine, RayConfig(**config.ray) if config.engine == "ray" else None)


def spec_of(fields: dict[str, Any] | None) -> ModelSpec | None:
    """The `ModelSpec` a config's model fields describe (None: no model)."""
    return None if fields is None else ModelSpec(**fields)
