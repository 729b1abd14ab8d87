"""Score VL-RewardBench replies with lmms-eval 0.7.3's own `vl_rewardbench` task code and print the result as one
JSON line: its `doc_to_text` prompt per item, its `process_results` per item and its aggregation, each the
function `vl_rewardbench.yaml` names, loaded as lmms-eval loads a task's `!function` (by file path).

Run by `tests/frameworks/test_lmms_eval.py` in a subprocess whose `PYTHONPATH` holds the frameworks' cached
install (`scripts/frameworks_env.sh`); not a test module itself. As `lmms-eval` runs the task, the reply first
passes `strip_reasoning_tags` with the CLI's default `--reasoning_tags`, and Python's `random` is seeded with
the CLI's default `--seed` (its first value seeds `random`); both defaults are read out of `lmms_eval/__main__.py`
with `ast`, because importing it loads the whole evaluator (sacrebleu and the other metric packages). The one
stand-in: `parse_by_llm`, which posts a regex-missed reply to OpenAI's gpt-4o-mini, returns the text the spec
gives for that reply (no network here).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import random
import sys
from typing import Any


def cli_defaults(path: str) -> dict[str, str]:
    """The defaults of `--reasoning_tags` and `--seed` in lmms-eval's `__main__.py`, read from its syntax tree."""
    tree = ast.parse(open(path).read())
    strings = {
        node.targets[0].id: node.value.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        and isinstance(node.targets[0], ast.Name)
        and isinstance(node.value, ast.Constant)
    }
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument" and node.args:
            flag = getattr(node.args[0], "value", None)
            default = next((k.value for k in node.keywords if k.arg == "default"), None)
            if flag in ("--reasoning_tags", "--seed") and default is not None:
                value = default.value if isinstance(default, ast.Constant) else strings[default.id]
                found[flag.removeprefix("--")] = value
    return found


def load_task(path: str) -> dict[str, Any]:
    """The task's YAML with each `!function utils.name` loaded as lmms-eval's `import_function` loads it: the
    module by file path from the YAML's folder (`importlib.util.spec_from_file_location`), under its name."""
    import importlib.util

    import yaml

    folder = os.path.dirname(path)

    def function(loader: Any, node: Any) -> Any:
        *module_name, name = loader.construct_scalar(node).split(".")
        module_name = ".".join(module_name)
        if module_name not in sys.modules:
            spec = importlib.util.spec_from_file_location(module_name, os.path.join(folder, f"{module_name}.py"))
            module = sys.modules[module_name] = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        return getattr(sys.modules[module_name], name)

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_constructor("!function", function)
    with open(path) as handle:
        return yaml.load(handle, Loader=Loader)


def main() -> None:
    import importlib.metadata

    parser = argparse.ArgumentParser()
    parser.add_argument("spec", help="a JSON file: docs (VL-RewardBench rows), replies, llm_replies (reply -> text)")
    spec = json.loads(open(parser.parse_args().spec).read())

    import lmms_eval
    from lmms_eval.api.reasoning import parse_reasoning_tags_config, strip_reasoning_tags

    task = load_task(
        os.path.join(os.path.dirname(lmms_eval.__file__), "tasks", "vl_rewardbench", "vl_rewardbench.yaml")
    )
    utils = sys.modules["utils"]

    cli = cli_defaults(os.path.join(os.path.dirname(lmms_eval.__file__), "__main__.py"))
    tags = parse_reasoning_tags_config(cli_value=cli["reasoning_tags"], task_value=None)
    llm_replies: dict[str, str] = spec["llm_replies"]
    asked: list[str] = []

    def parse_by_llm(response: str, model: str = "gpt-4o-mini", max_tokens: int = 32) -> str:
        asked.append(response)
        return llm_replies.get(response, "")

    utils.parse_by_llm = parse_by_llm
    seed = int(cli["seed"].split(",")[0])
    random.seed(seed)
    prompts, results = [], []
    [metric] = task["metric_list"]
    for doc, reply in zip(spec["docs"], spec["replies"]):
        prompts.append(task["doc_to_text"](doc))
        text = strip_reasoning_tags(reply, tags) if tags is not None else reply
        results.append(task["process_results"](doc, [text])[metric["metric"]])
    score = metric["aggregation"](results)
    out: dict[str, Any] = {
        "version": importlib.metadata.version("lmms_eval"),
        "reasoning_tags": tags,
        "seed": seed,
        "prompts": prompts,
        "results": results,
        "score": score,
        "asked_llm": asked,
    }
    out["generation_kwargs"] = task["generation_kwargs"]
    print(json.dumps(out))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
