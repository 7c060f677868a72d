"""Pivotal: actor-critic orchestration for LLM agents on LangGraph."""
