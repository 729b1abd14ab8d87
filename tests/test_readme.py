"""The README's shell commands work as written: each one is run here, or skipped for a stated reason.

Convention. Every command in a ```bash block of README.md (a line, with `\\` continuations joined and
`# comments` dropped) must match exactly one pattern below, tried in order:

- `RUN`: run here, in README order, in one fresh working folder, as a new user would type it: through a
  shell, `.venv/bin/X` and a bare `mrjudge` resolved to this interpreter's environment, `configs/` linked
  from the repository, and the README's placeholder inputs (`items.jsonl`, `test.parquet`, `preds.jsonl`)
  written first. A command that exits non-zero fails the test with its output.
- `SKIP`: not run, with the reason (a server, a GPU, a download, minutes of training, or covered elsewhere).

A README command that matches nothing fails `test_every_readme_command_is_classified`: decide whether
CI should run it, and add a pattern. `REQUIRED` lists commands the README must show *and* CI must run.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
BIN = Path(sys.executable).parent

RUN: list[str] = [
    r"mrjudge --help",
    r"mrjudge [a-z-]+( [a-z-]+)? --help",  # a command's (or subcommand's) help
    r"mrjudge tiny-model --out runs/[\w./-]+( --size \w+)?",
    r"mrjudge judge --model runs/tiny-judge --input items\.jsonl --output [\w./-]+",  # the prepared items
    r"mrjudge synth all --config configs/synth_world\.yaml",  # the data engine on the world: seconds
    r"mrjudge train (sft|grpo|policy) +--help-fields",
    r"mrjudge eval vl-rewardbench --data test\.parquet --predictions preds\.jsonl --out [\w./-]+",
    r"mrjudge adapters --store [\w./-]+ list",
    r"mrjudge view preds\.jsonl --data test\.parquet --out [\w./-]+\.html",  # the predictions scored above, as a page
]
"""Commands CI runs (regular expressions over the command with `.venv/bin/` dropped)."""

SKIP: list[tuple[str, str]] = [
    (
        r"make demo",
        "the full demo takes about 20 minutes (docs/demo.md); tests/tiny_world/test_demo.py runs each stage (--quick)",
    ),
    (r"make (test|lint)", "that is this test suite and its lint"),
    (r"mrjudge demo\b.*", "tests/tiny_world/test_demo.py runs the demo through the CLI with --quick"),
    (r".*https?://.*", "needs a model server (vllm serve, mrjudge serve) or the internet"),
    (r"(MRJUDGE_\w+=\S+ )?mrjudge serve .*", "a long-running server; tests/reward_server covers it on loopback"),
    (r"curl .*", "needs a running reward server"),
    (
        r"accelerate launch --config_file configs/accelerate/multinode_\w+\.yaml --machine_rank \d .*",
        "multi-node training: two machines with 8 GPUs each",
    ),
    (
        r"accelerate launch --multi_gpu --num_(processes|machines) .* -m mrjudge\.cli train sft --config "
        r"configs/judge_sft_tiny\.yaml .*",
        "covered by tests/training/test_multinode.py",
    ),
    (r"accelerate launch .*", "multi-GPU training"),
    (r"ray start .*", "starts a node of a Ray cluster; tests/ray run on a local Ray instead"),
    (
        r"(MRJUDGE_\w+=\S+ )+python -m (verl\.trainer\.main_ppo|openrlhf\.cli\.train_ppo_ray) .*",
        "trains a policy with verl / OpenRLHF on GPUs; tests/judge/test_integrations.py loads their reward files",
    ),
    (
        r"mrjudge synth all --config configs/synth_world\.yaml --engine ray",
        "tests/ray/test_synthesis.py runs it on a local Ray and compares every file with the local run",
    ),
    (r"mrjudge train (sft|grpo|policy) .*", "training takes minutes on a CPU; tests/training covers the recipes"),
    (
        r"mrjudge train policies --config configs/policies_tiny\.yaml .*",
        "tests/training/test_multi_policy.py runs the command from a YAML config with overrides",
    ),
    (r"mrjudge synth (records|negatives|describe|assemble|distill|world) .*", "on your own data and model servers"),
    (
        r"mrjudge synth all --config configs/synth_qwen2_5_vl\.yaml",
        "needs the two vllm serve servers; tests/data_synthesis/test_real_sources.py runs synth all on a source",
    ),
    (r"(CUDA_VISIBLE_DEVICES=\S+ )?vllm serve .*", "a vLLM server: GPUs and a model download"),
    (r"mrjudge adapters merge .*", "needs the adapter of a LoRA training run"),
    (r"mrjudge eval .*", "needs a trained judge and the benchmark's data (VL-RewardBench, MM-Vet, MMRB)"),
    (r"mrjudge adapters --store \S+ (promote|rollback|gc|show|import) .*", "needs revisions from a LoRA run"),
    (r"mrjudge judge .*", "needs a trained judge or a model server"),
    (r"mrjudge view runs/demo\b.*", "needs the demo's runs (make demo); tests/eval/view makes a page of every kind"),
    (r"(python|\.venv/bin/python) benchmarks/\w+\.py.*", "benchmarks take minutes and print measurements"),
]
"""Commands CI does not run, and why."""

REQUIRED: list[str] = [
    r"mrjudge --help",
    r"mrjudge tiny-model --out .*",
    r"mrjudge judge --model runs/tiny-judge .*",
    r"mrjudge adapters --store \S+ list",
    r"mrjudge eval vl-rewardbench --data \S+ --predictions .*",
]
"""What a new user tries first: the README must show these and CI must run them."""


def strip_comment(line: str) -> str:
    """The line without a `# comment` (a `#` after whitespace, outside quotes)."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def readme_commands(text: str) -> list[str]:
    """Every command in the ```bash blocks, continuations joined, comments and blank lines dropped."""
    commands = []
    for block in re.findall(r"^```bash\n(.*?)^```", text, flags=re.M | re.S):
        for line in re.sub(r"\s*\\\n\s*", " ", block).splitlines():
            command = strip_comment(line).strip()
            if command:
                commands.append(command)
    return commands


