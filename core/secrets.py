"""Keep secrets out of state, checkpoints, the store, logs and results, whoever put them in the
text (a provider's error, a tool, an environment's greeting).

Two nets: the values of this process's own secret variables (whatever their shape), and the
shapes common credentials have, so a key the process never held (an AWS key a tool prints, a
password in a database URL) is caught too.
"""

import copy
import dataclasses
import os
import re
from collections.abc import MutableMapping
from functools import lru_cache
from typing import TYPE_CHECKING, Any, TypeGuard, TypeVar

from pydantic import BaseModel

from pivotal.core.errors import PivotalError, shown

if TYPE_CHECKING:  # LangGraph's serializers load where a checkpointer is used
    from langgraph.checkpoint.serde.base import SerializerProtocol
    from langgraph.types import Send

MARK = "[redacted]"
_SECRET_NAME = re.compile(r"KEY|SECRET|TOKEN|PASSW|PASSPHRASE|CREDENTIAL|PRIVATE|COOKIE", re.IGNORECASE)
"""A variable is a secret when its name holds one of these anywhere (`AWS_SECRET_ACCESS_KEY`,
`MY_SERVICE_KEY`, `GITHUB_TOKEN_RO`, `DB_PASSWD`), not only as a suffix: a name that merely
contains one (`KEYBOARD`) costs nothing but a blanked value."""
MIN_SECRET_CHARS = 8
"""Shorter values (e.g. "test") would blank out ordinary words."""

# One alternative per credential shape. An alternative whose match carries context to keep (a
# URL's user and host, an assignment's name) puts the secret in its only capturing group; every
# other group is non-capturing, so `lastgroup` names the part to blank. Each alternative starts
# at a literal (a prefix, `://`, a keyword), never at a free run of characters: the scan stays
# linear on long, hostile tool output.
_SHAPES = re.compile(
    r"""
    (?P<openai>\bsk-(?:ant-|proj-)?[A-Za-z0-9_\-]{16,})
  | (?P<bearer>\bBearer\s+[A-Za-z0-9._\-+/=]{16,})
  | (?P<aws_id>\b(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AIPA|ANPA|ANVA|AROA|APKA)[A-Z0-9]{16}\b)
  | (?P<github>\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,}))
  | (?P<slack>\bxox[abposr]-[A-Za-z0-9\-]{10,})
  | (?P<google>\bAIza[A-Za-z0-9_\-]{35})
  | (?P<jwt>\beyJ[A-Za-z0-9_\-]{5,}\.eyJ[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]*)
  | (?P<pem>-----BEGIN[A-Z0-9 ]*PRIVATE\ KEY-----(?:(?!-----END)[\s\S])*(?:-----END[A-Z0-9 ]*PRIVATE\ KEY-----)?)
  | (?<=://)[^\s:/@]+:(?P<url_password>[^\s/@]+)(?=@)
  | (?i:password|passwd|secret|token|api[_\-]?key|access[_\-]?key|secret[_\-]?key|private[_\-]?key)
        ["']?[ \t]*[=:][ \t]*["']?(?P<assigned>[^\s"'&,;]{4,})
    """,
    re.VERBOSE,
)


def secret_values() -> list[str]:
    """Values of every variable named like a secret; read each time, so a key set later is covered.
    A number or a boolean is no secret (`TOKENIZERS_PARALLELISM=false`, `MAX_TOKENS=100000000`).

    Every text entering the state asks, so the answer is kept per environment: the key is the
    environment's raw items as a tuple (a C-level copy, ~1 µs), the scan of names runs only when
    a variable was set, changed or removed.
    """
    raw = getattr(os.environ, "_data", None)  # POSIX: the bytes behind os.environ, no decoding
    return list(_secret_values(tuple(raw.items()) if isinstance(raw, dict) else tuple(os.environ.items())))


@lru_cache(maxsize=4)
def _secret_values(_environment: tuple[tuple[Any, Any], ...]) -> list[str]:
    return sorted(
        {
            value
            for name, value in os.environ.items()
            if len(value) >= MIN_SECRET_CHARS and not value.isdigit() and _SECRET_NAME.search(name)
        },
        key=len,
        reverse=True,
    )


