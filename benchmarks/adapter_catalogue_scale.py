"""The adapter catalogue against its size: resolve p99, save p50 / p99 and the registration rate of
`benchmarks.adapter_catalogue` runs at several N (each run's "end" probe), drawn on log axes.

    python -m benchmarks.adapter_catalogue --revisions 10000 --skip-serving > n1e4.json
    python -m benchmarks.adapter_catalogue --skip-serving > n1e5.json
    python -m benchmarks.adapter_catalogue --revisions 1000000 --skip-serving > n1e6.json
    python -m benchmarks.adapter_catalogue_scale n1e4.json n1e5.json n1e6.json --out docs/img/adapter_catalogue_scale.png

Prints one JSON line: per N, the figures drawn, and `save_p99_vs_smallest` (each N's save p99 over the
smallest N's), the 10⁶ goal's reading.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks.kit import emit

FIGURES = {
    "resolve_p99_ms": "resolve p99 (ms)",
    "save_p50_ms": "save p50 (ms)",
    "save_p99_ms": "save p99 (ms)",
}


def read_run(path: Path) -> dict:
    """The last JSON line of a run's output (the benchmark prints one; progress may come before it)."""
    lines = [line for line in path.read_text().splitlines() if line.startswith("{")]
    if not lines:
        raise SystemExit(f"{path}: no JSON line in it (did the run finish?)")
    return json.loads(lines[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path, help="JSON outputs of benchmarks.adapter_catalogue")
    parser.add_argument("--out", type=Path, default=Path("adapter_catalogue_scale.png"))
    args = parser.parse_args()
    runs = sorted((read_run(p) for p in args.runs), key=lambda r: r["revisions"])
    sizes = [r["revisions"] for r in runs]

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (latency, rate) = plt.subplots(1, 2, figsize=(10, 3.8))
    for key, label in FIGURES.items():
        latency.plot(sizes, [r[key]["end"] for r in runs], marker="o", label=label)
    latency.set(xscale="log", yscale="log", xlabel="revisions in the catalogue", ylabel="ms")
    latency.set_title("lookups and saves do not grow with N")
    latency.legend()
    rate.plot(sizes, [r["register_per_s"] for r in runs], marker="o", color="tab:green")
    rate.set(xscale="log", xlabel="revisions in the catalogue", ylabel="revisions / s", ylim=(0, None))
    rate.set_title("registration rate (add_many, 1,000 a call)")
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=120)
    smallest = runs[0]["save_p99_ms"]["end"]
    emit(
        {
            "benchmark": "adapter_catalogue_scale",
            "plot": str(args.out),
            "sizes": sizes,
            **{key: [r[key]["end"] for r in runs] for key in FIGURES},
            "register_per_s": [r["register_per_s"] for r in runs],
            "register_s": [r["register_s"] for r in runs],
            "save_p99_vs_smallest": [r["save_p99_ms"]["end"] / smallest for r in runs],
        }
    )


if __name__ == "__main__":
    main()
