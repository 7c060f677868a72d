"""`pivotal bench`: ablations side by side, one process, one command to reproduce every number."""
