#!/usr/bin/env bash
# verl, OpenRLHF and lmms-eval as released, installed without their GPU dependencies for tests/frameworks.
#
#   scripts/frameworks_env.sh          build it if needed, then print its folder (what `make frameworks-env` runs)
#   scripts/frameworks_env.sh --path   print its folder if it is built, else exit 1 (builds nothing)
#
# The folder is $MRJUDGE_FRAMEWORKS_CACHE (default ~/.cache/mr-judge)/frameworks-<key>, where <key> hashes
# constraints/frameworks.txt, these scripts and the Python version: CI's fresh clones on the same machine
# reuse it, and a changed pin builds a new one (older ones are then removed; scripts/cached_folder.sh). It holds
#   wheels/  every pinned distribution as a wheel (`pip wheel --no-deps`; the one sdist is built here),
#   site/    those wheels installed with `pip install --no-deps --target` (put it on PYTHONPATH beside .venv).
# Nothing is installed into .venv: the frameworks' own top-level `tests` and `scripts` packages would shadow
# this repository's, so tests run framework code in subprocesses with PYTHONPATH=<folder>/site
# (tests/frameworks). About 20 s and 60 MB on a 2-core machine.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/cached_folder.sh

PYTHON=${PYTHON:-.venv/bin/python}
CONSTRAINTS=constraints/frameworks.txt

build() {
    local dir=$1
    mkdir -p "$dir/wheels"
    pip_quiet "$PYTHON" wheel --no-deps -w "$dir/wheels" -r "$CONSTRAINTS"
    pip_quiet "$PYTHON" install --no-deps --no-index --target "$dir/site" "$dir"/wheels/*.whl
    PYTHONPATH="$dir/site" "$PYTHON" -c '
import importlib.metadata as m
import verl, openrlhf, lmms_eval
print(*(f"{d} {m.version(d)}" for d in ("verl", "openrlhf", "lmms_eval")))' >&2
}

KEY=$({ cat "$CONSTRAINTS" scripts/frameworks_env.sh scripts/cached_folder.sh; "$PYTHON" -c 'import sys; print(sys.version)'; } | cache_key)
cached_folder "$(cache_root "${MRJUDGE_FRAMEWORKS_CACHE:-}")" frameworks "$KEY" build "${1:-}"
