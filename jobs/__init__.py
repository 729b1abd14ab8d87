"""Per-row jobs that survive being stopped: executors (local or Ray Data), the resumable loop, atomic JSONL
writes, progress bars, and `judge_file` (a JSONL of MC items → verdicts).

It stands on the core (`judge`) and under every command that writes rows (`synth`, `judge`, `eval`).
"""
