"""`pivotal` command line: a thin layer over `graphs.run`.

Exit codes: 0 the run finished (its outcome is in the output), 1 the task failed and `--check`
was given, 2 bad input (one line on stderr).
"""

import argparse
import json
import sys
from typing import Any

from dotenv import load_dotenv

from pivotal import lessons_cli
from pivotal.context import Context
from pivotal.errors import PivotalError

EXIT_SUCCESS, EXIT_TASK_FAILED, EXIT_BAD_INPUT = 0, 1, 2


def main(argv: list[str] | None = None) -> int:
    load_dotenv(override=False)  # provider keys from .env; the real environment wins
    args = _parser().parse_args(argv)
    try:
        return args.handler(args)
    except PivotalError as exc:
        print(f"pivotal: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("pivotal: interrupted; the last checkpoint is kept (resume with the same --thread-id)",
              file=sys.stderr)
        return 130


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pivotal", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(required=True, metavar="command")
    run = commands.add_parser("run", help="run one task through the actor-critic graph")
    _task_options(run)
    _context_options(run)
    run.add_argument("--checkpoints", metavar="PATH", help="SQLite checkpoint file, or :memory: "
                     "(default: PIVOTAL_CHECKPOINT_PATH or .pivotal/checkpoints.sqlite)")
    run.add_argument("--thread-id", help="LangGraph thread id (default: a new one per run)")
    run.add_argument("--json", action="store_true", help="print the full result as JSON")
    run.add_argument("--check", action="store_true", help="exit 1 when the task fails (for scripts and CI)")
    run.set_defaults(handler=_run)
    envs = commands.add_parser("envs", help="list the environments a task can name")
    envs.set_defaults(handler=_envs)
    lessons_cli.add_commands(commands)
    return parser


def _task_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("task")
    group.add_argument("--env", default="gridworld", help="environment name (see `pivotal envs`)")
    group.add_argument("--goal", default="", help="task goal (default: the environment's own goal)")
    group.add_argument("--seed", type=int, help="environment seed (same as --param seed=N)")
    group.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                       help="environment parameter; VALUE is read as JSON when it parses (repeatable)")
    group.add_argument("--family", default="", help="lesson family (default: the environment name)")


def _context_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("models and switches (defaults come from PIVOTAL_* / .env)")
    for role in ("", "actor-", "critic-", "reflector-", "lesson-"):
        group.add_argument(f"--{role}model", help=f"model spec for {role.rstrip('-') or 'every role'}")
    group.add_argument("--retry", choices=["pivotal", "full", "none"], help="after a failed attempt")
    group.add_argument("--recall", choices=["step", "task", "off"], help="when lessons are retrieved")
    group.add_argument("--no-critic", dest="critic", action="store_false", default=None)
    group.add_argument("--no-precheck", dest="precheck", action="store_false", default=None)
    group.add_argument("--no-memory", dest="memory", action="store_false", default=None)
    group.add_argument("--on-critique-exhausted", choices=["execute_best", "fail"])
    group.add_argument("--store", dest="store_path", metavar="DIR", help="Chroma experience store folder")
    group.add_argument("--store-url", metavar="URL", help="Chroma server shared by several processes")
    for name in ("max-steps", "max-critique-rounds", "max-pivot-retries", "local-threads"):
        group.add_argument(f"--{name}", type=int)


def context_from(args: argparse.Namespace) -> Context:
    """Only the flags given override Context's defaults (which read PIVOTAL_* settings)."""
    values = {name: value for name, value in vars(args).items()
              if name in Context.field_names() and value not in (None, "")}
    return Context(**values)


def task_from(args: argparse.Namespace) -> dict[str, Any]:
    params = dict(_param(item) for item in args.param)
    if args.seed is not None:
        params["seed"] = args.seed
    return {"goal": args.goal, "env": args.env, "family": args.family, "params": params}


def _param(item: str) -> tuple[str, Any]:
    key, sep, raw = item.partition("=")
    if not sep or not key:
        raise PivotalError(f"--param needs KEY=VALUE (got {item!r})")
    try:
        return key, json.loads(raw)
    except json.JSONDecodeError:
        return key, raw


def _run(args: argparse.Namespace) -> int:
    from graphs.runner import run

    result = run(task_from(args), context_from(args), checkpoint_path=args.checkpoints,
                 thread_id=args.thread_id)
    if args.json:
        print(result.model_dump_json(indent=2))
    else:
        _print_trace(result)
    return EXIT_TASK_FAILED if args.check and result.status != "success" else EXIT_SUCCESS


def _print_trace(result) -> None:
    task = result.task
    print(f"task {task['id']} ({task['env']}): {task['goal']}")
    for step in result.trajectory:
        verdicts = ", ".join(v["decision"] for v in step.get("verdicts", []))
        observation = step["observation"].strip().splitlines()[0][:90] if step["observation"].strip() else ""
        print(f"  {step['index']:>3}. {step['action']:<12} [{verdicts}] {observation}")
    for reflection in result.reflections:
        print(f"  reflection (attempt {reflection['attempt']}): pivotal step {reflection['pivotal_step']}, "
              f"{reflection['error_type']}: {reflection['advice']}")
    critic, retries, lessons = result.critic, result.retries, result.lessons
    print(f"{result.status}: {result.reason}")
    print(f"final path {result.trajectory_length} steps; env steps {result.steps} "
          f"(executed {result.executed}, replayed {result.replayed}), "
          f"llm calls {result.llm_calls}, critic approved {critic['approved']} / revised {critic['revised']} "
          f"/ rejected {critic['rejected']}, retries {retries['count']} ({retries['strategy']}), "
          f"lessons recalled {lessons['recalled']} / written {lessons['written']}, {result.wall_s:.1f} s, "
          f"thread {result.thread_id}")


def _envs(args: argparse.Namespace) -> int:
    from pivotal.environments import environment_names

    print("\n".join(environment_names()))
    return EXIT_SUCCESS


if __name__ == "__main__":
    sys.exit(main())
