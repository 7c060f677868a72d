"""The ground: what every layer above stands on and that knows nothing of them.

Settings and errors, the task and the graph's state, the run's `Context`, the environments
the actions execute in, and the chat models that play the roles. `graphs/`, `nodes/`,
`memory/` and `prompts/` build on these; nothing here imports them.
"""
