"""`pivotal lessons …`: inspect and curate the experience store from the shell."""

import argparse
import difflib
import json
import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, get_args

from pivotal.cli.options import Commands, Handler
from pivotal.core.errors import PivotalError
from pivotal.core.schemas import LessonKind
from pivotal.memory.lesson import DEFAULT_OWNER, SHARED, Lesson, LessonStatus
from pivotal.memory.lesson.ledger import Record

EXIT_OK, EXIT_BAD_INPUT = 0, 2


def add_commands(commands: Commands) -> None:
    lessons = commands.add_parser("lessons", help="list, show, export, import, retire lessons; store stats")
    actions = lessons.add_subparsers(required=True, metavar="action")
    listing = _action(actions, "list", "one line per lesson", _list)
    listing.add_argument("--family")
    listing.add_argument("--status", choices=[*get_args(LessonStatus), "all"], default="approved")
    listing.add_argument("--kind", choices=get_args(LessonKind))
    listing.add_argument("--json", action="store_true", help="one JSON object per line")
    show = _action(actions, "show", "one lesson, every field", _show)
    show.add_argument("id")
    export = _action(actions, "export", "write every lesson (retired too) as JSONL", _export)
    export.add_argument("file", help="output file, or - for stdout")
    export.add_argument("--family")
    imported = _action(
        actions, "import", "add lessons from a JSONL export (bad rows are reported and skipped)", _import
    )
    imported.add_argument("file")
    retire = _action(actions, "retire", "stop recalling lessons (they stay for audit)", _retire)
    retire.add_argument("ids", nargs="+")
    retire.add_argument("--reason", default="retired by hand")
    share = _action(actions, "share", "move lessons to the shared tier every owner recalls", _share)
    share.add_argument("ids", nargs="+")
    revoke = _action(
        actions, "revoke", "take back what a run, an import file or a time span gave (lessons and evidence)", _revoke
    )
    which = revoke.add_mutually_exclusive_group(required=True)
    which.add_argument("--run", help="a run id")
    which.add_argument("--source", metavar="FILE", help="an import file, as `lessons import` was given it")
    which.add_argument("--since", metavar="TIME", help="ISO time (UTC unless it says) or epoch seconds")
    revoke.add_argument("--dry-run", action="store_true", help="say what would go, change nothing")
    _action(actions, "stats", "counts, utility and size per family", _stats)


def _action(actions: Commands, name: str, help_text: str, handler: Handler) -> argparse.ArgumentParser:
    parser = actions.add_parser(name, help=help_text)
    parser.add_argument("--store", dest="store_path", metavar="DIR", help="store folder (default: PIVOTAL_STORE_PATH)")
    parser.add_argument("--store-url", metavar="URL", help="Chroma server (default: PIVOTAL_STORE_URL)")
    parser.add_argument(
        "--owner",
        default=DEFAULT_OWNER,
        help=f"whose lessons: the app's lessons_namespace joined by / (default {DEFAULT_OWNER}); the shared tier too",
    )
    parser.set_defaults(handler=handler)
    return parser


def _store(args: argparse.Namespace):
    from pivotal.core.settings import settings
    from pivotal.memory.policy.registry import open_store

    return open_store(args.store_path or settings().store_path, args.store_url or settings().store_url)


def _list(args: argparse.Namespace) -> int:
    lessons = _store(args).lessons(family=args.family, owner=args.owner)
    for lesson in sorted(lessons, key=lambda lesson_: (lesson_.family, -lesson_.utility, lesson_.id)):
        if (args.status != "all" and lesson.status != args.status) or (args.kind and lesson.kind != args.kind):
            continue
        if args.json:
            print(json.dumps(lesson.model_dump(), ensure_ascii=False))
        else:
            print(
                f"{lesson.id}  {lesson.family:<12} {lesson.kind:<9} {lesson.status:<8} "
                f"u={lesson.utility:.2f} ev={lesson.evidence:<3} {lesson.text[:70]}"
            )
    return EXIT_OK


