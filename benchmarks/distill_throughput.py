"""Distillation rows/s and tokens/s against a thinking-model endpoint: one request in flight vs 32.

The endpoint is a real loopback OpenAI-compatible server (`tiny_world.servers.thinking_server`) that answers
every request like a thinking model (reasoning in `reasoning_content`, the answer in `content`) after a
fixed delay, so the only thing that changes between the two runs is how many requests the stage keeps in
flight: the figure this measures. Each row costs three requests (reason, remove hint, align style).

    python -m benchmarks.distill_throughput [--rows 32] [--delay-s 0.5] [--concurrency 32]

Run time: the bare run took 96 s under load (7 agents on 2 cores); at concurrency 1 it waits at least
rows x 3 x delay (48 s) by design.

Prints one JSON line with rows/s and tokens/s at concurrency 1 and at `--concurrency`, and their ratio.
"""

from __future__ import annotations

import argparse
import platform
import tempfile
from pathlib import Path

from benchmarks.kit import emit, rounded
from data_synthesis.pipeline import ModelSpec, run_distill
from jobs.jsonl import write_jsonl_atomic
from tiny_world.servers.openai_server import serve
from tiny_world.servers.thinking_server import make_thinking_app


def items(n: int) -> list[dict]:
    colours = ["red", "blue", "green"]
    out = []
    for i in range(n):
        k, label = 2 + i % 2, i % 2
        out.append(
            {
                "id": f"row{i:05d}",
                "image": None,
                "question": f"What colour is the shape in row{i:05d}?",
                "candidates": [f"The shape is {colours[(j - label) % 3]}." for j in range(k)],
                "label": label,
                "meta": {"split": "train", "description": "A red shape.", "flaws": [None] * k},
            }
        )
    return out


def measure(url: str, rows: list[dict], concurrency: int, folder: Path) -> dict:
    folder.mkdir(parents=True)
    write_jsonl_atomic(folder / "items.jsonl", rows)
    spec = ModelSpec(url, "openai", {"max_retries": 0, "timeout": 60.0})
    _, summary = run_distill(
        folder,
        folder,
        reasoner="model",
        reasoner_model=spec,
        rewriter="model",
        concurrency=concurrency,
        show_progress=False,
    )
    assert summary["failed"] == 0 and summary["kept"] == len(rows), summary
    return {
        "rows_per_s": len(rows) / summary["wall_s"],
        "tokens_per_s": summary["completion_tokens_now"] / summary["wall_s"],
        "wall_s": summary["wall_s"],
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.distill_throughput", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--delay-s", type=float, default=0.5, help="the server's fixed delay per request")
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args(argv)
    rows = items(args.rows)
    app = make_thinking_app(keys=[row["id"] for row in rows], delay_s=args.delay_s)
    with serve(app) as url, tempfile.TemporaryDirectory() as tmp:
        single = measure(url, rows, 1, Path(tmp) / "c1")
        app.state.stats["max_in_flight"] = 0
        many = measure(url, rows, args.concurrency, Path(tmp) / f"c{args.concurrency}")
        in_flight = app.state.stats["max_in_flight"]
    result = {
        "benchmark": "distill_throughput",
        "stage": "distill (model reasoner + model rewriter, 3 requests per row)",
        "server": "loopback OpenAI-compatible thinking-model stand-in",
        "rows": args.rows,
        "delay_s": args.delay_s,
        "concurrency": args.concurrency,
        "max_in_flight_seen": in_flight,
        "c1_rows_per_s": single["rows_per_s"],
        "c1_tokens_per_s": single["tokens_per_s"],
        f"c{args.concurrency}_rows_per_s": many["rows_per_s"],
        f"c{args.concurrency}_tokens_per_s": many["tokens_per_s"],
        "ratio": many["rows_per_s"] / single["rows_per_s"],
        "python": platform.python_version(),
    }
    emit(result)
    return rounded(result)


if __name__ == "__main__":
    main()
