"""What the SFT and GRPO recipes share: the judge-specific config fields, model set-up, config files.

Configs are TRL's own `SFTConfig` / `GRPOConfig` extended with `JudgeModelArguments`' fields, loaded from
YAML with `key=value` overrides from the command line, so every TRL and `TrainingArguments` option works
as documented there and the help text of each field is its documentation.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml
from transformers import TrainerCallback

from judge.config import config_values, parse_key_values

__all__ = [
    "JudgeModelArguments",
    "RankFingerprintCallback",
    "build_trainer",
    "load_training_model",
    "VisionLearningRateMixin",
    "with_vision_learning_rate",
    "latest_checkpoint",
    "load_config",
    "parameter_fingerprint",
    "post_init_next",
    "prepare_model",
    "run_recipe",
    "save_resolved_config",
]

C = TypeVar("C")


@dataclass
class JudgeModelArguments:
    """Fields both judge recipes add to TRL's configs."""

    # Model
    model_name_or_path: str | None = field(
        default=None,
        metadata={
            "help": "Judge to train: a folder or hub id (e.g. Qwen/Qwen2.5-VL-7B-Instruct), or a LoRA adapter "
            "folder from an earlier use_lora run (see use_lora for what happens to it)."
        },
    )
    base_model_name_or_path: str | None = field(
        default=None,
        metadata={
            "help": "When model_name_or_path is an adapter folder: its base model, instead of the one its "
            "adapter_config.json names (for a base that moved or was written on another machine)."
        },
    )
    freeze_vision: bool = field(
        default=False, metadata={"help": "Keep the vision tower fixed (train the language side only)."}
    )
    vision_learning_rate: float | None = field(
        default=None,
        metadata={
            "help": "Learning rate of the vision tower and its merger, in their own optimizer groups "
            "(default: learning_rate, one group)."
        },
    )
    # Image size (Qwen's min_pixels / max_pixels)
    min_pixels: int | None = field(
        default=None,
        metadata={
            "help": "Images with fewer pixels are enlarged to about this many (aspect kept, sides multiples of 28) "
            "by the model's processor (default: its own config)."
        },
    )
    max_pixels: int | None = field(
        default=None,
        metadata={
            "help": "Images with more pixels are shrunk to at most this many by the model's processor, and the "
            "saved processor keeps it. Each 28x28 block is one visual token: 1003520 (1280*28*28) caps an image at "
            "1,280; Qwen2.5-VL's stock 12845056 allows ~16k, more than a 4096-token max_length holds "
            "(default: the processor's own config)."
        },
    )
    # LoRA (PEFT)
    use_lora: bool = field(
        default=False,
        metadata={
            "help": "Train LoRA adapters instead of all weights. Starting from an adapter folder, true keeps "
            "training that adapter (its own rank, alpha and targets; the lora_* fields are not used) and false "
            "merges it into the base and trains all weights. For a new LoRA over the merged model, run "
            "`mrjudge adapters merge ADAPTER --out DIR` and start from DIR."
        },
    )
    lora_r: int = field(default=16, metadata={"help": "LoRA rank; higher fits more and costs more memory."})
    lora_alpha: int = field(default=32, metadata={"help": "LoRA scaling numerator (alpha / r scales the update)."})
    lora_dropout: float = field(default=0.05, metadata={"help": "Dropout on the LoRA input."})
    lora_target_modules: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        metadata={"help": "Language-model module names that get adapters (the vision tower never does)."},
    )
    # Adapter store (LoRA runs): every save becomes a revision servers can load (`mrjudge adapters`)
    adapter_store: str | None = field(
        default=None, metadata={"help": "Adapter store folder to export each saved LoRA adapter to (needs use_lora)."}
    )
    adapter_policy: str | None = field(
        default=None, metadata={"help": "Policy name the exported revisions go under (default: output_dir's name)."}
    )
    adapter_parent: str | None = field(
        default=None, metadata={"help": "Revision this run continues (policy@rev), recorded as the first parent."}
    )
    # Data
    train_file: str | None = field(
        default=None, metadata={"help": "Training data from `mrjudge synth` (sft/train.jsonl or rl/train.jsonl)."}
    )
    eval_file: str | None = field(default=None, metadata={"help": "Optional validation data in the same format."})
    keep_text_only_rows: bool = field(
        default=False,
        metadata={
            "help": "Keep text-only rows of a data file that also has images (default: drop them, with their count "
            "in the log; under DeepSpeed ZeRO-3 a batch without images on one rank hangs training)."
        },
    )
    resume: bool = field(
        default=False,
        metadata={"help": "Resume from the last checkpoint in output_dir (optimizer and RNG state included)."},
    )
    rank_fingerprints: bool = field(
        default=False,
        metadata={
            "help": "Write each process's sha256 of its parameters at train start and end to "
            "output_dir/rank_fingerprints/rank{R}.json (data-parallel replicas must agree; sharded ones differ)."
        },
    )

    def __post_init__(self) -> None:
        from judge.images import PixelRange

        PixelRange(self.min_pixels, self.max_pixels)  # refused when the config loads
        post_init_next(self, JudgeModelArguments)


