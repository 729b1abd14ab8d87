"""The benchmarks: each module measures one thing and prints one JSON line on stdout.

Run one as a module from the repository root, as nanochat runs its scripts:

    python -m benchmarks.NAME --help
    python -m benchmarks.server_load --skip-faults --skip-hostile --duration 12

`docs/benchmarks.md` lists them with their commands, run times and figures. Helpers hold what several
share: `kit` (a server started and waited for, percentiles, CPU and RSS readings, the JSON line), `equal_work`
(one forced generation length on every engine, the tokens counted), `workers` (a configuration in a fresh
interpreter) and `lora_model` (the hand-off's base, LoRA, training step and merge). A benchmark too big for one module is a package with a `__main__` (`server_load`).
"""