def _show(args: argparse.Namespace) -> int:
    store = _store(args)
    found = store.get([args.id], owner=args.owner)
    if not found:
        raise PivotalError(f"no lesson with id {args.id!r}; see `pivotal lessons list --status all`")
    lesson = found[args.id]
    lineage = [f"{_when(record.at)}  {_record_line(record)}" for record in store.lineage(lesson)]
    shown = {**lesson.model_dump(), "provenance": _provenance(lesson.provenance), "quarantine": _quarantine(lesson)}
    print(json.dumps({**shown, "lineage": lineage}, ensure_ascii=False, indent=2))
    return EXIT_OK


def _provenance(spans: str) -> list[str] | str:
    """Each span as `field origin (trusted|untrusted): text`, in the order a prompt shows them."""
    from pivotal.memory.lesson.provenance import loads

    if not spans:
        return "none recorded (stored before provenance): shown as it always was"
    return [
        f"{span.field} {span.origin} ({'trusted' if span.trusted else 'untrusted'}): {span.text}"
        for span in loads(spans)
    ]


def _quarantine(lesson: Lesson) -> str:
    confirmed = len(set(lesson.witnesses.split()))
    if not lesson.needs:
        return "none (stored before quarantine)"
    counted = f"{confirmed} of {lesson.needs} independent runs with agreeing outcomes"
    return f"waiting: {counted}; not recalled yet" if lesson.status == "pending" else f"confirmed: {counted}"


def _record_line(record: Record) -> str:
    where = record.source if record.origin in ("import", "person") else f"run {record.run}"
    if record.kind == "evidence":
        merged = f", merged from {record.merged_from}" if record.merged_from else ""
        digest = f", from {record.digest}" if record.digest else ""
        witness = f", witness {record.witness}" if record.witness else ""
        return f"evidence +{record.weight} ({record.origin}: {where}{digest}{merged}{witness}): {record.text[:60]}"
    if record.kind == "recall":
        outcome = "success" if record.successes else "failure"
        return f"recalled by run {record.run}: {outcome}, {record.approved}/{record.steps} steps approved"
    return (
        f"carried from before the ledger: evidence {record.weight}, {record.recalls} recalls, "
        f"{record.successes} successes"
    )


