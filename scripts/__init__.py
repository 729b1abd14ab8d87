"""The `mrjudge` command line. Its folder is `scripts/`; it is installed as the package `mrjudge`.

The folder name is the project's layout; the import name is not `scripts` because verl's wheel installs a
top-level `scripts` package of its own, and two distributions cannot share one top-level package.
"""

if __name__ == "scripts":  # imported through the folder name (repo root on sys.path), not as installed
    raise ImportError(
        "mr-judge's command line is imported as `mrjudge`, not `scripts` (verl installs a `scripts` package too): "
        "run `mrjudge …`, `python -m mrjudge …` or `accelerate launch -m mrjudge.cli …`"
    )
