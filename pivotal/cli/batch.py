"""`pivotal batch TASKS.jsonl --out RESULTS.jsonl`: many tasks, streamed results, resumable.

RESULTS.jsonl gets one line per task as it finishes (the fields of `pivotal run --json` plus
`line`, the task's line in TASKS.jsonl). RESULTS.jsonl.batch remembers the batch's LangGraph
thread prefix and checkpoint file, and the tasks it started, so `--resume` after a crash skips the
finished tasks and continues the others from their last checkpoint, and refuses to start one of
them again from nothing when the checkpoints no longer hold it.

A task whose thread another process holds (the same batch resumed on two machines) is left to it
with one line on stderr, as is one that process finished and reported: each task runs once, and
its result is in the results file of the process that ran it.
"""

import argparse
import asyncio
import contextlib
import json
import os
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from pivotal.cli import options
from pivotal.cli.options import Commands
from pivotal.cli.trace import rewind_notices_to
from pivotal.core.errors import InfrastructureFault, PivotalError

if TYPE_CHECKING:  # loaded where a batch runs, not for every command's start
    from pivotal.core.context import Context
    from pivotal.graphs.summary import RunResult

EXIT_OK, EXIT_TASK_FAILED = 0, 1


def add_commands(commands: Commands) -> None:
    batch = commands.add_parser("batch", help="run every task of a JSONL file concurrently; resumable")
    batch.add_argument("tasks", help='JSONL file, one task per line: {"env": ..., "goal": ..., "params": {...}}')
    batch.add_argument("--out", required=True, help="results JSONL, one line per task as it finishes")
    batch.add_argument(
        "--concurrency", type=int, default=4, help="tasks in flight at once (default 4; with --ray, on each worker)"
    )
    mode = batch.add_mutually_exclusive_group()
    mode.add_argument("--resume", action="store_true", help="continue the batch that wrote --out")
    mode.add_argument("--overwrite", action="store_true", help="replace an existing --out and start afresh")
    batch.add_argument(
        "--checkpoints",
        metavar="PATH|URL",
        help="SQLite checkpoint file or postgresql:// URL (default: PIVOTAL_CHECKPOINT_PATH)",
    )
    batch.add_argument(
        "--ray",
        nargs="?",
        const="",
        metavar="ADDRESS",
        help="spread the tasks over Ray workers: on this machine, or on the cluster at ADDRESS (Postgres checkpoints)",
    )
    batch.add_argument("--workers", type=int, help="Ray workers (default: one per CPU of the Ray cluster)")
    batch.add_argument("--check", action="store_true", help="exit 1 when any task did not succeed")
    options.context_options(batch)
    options.plugin_option(batch)
    batch.set_defaults(handler=_batch)


def _batch(args: argparse.Namespace) -> int:
    if args.concurrency <= 0:
        raise PivotalError(f"--concurrency must be > 0 (got {args.concurrency})")
    out, marker = Path(args.out), Path(f"{args.out}.batch")
    with _results_lock(out):  # before anything is read or written: a refused batch changes nothing
        return _locked_batch(args, out, marker)


