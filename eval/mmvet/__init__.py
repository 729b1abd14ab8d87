"""MM-Vet best-of-N: N candidate answers per question, the judge picks one, MM-Vet's own grader scores it.

MM-Vet (Yu et al., 2023) asks 218 open-ended questions about 200 images and grades each free-form answer
with GPT-4 against a ground truth. MR. Judge reports best-of-N gains on it: a policy answers each question
N times, the judge chooses one answer, and that answer is graded. This module reproduces the grading of
the official evaluator (yuweihao/MM-Vet, `mm-vet_evaluator.py`) exactly:

- the grader sees one user message, no system prompt and no image: `GRADER_PROMPT + "\\n" +
  " | ".join([question, answer with " <AND> "/" <OR> " spaced, prediction, ""])`, so it ends in
  `"prediction | "` and the grader completes the last cell of the few-shot table;
- `max_tokens` 3, temperature 0.0; the grade is `float(text.split(" ")[0].strip())`, valid in [0, 1];
- an unparsable grade is asked again with `RETRY_SUFFIX` appended, at temperature 0.0 for the first retry
  and 0.5 higher for each retry after it; after 5 parsed tries in all (temperatures 0.0, 0.0, 0.5, 1.0,
  1.5) the grade is 0.0. The official script then sends a sixth request (temperature 2.0) whose answer it
  never reads; we do not send it, which changes no score;
- a capability's score is the mean grade over the questions that include it; the total is the mean over
  all questions. `metrics.json` keeps them in [0, 1]; `report.md` shows them × 100 with one decimal, as
  the official table does.

A real `mm-vet.json` entry (images live in `<json dir>/images` by default):

    "v1_0": {"imagename": "v1_0.png", "question": "What is x in the equation?",
             "answer": "-1<AND>-5", "capability": ["ocr", "math"]}

Candidates come as N official-format prediction files (`{"v1_0": "x = -1 or x = -5", ...}`), one per
policy or per sample, or are sampled here by `generate_candidates`. Four selectors are scored side by side:
`first` (candidate 0, i.e. no selection), `random` (seeded), `judge` and `oracle` (the best grade: the
ceiling of best-of-N). A run directory holds:

    OUT/predictions.jsonl  one line per question: candidates, grades, picks per selector, judge votes and
                           raw texts (resumable: finished questions are skipped)
    OUT/grades.jsonl       the grader cache, one line per (question, candidate): score, tries, raw texts
    OUT/metrics.json       {selector}_total, {selector}_{capability}, n, n_candidates, unparsed, ...
    OUT/report.md          selectors × capabilities (× 100), and which grader was used
    OUT/mmvet_by_capability.png

    questions = load_mmvet("mm-vet/mm-vet.json")
    candidates = load_candidates(["policy_s0.json", "policy_s1.json", "policy_s2.json"], questions)
    grader = OpenAIBackend("https://api.openai.com/v1", model_name="gpt-4-0613")
    run_mmvet(Judge(make_backend("runs/judge")), questions, candidates, grader, "runs/mmvet")

One idea per module: `data` (mm-vet.json read and validated with `parse_records`), `candidates` (candidate
files and sampling), `grader` (the official prompt and retry rule), `grade_cache` (grades.jsonl), `scoring`
(selectors and metrics), `report` (report.md) and `run` (`run_mmvet`). Everything public is importable
from `eval.mmvet`.
"""

from eval.mmvet.candidates import generate_candidates, load_candidates, save_candidates
from eval.mmvet.data import CAPABILITIES, MMVetQuestion, load_mmvet, mmvet_provenance
from eval.mmvet.grader import (
    GRADER_MAX_TOKENS,
    GRADER_PROMPT,
    GRADER_TEMPERATURES,
    RETRY_SUFFIX,
    Grade,
    grade_predictions,
    grader_message,
    parse_grade,
)
from eval.mmvet.run import mmvet_settings, run_mmvet
from eval.mmvet.scoring import SELECTORS, oracle_pick, random_pick, score_mmvet

__all__ = [
    "CAPABILITIES",
    "GRADER_MAX_TOKENS",
    "GRADER_PROMPT",
    "GRADER_TEMPERATURES",
    "RETRY_SUFFIX",
    "SELECTORS",
    "Grade",
    "MMVetQuestion",
    "generate_candidates",
    "grade_predictions",
    "grader_message",
    "load_candidates",
    "load_mmvet",
    "mmvet_provenance",
    "mmvet_settings",
    "oracle_pick",
    "parse_grade",
    "random_pick",
    "run_mmvet",
    "save_candidates",
    "score_mmvet",
]
