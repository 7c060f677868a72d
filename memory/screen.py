"""Deterministic screen for lessons that carry planted instructions (memory poisoning).

It runs before the LLM gate for the same reason the action pre-check runs before the
critic: it is free, and a small model cannot be trusted to notice an injection.
"""

import re

_PATTERNS = [
    (
        r"\b(ignore|disregard|forget)\b.{0,40}\b(instructions?|rules?|prompts?|guardrails?)\b",
        "tells the agent to drop its instructions",
    ),
    (r"\bsystem\s*(prompt|message)\b|^\s*system\s*:|<\s*/?\s*system\s*>|\[\s*system\s*\]", "poses as a system prompt"),
    (r"\byou are now\b|\bnew (instructions|rules|role)\b|\bfrom now on\b", "tries to change the agent's role"),
    (
        r"\bremember\s*:|\balways (approve|trust|execute|run|obey|follow|comply)\b|\bnever (reject|refuse|question)\b",
        "tries to plant a standing order",
    ),
    (r"\b(api[_ -]?key|password|secret|token|credential)s?\b", "mentions secrets"),
    (r"\b(exfiltrate|send .{0,30} to http|curl |wget )", "asks to send data out"),
    (r"```|<\s*/?\s*(instructions?|prompt)\s*>", "carries markup meant for a prompt"),
]
_COMPILED = [(re.compile(pattern, re.IGNORECASE | re.MULTILINE), why) for pattern, why in _PATTERNS]
MAX_LESSON_CHARS = 600


def screen(text: str) -> str | None:
    """Why this lesson text must not be stored, or None when nothing suspicious was found."""
    if len(text) > MAX_LESSON_CHARS:
        return f"longer than {MAX_LESSON_CHARS} characters"
    for pattern, why in _COMPILED:
        if pattern.search(text):
            return why
    return None
