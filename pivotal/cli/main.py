"""`pivotal` command line: a thin layer over `graphs.run`.

Exit codes: 0 the run finished (its outcome is in the output), 1 the task failed and `--check`
was given, 2 bad input or a fault that stopped the command (one line on stderr), 130 Ctrl-C and
143 SIGTERM (one line on how to go on).
"""

import argparse
import asyncio
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from types import FrameType

from pivotal.cli import batch, bench, checkpoints, critic, fork, lessons, options, studio
from pivotal.cli.trace import Trace, reflection_line, rewind_notices_to
from pivotal.core.errors import EnvironmentFault, PivotalError, Terminated, infrastructure_fault
from pivotal.core.logs import library_logs_to
from pivotal.core.settings import load_env_file, settings

EXIT_SUCCESS, EXIT_TASK_FAILED, EXIT_BAD_INPUT = 0, 1, 2
EXIT_INTERRUPTED, EXIT_TERMINATED = 130, 143  # 128 + SIGINT / SIGTERM, as a shell reports them


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        with _sigterm_as_interrupt():
            load_env_file()
            with library_logs_to(settings().log_file):  # every PIVOTAL_* value checked before any command starts work
                return args.handler(args)
    except PivotalError as exc:
        print(f"pivotal: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except EnvironmentFault as exc:  # a batch records it as the task's error; a single run stops with it
        print(f"pivotal: error: {exc}{_continue(args)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception as exc:
        if not (fault := infrastructure_fault(exc)):
            raise  # a bug of ours: its traceback is what a report needs
        print(f"pivotal: error: {fault}; fix it{_continue(args) or ', then run the command again'}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt as exc:
        print(f"pivotal: {_interrupted(args, exc)}", file=sys.stderr)
        return EXIT_TERMINATED if isinstance(exc, Terminated) else EXIT_INTERRUPTED


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """A service manager's stop (SIGTERM) ends a run the way Ctrl-C does, with its line on how to go on."""
    if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
        yield
        return
    _terminating.clear()
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        yield
    except KeyboardInterrupt as exc:
        if _terminating.is_set() and not isinstance(exc, Terminated):
            raise Terminated() from exc
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)


_terminating = threading.Event()


def _terminate(signum: int, frame: FrameType | None) -> None:
    """SIGTERM goes the way Ctrl-C goes. Inside an event loop that is asyncio's own handler, which
    cancels the main task at its next await; where that handler is not there (a process started with
    Ctrl-C ignored, as a script's background job is) the stop is raised between two of the loop's
    callbacks, and closing the loop cancels every task at its await. Raised from here instead, it
    landed in whatever line ran, asyncio's and LangGraph's internals included, where it could be
    swallowed or cut a clean-up in half.
    """
    _terminating.set()
    on_interrupt = signal.getsignal(signal.SIGINT)
    if callable(on_interrupt) and on_interrupt is not signal.default_int_handler:
        on_interrupt(signal.SIGINT, frame)  # asyncio.Runner's: it cancels the main task
        return
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # no event loop runs: the next line of ours is as good a place as any
        raise Terminated() from None
    loop.call_soon_threadsafe(_raise_terminated)


def _raise_terminated() -> None:
    raise Terminated()


def _continue(args: argparse.Namespace) -> str:
    """How a single run that stopped on its environment's fault goes on, once the environment is fixed."""
    if args.command == "run" and args.thread_id:
        return f"; continue with the same command (--thread-id {args.thread_id})"
    if args.command == "run":
        return "; this run had no --thread-id, so it cannot be continued: give one to runs you may resume"
    return ""


def _interrupted(args: argparse.Namespace, exc: KeyboardInterrupt) -> str:
    how = "terminated (SIGTERM)" if isinstance(exc, Terminated) else "interrupted"
    if args.command == "batch":
        return (
            f"{how}; finished tasks are in {args.out}: continue with "
            f"`pivotal batch {args.tasks} --out {args.out} --resume`"
        )
    if args.command == "run" and args.thread_id:
        return f"{how}; the last checkpoint is kept: continue with the same command (same --thread-id)"
    if args.command == "run":
        return f"{how}; this run had no --thread-id, so it cannot be continued: give one to runs you may resume"
    if args.command == "resume":
        return f"{how}; the last checkpoint of thread {args.thread_id} is kept"
    return how


def _parser() -> argparse.ArgumentParser:
    parser = options.OneLineParser(prog="pivotal", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(required=True, metavar="command", dest="command")
    run = commands.add_parser("run", help="run one task through the actor-critic graph")
    options.task_options(run)
    options.context_options(run)
    options.plugin_option(run)
    run.add_argument(
        "--checkpoints",
        metavar="PATH|URL",
        help="SQLite checkpoint file, postgresql:// URL, or :memory: "
        "(default: PIVOTAL_CHECKPOINT_PATH or .pivotal/checkpoints.sqlite)",
    )
    run.add_argument("--thread-id", help="LangGraph thread id (default: a new one per run)")
    run.add_argument("--json", action="store_true", help="print the full result as JSON")
    run.add_argument("--check", action="store_true", help="exit 1 when the task fails (for scripts and CI)")
    run.set_defaults(handler=_run)
    paused = commands.add_parser("resume", help="answer a run paused for approval and let it go on")
    paused.add_argument("thread_id")
    paused.add_argument("--decision", choices=["approve", "reject"], required=True)
    paused.add_argument("--reason", default="")
    paused.add_argument(
        "--repeat",
        action="store_true",
        help="with --decision approve: run again an irreversible action that already ran in this thread "
        '(the pause says so); a plain approval never does ({"decision": "approve", "repeat": true})',
    )
    paused.add_argument("--checkpoints", metavar="PATH|URL", help="the paused run's checkpoint file or URL")
    paused.add_argument("--json", action="store_true")
    paused.add_argument("--check", action="store_true")
    options.context_options(paused)
    options.plugin_option(paused)
    paused.set_defaults(handler=_resume)
    envs = commands.add_parser("envs", help="list the environments a task can name")
    options.plugin_option(envs)
    envs.set_defaults(handler=_envs)
    batch.add_commands(commands)
    lessons.add_commands(commands)
    checkpoints.add_commands(commands)
    critic.add_commands(commands)
    fork.add_commands(commands)
    bench.add_commands(commands)
    studio.add_commands(commands)
    return parser


def _run(args: argparse.Namespace) -> int:
    from pivotal.graphs.runner import resume, run

    options.load_plugins(args.plugin)
    context = options.context_from(args)
    live = None if args.json else Trace(sys.stdout)
    with rewind_notices_to(live.say) if live else nullcontext():  # with --json: a RewindWarning on stderr
        result = run(
            options.task_from(args),
            context,
            checkpoint_path=args.checkpoints,
            thread_id=args.thread_id,
            plugins=args.plugin,
            on_update=live,
        )
    while result.status == "interrupted" and sys.stdin.isatty():
        reply = _ask(result.interrupt or {})
        result = resume(result.thread_id, reply, context, checkpoint_path=args.checkpoints, on_update=live)
    return _report(result, args, traced=live is not None)


def _resume(args: argparse.Namespace) -> int:
    """The run goes on with its saved settings and plugins; a contradicting flag is refused."""
    from pivotal.graphs.runner import resume
    from pivotal.graphs.threads import saved_values

    if args.repeat and args.decision != "approve":
        raise PivotalError("--repeat re-approves an action that already ran; give it with --decision approve")
    saved = asyncio.run(saved_values(args.thread_id, args.checkpoints))
    options.load_plugins([*saved.get("plugins", []), *args.plugin])
    context = options.resumed_context(saved.get("run_settings") or {}, args)
    reply = {"decision": args.decision, "reason": args.reason, **({"repeat": True} if args.repeat else {})}
    live = None if args.json else Trace(sys.stdout)
    result = resume(args.thread_id, reply, context, checkpoint_path=args.checkpoints, on_update=live)
    return _report(result, args, traced=live is not None)


def _ask(pending: dict) -> dict:
    """The terminal's way to answer an approval pause; anything but y/yes rejects."""
    print(
        f"\napproval needed at step {pending.get('step')}: {pending.get('action')} {pending.get('arguments') or ''}",
        file=sys.stderr,
    )
    if pending.get("critic"):
        print(f"  critic: {pending['critic']}", file=sys.stderr)
    answer = input("  approve? [y/N] ").strip().lower()
    reason = input("  reason (optional): ").strip()
    return {"decision": "approve" if answer in ("y", "yes") else "reject", "reason": reason}


def _report(result, args: argparse.Namespace, *, traced: bool = False) -> int:
    if args.json:
        print(result.model_dump_json(indent=2))
    else:
        _print_summary(result, path=not traced)
    if result.status == "interrupted" and not args.json:
        again = " [--repeat: it already ran; run it again]" if (result.interrupt or {}).get("repeat") else ""
        print(
            f"paused for approval of {result.interrupt['action']}: continue with `pivotal resume "
            f"{result.thread_id} --decision approve|reject{again}` (same --checkpoints and model flags)"
        )
    return EXIT_TASK_FAILED if args.check and result.status != "success" else EXIT_SUCCESS


def _print_summary(result, *, path: bool) -> None:
    """The outcome and its counts; `path`: the final path and reflections too, when no live trace showed them."""
    task = result.task
    if path:
        print(f"task {task['id']} ({task['env']}): {task['goal']}")
        for step in result.trajectory:
            verdicts = ", ".join(v["decision"] for v in step.get("verdicts", []))
            observation = step["observation"].strip().splitlines()[0][:90] if step["observation"].strip() else ""
            circle = " (back: a circle)" if step.get("revisit_of") is not None else ""
            circle = " (changed nothing)" if step.get("no_op") else circle
            print(f"  {step['index']:>3}. {step['action']:<12} [{verdicts}]{circle} {observation}")
        for reflection in result.reflections:
            print(f"  reflection (attempt {reflection['attempt']}): {reflection_line(reflection)}")
    critic, retries, lessons = result.critic, result.retries, result.lessons
    print(f"{result.status}: {result.reason}")
    print(
        f"final path {result.trajectory_length} steps; env steps {result.steps} "
        f"(executed {result.executed}, replayed {result.replayed}), "
        f"llm calls {result.llm_calls}, critic approved {critic['approved']} / revised {critic['revised']} "
        f"/ rejected {critic['rejected']}, retries {retries['count']} ({retries['strategy']}, "
        f"budget {retries.get('budget', 'new')}), "
        f"lessons recalled {lessons['recalled']} / written {lessons['written']}, {result.wall_s:.1f} s, "
        f"thread {result.thread_id}"
    )


def _envs(args: argparse.Namespace) -> int:
    """One line per environment: its name first (so `cut -d' ' -f1` still lists the names), how a
    retry puts it back, the parameters a task may set (`--param NAME=VALUE`) with their defaults, and
    whether it says how far the goal is (an attempt that can no longer reach it then ends at once).
    """
    from pivotal.core.environments import environment_names

    options.load_plugins(args.plugin)
    names = environment_names()
    width = max(map(len, names), default=0)
    for name in names:
        print(f"{name:<{width}}  {_env_line(name)}")
    return EXIT_SUCCESS


def _env_line(name: str) -> str:
    from pivotal.core.environments import make_environment
    from pivotal.core.environments.base import REWIND_WORDS, DistanceOracle, declared_params, rewind_mode

    try:
        env = make_environment(name)
        mode = rewind_mode(env)
    except Exception as exc:  # noqa: BLE001 — one plugin that cannot be built must not hide the others
        return f"(cannot be built here: {' '.join(str(exc).split())[:120]})"
    params = declared_params(env)
    shown = "none declared" if params is None else " ".join(f"{k}={v}" for k, v in params.items()) or "none"
    ends = "  ends hopeless attempts (steps_to_goal)" if isinstance(env, DistanceOracle) else ""
    return f"rewind {mode:<10} ({REWIND_WORDS[mode]})  params: {shown}{ends}"
