"""Exact shared-prompt replay (whole and chunked prompt) vs the plain batched GRPO loss: memory, time, gradient.

    python -m benchmarks.prefix_replay                          # CPU: 934 s on 2 cores shared with 7 sessions
    python -m benchmarks.prefix_replay --full                   # CPU: 8K-token prompt, G = 2, 4, 8, 16, 512 MiB cap
    python -m benchmarks.prefix_replay --device cuda --model-size 1.5b --prompt-length 65536 --mem-cap-mib 40000
    python -m benchmarks.prefix_replay --device cuda --mem-cap-mib 80000 --search-start 65536   # chunked to 256K+

Run time. The bare CPU run is the configuration docs/replay.md reports: a 2,048-token prompt, G = 2 and 8, the
G = 8 sweep at that prompt alone, the gradient check at 1,024 tokens, and the longest-prompt searches under a
128 MiB cap from 512 tokens (plain and replay up to 4,096; chunked from replay's longest until it passes the
cap, 16,896 tokens there). It took 934 s on the 2 CPU cores shared with 7 other sessions (load ~16), most of it
in fresh worker processes (one per configuration and search probe) and the chunked search's long prompts.
`--full` is the bigger CPU probe (an 8,192-token prompt, G = 2, 4, 8, 16, the G = 8 sweep at P/4, P/2 and P, a
512 MiB cap, searches up to 32,768 and chunked to 2M): its chunked search reached 67K-token probes and had not
finished after 20 minutes on 2 cores. Every flag overrides its part of either. `--quick` is the bare CPU run
(older commands name it).

Prints one JSON line. Each (method, G, prompt length) runs in a fresh subprocess, so one configuration's
peak cannot hide in another's: on CPU the peak is VmHWM (reset through /proc/self/clear_refs once the model
is built) minus the resident size just before the step; on CUDA it is `torch.cuda.max_memory_allocated`
after `reset_peak_memory_stats`, minus the allocated bytes before the step. A step is one forward and
backward of the GRPO (DAPO) loss of G completions of R tokens sharing one P-token prompt. The model is a
Qwen2 built from a config with random weights (`--model-size`: `small` for CPUs, `0.5b`/`1.5b`/`3b` are
Qwen2.5's shapes for GPUs), so nothing is downloaded.

Figures: `mem_growth_*` = peak at the largest G / peak at the smallest (8 / 2 by default); `grad_cosine`,
`grad_rel_l2` between replayed and plain gradients (float32, all parameters); `max_prompt_*_g8` = the
longest prompt whose step at G=8 peaks under `--mem-cap-mib`, found by doubling (or halving) from
`--search-start` until a step exceeds the cap (or fails to allocate), then bisecting to 1/8 of the last
doubling; every length reported was measured to fit, and `first_over_cap_g8` is the shortest one measured not
to (on CPU a probe stops once it passes the cap).
`max_prompt_ratio_g8` = replay's over plain's.

Chunked replay (`replay_prompt_chunk`, `--prompt-chunk` tokens per chunk) is the third method: `chunked` in
the G sweep; `by_prompt_g8` gives peak and step time of all three against prompt length at G = 8
(`--prompt-lengths`); `max_prompt_chunked_g8` / `max_prompt_ratio_chunked_g8` (over plain's) its longest
prompt under the same cap (its search starts at replay's longest); `grad_rel_l2_chunked`,
`grad_cosine_chunked` its gradient against the plain one; `step_time_ratio_chunked` = chunked step time
over replay's at the longest prompt both ran in `by_prompt_g8` (each the faster of its G = 8 runs there; on
CPU the process's CPU time, `step_cpu_s`, since other work shares the cores). `max_prompt_ratio_chunked_g8_low`
= chunked's longest over plain's first length over the cap: a lower bound on the true ratio, which `goals` uses.
Chunk checkpointing follows the model's gradient checkpointing unless `--chunk-checkpoint on/off`.
`chunked_hit_search_limit`: the chunked search stopped at its limit, not at the cap (its longest prompt is
a lower bound). `goals` checks the issue's targets. On CPU the workers run with a fixed glibc mmap threshold
(`--mmap-threshold`), so that RSS follows live memory instead of heap left over from freed activations.

The package, one idea per module: `step` (the model, the batch and one step of each method, which
`benchmarks.gpu_checks` measures too), `worker` (one configuration in a fresh process, and the gradient check),
`search` (the longest prompt under the cap: the one search `gpu_checks` imports), `settings` (the flags and
each kind of run's defaults), `figures` (the JSON line's figures from the workers' results), `__main__` (the
run as steps: gradient check, G sweep, prompt sweep, searches, the line).
"""
