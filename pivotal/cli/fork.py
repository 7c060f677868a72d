"""`pivotal fork-preview`: before forking a thread from an earlier checkpoint (Studio's fork, a replay),
what the fork would do to each side effect recorded after it: skip, refuse, ask a person, or run again.
"""

import argparse
import asyncio
import json
from typing import TYPE_CHECKING, Any, cast

from pivotal.cli import options
from pivotal.cli.critic import checkpoint_location
from pivotal.cli.options import Commands
from pivotal.core.errors import PivotalError

if TYPE_CHECKING:  # loaded where a preview is made
    from pivotal.core.environments.preview import ForkPreview

EXIT_OK = 0
PAGE = 1000
"""Checkpoints per request to a server's thread history (the most its API gives at once)."""
SAID = {"skip": "skipped", "refuse": "refused", "ask": "asks a person", "run": "RUNS AGAIN"}


def add_commands(commands: Commands) -> None:
    parser = commands.add_parser(
        "fork-preview", help="what forking a thread from a checkpoint would do to each side effect recorded after it"
    )
    parser.add_argument("thread", help="the thread id")
    parser.add_argument("--checkpoint", metavar="ID", help="the checkpoint to fork from (default: the latest)")
    parser.add_argument("--namespace", default="", metavar="NS", help="a subgraph's checkpoint namespace")
    parser.add_argument(
        "--checkpoints", metavar="PATH", help="SQLite file or postgresql:// URL (default: PIVOTAL_CHECKPOINT_PATH)"
    )
    parser.add_argument(
        "--server",
        metavar="URL",
        help="read the thread from a LangGraph server (`langgraph dev`, Studio's) instead of a checkpoint file",
    )
    parser.add_argument("--json", action="store_true", help="the preview as one JSON object")
    options.plugin_option(parser)
    parser.set_defaults(handler=_preview)


def _preview(args: argparse.Namespace) -> int:
    from pivotal.core.environments.critic_report import checkpoints
    from pivotal.core.environments.preview import afork_preview
    from pivotal.graphs.checkpointer import open_checkpointer

    configurable = {"thread_id": args.thread, "checkpoint_ns": args.namespace}
    if args.checkpoint:
        configurable["checkpoint_id"] = args.checkpoint

    async def read() -> Any:
        async with open_checkpointer(checkpoint_location(args.checkpoints)) as saver:
            found = await checkpoints(saver, {"configurable": {"thread_id": args.thread}})
            # the app's environment, as the run registered it: the modules its run imported, and those named
            options.load_plugins(
                [*{m: None for _, state, _ in found for m in state.get("plugins") or []}, *args.plugin]
            )
            return await afork_preview(saver, {"configurable": configurable})

    preview = asyncio.run(_served(args, configurable) if args.server else read())
    _show(preview, args.json)
    return EXIT_OK


async def _served(args: argparse.Namespace, configurable: dict[str, Any]) -> Any:
    """A served thread's history, as Studio shows it; the app's environment from `--plugin`."""
    from langgraph_sdk import get_client

    from pivotal.core.environments.preview import afork_preview

    options.load_plugins(args.plugin)
    threads, history = get_client(url=args.server).threads, cast(list[Any], [])
    try:
        while True:  # newest first, a page at a time
            before = history[-1]["checkpoint"] if history else None
            page = await threads.get_history(args.thread, limit=PAGE, before=before)
            history += page
            if len(page) < PAGE:
                break
    except Exception as exc:  # noqa: BLE001 — an unreachable server or an unknown thread: say which, in one line
        raise PivotalError(
            f"cannot read thread {args.thread!r} from {args.server}: {type(exc).__name__}: {exc}"
        ) from None
    return await afork_preview(list(history), {"configurable": configurable})


def _show(preview: "ForkPreview", as_json: bool) -> None:
    if as_json:
        print(json.dumps(preview.model_dump()))
    elif not preview.calls:
        print(f"thread {preview.thread_id} from {preview.checkpoint_id}: no side effect was recorded after it")
    else:
        print(f"thread {preview.thread_id} forked from {preview.checkpoint_id}:")
        for call in preview.calls:
            print(f"  {call.action}({json.dumps(call.arguments)}): {SAID[call.fate]} ({call.why})")