def normalized(command: str) -> str:
    """For matching: single spaces, `.venv/bin/` dropped."""
    return re.sub(r"(^|\s)\.venv/bin/", r"\1", " ".join(command.split()))


def classify(command: str) -> str:
    """ "run", "skip: <reason>", or "unclassified"."""
    text = normalized(command)
    if any(re.fullmatch(pattern, text) for pattern in RUN):
        return "run"
    for pattern, reason in SKIP:
        if re.fullmatch(pattern, text):
            return f"skip: {reason}"
    return "unclassified"


COMMANDS = readme_commands(README.read_text(encoding="utf-8"))


def test_readme_has_bash_commands():
    assert len(COMMANDS) > 5


def test_every_readme_command_is_classified():
    unclassified = [c for c in COMMANDS if classify(c) == "unclassified"]
    assert not unclassified, (
        "README commands neither run nor skipped by tests/test_readme.py — add a RUN pattern, or a SKIP "
        f"pattern with the reason: {unclassified}"
    )


@pytest.mark.parametrize("pattern", REQUIRED)
def test_required_commands_are_in_the_readme_and_run(pattern):
    matching = [c for c in COMMANDS if re.fullmatch(pattern, normalized(c))]
    assert matching, f"the README shows no command matching {pattern!r}"
    assert all(classify(c) == "run" for c in matching), [(c, classify(c)) for c in matching]


def test_comment_and_continuation_handling():
    text = "```bash\nmrjudge a --x 1 \\\n    --y '#no' # yes\n# only a comment\n\n.venv/bin/mrjudge b\n```\n"
    assert readme_commands(text) == ["mrjudge a --x 1 --y '#no'", ".venv/bin/mrjudge b"]
    assert normalized(".venv/bin/mrjudge  b") == "mrjudge b"


# -- running them ------------------------------------------------------------------------------------------


