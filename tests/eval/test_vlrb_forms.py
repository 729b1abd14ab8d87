"""VL-RewardBench in each published form, scored by the CLI and checked against cal.py followed by hand.

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

import pytest
from fastapi import FastAPI, Request

from eval import vl_rewardbench as vlrb
from eval.vl_rewardbench import VLRBConfig, official_predict
from tests.eval.fixtures import _shown_answers
from tests.support.vlrb import eval_vlrb, vlrb_metrics
from tiny_world.bench_files import png_bytes as _png
from tiny_world.servers.openai_server import serve

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


@pytest.fixture
def github_run(tmp_path):
    data = write_github_jsonl(tmp_path)
    rows = [json.loads(line) for line in data.read_text().splitlines()]
    items = vlrb.load_vl_rewardbench(data)
    judge = CyclingJudge()
    predictions = official_predict(judge, items, VLRBConfig(k=10, seed=7))
    path = tmp_path / "predictions.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in predictions))
    return data, rows, items, judge, predictions, path


def test_github_jsonl_keeps_every_row_and_strips_image_tags(github_run):
    data, rows, items, judge, _, _ = github_run
    assert len(items) == len(ROWS) == 12
    assert [i.id for i in items][4:8] == [
        "mathverse_3414", "mathverse_3414#2", "mmmu_pro_test_Marketing_150", "mmmu_pro_test_Marketing_150#2"
    ]  # fmt: skip
    assert items[5].extra["id"] == "mathverse_3414" and items[5].responses == ["correct F", "wrong F2"]
    assert items[0].query == "Describe the image." and items[0].image.endswith("hallucination_pair_1-0.png")
    assert judge.calls == 120 and not any("<image>" in p for p in judge.prompts)
    assert "Question: Describe the image.\n\nAnswer 1:" in judge.prompts[0]
    assert [(i.source, i.group) for i in items][9] == ("vlfeedback", "general")


def test_cli_score_matches_calpy_by_hand_at_every_k(github_run, tmp_path):
    data, rows, _, _, predictions, path = github_run
    metrics = vlrb_metrics(data, path, tmp_path / "scored")
    reference = calpy_reference(inference_lines(rows, predictions))
    assert (metrics["reading"], metrics["headline_k"], metrics["calls_per_item"]) == ("cal.py", 9, 10)
    for k, (overall, macro, _groups) in reference.items():
        assert metrics[f"overall_accuracy_k{k}"] == pytest.approx(overall)
        assert metrics[f"macro_accuracy_k{k}"] == pytest.approx(macro)
    overall, macro, groups = reference[9]
    assert (metrics["overall_accuracy"], metrics["macro_accuracy"]) == (pytest.approx(overall), pytest.approx(macro))
    for group, accuracy in groups.items():
        assert metrics[f"accuracy_{group}"] == pytest.approx(accuracy)
    assert len({round(reference[k][0], 9) for k in reference}) > 1  # the ks really differ on these calls
    report = (tmp_path / "scored/report.md").read_text()
    assert "Headline: cal.py's reading at k = 9 (of 10 calls per item" in report


def test_all_calls_reading_is_the_named_option(github_run, tmp_path):
    data, _, items, _, predictions, path = github_run
    metrics = vlrb_metrics(data, path, tmp_path / "all", "--reading", "all-calls")
    outcomes = [vlrb.item_outcome([c["outcome"] for c in p["calls"]]) for p in predictions]
    agree = sum(o == "agree" for o in outcomes)
    decided = agree + sum(o == "reject" for o in outcomes)
    assert metrics["reading"] == "all-calls" and metrics["overall_accuracy"] == pytest.approx(agree / decided)
    assert metrics["unparsed"] == len(items) - decided
    assert metrics["overall_accuracy_unparsed_wrong"] == pytest.approx(agree / len(items))
    assert metrics["overall_accuracy_unparsed_coin"] == pytest.approx((agree + 0.5 * (len(items) - decided)) / 12)
    cal = vlrb_metrics(data, path, tmp_path / "cal")
    assert cal["all_calls_overall_accuracy"] == metrics["overall_accuracy"]


def test_hub_parquet_scores_the_same_calls_the_same_but_hashes_differently(github_run, tmp_path):
    data, _, _, _, _, path = github_run
    parquet = write_hub_parquet(tmp_path / "hub")
    items = vlrb.load_vl_rewardbench(parquet)
    assert [i.id for i in items][5] == "mathverse_3414#2" and isinstance(items[0].image, dict)
    assert items[0].query == "Describe the image."
    from_jsonl = vlrb_metrics(data, path, tmp_path / "a")
    from_parquet = vlrb_metrics(parquet, path, tmp_path / "b")
    keys = [k for k in from_jsonl if k.startswith(("overall", "macro", "accuracy_")) and "_ci95_" not in k]
    assert {k: from_parquet[k] for k in keys} == {k: from_jsonl[k] for k in keys}
    assert from_parquet["data_sha256"] != from_jsonl["data_sha256"]
    assert (from_parquet["data_rows"], from_parquet["data_revision"]) == (12, None)


def test_a_local_copy_of_the_hub_repository_loads(tmp_path):
    parquet = write_hub_parquet(tmp_path / "repo" / "data")
    items = vlrb.load_vl_rewardbench(tmp_path / "repo")
    assert len(items) == 12 and items.provenance["data_revision"] is None
    assert items.provenance["data_sha256"] == vlrb.load_vl_rewardbench(parquet).provenance["data_sha256"]


def test_data_sha256_changes_with_one_row_and_only_then(tmp_path):
    first = vlrb.load_vl_rewardbench(write_github_jsonl(tmp_path / "a")).provenance
    same = vlrb.load_vl_rewardbench(write_github_jsonl(tmp_path / "b")).provenance
    rows = github_rows(tmp_path / "c")
    rows[7]["response"][1] = "wrong H3"
    changed = vlrb.load_vl_rewardbench(write_github_jsonl(tmp_path / "c", rows)).provenance
    assert first["data_sha256"] == same["data_sha256"] != changed["data_sha256"]
    (tmp_path / "b/images/vlfeedback/RLHF-V-4-3.png").write_bytes(_png((1, 2, 3)))  # an image's bytes count too
    assert vlrb.load_vl_rewardbench(tmp_path / "b/data.jsonl").provenance["data_sha256"] != first["data_sha256"]
    assert vlrb.load_vl_rewardbench(tmp_path / "a/data.jsonl", limit=5).provenance["data_rows"] == 5


def test_bootstrap_interval_covers_the_estimate_and_is_reproducible(github_run, tmp_path):
    data, _, _, _, _, path = github_run
    one = vlrb_metrics(data, path, tmp_path / "one")
    two = vlrb_metrics(data, path, tmp_path / "two")
    for key in ("overall_accuracy", "macro_accuracy", "accuracy_hallucination"):
        low, high = one[f"{key}_ci95_low"], one[f"{key}_ci95_high"]
        assert low <= one[key] <= high and low < high
        assert (two[f"{key}_ci95_low"], two[f"{key}_ci95_high"]) == (low, high)
    other = vlrb_metrics(data, path, tmp_path / "other", "--seed", "5")
    assert other["bootstrap_seed"] == 5 and other["overall_accuracy"] == one["overall_accuracy"]
    assert "95 % CI" in (tmp_path / "one/report.md").read_text()


def test_predictions_file_with_repeated_ids_matches_rows_in_order(github_run, tmp_path):
    data, _, items, _, _, _ = github_run
    preds = tmp_path / "user.jsonl"
    decisions = [i.preferred for i in items]
    decisions[5] = 1 - decisions[5]  # the second mathverse_3414 row is wrong, the first right
    preds.write_text("".join(json.dumps({"id": i.extra["id"], "pred": d}) + "\n" for i, d in zip(items, decisions)))
    metrics = vlrb_metrics(data, preds, tmp_path / "user")
    assert metrics["reading"] == "decisions" and metrics["accuracy_reasoning"] == pytest.approx(3 / 4)
    assert metrics["accuracy_mathverse"] == 0.5
    preds.write_text(preds.read_text() + json.dumps({"id": "mathverse_3414", "pred": 0}) + "\n")
    assert eval_vlrb(data, preds, tmp_path / "x") == 2  # a third row for a twice-seen id


def test_llm_parse_reads_the_calls_the_regex_missed(github_run, tmp_path):
    data, _, _, _, predictions, path = github_run
    app, seen = FastAPI(), []

    @app.get("/v1/models")
    def models():
        return {"object": "list", "data": [{"id": "parser", "object": "model", "created": 0, "owned_by": "t"}]}

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        body = await request.json()
        seen.append(body)
        return {"id": "x", "object": "chat.completion", "created": 0, "model": "parser",
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": "Answer 1"}}]}  # fmt: skip

    junk = sum(c["outcome"] == "doesntMatch" for p in predictions for c in p["calls"])
    with serve(app) as url:
        metrics = vlrb_metrics(data, path, tmp_path / "llm", "--llm-parse", url)
    assert junk > 0 and len(seen) == junk and metrics["llm_parsed_calls"] == junk
    assert seen[0]["max_tokens"] == 32 and seen[0]["temperature"] == 0.0
    assert seen[0]["messages"][0]["content"].startswith("\nYou are given a pairwise judgement for two responses.")
    # By hand: every regex-missed call now chose display position 1.
    fixed = []
    for p in predictions:
        outcomes = [
            vlrb.call_outcome(1, c["display"], p["preferred"]) if c["outcome"] == "doesntMatch" else c["outcome"]
            for c in p["calls"]
        ]
        fixed.append(vlrb.item_outcome(outcomes))
    assert metrics["all_calls_overall_accuracy"] == pytest.approx(
        fixed.count("agree") / (fixed.count("agree") + fixed.count("reject"))
    )


def test_headline_k_is_one_of_calpys(github_run, tmp_path, capsys):
    data, _, _, _, _, path = github_run
    assert vlrb_metrics(data, path, tmp_path / "k5", "--headline-k", "5")["overall_accuracy"] is not None
    metrics = json.loads((tmp_path / "k5/metrics.json").read_text())
    assert metrics["headline_k"] == 5 and metrics["overall_accuracy"] == metrics["overall_accuracy_k5"]
    assert eval_vlrb(data, path, tmp_path / "x", "--headline-k", "4") == 2
    assert "--headline-k 4" in capsys.readouterr().err
