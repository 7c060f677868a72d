"""`pivotal fork-preview`: before forking a thread from an earlier checkpoint (Studio's fork, a replay),
what the fork would do to each side effect recorded after it: skip, refuse, ask a person, or run again.
"""

import argparse
import asyncio
import json
from typing import Any

from pivotal.cli import options
from pivotal.cli.critic import checkpoint_location

EXIT_OK = 0
SAID = {"skip": "skipped", "refuse": "refused", "ask": "asks a person", "run": "RUNS AGAIN"}


def add_commands(commands: Any) -> None:
    parser = commands.add_parser(
        "fork-preview", help="what forking a thread from a checkpoint would do to each side effect recorded after it"
    )
    parser.add_argument("thread", help="the thread id")
    parser.add_argument("--checkpoint", metavar="ID", help="the checkpoint to fork from (default: the latest)")
    parser.add_argument("--namespace", default="", metavar="NS", help="a subgraph's checkpoint namespace")
    parser.add_argument(
        "--checkpoints", metavar="PATH", help="SQLite file or postgresql:// URL (default: PIVOTAL_CHECKPOINT_PATH)"
    )
    parser.add_argument("--json", action="store_true", help="the preview as one JSON object")
    options.plugin_option(parser)
    parser.set_defaults(handler=_preview)


def _preview(args: argparse.Namespace) -> int:
    from pivotal.core.environments.critic_report import checkpoints
    from pivotal.core.environments.preview import afork_preview
    from pivotal.graphs.runner import open_checkpointer

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

    preview = asyncio.run(read())
    if args.json:
        print(json.dumps(preview.model_dump()))
        return EXIT_OK
    if not preview.calls:
        print(f"thread {preview.thread_id} from {preview.checkpoint_id}: no side effect was recorded after it")
        return EXIT_OK
    print(f"thread {preview.thread_id} forked from {preview.checkpoint_id}:")
    for call in preview.calls:
        print(f"  {call.action}({json.dumps(call.arguments)}): {SAID[call.fate]} ({call.why})")
    return EXIT_OK
