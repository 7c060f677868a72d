"""Chat models by spec string: hosted providers, the embedded local model, and sim oracles."""

from pivotal.core.models.factory import make_model, parse_spec

__all__ = ["make_model", "parse_spec"]