@lru_cache(maxsize=16)
def _values_pattern(values: tuple[str, ...]) -> re.Pattern[str]:
    """One compiled pattern for the secret values, longest first (so a value holding another is
    blanked whole), built once per set of values: every text entering the state passes it.
    """
    return re.compile("|".join(re.escape(value) for value in values))


_LITERALS = (
    "sk-", "Bearer", "xox", "AIza", "eyJ", "-----BEGIN", "://", "github_pat_",
    "ghp_", "gho_", "ghu_", "ghs_", "ghr_",
    "AKIA", "ASIA", "ABIA", "ACCA", "AGPA", "AIDA", "AIPA", "ANPA", "ANVA", "AROA", "APKA",
)  # fmt: skip
_KEYWORDS = ("passw", "secret", "token", "key")
"""Each alternative of _SHAPES needs one of these (the keywords in any case): text holding none
is left as it is without the regex, which reads ~3 MB/s (a run's results, every observation)."""


def redact(text: str, values: list[str] | None = None) -> str:
    """`text` with secrets blanked: the values of this process's secret variables, then the shapes."""
    values = secret_values() if values is None else values
    if any(value in text for value in values):  # substring search in C: most texts hold none
        text = _values_pattern(tuple(values)).sub(MARK, text)
    return _SHAPES.sub(_blank, text) if _may_hold_shape(text) else text


def _may_hold_shape(text: str) -> bool:
    """Outside ASCII, the regex's case-blind match knows letters `lower()` does not (ſ, K): it always runs."""
    if not text.isascii() or any(literal in text for literal in _LITERALS):
        return True
    lower = text.lower()
    return any(keyword in lower for keyword in _KEYWORDS)


def _blank(match: re.Match[str]) -> str:
    """The match with only its secret part replaced: a URL keeps its user and host, an
    assignment its name, so the text still says what was there.
    """
    secret = match.lastgroup or 0
    whole = match.group(0)
    start, end = match.start(secret) - match.start(), match.end(secret) - match.start()
    return whole[:start] + MARK + whole[end:]


def redact_tree(value: object, values: list[str] | None = None) -> Any:
    """Every string inside dicts, lists, tuples, pydantic models, dataclasses (LangGraph's
    `Interrupt`, `Command`), LangGraph's `Send` and exceptions, redacted; other values unchanged.

    What holds no secret comes back as the same object (most of what passes holds none): nothing
    is copied then, and a caller can tell by `is`. A model is copied, not validated again:
    "[redacted]" may be longer than a field allows.
    """
    if value is None or type(value) in _ATOMS:
        return value
    return _tree(value, tuple(secret_values() if values is None else values))


_ATOMS = frozenset((bool, int, float, bytes))
"""Values that never hold text: most leaves of a checkpoint (versions, counters, flags)."""


def _tree(value: object, values: tuple[str, ...]) -> Any:
    """`redact_tree` with the secret values read once: a copy is made only along a changed path."""
    return _walker(values).walk(value)


