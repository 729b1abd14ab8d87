"""mr-judge and verl, OpenRLHF and lmms-eval installed together, from their real wheels, in one folder: both
sides import from it and run.

`pip install --no-deps --target` puts mr-judge's wheel (built from this checkout) and the three framework
wheels (the cached ones, `scripts/frameworks_env.sh`) into one fresh folder, as `pip install` into one
environment would; the checks run in a subprocess with that folder first on `PYTHONPATH` (the frameworks'
other dependencies behind it), outside the repository, so nothing is imported from the checkout.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile

import pytest

from tests.frameworks.conftest import VERSIONS, frameworks_folder
from tests.support.wheels import build_wheel

pytest.importorskip("tomllib", reason="building the wheel reads pyproject.toml with tomllib (Python 3.11+)")

CHECK = r"""
import asyncio, inspect, json, sys
from pathlib import Path
target = Path(sys.argv[1])
import judge, mrjudge, reward_server, eval as mr_eval, verl, openrlhf, lmms_eval
from_target = {m.__name__: Path(m.__file__).resolve().is_relative_to(target)
               for m in (judge, mrjudge, reward_server, mr_eval, verl, openrlhf, lmms_eval)}
# verl runs, and loads mr-judge's reward file by path as its trainer does
from verl.utils.import_utils import load_extern_object
from verl.utils.reward_score import default_compute_score
compute_score = load_extern_object(str(target / "judge/integrations/verl.py"), "compute_score")
from openrlhf.utils.math_utils import grade_answer  # OpenRLHF runs
from lmms_eval.api.reasoning import strip_reasoning_tags  # lmms-eval runs
from judge.integrations.verl import get_reward_endpoint  # mr-judge runs
from mrjudge.serve_cmd import reward_usage
print(json.dumps({
    "from_target": from_target,
    "verl_gsm8k": default_compute_score("openai/gsm8k", "The answer is #### 4", "4"),
    "verl_loads_ours": inspect.iscoroutinefunction(compute_score),
    "openrlhf_grades": grade_answer("4", "4"),
    "lmms_eval_strips": strip_reasoning_tags("<think>a</think> b", [["<think>", "</think>"]]),
    "ours": get_reward_endpoint("http://judge:8000/v1"),
    "usage_names_verl_py": str(target / "judge/integrations/verl.py") in reward_usage("http://j:1", keyed=False, group_size=4),
}))
"""


def test_mr_judge_and_the_three_frameworks_install_into_one_folder_and_run(frameworks_site, tmp_path):
    folder = frameworks_folder()
    ours = build_wheel(tmp_path)
    theirs = sorted(folder.glob("wheels/verl-*.whl")) + sorted(folder.glob("wheels/openrlhf-*.whl"))
    theirs += sorted(folder.glob("wheels/lmms_eval-*.whl"))
    assert len(theirs) == 3, theirs
    target = tmp_path / "env"
    command = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", str(target)]
    subprocess.run([*command, str(ours), *map(str, theirs)], check=True, capture_output=True)
    # Nothing of mr-judge's was overwritten or removed by a framework's files.
    with zipfile.ZipFile(ours) as wheel:
        files = [n for n in wheel.namelist() if not n.endswith("/") and ".dist-info/" not in n]
        assert files and all((target / n).read_bytes() == wheel.read(n) for n in files)
    env = {"PYTHONPATH": f"{target}:{frameworks_site}", "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", CHECK, str(target)], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300
    )
    assert done.returncode == 0, done.stderr[-4000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert all(got["from_target"].values()), got["from_target"]
    assert got["verl_gsm8k"] == 1.0 and got["verl_loads_ours"] and got["openrlhf_grades"]
    assert got["lmms_eval_strips"] == "b" and got["ours"] == "http://judge:8000/get_reward"
    assert got["usage_names_verl_py"]
    help_text = subprocess.run(
        [sys.executable, "-m", "mrjudge", "--help"], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert help_text.returncode == 0 and "serve" in help_text.stdout
    metadata = subprocess.run(
        [sys.executable, "-c", "import importlib.metadata as m; print(m.version('verl'), m.version('openrlhf'), "
         "m.version('lmms_eval'), m.version('mr-judge'))"],
        capture_output=True, text=True, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert metadata.stdout.split() == [VERSIONS["verl"], VERSIONS["openrlhf"], VERSIONS["lmms_eval"], "0.1.0"]
