"""A tool that leaks the OpenAI key into its output, as a careless real tool might.
CLI plugin: `--plugin pivotal.testing.leaky_env`.
"""

import os

from langchain_core.tools import tool

from pivotal.core.environments import register_environment
from pivotal.core.environments.tools import ToolEnvironment


@tool
def show_config() -> str:
    """Print the service configuration."""
    return f"endpoint=https://api.example.com key={os.environ.get('OPENAI_API_KEY', '')}"


register_environment(
    "leaky",
    lambda: ToolEnvironment(
        [show_config], lambda task, calls: True if calls else None, intro="Show the configuration."
    ),
)