class _Walker:
    """One set of secret values' walk, its texts remembered. A checkpoint holds the whole state and
    every write walks it again (~1,800 values a gridworld step): the common values (a text, a number,
    a flag, a dict, a list) are told by their exact type, and a text asks one dict of this set's
    texts, where a cache keyed by (text, values) hashed the values at every text.
    """

    def __init__(self, values: tuple[str, ...]) -> None:
        self.values = values
        self.texts: dict[str, str | None] = {}
        """Each text up to MEMO_CHARS long, and its redacted form (None: it is clean)."""

    def text(self, value: str) -> str | None:
        """`value` redacted, or None when it holds no secret. One lookup, never a test and then a
        read: another thread (a log line, a sync saver) may empty the memory in between.
        """
        known = self.texts.get(value, _UNSEEN)
        if known is not _UNSEEN:
            return known  # type: ignore[return-value]
        clean = redact(value, list(self.values))
        found = None if clean == value else clean
        if len(value) <= MEMO_CHARS:
            if len(self.texts) >= MEMO_TEXTS:  # not kept alive: a long batch's texts come and go
                self.texts.clear()
            self.texts[value] = found
        return found

    def walk(self, value: object) -> Any:
        """`value` redacted; the same object when it holds no secret."""
        kind = type(value)
        if kind is str:
            clean = self.text(value)  # type: ignore[arg-type]
            return value if clean is None else clean
        if value is None or kind in _ATOMS:
            return value
        if kind is dict:
            return self.mapping(value)  # type: ignore[arg-type]
        if kind is list or kind is tuple:
            return self.sequence(value)  # type: ignore[arg-type]
        return self.other(value)

    def mapping(self, value: dict[Any, Any]) -> dict[Any, Any]:
        changed: dict[Any, Any] | None = None
        walk = self.walk
        for key, item in value.items():
            clean = walk(item)
            if clean is not item:
                changed = dict(value) if changed is None else changed
                changed[key] = clean
        return value if changed is None else changed

    def sequence(self, value: list[Any] | tuple[Any, ...]) -> Any:
        changed: list[Any] | None = None
        walk = self.walk
        for index, item in enumerate(value):
            clean = walk(item)
            if clean is not item:
                changed = list(value) if changed is None else changed
                changed[index] = clean
        return value if changed is None else type(value)(changed)

    def other(self, value: object) -> Any:
        """What is neither a plain text, dict, list, tuple nor atom: subclasses of those, exceptions,
        pydantic models, dataclasses, LangGraph's `Send`; anything else is left as it is.
        """
        values = self.values
        if isinstance(value, str):
            clean = self.text(value)
            return value if clean is None else clean
        if isinstance(value, dict):
            return self.mapping(value)
        if isinstance(value, BaseException):
            return _redacted_exception(value, values, frozenset())
        if isinstance(value, BaseModel):
            fields = {name: getattr(value, name) for name in type(value).model_fields}
            update = {name: clean for name, item in fields.items() if (clean := self.walk(item)) is not item}
            return value.model_copy(update=update) if update else value
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return _redacted_dataclass(value, values)
        if _is_send(value):
            arg = self.walk(value.arg)
            if arg is value.arg:
                return value
            sent = copy.copy(value)
            sent.arg = arg
            return sent
        return value


_UNSEEN = object()


@lru_cache(maxsize=16)
def _walker(values: tuple[str, ...]) -> _Walker:
    return _Walker(values)


def _is_send(value: object) -> TypeGuard["Send"]:
    """LangGraph's `Send` (a tool call's arguments ride in one to the tool node), told by name:
    importing langgraph.types here would cost every command ~2.7 s.
    """
    kind = type(value)
    return kind.__name__ == "Send" and kind.__module__ == "langgraph.types"


MEMO_CHARS = 2000
"""Texts up to this long are redacted once per set of secret values and remembered: a checkpoint
holds the whole state, so each write passes the same texts as the write before it (the goal, the
trajectory so far); a longer one (an observation) is redacted each time, and not kept alive."""
MEMO_TEXTS = 8192
"""Texts remembered per set of secret values; the memory is emptied when it is full."""


def _redacted_dataclass(value: Any, values: tuple[str, ...]) -> Any:
    """A copy with the changed fields set in place of `replace`: a frozen one, or one whose fields
    are not all `__init__` arguments, is copied alike.
    """
    fields = [f.name for f in dataclasses.fields(value)]
    changed = {name: _tree(getattr(value, name), values) for name in fields}
    changed = {name: item for name, item in changed.items() if item is not getattr(value, name)}
    if not changed:
        return value
    clean = copy.copy(value)
    for name, item in changed.items():
        object.__setattr__(clean, name, item)
    return clean


