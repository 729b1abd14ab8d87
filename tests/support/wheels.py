"""mr-judge's wheel, built from a copy of the project (an in-tree build would leave build/ in the checkout)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def build_wheel(out: Path) -> Path:
    """`pip wheel --no-deps` of the project's package folders, pyproject.toml and README into `out`; its path."""
    import tomllib  # Python 3.11+; the callers skip on 3.10

    table = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {table["package-dir"].get(p.split(".")[0], p.split(".")[0]) for p in table["packages"]}
    src = out / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for folder in folders:
        shutil.copytree(ROOT / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__"))
    command = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "-q",
        "-w",
        str(out),
        str(src),
    ]
    subprocess.run(command, check=True, capture_output=True)
    return next(out.glob("mr_judge-*.whl"))
