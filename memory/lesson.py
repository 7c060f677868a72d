"""The lesson record. Chroma's document + metadata hold it whole: no side files to drift."""

import hashlib
import time
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from pivotal.core.schemas import LessonKind, LessonLevel, Outcome
from pivotal.core.state import Candidate, Recalled

LessonStatus = Literal["approved", "retired", "pending"]
"""pending: imported, not recalled until a run's own lesson confirms it (memory/transfer.py)."""
Origin = Literal["run", "import", "person", "carried"]

DEFAULT_OWNER = "pivotal/lessons"
"""The owner of a run whose Context keeps the default `lessons_namespace`, and of every lesson
stored before lessons had owners."""
SHARED = ".shared"
"""The tier every owner recalls. A dot is never in a namespace label, so no owner is spelt so."""

RECENT_RUNS = 32
"""Run ids a lesson remembers, so a resumed run that writes or scores it again counts once."""


class Lesson(BaseModel):
    id: str = ""
    """Chroma id; fixed at creation (a hash of kind, family and first text), kept through merges."""
    kind: LessonKind
    situation: str
    text: str
    outcome: Outcome
    family: str
    level: LessonLevel = "step"
    verified: bool = True
    """False when it came from a run whose success the agent declared and nothing checked."""
    run_id: str = ""
    model: str = ""
    created_at: float = Field(default_factory=time.time, validate_default=True)
    evidence: int = 1
    """Distinct runs that produced this lesson (or a near-duplicate merged into it)."""
    retrievals: int = 0
    """Runs that recalled it."""
    successes: int = 0
    """Of those runs, the ones that ended in success."""
    step_retrievals: int = 0
    step_approvals: int = 0
    """Steps it was shown for whose action the critic approved."""
    utility: float = 0.5
    status: LessonStatus = "approved"
    retired_reason: str = ""
    source_runs: str = ""
    """Recent runs that contributed evidence (space separated, newest last)."""
    scored_runs: str = ""
    """Recent runs whose outcome is already counted in retrievals/successes."""
    owner: str = DEFAULT_OWNER
    """Whose lesson it is: `"/".join(Context.lessons_namespace)` of the run that made it (see
    `owner_of`), or SHARED. Recall, dedup and `pivotal lessons` see the caller's own and SHARED."""
    origin: Origin = "run"
    source: str = ""
    """Where it came from when not from a run: the import file, or the person."""
    digest: str = ""
    """Hash of what it was distilled from (the run's trajectory, the import row)."""
    ledgered: bool = True
    """Its counts are folded from ledger records (memory/ledger.py). False for a lesson stored
    before the ledger, until its counts are carried into one."""
    instances: str = ""
    """For task lessons: the environment instances (mazes, games) that taught it, space separated;
    empty where the environment names none. Taught by one instance only, it is recalled only there:
    a path through one maze misleads in the next. The same text taught by a second instance makes
    it general. Step lessons stay general: recall matches them by situation."""

    @field_validator("created_at")
    @classmethod
    def _to_milliseconds(cls, value: float) -> float:
        """Chroma keeps ~15 significant digits of a float: a full-precision time read back from
        disk would differ from the copy the store keeps in memory (and an imported one alike).
        """
        return round(value, 3)

    @model_validator(mode="after")
    def _fix_id(self) -> "Lesson":
        if not self.id:
            self.id = lesson_id(self.kind, self.family, self.text, self.owner)
        if not self.source_runs and self.run_id:
            self.source_runs = self.run_id
        return self

    @property
    def document(self) -> str:
        """What gets embedded: the situation leads, since recall queries with the current observation."""
        return f"{self.situation}\n{self.text}"

    @property
    def scope(self) -> str:
        """The one instance it is bound to, or "" when it applies across the family."""
        taught = set(self.instances.split())
        return taught.pop() if len(taught) == 1 else ""

    def applies_to(self, instance: str) -> bool:
        return not self.scope or self.scope == instance

    def metadata(self) -> dict[str, Any]:
        """Stored with `scope` beside the fields, so Chroma can filter on it when recall must."""
        return {**self.model_dump(exclude={"id"}), "scope": self.scope}

    def visible_to(self, owner: str) -> bool:
        return self.owner in (owner, SHARED)

    @classmethod
    def from_candidate(
        cls,
        candidate: Candidate,
        *,
        family: str,
        run_id: str,
        model: str,
        instance: str = "",
        owner: str = DEFAULT_OWNER,
        digest: str = "",
    ) -> "Lesson":
        """A distiller's or reflector's draft (kind, situation, text, outcome, level) with its provenance."""
        return cls(
            verified=candidate.get("verified", True),
            kind=candidate["kind"],
            situation=candidate["situation"],
            text=candidate["text"],
            outcome=candidate["outcome"],
            level=candidate.get("level", "step"),
            family=family,
            run_id=run_id,
            model=model,
            owner=owner,
            digest=digest,
            # a whole run's recipe ("down, down, right") holds in the maze that taught it; a step's
            # lesson is recalled by the situation it names, which reads alike in every maze
            instances=instance if candidate.get("level", "step") == "task" else "",
        )

    @classmethod
    def from_record(cls, lesson_id: str, metadata: dict[str, Any]) -> "Lesson":
        metadata.pop("scope", None)  # derived from `instances`
        metadata.setdefault("ledgered", False)  # stored before the ledger: its counts are its own
        return cls.model_validate({**metadata, "id": lesson_id})

    def merged_with(self, other: "Lesson", *, keep_text: bool = False) -> "Lesson":
        """One more piece of evidence from `other`'s run; the more specific text wins."""
        if other.run_id and other.run_id in self.source_runs.split():
            return self  # the same run written twice (e.g. after a resume): no new evidence
        confirmed = (
            self.status == "pending" and other.origin == "run"
        )  # a run's gated lesson confirms an import: its text is the gated one
        replace = confirmed or (not keep_text and better_text(other.text, self.text))
        text, situation = (other.text, other.situation) if replace else (self.text, self.situation)
        return self.model_copy(
            update={
                "text": text,
                "situation": situation,
                "evidence": self.evidence + other.evidence,
                "status": "approved" if confirmed else self.status,
                "source_runs": _recent(self.source_runs, other.run_id),
                "instances": " ".join(
                    list(dict.fromkeys([*self.instances.split(), *other.instances.split()]))[-RECENT_RUNS:]
                ),
            }
        )

    def scored(self, run_id: str, *, success: bool, steps: int, approved_steps: int) -> "Lesson":
        """Count one run that recalled this lesson; a run already counted changes nothing."""
        if run_id in self.scored_runs.split():
            return self
        update: dict[str, Any] = {
            "retrievals": self.retrievals + 1,
            "successes": self.successes + int(success),
            "step_retrievals": self.step_retrievals + steps,
            "step_approvals": self.step_approvals + approved_steps,
            "scored_runs": _recent(self.scored_runs, run_id),
        }
        return self.model_copy(
            update={
                **update,
                "utility": utility(
                    **{k: update[k] for k in ("retrievals", "successes", "step_retrievals", "step_approvals")}
                ),
            }
        )


