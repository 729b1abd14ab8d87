"""VL-RewardBench in each published form, and a scripted official run over it, for the tests beside this module.

The forms: the GitHub `data/data.jsonl` (`image_path`, repeated ids with other responses, `meta` dicts),
the hub Parquet (`image` bytes), both with POVID's `"<image>\\n"` queries. Official-mode calls come from a
scripted backend (right, wrong and unparsable replies in a fixed cycle), so no model runs. The reference,
`calpy_reference`, is VL-RewardBench's `cal.py` (commit 9b10abd) transcribed line by line onto the
inference-file lines `inference_hf.py` would have written for the same calls.
"""

from __future__ import annotations

import json
import random
import re
from collections import defaultdict

from tests.eval.fixtures import _shown_answers
from tiny_world.bench_files import png_bytes as _png

# (id, query, responses, human_ranking): POVID queries start with "<image>\n"; two ids repeat with other
# responses, as 18 do in the GitHub copy (e.g. mathverse_3414).
ROWS = [
    ("hallucination_pair_1", "<image>\nDescribe the image.", ["correct A", "wrong A"], [0, 1]),
    ("hallucination_pair_2", "<image>\nWhat is shown?", ["correct B", "wrong B"], [0, 1]),
    ("RLAIF-V-3", "Describe it in detail.", ["wrong C", "correct C"], [1, 0]),
    ("RLHF-V-4", "What colour is the bus?", ["correct D", "wrong D"], [0, 1]),
    ("mathverse_3414", "Find AF.", ["correct E", "wrong E"], [0, 1]),
    ("mathverse_3414", "Find AF.", ["correct F", "wrong F2"], [0, 1]),
    ("mmmu_pro_test_Marketing_150", "Probability?", ["correct G", "wrong G"], [0, 1]),
    ("mmmu_pro_test_Marketing_150", "Probability?", ["correct H", "wrong H2"], [0, 1]),
    ("wildvision-battle_9", "Which is better?", ["correct I", "wrong I"], [0, 1]),
    ("LRVInstruction-000000007746", "The dog has one floppy ear.", ["wrong J", "correct J"], [1, 0]),
    ("wildvision-battle_11", "Explain the chart.", ["correct K", "wrong K"], [0, 1]),
    ("RLAIF-V-12", "What is on the table?", ["correct L", "wrong L"], [0, 1]),
]
PATTERNS = [  # per item (by its correct response's letter), call by call: mostly right, mostly wrong, split, junk
    ["right", "right", "wrong", "right", "junk", "right", "right", "wrong", "right", "right"],
    ["wrong", "right", "wrong", "wrong", "junk", "wrong", "right", "wrong", "wrong", "right"],
    ["right", "wrong", "junk", "right", "wrong", "right", "wrong", "junk", "wrong", "right"],
    ["junk", "right", "junk", "wrong", "junk", "junk", "right", "junk", "wrong", "junk"],
]


def github_rows(folder):
    (folder / "images/vlfeedback").mkdir(parents=True, exist_ok=True)
    rows = []
    for i, (item_id, query, responses, ranking) in enumerate(ROWS):
        name = f"images/vlfeedback/{item_id}-{i}.png"
        (folder / name).write_bytes(_png((20 * i, 80, 140)))
        rows.append(
            {"id": item_id, "image_path": name, "query": query, "response": responses, "human_ranking": ranking,
             "models": ["m1", "m2"], "judge": "human", "rationale": None, "query_source": item_id.split("_")[0],
             "meta": {"note": "majority of human annotations"}, "human_error_analysis": ["recognition(object)"]}
        )  # fmt: skip
    return rows


def write_github_jsonl(folder, rows=None):
    rows = rows or github_rows(folder)
    path = folder / "data.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def write_hub_parquet(folder):
    """The hub's form of the same rows: `image` as PNG bytes, no `image_path`."""
    import datasets

    rows = github_rows(folder)
    for row in rows:
        row["image"] = {"bytes": (folder / row.pop("image_path")).read_bytes(), "path": None}
        row.pop("meta"), row.pop("human_error_analysis")
    features = datasets.Features(
        {
            "id": datasets.Value("string"),
            "query": datasets.Value("string"),
            "response": datasets.Sequence(datasets.Value("string")),
            "human_ranking": datasets.Sequence(datasets.Value("int64")),
            "models": datasets.Sequence(datasets.Value("string")),
            "judge": datasets.Value("string"),
            "rationale": datasets.Value("string"),
            "query_source": datasets.Value("string"),
            "image": datasets.Image(),
        }
    )
    path = folder / "test-00000-of-00001.parquet"
    datasets.Dataset.from_list(rows, features=features).to_parquet(str(path))
    return path


