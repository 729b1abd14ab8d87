"""Do `synth all`, `mrjudge judge` and the three eval CLIs write the same bytes as before a refactor?

Runs each command on fixed inputs (the synthetic world, a seeded tiny judge, the tiny benchmark files of
`tiny_world.bench_files`, a loopback grader for MM-Vet) in a fresh folder, and hashes every file it wrote.
Timing fields (`*_s`, `seconds`, dates), absolute paths and loopback ports are the only things taken out before
hashing JSON, because they differ from run to run by design; JSONL, Parquet and Markdown are hashed as they are.

    cd <tree> && python -m benchmarks.outputs_unchanged --out /tmp/outs-after      # one tree's hashes
    python -m benchmarks.outputs_unchanged --compare base.json /tmp/outs-after/hashes.json

(`-m` puts the folder it runs from first on the path: run it from the root of the tree whose code it measures.)

Run it once on the tree before the change and once after; `--compare` prints one JSON line with
`identical` and the files that differ or exist on one side only. A run took 15 s (12.8 s in the commands)
under load (7 agents on 2 cores); with neither flag it stops at once with a usage error.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.kit import emit

VOLATILE = re.compile(r"(_s|_seconds|seconds|_at|started|finished|time|date|elapsed|wall|host|pid|version)$")
SKIP_SUFFIXES = {".png", ".log"}  # plots embed renderer metadata; logs carry times
LOOPBACK = re.compile(r"127\.0\.0\.1:\d+")  # the grader's port is the OS's pick


def _scrub(value: Any, root: str) -> Any:
    """Drop the fields that differ between two runs of the same code (times, hosts, absolute paths, ports)."""
    if isinstance(value, dict):
        return {k: _scrub(v, root) for k, v in value.items() if not VOLATILE.search(str(k))}
    if isinstance(value, list):
        return [_scrub(v, root) for v in value]
    if isinstance(value, str):
        return LOOPBACK.sub("127.0.0.1:<port>", value.replace(root, "<out>"))
    return value


def _digest(path: Path, root: Path) -> str:
    data = path.read_bytes()
    if path.suffix == ".json":
        try:
            data = json.dumps(_scrub(json.loads(data), str(root)), sort_keys=True).encode()
        except ValueError:
            pass
    elif path.suffix in {".md", ".jsonl"}:
        data = LOOPBACK.sub("127.0.0.1:<port>", data.decode().replace(str(root), "<out>")).encode()
    return hashlib.sha256(data).hexdigest()


def hash_tree(root: Path) -> dict[str, str]:
    """sha256 of every output file under `root`, keyed by its path relative to `root`."""
    return {
        str(p.relative_to(root)): _digest(p, root)
        for p in sorted(root.rglob("*"))
        if p.is_file()
        and p.suffix not in SKIP_SUFFIXES
        and p.relative_to(root).parts[0] not in ("inputs", "hashes.json")
    }


def _judge_items(folder: Path) -> Path:
    from PIL import Image

    (folder / "img").mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(6):
        Image.new("RGB", (84, 84), (40 * i, 100, 200)).save(folder / f"img/{i}.png")
        k = 2 + i % 3
        rows.append({"id": f"q{i}", "image": f"img/{i}.png", "question": "What colour is the square?",
                     "candidates": [f"It is colour {j}." for j in range(k)], "label": i % k})  # fmt: skip
    path = folder / "items.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def run_all(out: Path) -> dict[str, int]:
    """Run every command into `out`; return each command's exit code."""
    from mrjudge.cli import main

    from tiny_world.bench_files import write_mmrb, write_mmvet, write_mmvet_candidates, write_vlrb_jsonl
    from tiny_world.servers.grader_server import make_grader_app
    from tiny_world.servers.openai_server import serve

    inputs = out / "inputs"
    inputs.mkdir(parents=True)
    codes: dict[str, int] = {}
    world = inputs / "synth_world.yaml"
    world.write_text(
        f"out: {out / 'synth'}\nworld_n: 60\nworld_seed: 0\nnegatives_generator: scene\nnegatives_n: 3\n"
        "describer: scene\nreasoner: scene\nrewriter: rules\nassemble:\n  val_fraction: 0.1\n  max_options: 4\nseed: 0\n"
    )
    codes["synth_all"] = main(["synth", "all", "--config", str(world)])
    model = inputs / "tiny-judge"
    codes["tiny_model"] = main(["tiny-model", "--out", str(model), "--seed", "0"])
    items = _judge_items(inputs)
    common = ["--max-new-tokens", "24", "--batch-size", "2"]
    codes["judge"] = main(["judge", "--model", str(model), "--input", str(items),
                           "--output", str(out / "judge" / "verdicts.jsonl"), *common])  # fmt: skip
    vlrb = write_vlrb_jsonl(inputs)
    codes["eval_vlrb_mc"] = main(["eval", "vl-rewardbench", "--data", str(vlrb), "--out", str(out / "vlrb_mc"),
                                  "--model", str(model), "--quiet", *common])  # fmt: skip
    codes["eval_vlrb_official"] = main(["eval", "vl-rewardbench", "--data", str(vlrb), "--out",
                                        str(out / "vlrb_official"), "--model", str(model), "--quiet",
                                        "--mode", "official", "--k", "2", *common])  # fmt: skip
    mmrb_dir = inputs / "mmrb"
    mmrb_dir.mkdir()
    codes["eval_mmrb"] = main(["eval", "multimodal-rewardbench", "--data", str(write_mmrb(mmrb_dir)),
                               "--out", str(out / "mmrb"), "--model", str(model), "--quiet", *common])  # fmt: skip
    mmvet_dir = inputs / "mmvet"
    mmvet_dir.mkdir()
    data = write_mmvet(mmvet_dir)
    files = [str(p) for p in write_mmvet_candidates(mmvet_dir)]
    with serve(make_grader_app()) as grader:
        codes["eval_mmvet"] = main(["eval", "mm-vet", "--data", str(data), "--out", str(out / "mmvet"),
                                    "--model", str(model), "--candidates", *files, "--grader-url", grader,
                                    "--quiet", *common])  # fmt: skip
    return codes


def compare(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    a, b = before["files"], after["files"]
    differ = sorted(k for k in a.keys() & b.keys() if a[k] != b[k])
    only_before, only_after = sorted(a.keys() - b.keys()), sorted(b.keys() - a.keys())
    return {
        "benchmark": "outputs_unchanged",
        "identical": not (differ or only_before or only_after) and before["codes"] == after["codes"],
        "files_compared": len(a.keys() & b.keys()),
        "differ": differ,
        "only_before": only_before,
        "only_after": only_after,
        "codes_before": before["codes"],
        "codes_after": after["codes"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.outputs_unchanged", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--out", type=Path, help="fresh folder to run the commands in (removed first)")
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("BEFORE", "AFTER"), help="two hashes.json files")
    args = parser.parse_args(argv)
    if args.compare:
        result = compare(*(json.loads(p.read_text()) for p in args.compare))
        emit(result)
        return 0 if result["identical"] else 1
    if args.out is None:
        parser.error("give --out DIR (to run) or --compare BEFORE AFTER")
    shutil.rmtree(args.out, ignore_errors=True)
    start = time.perf_counter()
    codes = run_all(args.out)
    record = {"codes": codes, "files": hash_tree(args.out)}
    (args.out / "hashes.json").write_text(json.dumps(record, indent=1, sort_keys=True))
    emit({"benchmark": "outputs_unchanged", "files": len(record["files"]), "codes": codes,
          "wall_s": time.perf_counter() - start}, digits=1)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
