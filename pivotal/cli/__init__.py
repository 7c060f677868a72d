"""The command line: a thin wing over `graphs/` (with `pivotal/bench/`, the only part of
`pivotal/` that may import the graph). One module per command group; `options` holds the
flags that several commands share.
"""

from pivotal.cli.main import main

__all__ = ["main"]
