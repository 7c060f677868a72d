"""`pivotal critic report`: what an observe-only critic would have done, per tool, against what happened."""

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

from pivotal.cli.options import Commands
from pivotal.core.checkpoints import WHERE, is_postgres
from pivotal.core.errors import PivotalError

EXIT_OK = 0
COLUMNS = (
    ("reviewed", "reviewed"),
    ("would_block", "would block"),
    ("would_block_but_fine", "blocked but fine"),
    ("would_block_and_bad", "blocked and bad"),
    ("let_through_and_fine", "let through, fine"),
    ("let_through_but_bad", "let through but bad"),
    ("pending", "pending"),
)


def add_commands(commands: Commands) -> None:
    parser = commands.add_parser("critic", help="what an observe-only critic would have done (observe_only)")
    actions = parser.add_subparsers(required=True, metavar="action")
    report = actions.add_parser(
        "report",
        help="per tool: calls the critic would have blocked that turned out fine, and let through that turned out bad",
    )
    report.add_argument(
        "--checkpoints", metavar="PATH", help="SQLite file or postgresql:// URL (default: PIVOTAL_CHECKPOINT_PATH)"
    )
    report.add_argument(
        "--thread", action="append", metavar="ID", help="only this thread (repeat for more); default all"
    )
    report.add_argument(
        "--revoked",
        action="append",
        default=[],
        metavar="RUN",
        help="a run whose lessons were revoked: its calls count as bad",
    )
    report.add_argument("--calls", action="store_true", help="also list each watched call and its outcome")
    report.add_argument("--json", action="store_true", help="the report as one JSON object")
    report.set_defaults(handler=_report)


def checkpoint_location(given: str | None) -> str:
    """The checkpoints a reading command opens: they must exist (a report never makes an empty file)."""
    from pivotal.core.settings import settings

    path = given or settings().checkpoint_path
    if path == ":memory:":
        raise PivotalError(":memory: keeps no checkpoints to read; pass --checkpoints PATH")
    if not is_postgres(path) and not Path(path).is_file():
        raise PivotalError(f"no checkpoint file at {path}: {WHERE}")
    return path


def _report(args: argparse.Namespace) -> int:
    from pivotal.core.environments.critic_report import acritic_report
    from pivotal.graphs.checkpointer import open_checkpointer

    async def read() -> Any:
        async with open_checkpointer(checkpoint_location(args.checkpoints)) as saver:
            return await acritic_report(saver, args.thread, revoked_runs=args.revoked)

    found = asyncio.run(read())
    if args.json:
        print(json.dumps(found.model_dump()))
        return EXIT_OK
    if not found.tools:
        print(f"{found.threads} threads read; no call was reviewed by a critic in observe mode (observe_only)")
        return EXIT_OK
    width = max(len("tool"), *(len(name) for name in found.tools))
    print("  ".join(["tool".ljust(width), *(title for _, title in COLUMNS)]))
    for name, figures in found.tools.items():
        cells = [str(getattr(figures, key)).rjust(len(title)) for key, title in COLUMNS]
        print("  ".join([name.ljust(width), *cells]))
    if args.calls:
        for call in found.calls:
            called = f"{call.action}({json.dumps(call.arguments)})"
            print(f"{call.thread_id}  {called}  critic: {call.decision}  -> {call.outcome}")
    return EXIT_OK
