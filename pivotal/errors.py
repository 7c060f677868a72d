"""One exception type for bad input, so callers and the CLI can show one clear line."""


class PivotalError(ValueError):
    """Bad configuration or input: the message names the problem and the fix, in one line."""
