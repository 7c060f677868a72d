"""Each test releases the stores it opened, so store-folder locks never leak between tests."""

import os
import shutil
import subprocess
import sys
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from filelock import FileLock

from pivotal.memory.policy.registry import close_stores

ROOT = Path(__file__).resolve().parents[1]

# Where the environment sets PYTHONDONTWRITEBYTECODE, each of the many processes the tests start (the
# command line, servers, benchmarks, the xdist workers) compiles the project's modules and pytest's
# rewritten plugins again: 2.1 s of CPU to import `pivotal.cli.main` with bytecode written, 5 s without.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False


POSTGRES_SERVER = "postgresql://postgres@127.0.0.1:5432"


@pytest.fixture(scope="module")
def postgres(request: pytest.FixtureRequest) -> Iterator[str]:
    """A database of the test module's own on the local server, dropped at the end; skipped in one
    line where the postgres extra or the server is missing.
    """
    psycopg = pytest.importorskip("psycopg", reason="no postgres extra: pip install 'pivotal[postgres]'")
    name = f"pivotal_{request.module.__name__.rsplit('.', 1)[-1]}_{uuid.uuid4().hex[:12]}"
    try:
        with psycopg.connect(f"{POSTGRES_SERVER}/postgres", autocommit=True, connect_timeout=3) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
    except Exception as exc:  # noqa: BLE001 — whatever stops us reaching it, the reason is the skip
        pytest.skip(f"no Postgres at 127.0.0.1:5432 ({type(exc).__name__})")
    yield f"{POSTGRES_SERVER}/{name}"
    with psycopg.connect(f"{POSTGRES_SERVER}/postgres", autocommit=True, connect_timeout=3) as admin:
        admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


SCRATCH = (".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".pivotal", ".langgraph_api", ".*_cache")


@pytest.fixture(autouse=True)
def _release_stores():
    yield
    close_stores()


LONGEST_FIRST = [
    "test_chaos", "test_resume_anywhere", "test_ray_batch", "test_types", "test_exits", "test_input_validation",
    "test_docs", "test_promises", "test_promises_http", "test_fork_preview", "test_batch", "test_bench",
    "test_store_server", "test_side_effects", "test_replay_thread", "test_leases", "test_batch_faults",
    "test_postgres_checkpoints", "test_embeddings", "test_double_text", "test_model_conformance",
]  # fmt: skip
"""The files that took longest in a full run (`--durations`, 2026-12-04), longest first. `--dist loadfile`
hands files to the workers in collection order: in alphabetical order `test_types` (two mypy runs) started
near the end and one worker finished alone; started first, the long files leave the short ones to even out
the end. A file not named here keeps its place after them."""


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The embedded model takes seconds per call, so `local_llm` implies `slow` (docs/contributing.md).
    The longest files run first (`LONGEST_FIRST`).
    """
    for item in items:
        if item.get_closest_marker("local_llm"):
            item.add_marker(pytest.mark.slow)
    rank = {name: place for place, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.stem, len(rank)))  # stable: the rest keep their order


def pytest_configure(config: pytest.Config) -> None:
    """LangChain's conformance suite times model construction with pytest-benchmark; here speed is
    measured in benchmarks/, so the timed test runs once, untimed, and prints no table.

    Under pytest-xdist (the README's test command runs `-n 4`) the workers share the cores: the
    embedded model's default of one llama.cpp thread per core would put two threads of each worker
    on the same two cores, where its speed collapses (SmolLM2 with 2 threads: 41–57 tokens/s alone,
    1–5 with another process on a core), so each worker and the processes it starts get their share
    of the cores, unless the user set `PIVOTAL_LOCAL_THREADS` themselves.
    """
    if hasattr(config.option, "benchmark_disable"):
        config.option.benchmark_disable = True
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if workers and "PIVOTAL_LOCAL_THREADS" not in os.environ:
        os.environ["PIVOTAL_LOCAL_THREADS"] = str(max(1, (os.cpu_count() or 1) // int(workers)))


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The package as users get it, built once per session from a copy of this checkout: setuptools
    builds in the source's `build/`, and a file left there by an earlier build would ship again.
    Under pytest-xdist the workers share one build, in the session's folder above their own.
    """
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return _build_wheel(tmp_path_factory.mktemp("wheel"), tmp_path_factory)
    shared = tmp_path_factory.getbasetemp().parent / "wheel"
    with FileLock(f"{shared}.lock"):
        if not (shared / "done").is_file():
            shutil.rmtree(shared, ignore_errors=True)  # a worker that died mid-build left half of one
            shared.mkdir()
            (shared / "done").write_text(_build_wheel(shared, tmp_path_factory).name)
    return shared / (shared / "done").read_text()


def _build_wheel(out: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = tmp_path_factory.mktemp("source") / "pivotal"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*SCRATCH))
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (built,) = out.glob("pivotal-*.whl")
    return built


@pytest.fixture(scope="session")
def unpacked(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel's files laid out as in site-packages: tools that walk the file tree (import-linter,
    mypy) read `pivotal.graphs` here, since the editable install maps it from `graphs/`.
    """
    folder = tmp_path_factory.mktemp("site")
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(folder)
    return folder


@pytest.fixture
def desk(tmp_path, monkeypatch):
    """The support desk's world: a ledger of its side effects, and a scripted OpenAI-compatible
    server on 127.0.0.1 behind a real `ChatOpenAI` (set `server.responder` to script it).
    """
    from langchain_openai import ChatOpenAI

    from pivotal.testing.loopback_provider import loopback

    monkeypatch.setenv("SUPPORT_LEDGER", str(tmp_path / "ledger.jsonl"))
    with loopback() as server:
        model = ChatOpenAI(model="clerk", base_url=server.base_url_openai, api_key="local", max_retries=0)
        yield server, model, tmp_path / "ledger.jsonl"


@pytest.fixture
def recorded_desk(request, tmp_path, monkeypatch):
    """`desk` on a recording of its server's answers (tests/cassettes/<module>/<test>.yaml, committed):
    replayed with no server, so the test runs the desk through the real `ChatOpenAI` without a socket
    or the server's per-call cost. The loopback server and the test's responder answer only while
    recording (`PIVOTAL_RECORD_MODE=all`, after a prompt changes); on replay `responder` is ignored.
    For tests that read the desk's ledger and results, not the server's request log.
    """
    from types import SimpleNamespace

    from langchain_openai import ChatOpenAI

    from pivotal.testing.fixtures import cassette_path
    from pivotal.testing.loopback_provider import loopback
    from pivotal.testing.recorded import recorded

    monkeypatch.setenv("SUPPORT_LEDGER", str(tmp_path / "ledger.jsonl"))
    with recorded(cassette_path(request.node)) as recording:
        if recording.replaying:
            model = ChatOpenAI(model="clerk", base_url="http://127.0.0.1:9/v1", api_key="local", max_retries=0)
            yield SimpleNamespace(responder=None), model, tmp_path / "ledger.jsonl"
            return
        with loopback() as server:
            model = ChatOpenAI(model="clerk", base_url=server.base_url_openai, api_key="local", max_retries=0)
            yield server, model, tmp_path / "ledger.jsonl"
