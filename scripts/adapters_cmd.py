"""`mrjudge adapters`: list, inspect, promote, roll back and collect LoRA adapter revisions; merge one.

    mrjudge adapters --store runs/adapters list                 # every policy, its revisions and aliases
    mrjudge adapters --store runs/adapters show judge@prod      # one revision's metadata (JSON)
    mrjudge adapters --store runs/adapters promote judge@3fa2c1 --alias prod
    mrjudge adapters --store runs/adapters rollback judge --alias prod
    mrjudge adapters --store runs/adapters gc --keep-last 3 --dry-run
    mrjudge adapters --store runs/adapters import judge out/checkpoint-200 --base Qwen/Qwen2.5-VL-7B-Instruct
    mrjudge adapters fingerprint Qwen/Qwen2.5-VL-7B-Instruct    # for `mrjudge serve --base-fingerprint`
    mrjudge adapters merge runs/judge-sft-lora --out runs/judge-sft-merged   # a full model folder
    mrjudge adapters --store runs/adapters merge judge@prod --out runs/judge-prod-merged --base runs/tiny-judge

The store may also come from `$MRJUDGE_ADAPTER_STORE`. A server started with `--adapter-store` sees a
promotion or a rollback on its next request; requests already in flight finish on their revision.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

STORE_ENV = "MRJUDGE_ADAPTER_STORE"


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "adapters",
        help="LoRA adapter revisions: list, show, promote, rollback, gc, import, fingerprint, merge",
        description="Manage the adapter store that training writes and `mrjudge serve --adapter-store` reads.",
    )
    parser.add_argument("--store", default=os.environ.get(STORE_ENV), help=f"store folder (default: ${STORE_ENV})")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="policies, revisions (oldest first) and aliases")
    listing.add_argument("policy", nargs="?", help="only this policy")
    show = actions.add_parser("show", help="a revision's metadata as JSON")
    show.add_argument("ref", help="policy@alias, policy@revision (or a unique prefix of it), or policy")
    promote = actions.add_parser("promote", help="point an alias (default prod) at a revision")
    promote.add_argument("ref")
    promote.add_argument("--alias", default="prod")
    rollback = actions.add_parser("rollback", help="point an alias back at its previous revision")
    rollback.add_argument("policy")
    rollback.add_argument("--alias", default="prod")
    gc = actions.add_parser("gc", help="delete revisions no alias, rollback history or recent save needs")
    gc.add_argument("--keep-last", type=int, default=3, help="newest revisions kept per policy (default 3)")
    gc.add_argument("--keep-history", type=int, default=3, help="past targets kept per alias (default 3)")
    gc.add_argument("--dry-run", action="store_true", help="only list what would go")
    imported = actions.add_parser("import", help="add a folder PEFT wrote (save_pretrained) as a revision")
    imported.add_argument("policy")
    imported.add_argument("folder")
    base = imported.add_mutually_exclusive_group(required=True)
    base.add_argument("--base", help="base model folder or hub id (loaded to fingerprint it)")
    base.add_argument("--base-fingerprint", help="the base's fingerprint, if already known")
    imported.add_argument("--step", type=int)
    fingerprint = actions.add_parser("fingerprint", help="print a base model's fingerprint")
    fingerprint.add_argument("model", help="model folder or hub id")
    merge = actions.add_parser(
        "merge",
        help="merge an adapter into its base: a full model folder (weights, config, processor, chat template)",
        description="Write ADAPTER merged into its base (PEFT merge_and_unload) as a model folder that every "
        "command and vLLM load. The base is the adapter_config.json's base_model_name_or_path unless --base.",
    )
    merge.add_argument("adapter", help="adapter folder (a use_lora run's output_dir or checkpoint), or policy@alias")
    merge.add_argument("--out", required=True, help="folder to create (must not exist)")
    merge.add_argument("--base", help="base model folder or hub id (default: the adapter's base_model_name_or_path)")
    merge.add_argument("--device", default="cpu", help="where to merge: cpu (default), cuda, cuda:1 …")
    merge.add_argument("--dtype", help="weights dtype of the result (default: the base's, e.g. bfloat16)")
    parser.set_defaults(run=run)


def _fingerprint(model: str) -> str:
    from adapter_revisions import base_fingerprint
    from judge.models import load_model

    return base_fingerprint(load_model(model, device="cpu").model)


def _row(revision: Any, aliases: dict[str, str]) -> str:
    names = ",".join(sorted(a for a, rid in aliases.items() if rid == revision.id)) or "-"
    created = time.strftime("%Y-%m-%d %H:%M", time.localtime(revision.created))
    metrics = " ".join(f"{k}={v:.4g}" for k, v in sorted(revision.meta.get("metrics", {}).items())[:3])
    size = revision.meta.get("bytes", 0) / 2**20
    step = "-" if revision.step is None else revision.step
    return f"  {revision.id}  step {step:<6} {size:8.2f} MiB  {created}  [{names}]  {metrics}"


def _merge(args: argparse.Namespace) -> int:
    from pathlib import Path

    from adapter_revisions import AdapterStore
    from adapter_revisions.merge import merge_adapter

    adapter = args.adapter
    if not Path(adapter).is_dir() and "@" in adapter and args.store:
        adapter = str(AdapterStore(args.store).resolve(adapter).path)
    elif not Path(adapter).is_dir():
        raise ValueError(f"{adapter} is not a folder (a store revision needs --store DIR and policy@alias)")
    out = merge_adapter(adapter, args.out, base=args.base, device=args.device, dtype=args.dtype)
    print(f"merged {adapter} into {out}")
    return 0


def run(args: argparse.Namespace) -> int:
    from adapter_revisions import AdapterStore

    if args.action == "fingerprint":
        print(_fingerprint(args.model))
        return 0
    if args.action == "merge":
        return _merge(args)
    if not args.store:
        raise ValueError(f"give --store DIR or set ${STORE_ENV}")
    store = AdapterStore(args.store)
    if args.action == "list":
        policies = [args.policy] if args.policy else store.policies()
        if not policies:
            print(f"no policies in {args.store}")
        for policy in policies:
            aliases = store.aliases(policy)
            print(f"{policy}  ({', '.join(f'{a}={r[:8]}' for a, r in sorted(aliases.items()))})")
            for revision in store.revisions(policy):
                print(_row(revision, aliases))
    elif args.action == "show":
        revision = store.resolve(args.ref)
        print(json.dumps({**revision.meta, "path": str(revision.path), "ref": revision.ref}, indent=2))
    elif args.action == "promote":
        revision = store.promote(args.ref, args.alias)
        print(f"{revision.policy}@{args.alias} -> {revision.id} (step {revision.step})")
    elif args.action == "rollback":
        revision = store.rollback(args.policy, args.alias)
        print(f"{args.policy}@{args.alias} -> {revision.id} (step {revision.step})")
    elif args.action == "gc":
        removed = store.gc(keep_last=args.keep_last, keep_history=args.keep_history, dry_run=args.dry_run)
        verb = "would remove" if args.dry_run else "removed"
        freed = sum(r.meta.get("bytes", 0) for r in removed) / 2**20
        print(f"{verb} {len(removed)} revisions ({freed:.2f} MiB)")
        for revision in removed:
            print(f"  {revision.ref}")
    elif args.action == "import":
        fingerprint = args.base_fingerprint or _fingerprint(args.base)
        revision = store.add_folder(
            args.policy, args.folder, base_fingerprint=fingerprint, step=args.step, base_model=args.base
        )
        print(f"imported {revision.ref}")
    return 0
