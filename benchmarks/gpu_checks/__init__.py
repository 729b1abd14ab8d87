"""GPU-scale checks in one command: the adapter hand-off at 4B, long prompts at 1.5B, and the CUDA paths.

    python -m benchmarks.gpu_checks --device cuda --out "$OUT"     # one H200, under 8 minutes (docs/gpu.md)
    python -m benchmarks.gpu_checks --device cpu --out /tmp/gc      # the same code on tiny shapes (CI runs it)

Run time: the whole run is held to `--budget-s` (450 s on CUDA, 240 s on CPU), plus interpreter start-up. The
CPU mode took 54 s in tests/benchmarks/test_gpu_checks.py (docs/gpu.md) and 47 s there under load (7 agents on
2 cores); the CUDA run has not been timed yet.

Three parts, each in its own subprocess (a CUDA error poisons the process it happens in, and one broken
part must not cost the others their GPU time), each with a deadline cut from one global budget (`--budget-s`):

1. `cuda_paths`: a few steps of judge SFT and judge GRPO (TRL) on a tiny Qwen2.5-VL in bf16, `mrjudge judge
   --backend hf` on the device, and the judge's throughput at a forced generation length; each output is
   checked to be of the same kind (keys, types, files) as the same run on the CPU.
2. `handoff`: `benchmarks.adapter_handoff`'s measurement (adapter-only vs merged full weights, end to end)
   on a 4B-shaped model (bf16, random weights from a config). Goal: `time_ratio_measured` >= 10.
3. `long_prompts`: exact replay (`training.replay`) on a Qwen2.5-1.5B-shaped model at G = 8: peak memory and
   step time against prompt length for plain / replay / chunked replay, the longest prompt under the cap (80 GB
   on CUDA) by `benchmarks.prefix_replay`'s search, and gradient agreement with the plain loss in float32 at a
   length all can run.

Every part fails soft: its error and traceback go into its record and the next part runs. Files under `--out`
(default `$OUT`): `gpu_checks.json` (everything), one `<part>.json` each, `log.txt` (the parts' stderr).
Prints one JSON line: the headline figures, each part's status and seconds.

The package, one idea per module: `plans` (what each device runs), `children` (the processes the parts run
in), `record` (a part's self-saving record and the machine's versions), `kinds` (outputs compared by kind,
the verdict contract), one module per part (`cuda_paths`, `handoff`, `long_prompts`), and `__main__` (the
flags, the parts in turn within the budget, the summary line).
"""
