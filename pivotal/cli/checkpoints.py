"""`pivotal checkpoints …`: how big the checkpoint file is, and pruning what resume does not need."""

import argparse
import json
from dataclasses import asdict
from datetime import timedelta

from pivotal.cli.options import Commands, Handler
from pivotal.core import checkpoints
from pivotal.core.errors import PivotalError

EXIT_OK = 0
MAX_DAYS = 36_500


def add_commands(commands: Commands) -> None:
    parser = commands.add_parser("checkpoints", help="size of the checkpoint file; prune finished runs' history")
    actions = parser.add_subparsers(required=True, metavar="action")
    stats = _action(actions, "stats", "threads, checkpoints and bytes in the checkpoint file", _stats)
    stats.add_argument("--json", action="store_true", help="the numbers as one JSON object")
    prune = _action(
        actions,
        "prune",
        "keep only the latest checkpoint of each finished run, then compact the file "
        "(runs that can still go on are never touched)",
        _prune,
    )
    prune.add_argument("--older-than", type=float, metavar="DAYS", help="only runs whose last step is this old")
    prune.add_argument("--dry-run", action="store_true", help="say what would be deleted; change nothing")


def _action(actions: Commands, name: str, help_text: str, handler: Handler) -> argparse.ArgumentParser:
    parser = actions.add_parser(name, help=help_text)
    parser.add_argument(
        "--checkpoints", metavar="PATH", help="SQLite checkpoint file (default: PIVOTAL_CHECKPOINT_PATH)"
    )
    parser.set_defaults(handler=handler)
    return parser


def _path(args: argparse.Namespace) -> str:
    from pivotal.core.settings import settings

    path = args.checkpoints or settings().checkpoint_path
    if path == ":memory:":
        raise PivotalError(":memory: keeps no checkpoints to measure or prune; pass --checkpoints PATH")
    if checkpoints.is_postgres(path):
        raise PivotalError(
            "stats and prune read SQLite checkpoint files; Postgres checkpoints live in its "
            "checkpoints, checkpoint_blobs and checkpoint_writes tables: measure and prune them there"
        )
    return path


def _stats(args: argparse.Namespace) -> int:
    found = checkpoints.stats(_path(args))
    if args.json:
        print(json.dumps({**asdict(found), "bytes_per_step": found.bytes_per_step}))
        return EXIT_OK
    print(
        f"{found.path}: {found.threads} threads ({found.finished} finished, {found.threads - found.finished} "
        f"can still go on), {found.checkpoints} checkpoints, {found.writes} writes, "
        f"{_size(found.bytes)} ({_size(found.bytes_per_step)} per step)"
    )
    if found.prunable:
        print(f"`pivotal checkpoints prune` would delete {found.prunable} checkpoints of finished runs")
    return EXIT_OK


def _prune(args: argparse.Namespace) -> int:
    if args.older_than is not None and not 0 <= args.older_than <= MAX_DAYS:
        raise PivotalError(f"--older-than must be a number of days from 0 to {MAX_DAYS} (got {args.older_than})")
    older_than = timedelta(days=args.older_than) if args.older_than is not None else None
    path = _path(args)
    done = checkpoints.prune(path, older_than=older_than, dry_run=args.dry_run)
    deleted = f"{done.checkpoints} checkpoints and {done.writes} writes of {done.threads} finished runs"
    whole = f"{done.left_whole} runs that can still go on left whole"
    if args.dry_run:
        print(f"{path}: would delete {deleted} (about {_size(done.freed_estimate)}); {whole}; nothing changed")
    else:
        print(f"{path}: deleted {deleted}; {_size(done.bytes_before)} -> {_size(done.bytes_after)}; {whole}")
    return EXIT_OK


def _size(count: float) -> str:
    for unit in ("bytes", "KB", "MB"):
        if count < 1024:
            return f"{count:.0f} {unit}" if unit == "bytes" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} GB"
