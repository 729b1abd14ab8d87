#!/usr/bin/env bash
# verl, OpenRLHF and lmms-eval as released, installed without their GPU dependencies for tests/frameworks.
#
#   scripts/frameworks_env.sh          build it if needed, then print its folder (what `make frameworks-env` runs)
#   scripts/frameworks_env.sh --path   print its folder if it is built, else exit 1 (builds nothing)
#
# The folder is $MRJUDGE_FRAMEWORKS_CACHE (default ~/.cache/mr-judge)/frameworks-<key>, where <key> hashes
# constraints/frameworks.txt, this script and the Python version: CI's fresh clones on the same machine
# reuse it, and a changed pin builds a new one (older ones are then removed). It holds
#   wheels/  every pinned distribution as a wheel (`pip wheel --no-deps`; the one sdist is built here),
#   site/    those wheels installed with `pip install --no-deps --target` (put it on PYTHONPATH beside .venv),
# and `.complete`, written last: a build that stops half-way is started again from scratch. Builds are
# serialised with flock. Nothing is installed into .venv: the frameworks' own top-level `tests` and `scripts`
# packages would shadow this repository's, so tests run framework code in subprocesses with
# PYTHONPATH=<folder>/site (tests/frameworks). About 20 s and 60 MB on a 2-core machine.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-.venv/bin/python}
CONSTRAINTS=constraints/frameworks.txt
ROOT=${MRJUDGE_FRAMEWORKS_CACHE:-${XDG_CACHE_HOME:-${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}/.cache}/mr-judge}
KEY=$({ cat "$CONSTRAINTS" scripts/frameworks_env.sh; "$PYTHON" -c 'import sys; print(sys.version)'; } |
    sha256sum | cut -c1-16)
DIR=$ROOT/frameworks-$KEY

if [ "${1:-}" = "--path" ]; then
    [ -f "$DIR/.complete" ] || exit 1
    echo "$DIR"
    exit 0
fi

pip_quiet() {  # quiet pip; drops this machine's notes about local index folders a package is absent from
    "$PYTHON" -m pip "$@" --quiet --disable-pip-version-check 2>&1 |
        { grep -v "is ignored: it is neither a file nor a directory" || true; } >&2
}

build() {
    local started=$SECONDS
    echo "building the frameworks folder in $DIR (once per machine and pin set)" >&2
    rm -rf "$DIR"
    mkdir -p "$DIR/wheels"
    pip_quiet wheel --no-deps -w "$DIR/wheels" -r "$CONSTRAINTS"
    pip_quiet install --no-deps --no-index --target "$DIR/site" "$DIR"/wheels/*.whl
    PYTHONPATH="$DIR/site" "$PYTHON" -c '
import importlib.metadata as m
import verl, openrlhf, lmms_eval
print(*(f"{d} {m.version(d)}" for d in ("verl", "openrlhf", "lmms_eval")))' >&2
    touch "$DIR/.complete"
    echo "frameworks folder built in $((SECONDS - started)) s" >&2
    for old in "$ROOT"/frameworks-*; do
        if [ "$old" != "$DIR" ] && [ -d "$old" ]; then rm -rf "$old"; fi
    done
}

if [ ! -f "$DIR/.complete" ]; then
    mkdir -p "$ROOT"
    exec 9>"$ROOT/.frameworks.lock"
    flock 9
    [ -f "$DIR/.complete" ] || build
fi
echo "$DIR"
