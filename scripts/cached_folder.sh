# Sourced by scripts/vllm_env.sh and scripts/frameworks_env.sh: a folder built once per machine and key.
#
# The folder is <root>/<name>-<key>; `.complete` is written last, so a build that stops half-way is started
# again from scratch; builds are serialised with flock on <root>/.<name>.lock; after a build, the other
# <name>-* folders (older keys) are removed.

# The cache root: $1 when set (the script's own override variable), else ~/.cache/mr-judge.
cache_root() {
    echo "${1:-${XDG_CACHE_HOME:-${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}/.cache}/mr-judge}"
}

# The first 16 hex digits of the sha256 of stdin.
cache_key() {
    sha256sum | cut -c1-16
}

# `PYTHON -m pip ARGS` quietly; drops this machine's notes about local index folders a package is absent from.
pip_quiet() {
    local python=$1
    shift
    "$python" -m pip "$@" --quiet --disable-pip-version-check 2>&1 |
        { grep -v "is ignored: it is neither a file nor a directory" || true; } >&2
}

# cached_folder ROOT NAME KEY BUILD [--path]: print ROOT/NAME-KEY, building it first with `BUILD DIR` if it is
# not complete; with --path, print it only if complete, else return 1 (builds nothing).
cached_folder() {
    local root=$1 name=$2 key=$3 build=$4 mode=${5:-}
    local dir=$root/$name-$key started old
    if [ "$mode" = "--path" ]; then
        [ -f "$dir/.complete" ] || return 1
        echo "$dir"
        return 0
    fi
    if [ ! -f "$dir/.complete" ]; then
        mkdir -p "$root"
        exec 9>"$root/.$name.lock"
        flock 9
        if [ ! -f "$dir/.complete" ]; then
            started=$SECONDS
            echo "building $dir (once per machine and pin set)" >&2
            rm -rf "$dir"
            "$build" "$dir"
            touch "$dir/.complete"
            echo "$name built in $((SECONDS - started)) s" >&2
            for old in "$root/$name"-*; do
                if [ "$old" != "$dir" ] && [ -d "$old" ]; then rm -rf "$old"; fi
            done
        fi
    fi
    echo "$dir"
}
