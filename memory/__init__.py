"""Pivotal's lesson memory, in three rooms: lesson/ (the record and its forms, the poisoning screen,
the evidence ledger's records), storage/ (where lessons and records are kept: the seam, one file per
backend, the embeddings) and policy/ (what is kept, merged, recalled and retired, on any backend).
Each room imports only the rooms below it (policy → storage → lesson; pyproject.toml's contract).
"""