def post_init_next(config: Any, mixin: type) -> None:
    """Run the `__post_init__` after `mixin`'s in `config`'s MRO, if any: a field mixin's checks, then those of the
    next mixin or of the TRL config it is mixed into."""
    parent = getattr(super(mixin, config), "__post_init__", None)
    if parent is not None:
        parent()


def load_config(
    cls: type[C], path: str | Path | None = None, overrides: list[str] | Mapping[str, Any] | None = None
) -> C:
    """`cls` from a YAML file with overrides: `key=value` strings (values parsed as YAML: `max_steps=20`,
    `use_lora=true`) or a mapping of field values (`mrjudge train`'s flags).

    Unknown keys fail with the list of valid ones; TRL's own checks run in `__post_init__`.
    """
    from transformers import HfArgumentParser

    parsed = dict(overrides) if isinstance(overrides, Mapping) else parse_key_values(overrides or [])
    values = config_values(cls, path, parsed, fields_hint="see `mrjudge train … --help-fields` for the valid ones")
    for name in ("model_name_or_path", "train_file"):
        if not values.get(name):
            raise ValueError(f"{cls.__name__}.{name} is required (set it in the YAML or as {name}=…)")
    (config,) = HfArgumentParser(cls).parse_dict(values, allow_extra_keys=False)
    return config


def save_resolved_config(config: Any, output_dir: str | Path) -> Path:
    """Write every field's final value next to the checkpoints, so a run can be reproduced from its folder."""
    path = Path(output_dir) / "mrjudge_config.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    values = config.to_dict()  # TrainingArguments' own serialisation: enums as their values, no secrets
    plain = json.loads(json.dumps(values, default=str))
    path.write_text(f"# resolved {type(config).__name__}\n" + yaml.safe_dump(plain, sort_keys=True))
    return path


def latest_checkpoint(output_dir: str | Path) -> str | None:
    from transformers.trainer_utils import get_last_checkpoint

    return get_last_checkpoint(str(output_dir)) if Path(output_dir).is_dir() else None


