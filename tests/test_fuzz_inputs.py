"""Property-based checks of what reads outside input: a tasks file and PIVOTAL_* settings.

Whatever the bytes, the reader never raises past its one-line error, and every line is either a
task or reported with its number; a setting is either taken or refused in one line.
"""

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from pivotal.cli.batch import read_tasks
from pivotal.core.errors import PivotalError
from pivotal.core.settings import Settings, settings as cached_settings

LINE = st.one_of(
    st.text(max_size=200),
    st.binary(max_size=200).map(lambda b: b.decode("latin-1")),
    st.fixed_dictionaries(
        {"env": st.sampled_from(["gridworld", "frozenlake", "nope", ""]), "goal": st.text(max_size=50)},
        optional={"params": st.dictionaries(st.text(max_size=8), st.integers() | st.text(max_size=8), max_size=3)},
    ).map(lambda d: __import__("json").dumps(d)),
)


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(LINE, max_size=8), raw=st.binary(max_size=300))
def test_any_tasks_file_is_read_line_by_line_never_raised(tmp_path, lines, raw):
    path = tmp_path / "tasks.jsonl"
    path.write_bytes(
        "\n".join(line.replace("\n", " ").replace("\r", " ") for line in lines).encode("utf-8", "surrogatepass")
        + b"\n"
        + raw
    )
    good, bad = read_tasks(path)
    numbers = [number for number, _ in good] + [number for number, _ in bad]
    assert len(numbers) == len(set(numbers))
    with path.open(encoding="utf-8", errors="replace") as file:  # lines as any text reader splits them
        nonblank = {n for n, line in enumerate(file, start=1) if line.strip()}
    assert set(numbers) == nonblank
    assert all("\n" not in why for _, why in bad)


NUMERIC = ["PIVOTAL_REQUEST_TIMEOUT", "PIVOTAL_MAX_LESSONS", "PIVOTAL_MAX_RETRIES", "PIVOTAL_STEP_TIMEOUT",
           "PIVOTAL_CALL_DEADLINE", "PIVOTAL_LOCAL_THREADS", "PIVOTAL_REQUESTS_PER_SECOND"]  # fmt: skip


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(NUMERIC), value=st.text(max_size=30).filter(lambda v: "\x00" not in v))
def test_any_setting_value_is_taken_or_refused_in_one_line(monkeypatch, name, value):
    with monkeypatch.context() as patch:
        patch.setenv(name, value)
        cached_settings.cache_clear()
        try:
            loaded = cached_settings()
        except PivotalError as error:
            assert "\n" not in str(error) and name in str(error)
        else:
            assert isinstance(loaded, Settings)
            assert getattr(loaded, name.removeprefix("PIVOTAL_").lower()) >= 0
        finally:
            cached_settings.cache_clear()


BUILT_IN = ["gridworld", "frozenlake", "taxi", "configs", "minesweeper"]
PARAMS = st.dictionaries(
    st.sampled_from(["seed", "size", "sise", "map", "slippery", "rows", "mines", "walls", "Seed", ""])
    | st.text(max_size=8),
    st.integers(-5, 40) | st.booleans() | st.text(max_size=6) | st.floats(allow_nan=False),
    max_size=3,
)


@settings(max_examples=150, deadline=None)
@given(env=st.sampled_from(BUILT_IN), params=PARAMS)
def test_any_parameters_are_taken_as_declared_or_refused_in_one_line(env, params):
    """A key the environment does not declare was dropped without a word (`--param sise=4` ran the
    default grid): every key of an accepted task is one its `params` model names.
    """
    from pivotal.core.environments import make_environment
    from pivotal.core.environments.base import declared_params
    from pivotal.graphs.checks import check_task

    try:
        task = check_task({"env": env, "params": params})
    except PivotalError as error:
        assert "\n" not in str(error) and str(error).startswith(env)
    else:
        assert set(task.params) <= set(declared_params(make_environment(env)) or {})


@pytest.fixture(autouse=True)
def _no_env_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a developer's own .env must not decide these cases
