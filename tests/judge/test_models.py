"""Where a model comes from (`judge.models.check_model_source`): a folder that is not there fails at once
instead of waiting on the hub, a hub id is left to the hub (or its cache, offline), and a model the tiny
factory wrote untrained is reported when it is loaded to judge."""

from __future__ import annotations

import logging
import shutil
import time

import pytest

from judge.models import UNTRAINED_MARKER, check_model_source, untrained_marker

UNREACHABLE_HUB = "http://127.0.0.1:9"  # the discard port on loopback: nothing answers there


@pytest.fixture
def no_hub(monkeypatch, tmp_path):
    """The hub unreachable, online mode, and a working folder with a `runs/` folder in it."""
    monkeypatch.setenv("HF_ENDPOINT", UNREACHABLE_HUB)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    return tmp_path


@pytest.mark.parametrize(
    "name",
    [
        "runs/no-such-model",  # owner/name in shape, but runs/ is a folder here
        "./no-such-model",
        "../no-such-model",
        "/no/such/model",
        "~/no-such-model-for-mrjudge",
        "runs/judge/checkpoint-9",  # more than one slash
        "no-such-runs/",
        "model.safetensors",
    ],
)
def test_a_missing_folder_fails_at_once_naming_it(no_hub, name):
    start = time.perf_counter()
    with pytest.raises(FileNotFoundError) as missing:
        check_model_source(name)
    assert time.perf_counter() - start < 1.0
    message = str(missing.value)
    assert message.startswith(f"no model folder {name!r}") and str(no_hub) in message
    if name == "runs/no-such-model":
        assert "as a hub id it would be 'runs/no-such-model'" in message


def test_a_hub_id_is_left_to_the_hub_and_offline_to_its_cache(no_hub, monkeypatch):
    check_model_source("some-owner/some-model")  # no request is made here: the loader asks the hub
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(
        FileNotFoundError, match="'some-owner/some-model' is not a folder here .* HF_HUB_OFFLINE is set"
    ):
        check_model_source("some-owner/some-model")


def test_the_factory_marks_its_model_and_a_trained_copy_is_not_flagged(tiny_vlm_dir, tmp_path, caplog):
    marker = untrained_marker(tiny_vlm_dir)
    assert marker is not None and marker["untrained"] is True and marker["kind"] == "vlm"
    with caplog.at_level(logging.WARNING, logger="judge.models"):
        check_model_source(str(tiny_vlm_dir))
    assert "is an untrained tiny model from the factory" in caplog.text and "runs/demo/grpo/model" in caplog.text

    trained = shutil.copytree(tiny_vlm_dir, tmp_path / "trained")  # trained in place: other weights
    weights = trained / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-4] + b"\0\0\0\1")
    assert (trained / UNTRAINED_MARKER).exists() and untrained_marker(trained) is None
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="judge.models"):
        check_model_source(str(trained))
    assert caplog.text == ""


def test_loading_it_to_judge_warns(tiny_vlm_dir, caplog):
    from judge.backends import make_backend

    with caplog.at_level(logging.WARNING, logger="judge.models"):
        make_backend(str(tiny_vlm_dir), device="cpu")
    assert "its verdicts will not parse" in caplog.text and "mrjudge demo" in caplog.text
