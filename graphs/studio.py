"""The graph LangGraph Studio and `langgraph dev` serve (`langgraph.json`); the platform supplies
its own checkpointer. Compiled at import, which only the server does.
"""

from pivotal.graphs.builder import build_graph

graph = build_graph()