def prepare_model(
    args: JudgeModelArguments, *, dtype: Any = None, checkpoint: str | None = None
) -> tuple[Any, Any, Any]:
    """Load the judge and its processor; freeze the vision tower and/or build a LoRA config as asked.

    `checkpoint` (when resuming full fine-tuning) is where the weights come from: `Trainer` restores a
    checkpoint with a non-strict `load_state_dict`, and Qwen2.5-VL checkpoints are saved under renamed
    keys (`model.layers…` for `model.language_model.layers…`), so its own restore silently keeps the
    *initial* weights. `from_pretrained` applies the renaming. LoRA checkpoints hold adapters only and
    are restored by the trainer.

    A LoRA adapter folder as `model_name_or_path` loads over its base: with `use_lora` as the trainable
    PEFT model itself (the trainer keeps training it; TRL's GRPO then takes a frozen copy of it as the KL
    reference), without it merged into the base for full fine-tuning.

    The processor resizes images into [`min_pixels`, `max_pixels`] when they are set (TRL's collators call it),
    and keeps that range when the trainer saves it.

    Returns (model, processor, peft_config or None) — the trainer applies the PEFT config itself.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText

    from judge.models import (
        load_adapter_onto,
        load_base_config,
        load_processor,
        merge_adapter_into,
        processor_folder,
        resolve_adapter,
        set_pixel_range,
    )

    source = resolve_adapter(args.model_name_or_path, args.base_model_name_or_path)
    # A local base is loaded by its absolute path, which PEFT writes into every adapter this run saves
    # (`base_model_name_or_path`), so the next command finds the base from any working directory.
    path = source.base if source else _absolute_if_local(args.model_name_or_path)
    config = load_base_config(source) if source else AutoConfig.from_pretrained(path)
    is_vlm = getattr(config, "vision_config", None) is not None
    auto = AutoModelForImageTextToText if is_vlm else AutoModelForCausalLM
    weights = checkpoint if checkpoint and not args.use_lora else path
    model = auto.from_pretrained(weights, dtype=dtype or torch.float32)
    processor = set_pixel_range(
        load_processor(processor_folder(source) if source else path, is_vlm=is_vlm, config_path=path),
        min_pixels=args.min_pixels,
        max_pixels=args.max_pixels,
    )
    if source is not None and args.use_lora:
        _warn_unused_lora_fields(args, source.config)
        model = load_adapter_onto(model, source, trainable=True)
        return model, processor, None  # already PEFT-wrapped: the trainer must not add a second adapter
    if source is not None and weights == path:  # a full fine-tuning checkpoint already holds the merged weights
        _check_mergeable_here(source)
        model = merge_adapter_into(model, source)
    if args.freeze_vision and is_vlm:
        visual = getattr(model, "visual", None) or model.model.visual
        for param in visual.parameters():
            param.requires_grad_(False)
    peft_config = None
    if args.use_lora:
        from peft import LoraConfig

        peft_config = LoraConfig(
            r=args.lora_r,
            lora_alpha=args.lora_alpha,
            lora_dropout=args.lora_dropout,
            # A regex, so the vision tower's projections (which share these names) stay frozen.
            target_modules=rf"^(?!.*visual).*\.({'|'.join(args.lora_target_modules)})$",
            task_type="CAUSAL_LM",
        )
    return model, processor, peft_config


def load_training_model(config: Any, checkpoint: str | None, *, left_pad: bool = False) -> tuple[Any, Any, Any]:
    """`prepare_model` in the recipe's dtype (bf16 or float32); `left_pad` for GRPO, whose prompts TRL left-pads:
    the processor must pad the same way, or Qwen2.5-VL's mm_token_type_ids land beside the image tokens."""
    import torch

    dtype = torch.bfloat16 if config.bf16 else torch.float32
    model, processor, peft_config = prepare_model(config, dtype=dtype, checkpoint=checkpoint)
    if left_pad:
        getattr(processor, "tokenizer", processor).padding_side = "left"
    return model, processor, peft_config


def build_trainer(
    trainer_class: type,
    config: Any,
    loaded: tuple[Any, Any, Any],
    load_dataset: Callable[[str], Any],
    *,
    callbacks: list[Any] | None = None,
    **extra: Any,
) -> Any:
    """`trainer_class` (with the vision learning rate when set) over `loaded` = (model, processor, peft_config),
    the config's train and optional eval files read by `load_dataset`; `extra` are trainer keywords (rewards)."""
    model, processor, peft_config = loaded
    train = load_dataset(config.train_file)
    evaluation = load_dataset(config.eval_file) if config.eval_file else None
    return with_vision_learning_rate(trainer_class, config)(
        model=model,
        args=config,
        train_dataset=train,
        eval_dataset=evaluation,
        processing_class=processor,
        peft_config=peft_config,
        callbacks=callbacks,
        **extra,
    )


