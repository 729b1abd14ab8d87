"""`mrjudge serve`: the judge as an HTTP reward model (FastAPI + uvicorn) over any backend.

    mrjudge serve --model runs/judge                                   # 127.0.0.1:8000, no key
    MRJUDGE_SERVER_API_KEY=... mrjudge serve --model runs/judge --host 0.0.0.0   # or --api-key-file FILE
    mrjudge serve --model http://127.0.0.1:8001/v1 --server-config serve.yaml --max-batch-items 64
    mrjudge serve --model runs/tiny-judge --adapter-store runs/adapters   # requests name "model": "judge@prod"
    mrjudge serve --model runs/judge --group-size 4 --allow-local-images data/   # OpenRLHF, 4 samples a prompt
    mrjudge serve --model http://gpu-1:8001/v1,http://gpu-2:8001/v1    # several vllm serve replicas of one judge
    mrjudge serve --model runs/judge --audit-auditor answer_key --audit-path runs/serve/audit.jsonl  # reward audit

On start it prints the lines to paste into a TRL script, a verl config and an OpenRLHF command.
    curl -s 127.0.0.1:8000/v1/reward -H 'Content-Type: application/json' \
        -d '{"prompt": "2+2?", "responses": ["4", "5"]}'

Every `ServerConfig` field is a flag (`--max-wait-ms`, `--max-queue`, `--allow-local-images DIR`, …);
`--server-config` reads them from YAML first. The reward audit (`ServerConfig.audit`, an `audit:` block of
`AuditConfig` keys in the YAML) takes `--audit-auditor`, `--audit-rate`, `--audit-window` and `--audit-path`
on top of it. Judge flags (`--orders`, `--max-new-tokens`, `--config`) are those of `mrjudge judge`.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import socket
import sys
from pathlib import Path
from typing import Any

from mrjudge.config_flags import ConfigFlags
from mrjudge.judge_cmd import add_judge_config_flags, judge_config_from
from mrjudge.model_flags import add_model_flags, base_options, loaded

from reward_server.config import ServerConfig

SERVER_FLAGS = ConfigFlags(ServerConfig)
"""`--host`, `--port`, `--max-batch-items`, …: every ServerConfig field."""


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "serve",
        help="serve the judge as a reward model over HTTP (/v1/judge, /v1/reward, OpenRLHF /get_reward)",
        description="Serve a judge over HTTP with dynamic batching, input limits and optional bearer-key auth.",
    )
    add_model_flags(parser)
    parser.add_argument("--server-config", type=Path, help="YAML file with ServerConfig fields; flags override it")
    parser.add_argument(
        "--no-batching", action="store_true", help="judge one request at a time (same as --max-batch-items 1)"
    )
    SERVER_FLAGS.add_to(
        parser.add_argument_group("server (ServerConfig fields: field default < --server-config < flag)")
    )
    add_audit_flags(
        parser.add_argument_group(
            "reward audit (ServerConfig.audit, off by default; the other AuditConfig keys go in --server-config's "
            "audit: block; figures on /metrics as mrjudge_audit_*)"
        )
    )
    add_judge_config_flags(parser, shown={"batch_size": "--max-batch-items"})
    parser.add_argument("--device", help="hf backend: cpu, cuda, cuda:1 … (default: cuda if available)")
    parser.add_argument(
        "--backend-api-key", help="openai backend: key for the model server (default: $MRJUDGE_API_KEY)"
    )
    parser.add_argument(
        "--backend-extra-body",
        type=json_object,
        metavar="JSON",
        help="openai backend: engine-specific fields sent with every request, a JSON object, e.g. vLLM's "
        '\'{"min_tokens": 64, "ignore_eos": true}\' (every call then generates exactly --max-new-tokens tokens)',
    )
    parser.add_argument("--log-level", default="info", choices=("critical", "error", "warning", "info", "debug"))
    parser.set_defaults(run=run)


AUDIT_FLAGS = {
    "auditor": (
        "auditor",
        str,
        "SPEC",
        "turns the audit on; who scores the gold: answer_key (exact match with the request's reference), "
        "answer_key:pkg.mod:fn (a verifiable task's own check: fn(prompt, completion, reference) -> float in "
        "[0, 1]) or judge_url:http://host:port (a stronger judge behind /v1/reward)",
    ),
    "rate": ("audit_rate", float, "SHARE", "share of judged groups audited (a seeded draw)"),
    "window": ("window", int, "N", "requests (a /get_reward group counts once) that make one window of figures"),
    "path": ("path", str, "FILE", "audit.jsonl to append every audited completion to (audit_windows.jsonl beside it)"),
}
"""`--audit-<flag>`: the `AuditConfig` key it sets in `ServerConfig.audit`, its type, metavar and help."""


def add_audit_flags(group: argparse._ArgumentGroup) -> None:
    """`--audit-auditor`, `--audit-rate`, `--audit-window`, `--audit-path`: `ServerConfig.audit`'s main keys,
    over the `audit:` block of `--server-config` (defaults: `AuditConfig`'s)."""
    from judge.reward.audit import AuditConfig

    defaults = {f.name: f.default for f in dataclasses.fields(AuditConfig)}
    for flag, (key, kind, metavar, text) in AUDIT_FLAGS.items():
        shown = "" if defaults[key] is None else f" (default: {defaults[key]})"
        group.add_argument(f"--audit-{flag}", dest=f"audit_{flag}", type=kind, metavar=metavar, help=text + shown)


def audit_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The `--audit-*` flags given, as `audit.<key>` overrides (`ServerConfig` folds them into `audit`)."""
    values = {f"audit.{key}": getattr(args, f"audit_{flag}", None) for flag, (key, *_) in AUDIT_FLAGS.items()}
    return {key: value for key, value in values.items() if value is not None}


def json_object(text: str) -> dict[str, Any]:
    """`--backend-extra-body`'s value: a JSON object (argparse reports anything else as a bad flag value).

    >>> json_object('{"min_tokens": 8, "ignore_eos": true}')
    {'min_tokens': 8, 'ignore_eos': True}
    """
    import json

    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"a JSON object is needed, got {type(value).__name__}")
    return value


def server_config_from(args: argparse.Namespace) -> Any:
    """ServerConfig from `--server-config` YAML, then flags, then the key from the environment if none yet."""
    from judge.config import config_from_yaml, config_values
    from judge.reward.wire import API_KEY_ENV

    overrides = {**SERVER_FLAGS.values(args), **audit_overrides(args)}
    if args.no_batching:
        overrides["max_batch_items"] = 1
    given = config_values(ServerConfig, args.server_config, overrides)
    if given.get("api_key") is None and given.get("api_key_file") is None and os.environ.get(API_KEY_ENV):
        overrides["api_key"] = os.environ[API_KEY_ENV]
    return config_from_yaml(ServerConfig, args.server_config, overrides)


def served_judge(args: argparse.Namespace, server_config: Any) -> Any:
    """The `Judge` `mrjudge serve ARGS` serves, built (and its model loaded) as the server builds it: what
    `benchmarks.server_load` calls in process to compare the server with the judge alone."""
    from judge.backends.spec import ModelSpec
    from judge.judging import Judge

    judge_config = judge_config_from(args)
    if args.batch_size is None:
        # One server batch should be one backend call; the judge's default (8 items) would split it.
        judge_config.batch_size = max(judge_config.batch_size, server_config.max_batch_items)
    backend_kwargs: dict[str, Any] = judge_config.pixel_options()  # the model's processor gets the judge's range
    backend = args.backend or ("openai" if args.model.startswith(("http://", "https://")) else "hf")
    if backend == "hf":
        backend_kwargs["max_batch_size"] = judge_config.batch_size * (judge_config.orders or 2) * judge_config.samples
        if args.device:
            backend_kwargs["device"] = args.device
    if backend == "openai" and args.backend_api_key:
        backend_kwargs["api_key"] = args.backend_api_key
    if args.backend_extra_body:
        if backend != "openai":
            raise ValueError("--backend-extra-body goes with an OpenAI-compatible server (--backend openai)")
        backend_kwargs["extra_body"] = args.backend_extra_body
    backend_kwargs.update(base_options(args, args.model, backend))
    engine = loaded(ModelSpec(args.model, backend, backend_kwargs), what="the judge").build()
    return Judge(engine, judge_config)


def run(args: argparse.Namespace) -> int:
    from judge.reward.wire import API_KEY_ENV
    from reward_server import create_app
    from reward_server.config import is_loopback
    from reward_server.run import run_server

    server_config = server_config_from(args)  # refuses a network address without a key, before any loading
    if args.api_key:
        print(
            f"warning: --api-key is visible to every user of this machine (`ps`); use ${API_KEY_ENV} or "
            "--api-key-file FILE",
            file=sys.stderr,
        )
    if server_config.api_key is None and not is_loopback(server_config.host):
        print(
            f"WARNING: --allow-unauthenticated: serving {server_config.host}:{server_config.port} WITHOUT an API "
            "key; anyone who can reach the port can use the judge",
            file=sys.stderr,
        )
    app = create_app(served_judge(args, server_config), server_config)
    try:  # bind first, so the usage lines name the port really bound (--port 0 picks a free one)
        sock = _bind(server_config.host, server_config.port)
    except OSError as exc:
        raise OSError(f"cannot listen on {server_config.host}:{server_config.port}: {exc}") from exc
    url = _client_url(server_config.host, sock.getsockname()[1])
    print(reward_usage(url, keyed=server_config.api_key is not None, group_size=server_config.group_size), flush=True)
    run_server(app, server_config, log_level=args.log_level, sock=sock)
    return 0


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.set_inheritable(True)
    return sock


def _client_url(host: str, port: int) -> str:
    """The address clients should use: a wildcard bind is reached through this machine's name."""
    if host in ("0.0.0.0", "::", ""):
        host = socket.gethostname()
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def reward_usage(url: str, *, keyed: bool, group_size: int) -> str:
    """The lines to paste into a TRL script, a verl config and an OpenRLHF command for this server.

    >>> print(reward_usage("http://127.0.0.1:8000", keyed=False, group_size=4).splitlines()[0])
    mr-judge reward server on http://127.0.0.1:8000 (no API key)
    """
    import judge.integrations
    from judge.reward.wire import API_KEY_ENV, REWARD_URL_ENV

    folder = Path(judge.integrations.__file__).resolve().parent
    key_line = f"export {API_KEY_ENV}=<the key this server was started with>" if keyed else ""
    env = f"export {REWARD_URL_ENV}={url}" + (f"; {key_line}" if keyed else "")
    n = max(group_size, 2)
    lines = [
        f"mr-judge reward server on {url} ({'API key required' if keyed else 'no API key'})",
        "Use it as the reward in",
        "  TRL (Python):",
        "    from judge.reward import AsyncHttpJudgeReward",
        f'    reward = AsyncHttpJudgeReward("{url}")' + (f"  # key from ${API_KEY_ENV}" if keyed else ""),
        "  verl >= 0.7 (environment, then config overrides for verl.trainer.main_ppo; read and run: 0.9.1):",
        f"    {env}",
        f"    reward.custom_reward_function.path={folder / 'verl.py'} reward.custom_reward_function.name=compute_score "
        "'+reward.custom_reward_function.reward_kwargs.group_size=${actor_rollout_ref.rollout.n}'",
        "    (each rollout is sent alone; the server judges a prompt's rollouts together, listwise)",
        "  verl <= 0.6 (its batch manager):",
        f"    custom_reward_function.path={folder / 'verl.py'} custom_reward_function.name=compute_score_batch "
        "reward_model.reward_manager=batch",
        "  OpenRLHF (environment, then flags for openrlhf.cli.train_ppo_ray; read and run: 0.11.2):",
        f"    {env}",
        f"    --reward.remote_url {folder / 'openrlhf.py'} --rollout.n_samples_per_prompt {n}",
    ]
    if group_size < 2:
        lines.append(
            f"    (and restart this server with --group-size {n}: OpenRLHF sends one sample per request, and the "
            "server groups a prompt's samples only when it knows how many to wait for)"
        )
    if not keyed:
        lines.append(f"    or, without the .py file: --reward.remote_url {url}/get_reward")
    return "\n".join(lines)
