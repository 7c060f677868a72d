"""Prompt text lives in the .md files beside this module; code only fills their {fields}.

Layout rule (it is what keeps memory poisoning out): every instruction is in the system
message; everything that came from outside — task, observations, tool output, recalled
lessons — goes in the human message inside <tags> and is declared data.
"""

import re
from functools import cache
from importlib.resources import files

_NAME = r"[A-Za-z_][\w-]*"
_TAG = re.compile(rf"<(/?)({_NAME})")
_EMPTY_BLOCK = re.compile(rf"<({_NAME})>\s*</\1>\n?")
SECTION_CHARS = 24_000
"""The most one data block of a prompt may hold (head and tail kept), so no input makes a prompt
megabytes long: a goal is capped at 20,000 characters and observations at max_observation_chars
before they get here, but a lesson stored before its cap, or many long steps, are not. Also the
ceiling on max_observation_chars as a prompt shows it."""
CLIPPED = "\n…(clipped {cut} characters)…\n"
"""The mark where `clip` cut a prompt section."""
OBSERVATION_CLIPPED = "\n[... {cut} characters cut; {hint} ...]\n"
"""The mark where `clip` cut an observation: it says how to see more."""
SEE_MORE = "raise max_observation_chars to see more"


@cache
def template(name: str) -> str:
    return (files(__package__) / f"{name}.md").read_text(encoding="utf-8")


def system(name: str) -> str:
    """A system prompt: trusted text only, with the shared rule that everything in <tags> is data."""
    return template(name).format(data_rule=template("data_rule"))


def render(name: str, **fields: str) -> str:
    """Fill a template; a field's own tags are defused, so data cannot close its tag and pose as prompt.

    A block left empty is left out rather than shown as "(none)": the embedded model reads every
    prompt token at ~7 ms on 2 cores, and three empty blocks were ~30 tokens of each actor call.
    Only the template's own tags can match, since the data's are defused.
    """
    filled = template(name).format(**{key: defuse(clip(value)) for key, value in fields.items()})
    return _EMPTY_BLOCK.sub("", filled)


def clip(value: str, limit: int = SECTION_CHARS, *, hint: str = "") -> str:
    """`value`, or its head and tail with a mark saying how much of the middle was cut: nothing is
    cut silently, and what was cut never makes a prompt or a checkpoint grow past its bound.

    The mark counts within `limit`: a prompt section or a recalled lesson gets `CLIPPED`, its length
    measured; an observation gets `OBSERVATION_CLIPPED` with a `hint` saying how to see more, 80
    characters set aside for it and equal halves kept, as observations have always been cut.
    """
    if not isinstance(value, str) or len(value) <= limit:
        return value
    if hint:
        mark = OBSERVATION_CLIPPED
        keep = 2 * max(limit // 2 - 40, 1)
    else:
        mark = CLIPPED
        keep = max(limit - len(mark.format(cut=len(value))), 2)
    head, tail = value[: keep - keep // 2], value[len(value) - keep // 2 :]
    return head + mark.format(cut=len(value) - len(head) - len(tail), hint=hint) + tail


def defuse(value: str) -> str:
    """`</observation>` in a tool's output becomes `‹/observation>`: readable, but no longer a tag."""
    return _TAG.sub(r"‹\1\2", value) if isinstance(value, str) else value