def _absolute_if_local(path: str) -> str:
    return str(Path(path).expanduser().resolve()) if Path(path).expanduser().is_dir() else path


def _check_mergeable_here(source: Any) -> None:
    """A merge needs whole weights; under DeepSpeed ZeRO-3 each rank holds a shard from the moment they load."""
    from transformers.integrations import is_deepspeed_zero3_enabled

    if is_deepspeed_zero3_enabled():
        raise ValueError(
            f"model_name_or_path is the adapter {source.adapter} and use_lora=false asks to merge it, but under "
            "DeepSpeed ZeRO-3 the base loads sharded and cannot be merged in place: run `mrjudge adapters merge "
            f"{source.adapter} --out DIR` once and set model_name_or_path=DIR, or continue the adapter (use_lora=true)"
        )


def _warn_unused_lora_fields(args: JudgeModelArguments, adapter_config: dict[str, Any]) -> None:
    import warnings

    defaults = {f.name: f.default for f in dataclasses.fields(JudgeModelArguments)}
    changed = [
        f"{name}={getattr(args, name)} (the adapter's is {adapter_config.get(key)})"
        for name, key in (("lora_r", "r"), ("lora_alpha", "lora_alpha"), ("lora_dropout", "lora_dropout"))
        if getattr(args, name) != defaults[name] and getattr(args, name) != adapter_config.get(key)
    ]
    if changed:
        warnings.warn(
            f"continuing the adapter {args.model_name_or_path} with its own settings; not used: {', '.join(changed)}. "
            "Merge it first (`mrjudge adapters merge`) to train a new LoRA with these settings.",
            stacklevel=3,
        )


def _is_vision(name: str) -> bool:
    return "visual." in name or name.startswith("visual")


class VisionLearningRateMixin:
    """Put the vision tower's parameters in their own optimizer groups at `args.vision_learning_rate`.

    Mixed in before a `transformers.Trainer` subclass. The scheduler is built on top of these groups, so it
    scales both rates alike (warm-up, decay).
    """

    def create_optimizer(self, model: Any = None) -> Any:
        optimizer = super().create_optimizer(model)  # type: ignore[misc]
        vision_lr = getattr(self.args, "vision_learning_rate", None)  # type: ignore[attr-defined]
        if vision_lr is None or vision_lr == self.args.learning_rate:  # type: ignore[attr-defined]
            return optimizer
        names = {id(p): n for n, p in (model or self.model).named_parameters()}  # type: ignore[attr-defined]
        groups = []
        for group in optimizer.param_groups:
            settings = {k: v for k, v in group.items() if k != "params"}
            vision = [p for p in group["params"] if _is_vision(names.get(id(p), ""))]
            language = [p for p in group["params"] if not _is_vision(names.get(id(p), ""))]
            groups += [{**settings, "params": language}] if language else []
            groups += [{**settings, "params": vision, "lr": vision_lr}] if vision else []
        optimizer.param_groups.clear()
        for group in groups:
            optimizer.add_param_group(group)
        return optimizer


def with_vision_learning_rate(trainer_class: type, args: Any) -> type:
    """`trainer_class` (a TRL trainer), with `VisionLearningRateMixin` mixed in when `args` sets a
    `vision_learning_rate` (under the same name); unchanged otherwise."""
    if getattr(args, "vision_learning_rate", None) is None:
        return trainer_class
    return _with_mixin(trainer_class)


