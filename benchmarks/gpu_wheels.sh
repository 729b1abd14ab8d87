#!/usr/bin/env bash
# The pure-Python wheels `benchmarks.gpu_checks` needs on the lent H200, which has no package registry.
#
#   bash benchmarks/gpu_wheels.sh                       # fills .gpu-wheels/ (ignored by git), checks the 64 MiB limit
#   bash benchmarks/gpu_wheels.sh --image-transformers  # leave transformers out: test the image's own 5.17
#   bash benchmarks/gpu_wheels.sh --list                # just print what it would fetch
#
# The H200 image (/work/.library/device/KINDS.md) has torch 2.11, transformers 5.17, peft, accelerate,
# pyarrow, pandas, xxhash, fsspec, huggingface-hub, pillow, safetensors, pyyaml, rich, httpx; it lacks
# trl and datasets (and datasets' dill and multiprocess). Those travel with the working tree through the
# device tool's `carry` (64 MiB in all, tree included); docs/gpu.md has the exact `run` call. Nothing else
# is needed there: gpu_checks imports no fastapi, uvicorn, openai or vLLM (vLLM cannot travel anyway).
# transformers travels too, at the version CI runs: exact replay (training/replay.py) fails on the image's
# 5.17 (its prompt-cache capture comes back empty; found by the CPU mode under 5.17 here, docs/gpu.md).
# Versions are the ones CI runs with (the main venv); `--no-deps` fetches exactly these.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="$ROOT/.gpu-wheels"
LIMIT_MIB=64
PACKAGES=(
  "trl==1.16.0"          # SFT / GRPO trainers, and training.replay's chunked log-prob kernel
  "datasets==5.2.0"      # TRL's data path
  "dill==0.4.1"          # datasets
  "multiprocess==0.70.19"  # datasets (its py312 wheel: the H200's python3 is 3.12)
)
if [ "${1:-}" = "--image-transformers" ]; then
  shift
else
  PACKAGES+=("transformers==5.24.0")  # needs huggingface-hub >= 1.31 (the image has 1.33) and tokenizers 0.23
fi
PYTHON="${PYTHON:-python3}"
if [ -x "$ROOT/.venv/bin/python" ]; then PYTHON="$ROOT/.venv/bin/python"; fi

if [ "${1:-}" = "--list" ]; then
  printf '%s\n' "${PACKAGES[@]}"
  exit 0
fi

rm -rf "$DEST"
mkdir -p "$DEST"
# Wheels for the H200's interpreter (CPython 3.12 on x86-64 Linux), whatever this machine runs.
"$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform any -d "$DEST" "${PACKAGES[@]}"

count=$(find "$DEST" -name '*.whl' | wc -l)
if [ "$count" -ne "${#PACKAGES[@]}" ]; then
  echo "gpu_wheels: expected ${#PACKAGES[@]} wheels in $DEST, found $count" >&2
  exit 1
fi
wheels_kib=$(du -sk "$DEST" | cut -f1)
# What travels: tracked and untracked-not-ignored files (the working tree as the device tool copies it).
tree_kib=$(cd "$ROOT" && git ls-files -z --cached --others --exclude-standard | du -ck --files0-from=- 2>/dev/null | tail -1 | cut -f1)
total_kib=$((wheels_kib + ${tree_kib:-0}))
echo "gpu_wheels: $count wheels, $((wheels_kib / 1024)) MiB; tree $((${tree_kib:-0} / 1024)) MiB; total $((total_kib / 1024)) of ${LIMIT_MIB} MiB"
if [ "$total_kib" -gt $((LIMIT_MIB * 1024)) ]; then
  echo "gpu_wheels: over the ${LIMIT_MIB} MiB the device tool carries; drop files from the tree or the list" >&2
  exit 1
fi
