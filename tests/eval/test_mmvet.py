"""MM-Vet best-of-N: official grading text and retry rule, metrics by hand, and whole runs on loopback.

Offline: the dataset is four questions in MM-Vet's schema with small PIL images built in tmp_path, the
grader is `tiny_world.servers.grader_server` (a stand-in for GPT-4 with a hand-computable rule) served on
loopback, and the judge is the tiny trained parrot.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from eval.mmvet import (
    GRADER_PROMPT,
    RETRY_SUFFIX,
    Grade,
    MMVetQuestion,
    generate_candidates,
    grade_predictions,
    grader_message,
    load_candidates,
    load_mmvet,
    oracle_pick,
    parse_grade,
    random_pick,
    run_mmvet,
    save_candidates,
    score_mmvet,
)
from jobs.jsonl import InputError
from judge.backends import make_backend
from judge.backends.base import Generation
from judge.backends.hf import TransformersBackend
from judge.backends.openai_http import OpenAIBackend
from judge.judging import Judge, JudgeConfig
from tests.eval.fixtures import (
    FIRST,
    MMVET,
    MMVET_CANDIDATES,
    MMVET_GRADES,
    MMVET_JUNK,
    ORACLE,
    write_mmvet,
    write_mmvet_candidates,
)
from tiny_world.servers.grader_server import MODEL_NAME, make_grader_app
from tiny_world.servers.openai_server import make_app, serve

N_GRADER_CALLS = 12 + 4  # every candidate once, plus four retries of the junk one


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("mmvet")
    questions = load_mmvet(write_mmvet(root))
    return questions, load_candidates(write_mmvet_candidates(root), questions)


@pytest.fixture(scope="module")
def hf_judge_backend(parrot_loaded):
    return TransformersBackend(parrot_loaded)


@pytest.fixture
def grader():
    """The stand-in grader on loopback, never parsing a prediction that carries MMVET_JUNK: (its app, whose
    `state.requests` records every call; its URL)."""
    app = make_grader_app(junk_marker=MMVET_JUNK)
    with serve(app) as url:
        yield app, url


class CountingBackend:
    """Passes requests through and counts them: proof that a resumed run calls nothing."""

    def __init__(self, inner):
        self.inner, self.name, self.calls, self.requests = inner, inner.name, 0, 0

    def generate(self, requests, params):
        self.calls += 1
        self.requests += len(requests)
        return self.inner.generate(requests, params)


def _judge(backend) -> Judge:
    return Judge(backend, JudgeConfig(orders=2, max_new_tokens=48))


def _question(qid: str = "q", answer: str = "-1<AND>-5", capabilities=("math",)) -> MMVetQuestion:
    return MMVetQuestion(qid, Path(f"{qid}.png"), "What is x in the equation?", answer, tuple(capabilities))


# -- grader text and parsing -------------------------------------------------------------------------------


def test_grader_prompt_is_the_official_text():
    assert GRADER_PROMPT.startswith(
        "Compare the ground truth and prediction from AI models, to give a correctness score for the prediction. "
        "<AND> in the ground truth means it is totally right only when all elements"
    )
    assert "\n\nQuestion | Ground truth | Prediction | Correctness\n--- | --- | --- | ---\n" in GRADER_PROMPT
    assert GRADER_PROMPT.endswith(
        "between the names of the countries and their actual physical characteristics. | 1.0\n"
    )
    # Pinned against yuweihao/MM-Vet mm-vet_evaluator.py: any edit, even of whitespace, changes the grades.
    digest = hashlib.sha256(GRADER_PROMPT.encode("utf-8")).hexdigest()
    assert digest == "d1b3e0a5b4e72c888b77164489d705bba4dd149934fff564dfba6443d81afe3f"


def test_grader_message_spaces_and_and_or_and_ends_open():
    message = grader_message("What is x in the equation?", "-1<AND>-5", "x = -1")
    assert message == GRADER_PROMPT + "\nWhat is x in the equation? | -1 <AND> -5 | x = -1 | "
    assert grader_message("Colour?", "red<OR>crimson", "red").endswith("\nColour? | red <OR> crimson | red | ")
    # Already spaced parts get doubled spaces, exactly as the official `.replace` does.
    assert grader_message("Q", "a <AND> b", "p").endswith("\nQ | a  <AND>  b | p | ")
    retry = grader_message("What is x in the equation?", "-1<AND>-5", "x = -1", retry=True)
    assert retry == message + "\nPredict the correctness of the answer (digit): "
    assert RETRY_SUFFIX == "\nPredict the correctness of the answer (digit): "


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0.7", 0.7),
        ("1.0 ", 1.0),  # text before the first space
        ("0.0", 0.0),
        ("1", 1.0),
        ("0.5 because", 0.5),
        ("\n0.3", 0.3),  # stripped after the split
        ("0.5.", None),  # a trailing full stop is not a number
        ("1.2", None),  # out of [0, 1]
        ("-0.1", None),
        ("abc", None),
        ("", None),
        ("N/A", None),
        ("nan", None),  # float() accepts it; the range check must not
        ("Score: 0.5", None),  # the first word is not a number
    ],
)
def test_parse_grade(text, expected):
    assert parse_grade(text) == expected


# -- metrics by hand ---------------------------------------------------------------------------------------


def test_oracle_and_random_picks():
    assert oracle_pick([0.5, 1.0, 0.0]) == 1
    assert oracle_pick([1.0, 0.0, 1.0]) == 0  # ties go to the lowest index
    assert oracle_pick([0.0, 0.5, 0.5]) == 1
    assert oracle_pick([0.0, 0.0]) == 0
    picks = [random_pick(3, f"v1_{i}", 4) for i in range(40)]
    assert picks == [random_pick(3, f"v1_{i}", 4) for i in range(40)]  # seeded
    assert set(picks) == {0, 1, 2, 3}
    assert picks != [random_pick(4, f"v1_{i}", 4) for i in range(40)]


def test_score_mmvet_by_hand():
    questions = [
        _question("q1", capabilities=("rec", "ocr")),
        _question("q2", capabilities=("rec",)),
        _question("q3", capabilities=("ocr", "math")),
        _question("q4", capabilities=("know", "rec")),
    ]
    grades = {
        "q1": [0.5, 1.0, 0.0],
        "q2": [0.0, 0.0, Grade(0.5, tries=2, raw=["N/A", "0.5"])],
        "q3": [1.0, 0.0, 1.0],
        "q4": [Grade(0.0, tries=5, raw=["N/A"] * 5, failed=True), 0.5, 0.5],
    }
    picks = {
        "first": {"q1": 0, "q2": 0, "q3": 0, "q4": 0},
        "judge": {"q1": 2, "q2": 2, "q3": 0, "q4": 1},  # q3: undecided, fell back to 0
        "oracle": {q: oracle_pick([g if isinstance(g, float) else g.score for g in grades[q]]) for q in grades},
    }
    assert picks["oracle"] == {"q1": 1, "q2": 2, "q3": 0, "q4": 1}
    metrics = score_mmvet(
        questions,
        grades,
        picks,
        judge_undecided=["q3"],
        judge_consistent={"q1": True, "q2": False, "q3": None, "q4": True},
    )
    expected = {
        "n": 4,
        "n_candidates": 3,
        # first picks 0.5, 0.0, 1.0, 0.0
        "first_total": 1.5 / 4,
        "first_rec": 0.5 / 3,  # q1, q2, q4
        "first_ocr": 1.5 / 2,  # q1, q3
        "first_math": 1.0,
        "first_know": 0.0,
        # judge picks 0.0, 0.5, 1.0, 0.5
        "judge_total": 2.0 / 4,
        "judge_rec": 1.0 / 3,
        "judge_ocr": 1.0 / 2,
        "judge_math": 1.0,
        "judge_know": 0.5,
        # oracle picks 1.0, 0.5, 1.0, 0.5
        "oracle_total": 3.0 / 4,
        "oracle_rec": 2.0 / 3,
        "oracle_ocr": 1.0,
        "oracle_math": 1.0,
        "oracle_know": 0.5,
        "unparsed": 1,
        "judge_consistency": 2 / 4,  # q3 (fewer than two parsed orders) counts as not consistent
        "judge_consistency_undetermined": 1,
        "grader_retried": 2,
        "grader_failed": 1,
        "grading_runs": 1,
        "bootstrap_resamples": 1000,
        "bootstrap_seed": 0,
    }
    added = ("_ci95_low", "_ci95_high", "_total_std", "_total_runs")
    core = {k: v for k, v in metrics.items() if not k.endswith(added)}
    assert core.keys() == expected.keys()  # no keys for absent capabilities (gen, spat) or selectors
    assert core == pytest.approx(expected, abs=1e-12)
    for selector in ("first", "judge", "oracle"):  # one grading run: no spread; the interval holds the mean
        assert metrics[f"{selector}_total_std"] == 0.0
        assert metrics[f"{selector}_total_runs"] == pytest.approx([expected[f"{selector}_total"]])
        low, high = metrics[f"{selector}_total_ci95_low"], metrics[f"{selector}_total_ci95_high"]
        assert low <= expected[f"{selector}_total"] <= high
    assert "first_gen_ci95_low" not in metrics


def test_score_mmvet_over_grading_runs_gives_mean_and_std():
    questions = [_question("a", capabilities=("rec",)), _question("b", capabilities=("ocr",))]
    grades = {"a": [1.0, 0.0], "b": [0.0, 0.5]}
    runs = {"a": [[1.0, 0.0], [0.5, 0.0], [1.0, 0.0]], "b": [[0.0, 0.5], [0.0, 0.5], [1.0, 0.5]]}
    m = score_mmvet(questions, grades, {"first": {"a": 0, "b": 0}}, grade_runs=runs)
    # first picks candidate 0: run totals (1+0)/2, (0.5+0)/2, (1+1)/2 = 0.5, 0.25, 1.0
    assert m["first_total_runs"] == pytest.approx([0.5, 0.25, 1.0])
    assert m["first_total"] == pytest.approx(1.75 / 3)
    mean = 1.75 / 3
    std = ((0.5 - mean) ** 2 + (0.25 - mean) ** 2 + (1.0 - mean) ** 2) / 3  # numpy's population std, squared
    assert m["first_total_std"] == pytest.approx(std**0.5)
    assert (m["first_rec"], m["first_ocr"], m["grading_runs"]) == (pytest.approx(2.5 / 3), pytest.approx(1 / 3), 3)


def test_score_mmvet_counts_a_question_once_per_capability_and_rejects_bad_picks():
    questions = [_question("a", capabilities=("rec", "ocr")), _question("b", capabilities=("ocr",))]
    grades = {"a": [1.0, 0.0], "b": [0.0, 0.5]}
    metrics = score_mmvet(questions, grades, {"first": {"a": 0, "b": 0}})
    assert (metrics["first_total"], metrics["first_rec"], metrics["first_ocr"]) == (0.5, 1.0, 0.5)
    assert metrics["judge_consistency"] is None  # no verdicts given
    with pytest.raises(ValueError, match="'b'"):
        score_mmvet(questions, grades, {"judge": {"a": 0, "b": 2}})


# -- the retry rule over HTTP --------------------------------------------------------------------------------


def test_retry_rule_gives_zero_after_five_tries(grader):
    app, url = grader
    question = _question()
    prediction = f"x = -1 or x = -5 {MMVET_JUNK}"
    [grade] = grade_predictions(OpenAIBackend(url, model_name=MODEL_NAME), [(question, prediction)])
    assert grade == Grade(score=0.0, tries=5, raw=["N/A"] * 5, failed=True)
    sent = app.state.requests
    assert len(sent) == 5  # no sixth, unread call
    assert [r["temperature"] for r in sent] == [0.0, 0.0, 0.5, 1.0, 1.5]
    assert all(r["max_tokens"] == 3 and r["model"] == MODEL_NAME for r in sent)
    assert sent[0]["text"] == grader_message(question.question, question.answer, prediction)
    assert all(
        r["text"] == grader_message(question.question, question.answer, prediction, retry=True) for r in sent[1:]
    )


def test_retry_rounds_are_batched_and_stop_at_the_first_parsed_grade():
    pairs = [
        (_question("a"), "x = -1 or x = -5"),  # junk twice, then 1.0
        (_question("b"), "x = 3"),  # junk twice, then 0.0
        (_question("c"), f"x = -5 {MMVET_JUNK}"),  # never parses
    ]
    app = make_grader_app(junk_first=2, junk_marker=MMVET_JUNK)
    with serve(app) as url:
        backend = CountingBackend(OpenAIBackend(url))
        grades = grade_predictions(backend, pairs)
    assert [(g.score, g.tries, g.failed) for g in grades] == [(1.0, 3, False), (0.0, 3, False), (0.0, 5, True)]
    assert grades[0].raw == ["N/A", "N/A", "1.0"]
    assert backend.calls == 5  # one generate per round, all pending pairs together
    temperatures = [r["temperature"] for r in app.state.requests]
    assert temperatures == [0.0] * 3 + [0.0] * 3 + [0.5] * 3 + [1.0, 1.5]


# -- whole runs --------------------------------------------------------------------------------------------


def _run(judge_backend, dataset, grader_url: str, out: Path, **kwargs) -> dict:
    """`run_mmvet` on the whole dataset: the two-order judge on `judge_backend`, the grader at `grader_url`."""
    questions, candidates = dataset
    return run_mmvet(
        _judge(judge_backend), questions, candidates, OpenAIBackend(grader_url), out, show_progress=False, **kwargs
    )


def _check_run(out: Path, metrics: dict, questions: list[MMVetQuestion]) -> list[dict]:
    assert {k: metrics[k] for k in FIRST} == FIRST
    assert {k: metrics[k] for k in ORACLE} == ORACLE
    assert (metrics["n"], metrics["n_candidates"], metrics["grader_retried"], metrics["grader_failed"]) == (4, 3, 1, 1)
    assert json.loads((out / "metrics.json").read_text()) == metrics
    rows = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == [q.id for q in questions]
    for row in rows:
        assert row["grades"] == MMVET_GRADES[row["id"]]
        assert row["candidates"] == [table[row["id"]] for table in MMVET_CANDIDATES]
        assert set(row["picks"]) == {"first", "random", "judge", "oracle"}
        assert row["picks"]["random"] == random_pick(0, row["id"], 3)
        assert row["picks"]["judge"] in (0, 1, 2)
        assert row["picks"]["judge"] == (row["judge_choice"] if row["judge_choice"] is not None else 0)
        assert len(row["judge_votes"]) == len(row["judge_raw"]) == 2  # two display orders
        assert row["consistent"] in (True, False, None)
    for selector in ("random", "judge"):  # the selectors that do not depend on the stand-in alone
        chosen = [row["grades"][row["picks"][selector]] for row in rows]
        assert metrics[f"{selector}_total"] == pytest.approx(sum(chosen) / 4)
        rec = [c for c, q in zip(chosen, questions) if "rec" in q.capabilities]
        assert metrics[f"{selector}_rec"] == pytest.approx(sum(rec) / 3)
    assert metrics["unparsed"] == sum(row["judge_choice"] is None for row in rows)
    grades = [json.loads(line) for line in (out / "grades.jsonl").read_text().splitlines()]
    assert len(grades) == 12 and {g["grader"] for g in grades} == {MODEL_NAME}
    junk = next(g for g in grades if g["question_id"] == "v1_3" and g["candidate"] == 2)
    assert (junk["score"], junk["tries"], junk["failed"], junk["raw"]) == (0.0, 5, True, ["N/A"] * 5)
    report = (out / "report.md").read_text()
    assert "| selector | rec | ocr | know | math | total |" in report
    assert "| first | 66.7 | 0.0 | 100.0 | 0.0 | 50.0 |" in report
    assert "| oracle | 100.0 | 100.0 | 100.0 | 100.0 | 100.0 |" in report
    assert "official MM-Vet grader prompt and retry rule" in report and f"`{MODEL_NAME}`" in report
    assert (out / "mmvet_by_capability.png").read_bytes().startswith(b"\x89PNG")
    assert not list(out.glob("*.partial"))
    return rows


def test_run_mmvet_with_a_transformers_judge(dataset, hf_judge_backend, grader, tmp_path):
    questions, _ = dataset
    app, url = grader
    metrics = _run(hf_judge_backend, dataset, url, tmp_path)
    assert len(app.state.requests) == N_GRADER_CALLS
    rows = _check_run(tmp_path, metrics, questions)
    votes = [v for row in rows for v in row["judge_votes"]]
    assert any(v is not None for v in votes)  # the parrot answers in the judge format


def test_run_mmvet_with_an_openai_judge(dataset, parrot_loaded, grader, tmp_path):
    questions, candidates = dataset
    grader_app, grader_url = grader
    with serve(make_app(parrot_loaded)) as judge_url:
        metrics = run_mmvet(
            _judge(make_backend(judge_url)),
            questions,
            candidates,
            OpenAIBackend(grader_url, model_name=MODEL_NAME),
            tmp_path,
            batch_size=3,  # two steps of judging and grading; rows must still come back in question order
            show_progress=False,
        )
    assert len(grader_app.state.requests) == N_GRADER_CALLS
    _check_run(tmp_path, metrics, questions)


def test_a_rerun_resumes_without_any_call(dataset, hf_judge_backend, grader, tmp_path):
    app, url = grader
    first = _run(hf_judge_backend, dataset, url, tmp_path)
    assert len(app.state.requests) == N_GRADER_CALLS
    report = (tmp_path / "report.md").read_text()

    counting = CountingBackend(hf_judge_backend)
    again = _run(counting, dataset, url, tmp_path)
    assert len(app.state.requests) == N_GRADER_CALLS  # no grader call repeated
    assert counting.calls == 0  # no judge call repeated
    assert again == first
    assert (tmp_path / "report.md").read_text() == report

    # With the per-question results gone, the judge runs again but every grade comes from the cache.
    (tmp_path / "predictions.jsonl").unlink()
    third = _run(counting, dataset, url, tmp_path)
    assert len(app.state.requests) == N_GRADER_CALLS
    assert counting.calls > 0
    assert third == first  # greedy judge, same seed: same verdicts


class MumblingBackend:
    """A judge backend whose answers never parse: every verdict is undecided."""

    name = "mumbling"

    def generate(self, requests, params):
        return [Generation("I cannot tell.") for _ in requests]


def test_an_undecided_judge_falls_back_to_the_first_candidate(dataset, grader, tmp_path):
    _, url = grader
    metrics = _run(MumblingBackend(), dataset, url, tmp_path)
    assert metrics["unparsed"] == 4
    # No question had two parsed display orders: each counts as not consistent, by the one rule.
    assert (metrics["judge_consistency"], metrics["judge_consistency_undetermined"]) == (0.0, 4)
    assert {k: metrics[k.replace("first", "judge", 1)] for k in FIRST} == FIRST  # judge = first, everywhere
    assert "judge undecided (fell back to candidate 0): 4 of 4" in (tmp_path / "report.md").read_text()


def test_num_runs_grades_every_candidate_again_and_a_rerun_adds_only_missing_runs(dataset, grader, tmp_path):
    app, url = grader
    metrics = _run(MumblingBackend(), dataset, url, tmp_path, num_runs=2, data_source="mm-vet.json")
    assert len(app.state.requests) == 2 * N_GRADER_CALLS
    assert metrics["grading_runs"] == 2 and metrics["first_total_runs"] == [0.5, 0.5]
    assert metrics["first_total_std"] == 0.0  # a deterministic grader agrees with itself
    assert {k: metrics[k] for k in FIRST} == pytest.approx(FIRST)
    again = _run(MumblingBackend(), dataset, url, tmp_path, num_runs=3, data_source="mm-vet.json")
    assert len(app.state.requests) == 3 * N_GRADER_CALLS  # only the third run was asked
    assert again["first_total_runs"] == [0.5, 0.5, 0.5]
    assert again["data_rows"] == 4 and again["data_source"] == "mm-vet.json" and len(again["data_sha256"]) == 64
    report = (tmp_path / "report.md").read_text()
    assert "graded 3 time(s)" in report and again["data_sha256"] in report


def test_new_candidates_in_an_old_run_folder_are_refused(dataset, hf_judge_backend, tmp_path):
    questions, candidates = dataset
    with serve(make_grader_app()) as url:
        run_mmvet(
            _judge(hf_judge_backend), questions[:1], candidates, OpenAIBackend(url), tmp_path, show_progress=False
        )
        changed = {**candidates, "v1_0": ["x = 1", "x = 2", "x = 3"]}
        with pytest.raises(InputError, match="'v1_0'.*fresh output folder"):
            run_mmvet(_judge(hf_judge_backend), questions, changed, OpenAIBackend(url), tmp_path, show_progress=False)


def test_generate_candidates_resumes_and_round_trips(dataset, hf_judge_backend, tmp_path):
    questions, _ = dataset
    policy = CountingBackend(hf_judge_backend)  # any VLM will do as a policy; the parrot answers something
    kwargs = dict(temperature=1.0, max_new_tokens=8, seed=1, cache_path=tmp_path / "candidates.jsonl")
    sampled = generate_candidates(policy, questions[:2], 3, **kwargs, show_progress=False)
    assert list(sampled) == ["v1_0", "v1_1"] and all(
        len(c) == 3 and all(isinstance(a, str) for a in c) for c in sampled.values()
    )
    assert policy.requests == 6
    assert generate_candidates(policy, questions[:2], 3, **kwargs, show_progress=False) == sampled
    assert policy.requests == 6  # resumed from the cache
    files = save_candidates(sampled, tmp_path / "files")
    assert [p.name for p in files] == ["candidates_0.json", "candidates_1.json", "candidates_2.json"]
    assert load_candidates(files, questions[:2]) == sampled
    with pytest.raises(ValueError, match="temperature"):
        generate_candidates(policy, questions, 2, temperature=0.0)


# -- bad input ---------------------------------------------------------------------------------------------


def test_malformed_mmvet_json_lists_every_problem(tmp_path):
    entries = {
        "v1_0": {k: v for k, v in MMVET["v1_0"].items() if k != "imagename"},
        "v1_1": {**MMVET["v1_1"], "capability": "rec"},
        "v1_2": {**MMVET["v1_2"], "imagename": "nope.png"},
        "v1_3": MMVET["v1_3"],
        "v1_4": "not an entry",
    }
    path = write_mmvet(tmp_path, entries)
    with pytest.raises(InputError) as caught:
        load_mmvet(path)
    message = str(caught.value)
    assert "4 problem(s)" in message
    assert "entry 'v1_0': field 'imagename': missing" in message and '"imagename": "v1_0.png"' in message
    assert "entry 'v1_1': field 'capability': expected a list" in message
    assert "entry 'v1_2': field 'imagename': image file not found" in message and "nope.png" in message
    assert "entry 'v1_4'" in message and "v1_3" not in message


def test_mmvet_v2_is_refused_by_name(tmp_path):
    v2 = {"v2_0": {"question": "Which is heavier?<IMG>v2_0_0.png<IMG>And now?<IMG>v2_0_1.png", "answer": "A",
                   "capability": ["rec", "seq"], "added_in": "v2"}}  # fmt: skip
    path = tmp_path / "mm-vet-v2.json"
    path.write_text(json.dumps(v2))
    with pytest.raises(InputError, match="MM-Vet v2 .* not supported"):
        load_mmvet(path)


def test_mmvet_json_shape_errors(tmp_path):
    path = tmp_path / "mm-vet.json"
    path.write_text('[{"imagename": "a.png"}]')
    with pytest.raises(InputError, match="expected a JSON object keyed by question id"):
        load_mmvet(path)
    path.write_text('{"v1_0": {"imagename": "a.png",')
    with pytest.raises(InputError, match="not valid JSON"):
        load_mmvet(path)
    path.write_text('{"v1_0": {}, "v1_0": {}}')
    with pytest.raises(InputError, match="duplicate key.*'v1_0'"):
        load_mmvet(path)
    with pytest.raises(InputError, match="file not found"):
        load_mmvet(tmp_path / "missing.json")


def test_load_mmvet_resolves_images_and_limits(tmp_path):
    path = write_mmvet(tmp_path / "data")
    questions = load_mmvet(path, limit=2)
    assert [q.id for q in questions] == ["v1_0", "v1_1"]
    assert questions[0].image == tmp_path / "data" / "images" / "v1_0.png"
    assert questions[0].capabilities == ("ocr", "math")
    elsewhere = tmp_path / "pictures"
    (tmp_path / "data" / "images").rename(elsewhere)
    with pytest.raises(InputError, match="image file not found"):
        load_mmvet(path)
    assert load_mmvet(path, images_dir=elsewhere)[3].image == elsewhere / "v1_3.png"


def test_candidate_files_must_align(tmp_path):
    questions = load_mmvet(write_mmvet(tmp_path))
    broken = [dict(t) for t in MMVET_CANDIDATES]
    del broken[1]["v1_2"]
    broken[2]["v1_0"] = None
    paths = write_mmvet_candidates(tmp_path, broken)
    with pytest.raises(InputError) as caught:
        load_candidates(paths, questions)
    message = str(caught.value)
    assert f"{paths[1]}: id 'v1_2': missing" in message
    assert f"{paths[2]}: id 'v1_0': expected the answer as a string, got None" in message

    partial = [{k: v for k, v in t.items() if k != "v1_3"} for t in MMVET_CANDIDATES]
    with pytest.raises(InputError, match="id 'v1_3': in none of the candidate files"):
        load_candidates(write_mmvet_candidates(tmp_path, partial), questions)
    # Without questions the union of ids must be in every file; with them, extra ids are ignored.
    with pytest.raises(InputError, match="id 'v1_2': missing"):
        load_candidates(write_mmvet_candidates(tmp_path, [dict(t) for t in broken[:2]]))
    loaded = load_candidates(write_mmvet_candidates(tmp_path), questions[:2])
    assert loaded == {
        "v1_0": ["x = -1", "x = -1 or x = -5", "x = 3"],
        "v1_1": ["The car is Red.", "It is crimson.", "Blue."],
    }
    with pytest.raises(InputError, match="2 to 26 candidate files"):
        load_candidates(write_mmvet_candidates(tmp_path)[:1])


def test_candidates_from_a_model_spec_equal_a_loaded_backend(tiny_vlm_dir, tmp_path):
    from eval.mmvet import generate_candidates, load_mmvet
    from judge.backends.spec import ModelSpec

    questions = load_mmvet(write_mmvet(tmp_path))[:2]
    spec = ModelSpec(str(tiny_vlm_dir), "hf", {"device": "cpu"})
    settings = dict(temperature=0.7, max_new_tokens=4, seed=3, batch_size=1, show_progress=False)
    by_spec = generate_candidates(spec, questions, 2, **settings)
    assert by_spec == generate_candidates(spec.build(), questions, 2, **settings)
    assert all(len(answers) == 2 for answers in by_spec.values())