@functools.cache
def _with_mixin(trainer_class: type) -> type:
    return type(trainer_class.__name__, (VisionLearningRateMixin, trainer_class), {})


def parameter_fingerprint(model: Any) -> str:
    """sha256 over a model's (or state dict's) tensors: names, dtypes, shapes and bytes, in name order."""
    import hashlib

    import torch

    state = model.state_dict() if hasattr(model, "state_dict") else model
    digest = hashlib.sha256()
    for name in sorted(state):
        tensor = state[name].detach().to("cpu").contiguous().reshape(-1)
        digest.update(f"{name}|{tensor.dtype}|{tuple(state[name].shape)}\n".encode())
        digest.update(tensor.view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


class RankFingerprintCallback(TrainerCallback):
    """Writes `output_dir/rank_fingerprints/rank{R}.json`: this process's parameter fingerprint at train start
    and end, with its rank, world size, backend, steps and batches per epoch — the evidence that a
    multi-process run really split the data and ended with the same weights on every data-parallel rank.
    Under DeepSpeed ZeRO-3 or FSDP each rank holds a shard, so the fingerprints differ by design.
    """

    def __init__(self) -> None:
        self.start: str | None = None
        self.batches_per_epoch: int | None = None

    def on_train_begin(self, args, state, control, model=None, train_dataloader=None, **kwargs):
        self.start = parameter_fingerprint(model)
        self.batches_per_epoch = len(train_dataloader) if train_dataloader is not None else None

    def on_train_end(self, args, state, control, model=None, **kwargs):
        import torch.distributed as dist

        record = {
            "rank": args.process_index,
            "world_size": args.world_size,
            "backend": dist.get_backend() if dist.is_available() and dist.is_initialized() else None,
            "global_step": state.global_step,
            "epoch": state.epoch,
            "batches_per_epoch": self.batches_per_epoch,
            "start": self.start,
            "end": parameter_fingerprint(model),
        }
        folder = Path(args.output_dir) / "rank_fingerprints"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"rank{args.process_index}.json").write_text(json.dumps(record, indent=2) + "\n")


def run_recipe(build: Any, config: Any, callbacks: list[Any] | None = None) -> Any:
    """Build a trainer with `build(config, callbacks=…, checkpoint=…)`, train, save judge and processor.

    With `config.resume`, training continues from the last checkpoint in `output_dir`: the weights come
    from it (see `prepare_model`), and optimizer, scheduler, RNG and step count from the trainer's restore.
    """
    checkpoint = latest_checkpoint(config.output_dir) if config.resume else None
    callbacks = list(callbacks or [])
    if config.adapter_store:
        if not config.use_lora:
            raise ValueError("adapter_store exports LoRA adapters: set use_lora=true, or drop adapter_store")
        from training.adapter_export import AdapterExportCallback

        policy = config.adapter_policy or Path(config.output_dir).name
        callbacks.append(AdapterExportCallback(config.adapter_store, policy, parent=config.adapter_parent))
    if config.rank_fingerprints:
        callbacks.append(RankFingerprintCallback())
    trainer = build(config, callbacks=callbacks, checkpoint=checkpoint)
    # In a multi-process run only the saving process(es) write files every rank would write alike.
    if trainer.args.should_save:
        save_resolved_config(config, config.output_dir)
    result = trainer.train(resume_from_checkpoint=checkpoint)
    trainer.save_model(config.output_dir)  # saves where `should_save` (and gathers sharded weights)
    if trainer.args.should_save:
        trainer.processing_class.save_pretrained(config.output_dir)
    return result


def close_process_group() -> None:
    """End a multi-process run's process group once every rank is done: call it last, before the process exits.

    Left to interpreter shutdown, gloo's worker threads can be torn down while still joinable, and one rank
    then dies with "terminate called without an active exception" (SIGABRT) after its work was done; the
    barrier keeps a rank from closing its connections while a peer still uses them. A no-op in one process.
    """
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
