"""Prompt text lives in the .md files beside this module; code only fills their {fields}.

Layout rule (it is what keeps memory poisoning out): every instruction is in the system
message; everything that came from outside — task, observations, tool output, recalled
lessons — goes in the human message inside <tags> and is declared data.
"""

import re
from functools import cache
from importlib.resources import files

_TAG = re.compile(r"<(/?)([A-Za-z_][\w-]*)")


@cache
def template(name: str) -> str:
    return (files(__package__) / f"{name}.md").read_text(encoding="utf-8")


def system(name: str) -> str:
    """A system prompt: trusted text only, with the shared rule that everything in <tags> is data."""
    return template(name).format(data_rule=template("data_rule"))


def render(name: str, **fields: str) -> str:
    """Fill a template; a field's own tags are defused, so data cannot close its tag and pose as prompt."""
    return template(name).format(**{key: defuse(value) for key, value in fields.items()})


def defuse(value: str) -> str:
    """`</observation>` in a tool's output becomes `‹/observation>`: readable, but no longer a tag."""
    return _TAG.sub(r"‹\1\2", value) if isinstance(value, str) else value
