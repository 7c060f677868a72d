"""Pivotal's lesson memory."""
