"""Deterministic screen for lessons that carry planted instructions (memory poisoning).

It runs before the LLM gate for the same reason the action pre-check runs before the
critic: it is free, and a small model cannot be trusted to notice an injection. It guards
every way a lesson gets into the store: the gate of a run and `pivotal lessons import`.

The patterns see a normalised copy of the text, never the text as written: a model reads
"ignore" spelt with a Cyrillic o, split by a zero-width space or set in mathematical bold as
"ignore", so the screen must too. The stored lesson keeps its own characters.
"""

import re
import unicodedata
from functools import cache

MAX_LESSON_CHARS = 600
"""Situation and text together: a lesson is one or two sentences, and every recall puts it in a prompt."""

_PATTERNS = [
    (
        r"\b(ignore|disregard|forget|override|bypass)\b.{0,40}"
        r"\b(instructions?|rules?|prompts?|guardrails?|critic|reviewers?|checks?)\b",
        "tells the agent to drop its instructions",
    ),
    (r"\bsystem\s*(prompt|message)\b|^\s*system\s*:|<\s*/?\s*system\s*>|\[\s*system\s*\]", "poses as a system prompt"),
    (
        r"\byou are now\b|\bnew (instructions|rules|role)\b|\bfrom now on\b|\b(act|behave) as (an? )?(admin|root)\b",
        "tries to change the agent's role",
    ),
    (
        r"\bremember\s*:|\bnote to (the )?(agent|critic|assistant|ai|model|gate)\b"
        r"|\b(always|never)\s+(\w+\s+){0,2}?(approve|trust|execute|run|obey|follow|comply|call|use|invoke|delete"
        r"|remove|drop|wipe|erase|destroy|disable|grant|send|transfer)\b"
        r"|\bnever (reject|refuse|question|check|verify|ask|review)\b"
        r"|\b(approve|allow|accept|execute) (all|every|any)\b",
        "tries to plant a standing order",
    ),
    (r"\b(api[_ -]?key|password|secret|token|credential)s?\b", "mentions secrets"),
    (r"\b(exfiltrate|send .{0,30} to http|curl |wget )", "asks to send data out"),
    (
        r"```|<\s*/?\s*(instructions?|prompt)\s*>|<\|[a-z_]+\|>|\[/?inst\]|^\s*#+\s*(instruction|system)",
        "carries markup meant for a prompt",
    ),
]
_COMPILED = [(re.compile(pattern, re.IGNORECASE | re.MULTILINE), why) for pattern, why in _PATTERNS]
_DROPPED = {"Cf", "Mn", "Me", "Cc"}
"""Format characters (zero-width, bidi controls, soft hyphen), combining marks and control
characters: invisible, or nothing a reader takes for a letter; line breaks are kept apart."""


def screen(text: str) -> str | None:
    """Why this lesson text must not be stored, or None when nothing suspicious was found."""
    if len(text) > MAX_LESSON_CHARS:
        return f"longer than {MAX_LESSON_CHARS} characters"
    seen = normalise(text)
    for pattern, why in _COMPILED:
        if pattern.search(seen):
            return why
    return None


def screen_lesson(situation: str, text: str) -> str | None:
    """One lesson as every way in screens it: situation and text together, as recall shows them."""
    return screen(f"{situation}\n{text}")


def normalise(text: str) -> str:
    """The text as a reader sees it: compatibility forms folded (NFKC: fullwidth, math letters,
    ligatures), invisible characters and accents dropped, look-alike letters mapped to Latin,
    runs of spaces made one.
    """
    folded = unicodedata.normalize("NFKD", unicodedata.normalize("NFKC", text))
    visible = "".join(ch for ch in folded if ch in "\n\t " or unicodedata.category(ch) not in _DROPPED)
    latin = visible.translate(_to_latin())
    return "\n".join(" ".join(line.split()) for line in latin.splitlines())


@cache
def _to_latin() -> dict[int, str]:
    """Non-ASCII letters that look like ASCII ones, from Unicode's confusables list.

    `confusable-homoglyphs` ships that list (tens of thousands of entries, kept in step with
    Unicode releases) as plain data with no dependencies: a hand-written table would cover the
    dozen Cyrillic letters everyone thinks of and miss Greek, Armenian, Cherokee, Latin
    small capitals and the rest. Loaded on first use (~40 ms), not when the graph is built.
    """
    from confusable_homoglyphs.confusables import confusables_data

    table = {}
    for char, homoglyphs in confusables_data.items():
        latin = next((h["c"] for h in homoglyphs if h["c"].isascii() and h["c"].isalnum()), None)
        if len(char) == 1 and not char.isascii() and latin:
            table[ord(char)] = _case_of(char, latin)
    table.update({ord(char): latin for char, latin in _MISSING.items()})
    return table


def _case_of(char: str, latin: str) -> str:
    """Unicode's prototype for every capital I look-alike is "l" (it is made for comparing
    skeletons, not for reading): a capital keeps reading as the capital I it shows.
    """
    return "I" if latin == "l" and char.isupper() else latin


_MISSING = {"к": "k", "κ": "k", "т": "t", "τ": "t", "м": "m", "н": "h", "в": "b", "г": "r"}
"""Lower-case Cyrillic and Greek letters that Unicode's list leaves out because they look like
Latin ones only in some fonts (small capitals, italics): enough for a model to read them so."""
