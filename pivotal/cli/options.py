"""Command-line options shared by `pivotal run` and `pivotal batch`."""

import argparse
import importlib
import json
import os
import sys
from collections.abc import Callable
from typing import Any, NoReturn, TypeAlias, get_args

from pivotal.core.context import Context, LoopDetection, OnCritiqueExhausted, RecallMode, RetryStrategy, StepBudget
from pivotal.core.errors import PivotalError
from pivotal.core.schemas import PivotChoice


class OneLineParser(argparse.ArgumentParser):
    """argparse's parser (its subcommands' too: they take their parent's class), whose error is one
    line, as every other bad input's: argparse printed the whole usage block above it (22 lines
    for `pivotal resume X --decision maybe`), burying what was wrong. `--help` still shows it all.
    """

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"pivotal: error: {message}; see `{self.prog} --help`\n")  # 2: argparse's, and bad input's


Commands: TypeAlias = "argparse._SubParsersAction[OneLineParser]"
"""The `pivotal` command's subcommands, where each module adds its own (`add_commands`)."""
Handler = Callable[[argparse.Namespace], int]
"""What a subcommand runs: its exit status from its parsed arguments."""


def task_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("task")
    group.add_argument("--env", default="gridworld", help="environment name (see `pivotal envs`)")
    group.add_argument("--goal", default="", help="task goal (default: the environment's own goal)")
    group.add_argument("--seed", type=int, help="environment seed (same as --param seed=N)")
    group.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="environment parameter; VALUE is read as JSON when it parses (repeatable)",
    )
    group.add_argument("--family", default="", help="lesson family (default: the environment name)")


def context_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("models and switches (defaults come from PIVOTAL_* / .env)")
    for role in ("", "actor-", "critic-", "reflector-", "lesson-"):
        group.add_argument(f"--{role}model", help=f"model spec for {role.rstrip('-') or 'every role'}")
    group.add_argument("--retry", choices=get_args(RetryStrategy), help="after a failed attempt")
    group.add_argument(
        "--budget",
        choices=get_args(StepBudget),
        help="what --max-steps counts (default fair: the path per attempt and one total for all attempts; new gives a "
        "pivotal retry more steps than a full retry: not a fair comparison)",
    )
    group.add_argument(
        "--pivot", choices=get_args(PivotChoice), help="which step a pivotal retry redoes (default best)"
    )
    group.add_argument("--recall", choices=get_args(RecallMode), help="when lessons are retrieved")
    group.add_argument("--no-critic", dest="critic", action="store_false", default=None)
    group.add_argument("--no-precheck", dest="precheck", action="store_false", default=None)
    group.add_argument("--no-memory", dest="memory", action="store_false", default=None)
    group.add_argument(
        "--model-screen",
        action="store_true",
        default=None,
        help="also ask the critic's model whether a new lesson orders what no task asked (one call per lesson)",
    )
    group.add_argument("--on-critique-exhausted", choices=get_args(OnCritiqueExhausted))
    group.add_argument(
        "--loop-detection", choices=get_args(LoopDetection), help="warn of steps that change nothing (default warn)"
    )
    group.add_argument("--store", dest="store_path", metavar="DIR", help="Chroma experience store folder")
    group.add_argument("--store-url", metavar="URL", help="Chroma server shared by several processes")
    group.add_argument(
        "--require-approval-for",
        action="append",
        metavar="ACTION",
        help="pause for a person before ACTION runs; 'irreversible' or '*' for classes (repeatable)",
    )
    for name in ("max-steps", "max-critique-rounds", "max-pivot-retries", "local-threads"):
        group.add_argument(f"--{name}", type=int)
    for name in ("max-precheck-bounces", "max-human-rejections"):
        group.add_argument(f"--{name}", type=int, help="per step (default: --max-critique-rounds)")


def context_from(args: argparse.Namespace) -> Context:
    """Only the flags given override Context's defaults (which read PIVOTAL_* settings)."""
    return Context(**context_flags(args))


def context_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The Context fields set by a flag on this command line, and nothing else."""
    return {
        name: value
        for name, value in vars(args).items()
        if name in Context.field_names() and value not in (None, "", [])
    }


FLAG_NAMES = {"store_path": "--store", "critic": "--no-critic", "precheck": "--no-precheck", "memory": "--no-memory"}


def flag_name(field: str) -> str:
    """How a Context field is spelt on the command line, for messages."""
    return FLAG_NAMES.get(field, "--" + field.replace("_", "-"))


def resumed_context(saved: dict[str, Any], args: argparse.Namespace) -> Context:
    """A resumed run's own settings; a flag may repeat one but not contradict it."""
    return Context.resumed(saved, context_flags(args), name_of=flag_name)


def task_from(args: argparse.Namespace) -> dict[str, Any]:
    for flag, value in (("--goal", args.goal), ("--family", args.family), *(("--param", p) for p in args.param)):
        _check_utf8(flag, value)
    params = dict(_param(item) for item in args.param)
    if args.seed is not None:
        params["seed"] = args.seed
    return {"goal": args.goal, "env": args.env, "family": args.family, "params": params}


def _check_utf8(flag: str, value: str) -> None:
    """Python reads command-line bytes that are not UTF-8 as lone surrogates (surrogateescape); a goal
    holding them would reach the models and the results as something the person never wrote.
    """
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        byte = ord(value[exc.start]) - 0xDC00  # the byte surrogateescape stood in for
        raise PivotalError(
            f"{flag} is not UTF-8 text (byte 0x{byte & 0xFF:02x} at character {exc.start + 1}); "
            "pass it as UTF-8 (check the terminal's or the script's encoding)"
        ) from None


def _param(item: str) -> tuple[str, Any]:
    key, sep, raw = item.partition("=")
    if not sep or not key:
        raise PivotalError(f"--param needs KEY=VALUE (got {item!r})")
    try:
        return key, json.loads(raw)
    except json.JSONDecodeError:
        return key, raw


def plugin_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--plugin",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE first (it registers your environments); repeatable",
    )


def load_plugins(modules: list[str]) -> None:
    """Environments an application registers live in its own module; the CLI imports it by name."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception as exc:  # noqa: BLE001 — whatever the plugin raised, say which plugin
            raise PivotalError(f"cannot import plugin {module!r}: {type(exc).__name__}: {exc}") from None
