"""Prompt text lives in the .md files beside this module; code only fills their {fields}.

Layout rule (it is what keeps memory poisoning out): every instruction is in the system
message; everything that came from outside — task, observations, tool output, recalled
lessons — goes in the human message inside <tags> and is declared data.
"""

from functools import cache
from importlib.resources import files


@cache
def template(name: str) -> str:
    return (files(__package__) / f"{name}.md").read_text(encoding="utf-8")


def render(name: str, **fields: str) -> str:
    return template(name).format(**fields)
