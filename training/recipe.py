"""A recipe run's lifecycle: build the trainer, resume, train, save; at the very end, close the process group.

The three recipes (`training.sft`, `training.grpo`, `training.policy`) each write a builder over `build_trainer`
(model, processor and LoRA config from `training.model_loading`, datasets from their reader), and `run_recipe`
drives it through one run: the checkpoint to resume from, the callbacks the config asks for (adapter export,
rank fingerprints), the resolved config beside the checkpoints (`training.config`), training and the final save.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from training.config import save_resolved_config
from training.rank_fingerprints import RankFingerprintCallback
from training.vision_learning_rate import with_vision_learning_rate

__all__ = ["build_trainer", "close_process_group", "latest_checkpoint", "run_recipe"]


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


def latest_checkpoint(output_dir: str | Path) -> str | None:
    from transformers.trainer_utils import get_last_checkpoint

    return get_last_checkpoint(str(output_dir)) if Path(output_dir).is_dir() else None


def run_recipe(build: Any, config: Any, callbacks: list[Any] | None = None) -> Any:
    """Build a trainer with `build(config, callbacks=…, checkpoint=…)`, train, save judge and processor.

    With `config.resume`, training continues from the last checkpoint in `output_dir`: the weights come from it
    (see `training.model_loading.prepare_model`), and optimizer, scheduler, RNG and step count from the trainer's
    restore.
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