def _redacted_exception(error: BaseException, values: tuple[str, ...], seen: frozenset[int]) -> Any:
    """`error` of its own type, its arguments, attributes (notes among them) and chained causes
    redacted: LangGraph writes a failed task's exception as a pending write (`__error__`, serialised
    as its `repr`), and a tool's or a provider's error quotes what it was given, a key included. The
    caller's exception, raised on with its traceback, is not changed. One whose text still shows a
    secret (a `__str__` reading what it keeps elsewhere) becomes that text redacted, which is what
    LangGraph stores of an exception anyway, and reads back as one.
    """
    seen = seen | {id(error)}
    parts = (error.args, vars(error), error.__cause__, error.__context__)
    cleaned = (_tree(error.args, values), _tree(vars(error), values), *(_chained(e, values, seen) for e in parts[2:]))
    same = all(a is b for a, b in zip(cleaned, parts, strict=True))
    clean = error if same else _exception_like(error, *cleaned)
    written = _written(error if clean is None else clean)
    hidden = tuple(redact(text, list(values)) for text in written)
    return clean if clean is not None and hidden == written else hidden[0]


def _chained(link: BaseException | None, values: tuple[str, ...], seen: frozenset[int]) -> BaseException | None:
    """A cause or context, redacted in turn; a chain that loops back is cut there."""
    if link is None or id(link) in seen:
        return None
    clean = _redacted_exception(link, values, seen)
    return clean if isinstance(clean, BaseException) else RuntimeError(clean)


def _exception_like(
    error: BaseException,
    args: tuple[Any, ...],
    fields: dict[str, Any],
    cause: BaseException | None,
    context: BaseException | None,
) -> BaseException | None:
    """A new exception of `error`'s type made with `__new__` (its `__init__` may want other arguments
    than its `args`), or None when the type will not be made so.
    """
    kind = type(error)
    try:
        clean = kind.__new__(kind, *args)
        object.__setattr__(clean, "args", args)  # a frozen dataclass's own __setattr__ refuses
    except Exception:  # noqa: BLE001 — a type whose own __new__ wants other arguments
        return None
    vars(clean).update(fields)
    for name, item in (("__cause__", cause), ("__context__", context), ("__traceback__", error.__traceback__)):
        object.__setattr__(clean, name, item)
    object.__setattr__(clean, "__suppress_context__", error.__suppress_context__)
    return clean


def _written(error: BaseException) -> tuple[str, str]:
    """How an exception is written: its `repr` (LangGraph's serialiser) and its `str` (a log line)."""
    try:
        return repr(error), str(error)
    except Exception:  # noqa: BLE001 — a broken __repr__ shows its type only
        return type(error).__name__, type(error).__name__


class RedactingSerializer:
    """A checkpointer's serializer that blanks secrets before its own (`serde`) writes anything:
    LangGraph saves the caller's input, every node's writes, a person's `Command(resume=...)`, a
    failed task's exception and a parent graph's state as given, before any node of Pivotal's could
    blank them; every one of them passes `dumps_typed`. Reading is the wrapped serializer's: what was written reads back
    with its types intact, only a secret reads back as "[redacted]".
    """

    def __init__(self, serde: "SerializerProtocol") -> None:
        self.serde = serde

    def dumps_typed(self, obj: object) -> tuple[str, bytes]:
        return self.serde.dumps_typed(redact_tree(obj))

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        return self.serde.loads_typed(data)


Saver = TypeVar("Saver")


def redacting(checkpointer: Saver) -> Saver:
    """`checkpointer`, its serializer now blanking secrets before every write (checkpoints and
    pending writes alike); the same object, changed in place, so every graph using it is covered.
    Calling it again changes nothing. Needed only for a checkpointer Pivotal is not given: an app's
    own for `create_agent` with `PivotalCritic`, or a parent graph's with Pivotal as a node.
    Anything else (None, a path) is refused: handed back unchanged, it looked covered and was not.
    """
    from langgraph.checkpoint.base import BaseCheckpointSaver  # here: the redaction of logs needs no langgraph

    if not isinstance(checkpointer, BaseCheckpointSaver):
        raise PivotalError(
            f"checkpointer must be a LangGraph checkpointer (InMemorySaver(), a SqliteSaver, ...), not "
            f"{shown(checkpointer)}; pass the saver the graph is compiled with"
        )
    serde = getattr(checkpointer, "serde", None)
    if serde is not None and not isinstance(serde, RedactingSerializer):
        checkpointer.serde = RedactingSerializer(serde)
    return checkpointer


def redact_event(_logger: object, _method: str, event: MutableMapping[str, Any]) -> dict[str, Any]:
    """Structlog processor."""
    return redact_tree(event)
