"""A stand-in for MM-Vet's GPT-4 grader: a real OpenAI chat-completions server on loopback.

GPT-4 cannot run here, so this server grades the way the MM-Vet prompt asks, with a rule simple enough to
compute by hand: it reads the ground truth and the prediction out of the last table row of the message
(`question | ground truth | prediction | `) and answers "1.0" when every `<AND>` part (or any `<OR>`
part, or the whole ground truth) appears in the prediction, case-insensitively, otherwise "0.0".

It parses the message on its own (it does not import `eval.mmvet`), so a test against it checks the text
on the wire. Switches exercise the official retry rule: `junk_first` answers "N/A" to the first N calls
for each prediction text, `junk_marker` answers "N/A" forever to predictions containing it. Every request
is recorded (`app.state.requests`: text, temperature, max_tokens, model, prediction, reply) so tests can
check the retry temperatures and suffix and count calls.
"""

from __future__ import annotations

from collections import Counter

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from tiny_world.servers.wire import chat_completion, last_message_text, serve_model_list

MODEL_NAME = "gpt-4-stand-in"
JUNK = "N/A"
PROMPT_START = "Compare the ground truth and prediction from AI models, to give a correctness score"
RETRY_SUFFIX = "\nPredict the correctness of the answer (digit): "


def parse_row(text: str) -> tuple[str, str, str]:
    """(question, ground truth, prediction) from the last table row of a grading message."""
    if text.endswith(RETRY_SUFFIX):
        text = text[: -len(RETRY_SUFFIX)]
    row = text.rsplit("\n", 1)[-1]
    cells = row.split(" | ")
    if len(cells) < 4 or cells[-1] != "":
        raise ValueError(f"last line is not an open table row ending in ' | ': {row!r}")
    return cells[0], cells[1], " | ".join(cells[2:-1])


def grade(truth: str, prediction: str) -> str:
    """The grade as the grader would write it: "1.0" by the `<AND>` / `<OR>` containment rule, else "0.0"."""
    said = prediction.casefold()
    if "<AND>" in truth:
        ok = all(part.strip().casefold() in said for part in truth.split("<AND>"))
    elif "<OR>" in truth:
        ok = any(part.strip().casefold() in said for part in truth.split("<OR>"))
    else:
        ok = truth.strip().casefold() in said
    return "1.0" if ok else "0.0"


def make_grader_app(*, junk_first: int = 0, junk_marker: str | None = None) -> FastAPI:
    app = FastAPI()
    app.state.requests = []
    seen: Counter[str] = Counter()

    serve_model_list(app, MODEL_NAME)

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> JSONResponse:
        body = await request.json()
        text = last_message_text(body)
        if not text.startswith(PROMPT_START):
            return JSONResponse({"error": {"message": "not an MM-Vet grading prompt", "type": "invalid_request"}}, 400)
        try:
            _, truth, prediction = parse_row(text)
        except ValueError as exc:
            return JSONResponse({"error": {"message": str(exc), "type": "invalid_request"}}, 400)
        seen[prediction] += 1
        junk = seen[prediction] <= junk_first or (junk_marker is not None and junk_marker in prediction)
        reply = JUNK if junk else grade(truth, prediction)
        app.state.requests.append(
            {
                "text": text,
                "temperature": body.get("temperature"),
                "max_tokens": body.get("max_tokens"),
                "model": body.get("model"),
                "prediction": prediction,
                "reply": reply,
            }
        )
        choice = {"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}
        return JSONResponse(chat_completion(MODEL_NAME, choice, prompt_tokens=len(text.split()), completion_tokens=1))

    return app
