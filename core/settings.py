"""Defaults that come from the environment or `.env`, so deployments need no code change.

Every value is checked when first read: a bad one is one line naming the variable, never a
run that quietly goes on without saving, or a pydantic dump.
"""

import os
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal

from dotenv import load_dotenv
from pydantic import AliasChoices, BeforeValidator, Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from pivotal.core.errors import PivotalError, first_problem

ENV_FILE = ".env"
"""In the current folder, for the settings and the provider keys alike."""


def _upper(value: object) -> Any:
    return value.upper() if isinstance(value, str) else value


LogLevel = Annotated[Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"], BeforeValidator(_upper)]


class Settings(BaseSettings):
    """Every `PIVOTAL_*` variable the project reads; `.env.example` lists them all."""

    model_config = SettingsConfigDict(
        env_prefix="PIVOTAL_",
        env_file=ENV_FILE,
        env_file_encoding="utf-8",  # a BOM is dropped by the parser; the locale's encoding is never guessed
        extra="ignore",
        str_strip_whitespace=True,
        allow_inf_nan=False,
        populate_by_name=True,  # Settings(checkpoint_path=...) still works beside its two variable names
    )

    model: str = Field("local", min_length=1)
    actor_model: str = ""
    critic_model: str = ""
    reflector_model: str = ""
    lesson_model: str = ""
    fallback_model: str = ""
    requests_per_second: float = Field(0.0, ge=0)
    """Client-side rate limit per hosted model (LangChain's InMemoryRateLimiter); 0 = none."""
    store_path: str = Field(".pivotal/lessons", min_length=1)
    """Empty would put the store in whatever folder the process happens to start in."""
    store_url: str = ""
    """Chroma server URL (e.g. http://127.0.0.1:8000) for stores shared by several processes."""
    max_lessons: int = Field(1000, gt=0)
    checkpoint_path: str = Field(
        ".pivotal/checkpoints.sqlite",
        min_length=1,
        validation_alias=AliasChoices("PIVOTAL_CHECKPOINT_PATH", "PIVOTAL_CHECKPOINT_URL"),
    )
    """A SQLite file, or a `postgresql://` URL (then PIVOTAL_CHECKPOINT_URL reads better; PATH wins
    when both are set). Empty would silently mean a throw-away database: runs that cannot be resumed."""
    checkpoint_sync: Literal["normal", "full"] = "normal"
    """SQLite checkpoints: "normal" survives a killed process (the guarantee resume relies on) at a
    fraction of the fsyncs; "full" also survives a power loss, at one fsync per commit."""
    local_threads: int = Field(default_factory=lambda: min(os.cpu_count() or 1, 4), gt=0)
    """CPU threads for the embedded model: the machine's cores, up to 4 (the README's first run took
    126 s with 1 thread and 77 s with 2 on 2 idle cores); 1 where several processes share the cores."""
    request_timeout: float = Field(60.0, gt=0)
    """Seconds a hosted-provider request may take before the SDK gives up (and retries)."""
    max_retries: int = Field(2, ge=0)
    """Retries the provider SDK makes itself (429 with retry-after, 5xx, timeouts) before a role falls back."""
    step_timeout: float = Field(60.0, gt=0)
    """Seconds one environment call (reset, step, restore) may take before its task stops with a
    retryable error; a hung tool then holds one thread of the environments' own pool, not the batch."""
    call_deadline: float = Field(120.0, gt=0)
    """Seconds one model call may take in all (connect, first byte, a reply trickled byte by byte, the
    SDK's own retries); past it the role treats the provider as down. With the defaults a provider
    that never answers costs a run at most this long: two requests of `request_timeout` fit, a third
    does not, and the run asks that model nothing more once a call timed out (core/models/roles.py)."""
    lease_s: float = Field(30.0, gt=0)
    """Seconds a process owns a thread it stopped renewing (graphs/lease.py): it renews every third of
    it while it runs, so another process takes over a run whose machine was lost after this long."""
    log_level: LogLevel = "WARNING"
    log_file: str = Field(".pivotal/pivotal.log", min_length=1)
    """Where the command line puts what libraries log themselves (a Postgres pool reconnecting, a
    driver's warnings), so the terminal keeps Pivotal's own one-line messages; made at the first record."""
    cache_dir: str = Field(default_factory=lambda: _user_cache("pivotal"), min_length=1)
    """Files Pivotal makes once per machine and reuses: the int8 embedding model (~23 MB)."""


def _user_cache(name: str) -> str:
    """The XDG cache folder, as pip and Hugging Face use it."""
    return str(Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / name)


@lru_cache(maxsize=1)
def settings() -> Settings:
    try:
        return Settings()
    except ValidationError as exc:
        raise PivotalError(_bad_setting(exc)) from None
    except UnicodeDecodeError as exc:
        raise PivotalError(_not_utf8(exc)) from None


def load_env_file() -> None:
    """Provider keys (OPENAI_API_KEY, ...) come from the same `.env` as the settings; the real
    environment wins.
    """
    try:
        load_dotenv(ENV_FILE, override=False, encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise PivotalError(_not_utf8(exc)) from None


_ALIASES = {
    alias: (" or ".join(map(str, field.validation_alias.choices)), name)
    for name, field in Settings.model_fields.items()
    if isinstance(field.validation_alias, AliasChoices)
    for alias in field.validation_alias.choices
}
"""A field read under several variable names reports one of them as the error's place: name them all."""


def _bad_setting(exc: ValidationError) -> str:
    field, problem, given = first_problem(exc)
    name, field = _ALIASES.get(field, (f"PIVOTAL_{field.upper()}", field))
    default = Settings.model_fields[field].default
    if isinstance(given, str) and not given.strip():
        return f"{name} is set but empty; give it a value, or remove it to use the default ({default!r})"
    return (
        f"{name}={given!r} is not valid: {problem}; fix it in the environment or {ENV_FILE}, "
        f"or remove it to use the default ({default!r})"
    )


def _not_utf8(exc: UnicodeDecodeError) -> str:
    line = exc.object[: exc.start].count(b"\n") + 1
    return f"{Path(ENV_FILE).resolve()} is not UTF-8 text (line {line}); save it as UTF-8"
