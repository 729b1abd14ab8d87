"""What one run measures: the flags, with each unset one taken from the defaults of its kind of run.

Three kinds: the bare CPU run (the configuration docs/replay.md reports), `--full` (the bigger CPU probe) and
CUDA. A flag given on the command line overrides its part of any of them.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

RUNS = ("cpu", "full", "cuda")
# fmt: off
DEFAULTS: dict[str, tuple[Any, Any, Any]] = {
    # flag:                  bare CPU    --full       CUDA
    "model_size":             ("small",   "small",     "1.5b"),
    "prompt_length":          (2048,      8192,        65536),
    "groups":                 ("2,8",     "2,4,8,16",  "2,4,8,16"),
    "prompt_chunk":           (512,       512,         4096),
    "mem_cap_mib":            (128.0,     512.0,       40000.0),
    "search_start":           (512,       512,         4096),
    "search_limit":           (4096,      32768,       1 << 20),
    "gradient_checkpointing": ("off",     "off",       "on"),
}
# fmt: on
"""Each flag's default in a bare CPU run, with `--full`, and on CUDA (`Settings.from_args`)."""


@dataclass(frozen=True)
class Settings:
    """Everything a run measures, resolved from the flags."""

    cuda: bool
    model_size: str
    prompt: int  # P of the G sweep
    groups: list[int]
    lengths: list[int]  # the prompt lengths of the G = 8 sweep
    grad_prompt: int  # P of the gradient check
    cap: float  # MiB, of the longest-prompt searches at G = 8
    start: int  # the searches' first prompt length
    limit: int  # the longest prompt plain's and replay's searches try
    chunked_limit: int  # the longest prompt chunked replay's search tries
    checkpointing: bool
    chunk: int  # tokens per chunk of chunked replay
    base: dict[str, Any]  # every worker's spec, less its method, G and P
    timeout: float  # seconds per worker

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Settings:
        cuda = args.device.startswith("cuda")
        run = RUNS.index("cuda" if cuda else "full" if args.full else "cpu")
        flag = {name: getattr(args, name) or column[run] for name, column in DEFAULTS.items()}
        small_cpu = RUNS[run] == "cpu"  # the bare CPU run (the package's docstring: "Run time")
        prompt, limit = flag["prompt_length"], flag["search_limit"]
        if args.prompt_lengths:
            lengths = [int(n) for n in args.prompt_lengths.split(",")]
        else:
            lengths = [prompt] if small_cpu else [prompt // 4, prompt // 2, prompt]
        checkpointing = flag["gradient_checkpointing"] == "on"
        base = dict(device=args.device, dtype="bfloat16" if cuda else "float32", model_size=flag["model_size"],
                    completion=args.completion_length, branch_batch=args.branch_batch, threads=args.threads,
                    seed=args.seed, checkpointing=checkpointing, prompt_chunk=flag["prompt_chunk"],
                    mmap_threshold=0 if cuda else args.mmap_threshold,
                    chunk_checkpoint={"auto": None, "on": True, "off": False}[args.chunk_checkpoint],
                    repeats=args.repeats)  # fmt: skip
        return cls(
            cuda=cuda,
            model_size=flag["model_size"],
            prompt=prompt,
            groups=[int(g) for g in flag["groups"].split(",")],
            lengths=lengths,
            grad_prompt=args.grad_prompt_length or (1024 if small_cpu else min(prompt, 2048)),
            cap=flag["mem_cap_mib"],
            start=flag["search_start"],
            limit=limit,
            chunked_limit=args.chunked_search_limit or (1 << 22 if cuda else 64 * limit),
            checkpointing=checkpointing,
            chunk=flag["prompt_chunk"],
            base=base,
            timeout=args.timeout,
        )
