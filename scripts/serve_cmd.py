"""`mrjudge serve`: the judge as an HTTP reward model (FastAPI + uvicorn) over any backend.

    mrjudge serve --model runs/judge                                   # 127.0.0.1:8000, no key
    mrjudge serve --model runs/judge --host 0.0.0.0 --api-key "$KEY"   # or MRJUDGE_SERVER_API_KEY=...
    mrjudge serve --model http://127.0.0.1:8001/v1 --server-config serve.yaml --max-batch-items 64
    mrjudge serve --model runs/tiny-judge --adapter-store runs/adapters   # requests name "model": "judge@prod"
    curl -s 127.0.0.1:8000/v1/reward -H 'Content-Type: application/json' \
        -d '{"prompt": "2+2?", "responses": ["4", "5"]}'

Every `ServerConfig` field is a flag (`--max-wait-ms`, `--max-queue`, `--allow-local-images DIR`, …);
`--server-config` reads them from YAML first. Judge flags (`--orders`, `--max-new-tokens`, `--config`)
are those of `mrjudge judge`.
"""

from __future__ import annotations

import argparse
import dataclasses
import ipaddress
import os
import sys
from pathlib import Path
from typing import Any

from scripts.engine_flags import add_pixel_flags
from scripts.judge_cmd import judge_config_from

SERVER_FLAGS_DEST = "server_"


def _server_fields() -> list[dataclasses.Field]:
    from judge.server.config import ServerConfig

    return list(dataclasses.fields(ServerConfig))


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "serve",
        help="serve the judge as a reward model over HTTP (/v1/judge, /v1/reward, OpenRLHF /get_reward)",
        description="Serve a judge over HTTP with dynamic batching, input limits and optional bearer-key auth.",
    )
    parser.add_argument(
        "--model", required=True, help="model folder or hub id, or an OpenAI-compatible server URL (http://…/v1)"
    )
    parser.add_argument("--backend", choices=("hf", "openai", "vllm"), help="default: openai for URLs, hf otherwise")
    parser.add_argument("--server-config", type=Path, help="YAML file with ServerConfig fields; flags override it")
    parser.add_argument(
        "--no-batching", action="store_true", help="judge one request at a time (same as --max-batch-items 1)"
    )
    server = parser.add_argument_group("server (ServerConfig fields)")
    for f in _server_fields():
        kind = type(f.default) if f.default is not None else str
        server.add_argument(
            f"--{f.name.replace('_', '-')}",
            dest=SERVER_FLAGS_DEST + f.name,
            type=kind,
            metavar=f.name.upper(),
            help=f"{f.metadata.get('help', '')} (default: {f.default})",
        )
    judge = parser.add_argument_group("judge (JudgeConfig fields)")
    judge.add_argument("--config", type=Path, help="YAML file with JudgeConfig fields; flags below override it")
    judge.add_argument("--orders", type=int, help="display orders per item (default 2)")
    judge.add_argument("--samples", type=int, help="calls per display order, majority-voted (needs --temperature > 0)")
    judge.add_argument("--temperature", type=float, help="sampling temperature; 0 = greedy (default)")
    judge.add_argument("--max-new-tokens", type=int, help="generation budget per call (default 512)")
    judge.add_argument("--batch-size", type=int, help="items per backend call (default: --max-batch-items)")
    judge.add_argument("--seed", type=int, help="seeds display orders, sampling and tie-breaks (default 0)")
    add_pixel_flags(judge, "the judge")
    judge.add_argument("--device", help="hf backend: cpu, cuda, cuda:1 … (default: cuda if available)")
    judge.add_argument("--backend-api-key", help="openai backend: key for the model server (default: $MRJUDGE_API_KEY)")
    parser.add_argument("--log-level", default="info", choices=("critical", "error", "warning", "info", "debug"))
    parser.set_defaults(run=run)


def server_config_from(args: argparse.Namespace) -> Any:
    """ServerConfig from `--server-config` YAML, then flags, then the key from the environment if none yet."""
    from judge.config import ConfigError, config_from_yaml, config_values
    from judge.server.config import API_KEY_ENV, ServerConfig

    overrides = {
        f.name: getattr(args, SERVER_FLAGS_DEST + f.name)
        for f in _server_fields()
        if getattr(args, SERVER_FLAGS_DEST + f.name, None) is not None
    }
    if args.no_batching:
        overrides["max_batch_items"] = 1
    try:
        if "api_key" not in config_values(ServerConfig, args.server_config, overrides) and os.environ.get(API_KEY_ENV):
            overrides["api_key"] = os.environ[API_KEY_ENV]
        return config_from_yaml(ServerConfig, args.server_config, overrides)
    except ConfigError as exc:
        raise SystemExit(f"error: {exc}") from exc


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from judge.backends import make_backend
    from judge.judging import Judge
    from judge.server import create_app

    server_config = server_config_from(args)
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
    try:
        engine = make_backend(args.model, backend, **backend_kwargs)
    except (ImportError, OSError, ValueError) as exc:
        print(f"error: cannot load the judge from --model {args.model}: {exc}", file=sys.stderr)
        return 2
    if not _is_loopback(server_config.host) and server_config.api_key is None:
        print(
            f"warning: serving on {server_config.host} without an API key; anyone who can reach the port can use "
            "the judge (set --api-key or $MRJUDGE_SERVER_API_KEY)",
            file=sys.stderr,
        )
    app = create_app(Judge(engine, judge_config), server_config)
    uvicorn.run(
        app,
        host=server_config.host,
        port=server_config.port,
        log_level=args.log_level,
        timeout_graceful_shutdown=int(server_config.request_timeout_s) + 5,
    )
    return 0
