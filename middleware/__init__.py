"""Pivotal's critic and experience store as LangChain agent middleware, for `create_agent` agents."""

from pivotal.middleware.critic import PivotalCritic, critic_counts
from pivotal.middleware.memory import PivotalMemory

__all__ = ["PivotalCritic", "PivotalMemory", "critic_counts"]