def _quiet_about_stops(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """A stop (SIGTERM, Ctrl-C) that lands while the loop winds the batch's task down leaves that
    task's exception unread; the one line the command prints says all there is, so asyncio's
    "exception was never retrieved" traceback is not printed after it.
    """
    if not isinstance(context.get("exception"), KeyboardInterrupt):
        loop.default_exception_handler(context)


def _locked_batch(args: argparse.Namespace, out: Path, marker: Path) -> int:
    from pivotal.graphs.checks import check_context

    saved = _saved_batch(out, marker) if args.resume else {}
    options.load_plugins([*saved.get("plugins", []), *args.plugin])
    # the batch's own settings: a resume runs with them; a flag may repeat one, not contradict it
    context = options.resumed_context(saved.get("context") or {}, args) if args.resume else options.context_from(args)
    lines, bad = read_tasks(Path(args.tasks))  # a missing tasks file fails before anything is written
    check_context(context)  # models, keys and the store (its lock too) before the results are touched
    _check_checkpoints(args.checkpoints or saved.get("checkpoints"))
    _check_ray(args, context, args.checkpoints or saved.get("checkpoints"))
    resume = f"pivotal batch {args.tasks} --out {args.out} --resume"
    state = _batch_state(args, out, marker, saved, context)
    try:
        done = load_done(out) if args.resume else set()
        if args.resume:
            _check_started(state, {number for number, _ in lines}, done, args.tasks)
        started = time.perf_counter()
        _run_pending(args, out, lines, bad, done, context, state)
    except InfrastructureFault as fault:
        raise InfrastructureFault(f"{fault}: {resume}") from None
    summary = batch_summary(_read_results(out), time.perf_counter() - started, resumed=len(done))
    print(format_summary(summary))
    failed = summary["tasks"] - summary["success"]
    return EXIT_TASK_FAILED if args.check and failed else EXIT_OK


def _run_pending(
    args: argparse.Namespace,
    out: Path,
    lines: list[tuple[int, dict[str, Any]]],
    bad: list[tuple[int, str]],
    done: set[int],
    context: "Context",
    state: dict[str, Any],
) -> None:
    """The bad lines recorded, then every task not yet answered run; results appended as they come."""
    try:
        opened = out.open("ab", buffering=0)  # unbuffered: see `_write`
    except OSError as exc:
        raise _storage_fault(out, exc) from None
    with opened as results:
        for number, why in bad:
            print(f"{args.tasks}:{number}: skipped: {why}", file=sys.stderr)
            if number not in done:
                _write(
                    results,
                    {
                        "line": number,
                        "status": "error",
                        "reason": f"bad task line: {why}",
                        "error": f"bad task line: {why}",
                    },
                )
        pending = [(number, task) for number, task in lines if number not in done]
        # the run API's rewind notice, once per environment, above the summary on stdout: stderr keeps its
        # one line for a fault (and JSON logs, when asked for, stay JSON)
        with asyncio.Runner() as runner, rewind_notices_to(print):
            runner.get_loop().set_exception_handler(_quiet_about_stops)
            runner.run(_run(pending, context, args.concurrency, state, results, args))


def _check_checkpoints(path: str | None) -> None:
    """Before the results file is touched: a damaged SQLite file, or a Postgres server that cannot be
    reached, is one line, and the same command can simply be run again once it is fixed.
    """
    from pivotal.core.checkpoints import check_file, is_postgres
    from pivotal.core.settings import settings

    path = path or settings().checkpoint_path
    if is_postgres(path):
        asyncio.run(_reach(path))
    elif path != ":memory:":
        check_file(path)


def _check_ray(args: argparse.Namespace, context: "Context", checkpoints: str | None) -> None:
    """With --ray, what every worker must share (Postgres checkpoints, a Chroma server for lessons)
    and Ray itself are checked before the results file is touched.
    """
    from pivotal.core.settings import settings

    if args.ray is None:
        if args.workers is not None:
            raise PivotalError("--workers needs --ray: one process runs without workers")
        return
    from pivotal.graphs.ray_batch import check_ray_inputs, ray_module

    check_ray_inputs(context, checkpoints or settings().checkpoint_path, args.concurrency, args.workers)
    ray_module()


async def _reach(url: str) -> None:
    from pivotal.graphs.checkpointer import open_checkpointer

    async with open_checkpointer(url):
        pass


@contextmanager
def _results_lock(out: Path) -> Iterator[None]:
    """One batch per results file: a second one (`--overwrite`, another `--resume`) is refused
    before it has read or changed anything, so it can neither empty the file nor run a task twice.
    """
    from filelock import FileLock, Timeout

    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(f"{out}.lock", timeout=0)
        lock.acquire()
    except Timeout:
        raise PivotalError(
            f"{out} is in use by another batch (lock {out}.lock); wait for it to finish, or write to another --out"
        ) from None
    except OSError as exc:
        raise PivotalError(f"cannot lock {out}: {exc.strerror or exc}; choose a writable --out") from None
    try:
        yield
    finally:
        lock.release()


async def _run(
    pending: list[tuple[int, dict[str, Any]]],
    context: "Context",
    concurrency: int,
    state: dict[str, Any],
    results: BinaryIO,
    args: argparse.Namespace,
) -> None:
    from pivotal.graphs.batch import run_batch

    progress = _progress(len(pending))

    def record(index: int, result: "RunResult") -> None:
        if result.status == "skipped":  # another process runs it, or ran it: its results file has it
            print(f"{args.tasks}:{pending[index][0]}: skipped: {result.reason}", file=sys.stderr)
        else:
            _write(results, {"line": pending[index][0], **result.model_dump()})
        progress.update(1)

    def started(index: int) -> None:  # Ray workers' starts are not the driver's to see: Postgres keeps them
        _mark_started(state, pending[index][0], Path(f"{args.out}.batch"))

    common = {
        "concurrency": concurrency,
        "thread_prefix": state["thread_prefix"],
        "on_result": record,
        "thread_keys": [str(number) for number, _ in pending],
        "plugins": state.get("plugins", []),
    }
    try:
        if args.ray is None:
            await run_batch(
                [task for _, task in pending], context, checkpoint_path=state["checkpoints"], on_start=started, **common
            )
        else:
            from pivotal.graphs.ray_batch import run_batch_on_ray

            await run_batch_on_ray(
                [task for _, task in pending],
                context,
                checkpoints=state["checkpoints"],
                address=args.ray or None,
                workers=args.workers,
                **common,
            )
    finally:
        progress.close()


def _mark_started(state: dict[str, Any], line: int, marker: Path) -> None:
    """The marker names every task that started, once its first checkpoint is written and before
    any of its nodes runs: a resume then knows which threads the checkpoints must hold (a task killed
    before that has done nothing to repeat). Replaced whole, so a kill leaves the old one.
    """
    if line in state.setdefault("started", []):
        return
    state["started"].append(line)
    _replace(marker, json.dumps(state))


def _check_started(state: dict[str, Any], good: set[int], done: set[int], tasks: str) -> None:
    """What the marker and the results say started must still be in the checkpoints: an emptied or
    replaced checkpoint file would otherwise start those tasks again from step 0, repeating every
    action they took. Refused in one line before anything runs.
    """
    from pivotal.graphs.threads import held_threads

    started = sorted((set(state.get("started", [])) | done) & good)
    if not started:
        return
    prefix, where = state["thread_prefix"], state["checkpoints"]
    held = asyncio.run(held_threads(where, [f"{prefix}:{line}" for line in started]))
    missing = [line for line in started if f"{prefix}:{line}" not in held]
    if missing:
        shown = ", ".join(map(str, missing[:10])) + (", ..." if len(missing) > 10 else "")
        raise PivotalError(
            f"{where} holds no checkpoints for {len(missing)} task(s) this batch started (line(s) {shown} of "
            f"{tasks}): the file was emptied or replaced, so resuming would start them again from step 0; "
            "restore it (or pass --checkpoints with the one the batch used), or start afresh with --overwrite; "
            "nothing was run"
        )


def read_tasks(path: Path) -> tuple[list[tuple[int, dict[str, Any]]], list[tuple[int, str]]]:
    """Good task lines and (line number, why) for the bad ones; blank lines are skipped."""
    from pivotal.graphs.checks import check_task

    if not path.is_file():
        raise PivotalError(f"tasks file {path} does not exist")
    good, bad = [], []
    # lines split as any text reader splits them; bytes that are not UTF-8 kept apart (surrogateescape)
    with path.open(encoding="utf-8-sig", errors="surrogateescape") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                _check_utf8(line)
                raw = json.loads(line)
                check_task(raw if isinstance(raw, (dict, str)) else None)  # its environment and params too
                good.append((number, raw if isinstance(raw, dict) else {"goal": raw}))
            except json.JSONDecodeError as exc:
                bad.append((number, f"not JSON ({exc.msg} at column {exc.colno})"))
            except PivotalError as exc:
                bad.append((number, str(exc)))
    return good, bad


def _check_utf8(line: str) -> None:
    """A line with bytes that are not UTF-8 is refused rather than run with its goal changed (a
    replacement character in place of what the person wrote). A BOM before the first line, as
    editors write it, is dropped by the codec.
    """
    try:
        line.encode("utf-8")
    except UnicodeEncodeError as exc:
        byte = ord(line[exc.start]) - 0xDC00  # the byte surrogateescape stood in for
        raise PivotalError(
            f"not UTF-8 text (byte 0x{byte & 0xFF:02x} at character {exc.start + 1} of the line); "
            "save the tasks file as UTF-8"
        ) from None


def load_done(out: Path) -> set[int]:
    """Lines already answered; only they stay in the file. A line cut short by a kill is dropped (the
    file stays valid JSONL), and so is an `error` row: a failure is an answer, an error is not, so
    the task runs again, from its last checkpoint.
    """
    kept, done = [], set()
    for line in out.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(row, dict) or row.get("status") == "error":
            continue
        if isinstance(row.get("line"), int) and row["line"] not in done:
            done.add(row["line"])
            kept.append(line)
    _replace(out, "".join(f"{line}\n" for line in kept))
    return done


def _replace(path: Path, text: str, then: str = "resume the batch") -> None:
    """The file holds the old text or the new, never part of either (a full disk, a kill)."""
    temporary = path.with_name(path.name + ".tmp")
    try:
        temporary.write_text(text, encoding="utf-8")
        os.replace(temporary, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise _storage_fault(path, exc, then) from None


def _saved_batch(out: Path, marker: Path) -> dict[str, Any]:
    if not marker.is_file() or not out.is_file():
        raise PivotalError(f"nothing to resume: {out} or {marker} is missing; run without --resume")
    try:
        saved = json.loads(marker.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _damaged_marker(marker, f"not JSON: {exc}") from None
    except OSError as exc:
        raise PivotalError(f"cannot read {marker}: {exc.strerror or exc}") from None
    if not isinstance(saved, dict):
        raise _damaged_marker(marker, f"a JSON {type(saved).__name__}, not an object")
    for key in MARKER_FIELDS:
        if not isinstance(saved.get(key), str) or not saved[key]:
            raise _damaged_marker(marker, f"no {key!r}")
    if not isinstance(saved.get("context", {}), dict) or not isinstance(saved.get("plugins", []), list):
        raise _damaged_marker(marker, "its 'context' or 'plugins' is not the shape a batch writes")
    return saved


MARKER_FIELDS = ("thread_prefix", "checkpoints")
"""What a resume cannot go on without: the batch's LangGraph threads and where their checkpoints are."""


def _damaged_marker(marker: Path, why: str) -> PivotalError:
    """Nothing has been read from the results or checkpoints yet, and nothing is changed."""
    return PivotalError(
        f"batch marker {marker} is damaged ({' '.join(why.split())[:120]}): restore it from a backup, or start "
        "the batch afresh with --overwrite (its finished tasks then run again); nothing was changed"
    )


def _batch_state(
    args: argparse.Namespace, out: Path, marker: Path, saved: dict[str, Any], context: "Context"
) -> dict[str, Any]:
    """What a resume needs to go on exactly as the batch started: threads, checkpoints, settings, plugins."""
    from pivotal.core.settings import settings

    if args.resume:
        state = dict(saved)
        if args.checkpoints:
            state["checkpoints"] = args.checkpoints
        return state
    if out.exists() and not args.overwrite:
        raise PivotalError(f"{out} exists; pass --resume to continue that batch or --overwrite to replace it")
    if (args.checkpoints or settings().checkpoint_path) == ":memory:":
        print("pivotal: warning: in-memory checkpoints: this batch cannot be resumed", file=sys.stderr)
    state = {
        "thread_prefix": f"batch-{uuid.uuid4().hex[:12]}",
        "checkpoints": args.checkpoints or settings().checkpoint_path,
        "tasks": str(Path(args.tasks).resolve()),
        "context": context.saved(),
        "plugins": list(args.plugin),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    _replace(marker, json.dumps(state), then="run the same command again")
    _replace(out, "", then="run the same command again")
    return state


def _write(results: BinaryIO, row: dict[str, Any]) -> None:
    """One line per result, whatever it holds: text that cannot be UTF-8 (a lone surrogate from a
    goal's JSON escape) is written as ASCII JSON escapes, and values JSON does not know as their text.

    Whole or not at all: `results` is unbuffered, so a full disk is seen at this line, which is
    then cut off again (a resume would drop a partial line, but a reader in between would see it).
    """
    line = json.dumps(row, ensure_ascii=False, default=str)
    if not _utf8(line):
        line = json.dumps(row, default=str)
    data, start = memoryview(f"{line}\n".encode()), results.tell()
    try:
        while data:
            data = data[results.write(data) :]
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.ftruncate(results.fileno(), start)
        raise _storage_fault(results.name, exc) from None


def _storage_fault(path: Any, exc: OSError, then: str = "resume the batch") -> InfrastructureFault:
    return InfrastructureFault(
        f"cannot write {path} ({exc.strerror or exc}); nothing half-written was left: free the space or "
        f"fix the folder, then {then}"
    )


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _read_results(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines() if line.strip()]


def _progress(total: int) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, unit="task", file=sys.stderr, disable=not sys.stderr.isatty(), dynamic_ncols=True)


def batch_summary(rows: list[dict[str, Any]], wall_s: float, *, resumed: int = 0) -> dict[str, Any]:
    def total(*path: str) -> int:
        found = 0
        for row in rows:
            value: Any = row
            for key in path:
                value = (value or {}).get(key, 0) if isinstance(value, dict) else 0
            found += int(value or 0)
        return found

    count = {status: sum(row.get("status") == status for row in rows) for status in ("success", "failure", "error")}
    tokens = sum(
        int(u.get("input_tokens", 0)) + int(u.get("output_tokens", 0))
        for row in rows
        for u in (row.get("usage") or {}).values()
    )
    return {
        "tasks": len(rows),
        **count,
        "success_rate": round(count["success"] / len(rows), 3) if rows else 0.0,
        "executed_steps": total("executed"),
        "replayed_steps": total("replayed"),
        "llm_calls": total("llm_calls"),
        "tokens": tokens,
        "retries": total("retries", "count"),
        "lessons_written": total("lessons", "written"),
        "lessons_merged": total("lessons", "merged"),
        "lessons_retired": total("lessons", "retired"),
        "resumed_from": resumed,
        "wall_s": round(wall_s, 1),
    }


def format_summary(s: dict[str, Any]) -> str:
    return (
        f"{s['tasks']} tasks: {s['success']} succeeded, {s['failure']} failed, {s['error']} errors "
        f"(success rate {s['success_rate']:.1%}); steps {s['executed_steps']} executed + {s['replayed_steps']} "
        f"replayed; {s['llm_calls']} LLM calls, {s['tokens']} tokens; {s['retries']} retries; lessons "
        f"{s['lessons_written']} written, {s['lessons_merged']} merged, {s['lessons_retired']} retired; "
        f"{s['wall_s']} s" + (f" (resumed; {s['resumed_from']} tasks were already done)" if s["resumed_from"] else "")
    )
