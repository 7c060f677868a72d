"""What Chroma's calls cost a store folder, in CPU of the whole process (Chroma's own threads do
much of the work, which a profile of the calling thread does not see):

1. Writes, by `sync_threshold` (the log records a collection's vector index takes in before it is
   written to disk): a metadata update of 20 lessons, many times over, in a family of N lessons
   with the metadata Pivotal stores. The store's setting: memory/storage/chroma.py `SYNC_THRESHOLD`.
2. Reads, by family size: one nearest-lesson query (12 lessons with their metadata, as recall asks
   before it knows them) against reading every vector of the family. Their ratio sets when a family
   is read into memory: memory/policy/mirror.py `VECTORS_PER_QUERY`.

Vectors are random (the costs do not depend on them); metadata and documents are real lessons'.

Run: python benchmarks/bench_chroma_costs.py [--sizes 100 1000 10000] [--thresholds 1000 200 100 50 20] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from typing import Any

import chromadb
import numpy as np
from bench_store import lessons

UPDATE = 20
"""Lessons per update: about what a run's flush holds."""


def _fill(folder: str, size: int, threshold: int | None) -> Any:
    """A collection of `size` lessons, reopened (Chroma reads a collection's settings when first used)."""
    made = [lesson.model_copy(update={"family": "gridworld"}) for lesson in lessons(min(size, 2000))]
    metadatas, documents = [lesson.metadata() for lesson in made], [lesson.document for lesson in made]
    hnsw: dict[str, Any] = {"space": "cosine", **({"sync_threshold": threshold} if threshold else {})}
    client = chromadb.PersistentClient(path=folder)
    collection = client.get_or_create_collection("lessons", embedding_function=None, configuration={"hnsw": hnsw})
    rng = np.random.default_rng(0)
    for start in range(0, size, 1000):
        rows = range(start, min(start + 1000, size))
        collection.add(
            ids=[f"id{i}" for i in rows],
            embeddings=rng.random((len(rows), 384)).astype(np.float32) - 0.5,
            metadatas=[metadatas[i % len(made)] for i in rows],
            documents=[documents[i % len(made)] for i in rows],
        )
    client.close()  # type: ignore[attr-defined]  # ClientAPI omits close(); the client has it
    return chromadb.PersistentClient(path=folder).get_collection("lessons")


def writes(size: int, threshold: int | None, updates: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        collection = _fill(folder, size, threshold)
        got = collection.get(limit=2000, include=["metadatas"])
        cpu, wall = [], []
        for i in range(updates):
            at = (i * 37) % (len(got["ids"]) - UPDATE)
            metadatas = [{**m, "retrievals": i} for m in got["metadatas"][at : at + UPDATE]]
            started, spent = time.perf_counter(), time.process_time()
            collection.update(ids=got["ids"][at : at + UPDATE], metadatas=metadatas)
            cpu.append(1000 * (time.process_time() - spent))
            wall.append(1000 * (time.perf_counter() - started))
    return {
        "lessons": size,
        "sync_threshold": threshold or "default (1000)",
        "updates": updates,
        "cpu_ms_mean": round(statistics.mean(cpu), 2),
        "cpu_ms_median": round(statistics.median(cpu), 2),
        "cpu_ms_max": round(max(cpu), 2),
        "wall_ms_mean": round(statistics.mean(wall), 2),
    }


def reads(size: int, queries: int = 12, repeats: int = 3) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        collection = _fill(folder, size, 100)
        rng = np.random.default_rng(1)
        asked = []
        for _ in range(queries):
            vector = (rng.random(384) - 0.5).astype(np.float32).tolist()
            spent = time.process_time()
            collection.query(query_embeddings=[vector], n_results=12, include=["metadatas", "distances"])
            asked.append(1000 * (time.process_time() - spent))
        read = []
        for _ in range(repeats):
            spent = time.process_time()
            got = collection.get(limit=size + 1, include=["embeddings"])
            np.asarray(got["embeddings"], dtype=np.float32)
            read.append(1000 * (time.process_time() - spent))
    query, whole = statistics.median(asked[1:]), statistics.median(read)
    return {
        "lessons": size,
        "query_cpu_ms": round(query, 2),
        "read_all_vectors_cpu_ms": round(whole, 1),
        "read_us_per_vector": round(1000 * whole / size, 1),
        "vectors_per_query": round(size * query / whole),
        "break_even_queries": round(whole / query, 1),
    }


def main(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "writes": [
            writes(size, threshold or None, args.updates) for size in args.write_sizes for threshold in args.thresholds
        ],
        "reads": [reads(size) for size in args.sizes],
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 5000, 10000], help="family sizes for reads")
    parser.add_argument("--write-sizes", type=int, nargs="+", default=[1000, 10000], help="family sizes for writes")
    parser.add_argument(
        "--thresholds", type=int, nargs="+", default=[0, 200, 100, 50, 20], help="sync_threshold values (0: default)"
    )
    parser.add_argument("--updates", type=int, default=100, help="updates per write measurement")
    parser.add_argument("--json", action="store_true")
    arguments = parser.parse_args()
    report = main(arguments)
    if arguments.json:
        print(json.dumps(report, indent=2))
    else:
        for w in report["writes"]:
            print(
                f"update of {UPDATE} lessons in {w['lessons']}, sync_threshold {w['sync_threshold']}: CPU mean "
                f"{w['cpu_ms_mean']} ms (median {w['cpu_ms_median']}, max {w['cpu_ms_max']}), "
                f"wall mean {w['wall_ms_mean']} ms"
            )
        for r in report["reads"]:
            print(
                f"{r['lessons']} lessons: a query {r['query_cpu_ms']} ms CPU, reading every vector "
                f"{r['read_all_vectors_cpu_ms']} ms ({r['read_us_per_vector']} us each): a query costs as much as "
                f"{r['vectors_per_query']} vectors, the read {r['break_even_queries']} queries"
            )
