"""Runs one task from an application whose module names clash with Pivotal's folders."""

import json
import sys

import graphs
import memory
import nodes
import pivotal
import prompts
from pivotal import Context, ToolEnvironment, register_environment, run

assert memory.NOTES == [] and prompts.GREETING.startswith("You are") and hasattr(nodes, "refund")
assert graphs.__file__.startswith(sys.path[0]), graphs.__file__  # the app's own module, not Pivotal's


def verifier(task, calls):
    return True if any(c["tool"] == "refund" and not c["error"] for c in calls) else None


register_environment("desk", lambda: ToolEnvironment([nodes.lookup_order, nodes.refund], verifier))
result = run({"env": "desk", "goal": "Refund order A1 in full."}, Context(model="sim", memory=False, max_steps=4))
agent = graphs.support_agent()
print(json.dumps({"status": result.status, "steps": result.steps, "notes": memory.NOTES,
                  "pivotal": pivotal.__file__, "agent": type(agent).__name__}))  # fmt: skip
