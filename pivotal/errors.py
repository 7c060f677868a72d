"""One exception type for bad input, so callers and the CLI can show one clear line."""

from pydantic import ValidationError


class PivotalError(ValueError):
    """Bad configuration or input: the message names the problem and the fix, in one line."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C would be: the same clean-up runs (tasks cancelled, checkpoints
    closed), no task records it as its own error, and the CLI can still tell the two apart.
    """


def first_problem(exc: ValidationError) -> tuple[str, str, object]:
    """(field, what is wrong, the value given) of a pydantic error: what a person needs for one
    line, without pydantic's multi-line dump and documentation URL.
    """
    error = exc.errors(include_url=False)[0]
    field = ".".join(str(part) for part in error["loc"])
    message = error["msg"]
    return field, message[:1].lower() + message[1:], error.get("input")


_CRYPTIC_MODEL_ERRORS = {
    "IndexError: list index out of range": "the model server sent an empty `choices` list, no answer",
}
"""SDK errors whose words do not say what happened: langchain-openai indexes the first choice."""


def describe_model_error(error: str) -> str:
    """A model call's error as the reason a run reports; the SDK's own words stay for searching."""
    meaning = _CRYPTIC_MODEL_ERRORS.get(error)
    return f"{meaning}: check its log and that it serves this model; the SDK said {error}" if meaning else error
