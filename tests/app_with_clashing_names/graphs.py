"""The application's own graphs module: it builds its agent from Pivotal's public face."""

from langgraph.checkpoint.memory import InMemorySaver

from nodes import lookup_order, refund
from pivotal import create_pivotal_agent


def support_agent():
    return create_pivotal_agent("sim", [lookup_order, refund], irreversible=["refund"], checkpointer=InMemorySaver())