def _placeholder_inputs(folder: Path) -> None:
    """The README's example inputs: MC items with images, a VL-RewardBench Parquet, a predictions file."""
    import datasets
    from PIL import Image

    from tiny_world.bench_files import vlrb_features

    (folder / "img").mkdir()
    items = []
    for i, colour in enumerate(("red", "blue")):
        Image.new("RGB", (56, 56), (200, 30, 30) if colour == "red" else (30, 30, 200)).save(folder / f"img/{i}.png")
        items.append(
            {
                "id": f"item-{i}",
                "image": f"img/{i}.png",
                "question": "What colour is the picture?",
                "candidates": [f"It is {colour}.", "It is green."],
                "label": 0,
            }
        )
    (folder / "items.jsonl").write_text("".join(json.dumps(item) + "\n" for item in items))
    rows = {
        "id": ["RLAIF-V_1", "mmmu_2", "wildvision_3"],
        "query": ["What colour is it?", "What is 2 + 2?", "Describe the picture."],
        "response": [["Red.", "Blue."], ["4", "5"], ["A blue square.", "A red circle."]],
        "image": [Image.new("RGB", (28, 28), (i * 80, 0, 0)) for i in range(3)],
        "human_ranking": [[0, 1], [0, 1], [1, 0]],
    }
    datasets.Dataset.from_dict(rows, features=vlrb_features(sources=False)).to_parquet(str(folder / "test.parquet"))
    predictions = [{"id": "RLAIF-V_1", "pred": 0}, {"id": "mmmu_2", "pred": 1}, {"id": "wildvision_3", "pred": 1}]
    (folder / "preds.jsonl").write_text("".join(json.dumps(p) + "\n" for p in predictions))


def _shell_command(command: str) -> str:
    """The command with `.venv/bin/` (and a leading bare `mrjudge`) pointing at this environment."""
    command = re.sub(r"(^|\s)\.venv/bin/", rf"\g<1>{BIN}/", command)
    return re.sub(r"^mrjudge\b", f"{BIN}/mrjudge", command)


@pytest.mark.slow  # ~8 fresh processes (imports ~5 s each) and the world's data engine: about a minute
def test_readme_commands_run(tmp_path):
    """Run every RUN command, in README order, in one fresh folder; then check what they left behind."""
    _placeholder_inputs(tmp_path)
    (tmp_path / "configs").symlink_to(ROOT / "configs")
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "OMP_NUM_THREADS": "1"}
    env.pop("MRJUDGE_ADAPTER_STORE", None)
    ran = []
    for command in COMMANDS:
        if classify(command) != "run":
            continue
        result = subprocess.run(
            _shell_command(command), shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
        )
        assert result.returncode == 0, (
            f"README command failed (exit {result.returncode}): {command}\n"
            f"--- stdout ---\n{result.stdout[-3000:]}\n--- stderr ---\n{result.stderr[-3000:]}"
        )
        ran.append(normalized(command))
    assert ran, "no README command ran"
    if any(c.startswith("mrjudge tiny-model --out runs/tiny-judge") for c in ran):
        assert (tmp_path / "runs" / "tiny-judge" / "config.json").is_file()
    for command in ran:
        if command.startswith("mrjudge judge "):
            output = tmp_path / command.split("--output ")[1].split()[0]
            assert len(output.read_text().splitlines()) == 2, command
        if command.startswith("mrjudge view "):
            page = (tmp_path / command.split("--out ")[1].split()[0]).read_text()
            assert "mr-judge view" in page and "RLAIF-V_1" in page, command
        if command.startswith("mrjudge eval vl-rewardbench") and "--predictions" in command:
            metrics = json.loads((tmp_path / command.split("--out ")[1].split()[0] / "metrics.json").read_text())
            assert metrics["n"] == 3 and metrics["overall_accuracy"] == pytest.approx(2 / 3)


# -- a README for users ------------------------------------------------------------------------------------


def test_readme_is_short_and_links_every_docs_page_once():
    """The README is a tour, under ~300 lines; the long versions live in docs/, each linked from it once."""
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 300, "move explanations, tables and measurements to docs/"
    links = re.findall(r"\]\((docs/[\w./-]+\.md)(?:#[\w-]+)?\)", text)
    pages = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md"))
    assert sorted(set(links)) == pages, (
        f"unlinked: {sorted(set(pages) - set(links))}; missing: {sorted(set(links) - set(pages))}"
    )
    twice = sorted({link for link in links if links.count(link) > 1})
    assert not twice, f"linked more than once: {twice}"


def test_docs_links_resolve():
    """Every relative link in README.md and docs/*.md points at a file that exists."""
    broken = []
    for page in [README, *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            if "://" not in target and not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not broken, broken
