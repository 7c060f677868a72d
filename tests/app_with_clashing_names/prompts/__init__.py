"""The application's own prompts package."""

GREETING = "You are the support desk's assistant."