def _when(at: float) -> str:
    return datetime.fromtimestamp(at, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _export(args: argparse.Namespace) -> int:
    from pivotal.memory.policy.transfer import export_lessons

    store = _store(args)
    if args.file == "-":
        count = export_lessons(store, sys.stdout, family=args.family, owner=args.owner)
    else:
        with open(args.file, "w", encoding="utf-8") as out:
            count = export_lessons(store, out, family=args.family, owner=args.owner)
    print(f"exported {count} lessons", file=sys.stderr)
    return EXIT_OK


def _import(args: argparse.Namespace) -> int:
    from pivotal.memory.policy.transfer import import_lessons

    path = Path(args.file)
    if not path.is_file():
        raise PivotalError(f"import file {path} does not exist")
    with path.open(encoding="utf-8", errors="replace") as lines:
        report = import_lessons(_store(args), lines, source=source_path(args.file), owner=args.owner)
    for number, why in report.bad_rows:
        print(f"{path}:{number}: skipped: {why}", file=sys.stderr)
    already = f", {report.already} already stored for {args.owner}" if report.already else ""
    print(
        f"imported {report.imported} lessons for {args.owner}{already}, skipped {len(report.bad_rows)} bad rows "
        "(held as pending: recalled once a run's own lesson confirms one)",
        file=sys.stderr,
    )
    return EXIT_BAD_INPUT if report.bad_rows else EXIT_OK


def _retire(args: argparse.Namespace) -> int:
    retired = _store(args).retire(args.ids, args.reason, owner=args.owner)
    missing = sorted(set(args.ids) - set(retired))
    print(f"retired {len(retired)} lessons", file=sys.stderr)
    if missing:
        raise PivotalError(f"no lesson with id {', '.join(missing)}")
    return EXIT_OK


def _share(args: argparse.Namespace) -> int:
    store = _store(args)
    own = {i: lesson for i, lesson in store.get(args.ids, owner=args.owner).items() if lesson.owner == args.owner}
    store.put([lesson.model_copy(update={"owner": SHARED}) for lesson in own.values()])
    print(f"shared {len(own)} lessons", file=sys.stderr)
    missing = sorted(set(args.ids) - set(own))
    if missing:
        raise PivotalError(f"no lesson of owner {args.owner!r} with id {', '.join(missing)}")
    return EXIT_OK


def source_path(typed: str) -> str:
    """An import file as one name however it was typed: absolute, `./`-relative, through a symlink."""
    return os.path.realpath(os.path.expanduser(typed))


def _revoke(args: argparse.Namespace) -> int:
    since = _since(args.since) if args.since else None
    source = source_path(args.source) if args.source else None
    sources: set[str] = set()
    matched: list[Any] = []

    def revoked(record: Any) -> bool:
        if record.kind == "carried":
            return False
        if args.run:
            return record.run == args.run
        if source is not None:
            if record.origin != "import":
                return False
            sources.add(record.source)
            # an import recorded before sources were normalised holds the path as typed then
            hit = record.source in (source, args.source) or source_path(record.source) == source
            if hit:
                matched.append(record)
            return hit
        return record.at >= since

    store = _store(args)
    report = store.revoke(revoked, owner=args.owner, dry_run=True)
    if source is not None and not matched:
        raise PivotalError(_no_source(args.source, source, sources, args.owner))
    if not args.dry_run:
        report = store.revoke(revoked, owner=args.owner, dry_run=False)
    if source is not None:
        print(f"{source}: matched {len({r.id for r in matched})} import records of {args.owner}", file=sys.stderr)
    verb = "would remove" if args.dry_run else "removed"
    for lesson, _ in report.removed:
        print(f"{verb} {lesson.id}  {lesson.text[:70]}")
    for lesson, gone in report.reduced:
        print(f"{'would take' if args.dry_run else 'took'} {len(gone)} records out of {lesson.id}  {lesson.text[:60]}")
    print(
        f"{verb} {len(report.removed)} lessons, {len(report.reduced)} kept with other sources, "
        f"{report.runs} run records",
        file=sys.stderr,
    )
    return EXIT_OK


def _no_source(typed: str, source: str, sources: set[str], owner: str) -> str:
    """0 matches: the closest import sources the owner's lessons name, so a typo is seen at once."""
    closest = difflib.get_close_matches(source, sorted(sources), n=3, cutoff=0.0)
    named = "; closest: " + ", ".join(closest) if closest else f"; no lesson of {owner} was imported from a file"
    return f"--source {typed} ({source}) matched no import records of {owner}{named}"


def _since(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise PivotalError(f"--since {text!r} is not a time: give ISO (2026-12-02T06:00) or epoch seconds") from None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def _stats(args: argparse.Namespace) -> int:
    store = _store(args)
    rows: dict[str, dict[str, Any]] = {}
    for lesson in store.lessons(owner=args.owner):
        row = rows.setdefault(lesson.family, {"approved": 0, "retired": 0, "pending": 0, "utility": [], "kinds": {}})
        row[lesson.status] += 1
        row["kinds"][lesson.kind] = row["kinds"].get(lesson.kind, 0) + 1
        if lesson.status == "approved":
            row["utility"].append(lesson.utility)
    stats = {
        "store": store.location,
        "disk_bytes": _disk_bytes(store.location),
        "families": {
            family: {
                "approved": r["approved"],
                "retired": r["retired"],
                "pending": r["pending"],
                "kinds": r["kinds"],
                "mean_utility": round(sum(r["utility"]) / len(r["utility"]), 3) if r["utility"] else None,
            }
            for family, r in sorted(rows.items())
        },
    }
    print(json.dumps(stats, indent=2))
    return EXIT_OK


def _disk_bytes(location: str) -> int | None:
    folder = Path(location)
    if not folder.is_dir():
        return None  # a server: its disk is not ours to measure
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
