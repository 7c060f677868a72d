"""The lesson record. Chroma's document + metadata hold it whole: no side files to drift."""

import hashlib
import time
from typing import Any, Literal

from pydantic import BaseModel, Field


class Lesson(BaseModel):
    kind: Literal["strategy", "guardrail", "skill"]
    situation: str
    text: str
    outcome: Literal["success", "failure"]
    family: str
    level: Literal["task", "step"] = "step"
    run_id: str = ""
    model: str = ""
    created_at: float = Field(default_factory=time.time)
    evidence: int = 1
    retrievals: int = 0
    successes: int = 0
    """Runs that succeeded after recalling this lesson."""
    utility: float = 0.5
    status: Literal["approved", "retired"] = "approved"

    @property
    def id(self) -> str:
        """Same kind, family and text → same id, so a repeated lesson merges instead of duplicating."""
        key = f"{self.kind}|{self.family}|{' '.join(self.text.lower().split())}"
        return hashlib.sha256(key.encode()).hexdigest()[:24]

    @property
    def document(self) -> str:
        """What gets embedded: the situation leads, since recall queries with the current observation."""
        return f"{self.situation}\n{self.text}"

    def metadata(self) -> dict[str, Any]:
        return self.model_dump()

    @classmethod
    def from_metadata(cls, metadata: dict[str, Any]) -> "Lesson":
        return cls.model_validate(metadata)
