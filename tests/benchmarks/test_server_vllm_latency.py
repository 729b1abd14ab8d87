"""benchmarks/server_vllm_latency.py without vLLM: a loopback stand-in for `vllm serve` (from test_equal_work)
behind the real `mrjudge serve` subprocess, and `mrjudge serve --backend-extra-body`."""

from __future__ import annotations

import argparse

import pytest
from mrjudge.cli import build_parser
from mrjudge.serve_cmd import served_judge, server_config_from

from benchmarks.server_vllm_latency import ORDERS, measure, serve_argv
from judge.loopback import free_port
from tests.support.fake_vllm import recording_vllm
from tiny_world.servers.openai_server import serve


def test_both_sides_send_the_forced_length_and_every_figure_is_reported():
    """Direct and through the server, every chat call carries vLLM's `min_tokens` + `ignore_eos`, and the
    token counter read around each request adds up to requests x orders x max_new_tokens on both sides."""
    seen: list[dict] = []
    generated = [0.0]
    args = argparse.Namespace(requests=2, warmup=1, max_new_tokens=5, image_size=28, no_batching=False, seed=0)
    with serve(recording_vllm(seen, generated)) as url:
        result = measure(url, free_port(), args)
    per_side = (args.warmup + args.requests) * ORDERS
    assert len(seen) == 2 * per_side
    assert {(b["min_tokens"], b["ignore_eos"], b["max_tokens"]) for b in seen} == {(5, True, 5)}
    assert result["tokens"] == {"direct": 2 * ORDERS * 5, "server": 2 * ORDERS * 5}
    assert result["non_200"] == 0 and result["max_wait_ms"] == 10.0
    assert [len(result["times"][side]) for side in ("direct", "server")] == [2, 2]
    assert all(len(values) == 2 for values in result["timing"].values()) and len(result["http_ms"]) == 2


def test_backend_extra_body_is_a_json_object_for_the_openai_backend_only():
    parser = build_parser()
    args = parser.parse_args(serve_argv("http://127.0.0.1:9/v1", 0, argparse.Namespace(
        max_new_tokens=7, no_batching=True, seed=0)))  # fmt: skip
    judge = served_judge(args, server_config_from(args))
    assert judge.backend.extra_body == {"min_tokens": 7, "ignore_eos": True}
    for bad in ("[1]", "{min_tokens: 7}"):
        with pytest.raises(SystemExit):
            parser.parse_args(["serve", "--model", "http://127.0.0.1:9/v1", "--backend-extra-body", bad])
    args = parser.parse_args(["serve", "--model", "runs/x", "--backend-extra-body", '{"min_tokens": 1}'])
    with pytest.raises(ValueError, match="--backend-extra-body goes with an OpenAI-compatible server"):
        served_judge(args, server_config_from(args))