def line(kind: str, situation: str, text: str) -> str:
    """A lesson as one line of a prompt; the sim reads the `[guardrail]` marker back."""
    return f"[{kind}] when {situation}: {text}"


def lessons_block(recalled: list[Recalled]) -> str:
    """The recalled lessons as the prompts' <lessons> data block."""
    if not recalled:
        return ""
    return "\n".join(f"- {line(lesson['kind'], lesson['situation'], lesson['text'])}" for lesson in recalled)


def owner_of(namespace: list[str] | tuple[str, ...]) -> str:
    """A run's owner, from its Context's `lessons_namespace`: the same label a LangGraph store
    keeps its lessons under, so one app's lessons have one owner on either backend.
    """
    return "/".join(namespace)


def lesson_id(kind: str, family: str, text: str, owner: str = DEFAULT_OWNER) -> str:
    """The default owner's ids are those lessons had before owners, so old stores keep theirs."""
    key = f"{kind}|{family}|{' '.join(text.lower().split())}"
    if owner != DEFAULT_OWNER:
        key = f"{owner}|{key}"
    return hashlib.sha256(key.encode()).hexdigest()[:24]


def utility(*, retrievals: int, successes: int, step_retrievals: int, step_approvals: int) -> float:
    """Mean of two Laplace-smoothed rates: runs that succeeded after recalling the lesson, and
    steps it was shown for that the critic approved. A new lesson starts at 0.5 and needs
    several bad runs before it can fall below a floor.
    """
    run_rate = (successes + 1) / (retrievals + 2)
    step_rate = (step_approvals + 1) / (step_retrievals + 2)
    return round((run_rate + step_rate) / 2, 4)


def better_text(candidate: str, current: str) -> bool:
    """The more specific text (more distinct words) wins; a tie keeps the current one."""
    return len(set(candidate.lower().split())) > len(set(current.lower().split()))


def _recent(runs: str, run_id: str) -> str:
    ids = [r for r in runs.split() if r != run_id] + ([run_id] if run_id else [])
    return " ".join(ids[-RECENT_RUNS:])