class CyclingJudge:
    """Answers each official prompt right, wrong or unparsably by its item's pattern; records every prompt."""

    name = "cycling"

    def __init__(self):
        self.calls, self.prompts, self.seen = 0, [], defaultdict(int)

    def generate(self, requests, params):
        from judge.backends.base import Generation

        out = []
        for request in requests:
            text = next(p["text"] for p in request.messages[-1]["content"] if p["type"] == "text")
            self.prompts.append(text)
            first, second = _shown_answers(text)
            right = 1 if "correct" in first else 2
            letter = re.search(r"correct (\w)", first + second).group(1)
            kind = PATTERNS[(ord(letter) - ord("A")) % 4][self.seen[letter] % 10]
            self.seen[letter] += 1
            self.calls += 1
            if kind == "junk":
                out.append(Generation(text="Both answers have merits; I cannot decide."))
            else:
                pick = right if kind == "right" else 3 - right
                out.append(Generation(text=f"Accuracy: ...\n**Overall Judgment**: Answer {pick} is better."))
        return out


def calpy_reference(lines, ks=(1, 3, 5, 7, 9)):
    """cal.py's main(): random.seed(1234), then for each k: distribution(reparse=True) → classify →
    distribution_dataset's group sums. Returns {k: (overall, macro, {group: accuracy})}."""
    pattern = r"(?:Overall Judgment|Therefore)\s*.*\s*-*\s*Answer\s*(\d+)\s*is\s*(?:the\s*)?(?:slightly\s*)?better"

    def get_dataset_from_id(id):
        split_index = min((id.find("_"), id.find("-")), key=lambda x: x if x != -1 else float("inf"))
        prefix = id[:split_index] if split_index != -1 else id
        return {"RLAIF": "rlaif-v", "RLHF": "rlhf-v", "mathverse": "reasoning_tasks", "mmmu": "reasoning_tasks",
                "wildvision": "wildvision-battle", "hallucination": "povid"}.get(prefix, "vlfeedback")  # fmt: skip

    def shuffle_data(data):
        for i in range(len(data)):
            j = random.randint(0, len(data) - 1)
            data[i], data[j] = data[j], data[i]
        return data

    group_mapping = {"vlfeedback": "general", "povid": "hallucination", "reasoning_tasks": "reasoning",
                     "rlhf-v": "hallucination", "rlaif-v": "hallucination", "wildvision-battle": "general"}  # fmt: skip
    random.seed(1234)
    out = {}
    for k in ks:
        data = shuffle_data([json.loads(json.dumps(line)) for line in lines])
        distribution = {}
        for item in data:
            key = item["id"] + item["query"] + "\t".join(sorted(item["response"]))
            random_number = item["meta"]["random_number"]
            rejected = item["ranking"].index(1 if random_number == 0 else 0) + 1
            match = re.search(pattern, item["meta"]["filter_choice"].replace("\n", "").replace("*", ""), re.I)
            status = "doesntMatch" if not match else ("reject" if int(match.group(1)) == rejected else "agree")
            entry = distribution.setdefault(
                key, {"agree": 0, "reject": 0, "doesntMatch": 0, "dataset": get_dataset_from_id(item["id"])}
            )
            if entry["agree"] + entry["reject"] + entry["doesntMatch"] >= k:
                continue
            entry[status] += 1
        correct, total = defaultdict(int), defaultdict(int)
        for entry in distribution.values():
            n = entry["agree"] + entry["reject"] + entry["doesntMatch"]
            group = group_mapping[entry["dataset"]]
            if entry["agree"] > n / 2:
                correct[group] += 1
                total[group] += 1
            elif entry["reject"] > n / 2:
                total[group] += 1
        tasks = ["reasoning", "hallucination", "general"]
        macro = sum(correct[t] / total[t] for t in tasks) / 3
        overall = sum(correct[t] for t in tasks) / sum(total[t] for t in tasks)
        out[k] = (overall, macro, {t: correct[t] / total[t] for t in tasks})
    return out


def inference_lines(rows, predictions):
    """The lines inference_hf.py writes for these calls: row by row, k calls each, with the raw query."""
    lines = []
    for row, pred in zip(rows, predictions):
        for call, raw in zip(pred["calls"], pred["raw"]):
            meta = {"random_number": 0 if call["display"] == [0, 1] else 1, "filter_choice": raw}
            lines.append({"id": row["id"], "query": row["query"], "response": row["response"],
                          "ranking": row["human_ranking"], "meta": meta})  # fmt: skip
    return lines
