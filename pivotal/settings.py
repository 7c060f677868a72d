"""Defaults that come from the environment or `.env`, so deployments need no code change."""

from functools import lru_cache

from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Every `PIVOTAL_*` variable the project reads; `.env.example` lists them all."""

    model_config = SettingsConfigDict(env_prefix="PIVOTAL_", env_file=".env", extra="ignore")

    model: str = "local"
    actor_model: str = ""
    critic_model: str = ""
    reflector_model: str = ""
    lesson_model: str = ""
    fallback_model: str = ""
    requests_per_second: float = 0.0
    """Client-side rate limit per hosted model (LangChain's InMemoryRateLimiter); 0 = none."""
    store_path: str = ".pivotal/lessons"
    store_url: str = ""
    """Chroma server URL (e.g. http://127.0.0.1:8000) for stores shared by several processes."""
    max_lessons: int = 1000
    checkpoint_path: str = ".pivotal/checkpoints.sqlite"
    local_threads: int = 1
    request_timeout: float = 60.0
    """Seconds a hosted-provider request may take before the SDK gives up (and retries)."""
    max_retries: int = 2
    """Retries the provider SDK makes itself (429 with retry-after, 5xx, timeouts) before a role falls back."""
    log_level: str = "WARNING"


@lru_cache(maxsize=1)
def settings() -> Settings:
    return Settings()
