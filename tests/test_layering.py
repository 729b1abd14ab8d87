"""The house's floors (docs/architecture.md): imports point down only, and the core stays light.

The core (`judge`) is what a reward function inside someone else's RL framework imports: it must load no web
server, no model library and no torch, so that verl's or OpenRLHF's reward worker pays nothing for it.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDER = {"mrjudge": "scripts"}  # the command line's import name differs from its folder (pyproject.toml)

# What each floor may import of ours; a floor never imports one above it. Read bottom to top.
MAY_IMPORT: dict[str, set[str]] = {
    "judge": set(),
    "jobs": {"judge"},
    "adapter_revisions": {"judge"},
    "reward_server": {"judge", "jobs", "adapter_revisions"},
    "data_synthesis": {"judge", "jobs"},
    "eval": {"judge", "jobs", "data_synthesis"},
    "training": {"judge", "jobs", "adapter_revisions", "data_synthesis"},
    "tiny_world": {"judge", "jobs", "adapter_revisions", "reward_server", "data_synthesis", "training", "eval"},
    "mrjudge": {
        "judge",
        "jobs",
        "adapter_revisions",
        "reward_server",
        "data_synthesis",
        "training",
        "eval",
        "tiny_world",
    },
}
HEAVY = ("fastapi", "uvicorn", "starlette", "transformers", "torch", "trl", "peft", "datasets", "vllm", "ray")
CORE_MODULES = (
    "judge",
    "judge.types",
    "judge.prompt",
    "judge.parser",
    "judge.images",
    "judge.config",
    "judge.judging",
    "judge.backends",
    "judge.loopback",
    "judge.reward.scoring",
    "judge.reward.planner",
    "judge.reward.inputs",
    "judge.reward",
    "judge.reward.wire",
    "judge.reward.audit",
    "judge.reward.trl",
    "judge.integrations.verl",
    "judge.integrations.openrlhf",
)


def _imports_of_ours(path: Path) -> set[str]:
    """Top-level names of ours that a file imports anywhere (lazy imports inside functions count too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found |= {name.split(".")[0] for name in names if name.split(".")[0] in MAY_IMPORT}
    return found


@pytest.mark.parametrize("floor", sorted(MAY_IMPORT))
def test_imports_point_down(floor: str) -> None:
    files = sorted((ROOT / FOLDER.get(floor, floor)).rglob("*.py"))
    assert files, f"no files under {floor}"
    wrong = {
        str(f.relative_to(ROOT)): sorted(bad)
        for f in files
        if (bad := _imports_of_ours(f) - MAY_IMPORT[floor] - {floor})
    }
    assert not wrong, f"{floor} may import only {sorted(MAY_IMPORT[floor])}; these files reach up: {wrong}"


def test_nothing_imports_the_command_line_by_its_folder_name() -> None:
    """`scripts` is verl's top-level package too: ours is imported as `mrjudge` only."""
    folders = [FOLDER.get(f, f) for f in MAY_IMPORT] + ["tests", "benchmarks"]
    offenders = [
        str(f.relative_to(ROOT))
        for folder in folders
        for f in sorted((ROOT / folder).rglob("*.py"))
        if any(
            (isinstance(n, ast.Import) and any(a.name.split(".")[0] == "scripts" for a in n.names))
            or (isinstance(n, ast.ImportFrom) and n.level == 0 and (n.module or "").split(".")[0] == "scripts")
            for n in ast.walk(ast.parse(f.read_text()))
        )
    ]
    assert offenders == []


def test_importing_the_core_loads_no_server_no_model_library_and_no_torch() -> None:
    # A fresh interpreter: this test process has long imported torch and fastapi.
    code = (
        "import importlib, json, sys\n"
        f"for name in {CORE_MODULES!r}: importlib.import_module(name)\n"
        f"print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


def test_importing_scripts_by_folder_name_names_the_right_spelling() -> None:
    out = subprocess.run([sys.executable, "-c", "import scripts"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode != 0
    assert "imported as `mrjudge`" in out.stderr
