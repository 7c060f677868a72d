"""Experience-store speed at 1k and 10k lessons: batched insert, recall latency, disk size.

The baseline is the plain-Chroma design measured in the same run: every lesson in one
collection and recall filtered with a metadata `where` (status + family). Pivotal keeps a
collection per family and over-fetches without a filter (memory/policy/store.py); the ratio shows
what that buys. Recall latency includes embedding the query, as a run pays it.

Queries: short sentences (the old form), real observations from gridworld and FrozenLake runs as
they were embedded before, and the situation recall embeds now (each cold: the embedding paid
every time), then the situations of a run in order with the cache on.

Run: python benchmarks/bench_store.py [--sizes 1000 10000] [--queries 200] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path

import chromadb

from pivotal.memory.lesson import Lesson
from pivotal.memory.policy.registry import close_stores, open_store
from pivotal.memory.storage.chroma import PREFIX
from pivotal.memory.storage.embeddings import default_embedding

FAMILIES = ["gridworld", "frozenlake", "files", "billing", "deploys"]
KINDS = ["strategy", "guardrail", "skill"]
PLACES = [
    "a narrow corridor",
    "the payments service",
    "a locked file",
    "an empty queue",
    "the deploy window",
    "a frozen lake edge",
    "the refund form",
    "a stale cache",
    "the staging database",
    "a full disk",
]
ACTIONS = [
    "check the state first",
    "move away from the hole",
    "retry once with backoff",
    "ask for approval",
    "read the log before acting",
    "take the shortest safe path",
    "close what you opened",
    "never delete without a backup",
    "prefer the reversible action",
    "stop after two failures",
]
REASONS = [
    "because it failed before",
    "to avoid an irreversible step",
    "since the goal is close",
    "so the critic can verify it",
    "as the tool is flaky",
    "because time is short",
]


def lessons(count: int, seed: int = 0) -> list[Lesson]:
    rng = random.Random(seed)
    made = []
    for i in range(count):
        place, action, reason = rng.choice(PLACES), rng.choice(ACTIONS), rng.choice(REASONS)
        made.append(
            Lesson(
                kind=rng.choice(KINDS),
                family=FAMILIES[i % len(FAMILIES)],
                outcome="failure",
                situation=f"in {place}",
                text=f"{action.capitalize()} {reason} (case {i}).",
                status="retired" if rng.random() < 0.1 else "approved",
                run_id=f"bench-{i}",
            )
        )
    return made


def queries(count: int, seed: int = 1) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    return [
        (f"the agent is in {rng.choice(PLACES)} and wants to {rng.choice(ACTIONS)}", rng.choice(FAMILIES))
        for _ in range(count)
    ]


def observations(count: int, seed: int = 2) -> list[tuple[str, str, str]]:
    """(full observation, what recall embeds, family) from real gridworld and FrozenLake runs: a
    random walk of each, as a run sees them. Recall embeds the environment's `situation()`.
    """
    from pivotal.core.environments import make_environment
    from pivotal.core.task import Task

    rng, made = random.Random(seed), []
    while len(made) < count:
        name = rng.choice(["gridworld", "frozenlake"])
        env = make_environment(name)
        observation = env.reset(Task(env=name, params={"seed": rng.randrange(1000)}))
        for _ in range(rng.randrange(1, 8)):
            made.append((observation, env.situation(), name))
            result = env.step(rng.choice([a.name for a in env.describe_actions()]), {})
            observation = result.observation
            if result.done:
                break
    return made[:count]


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def bench(size: int, n_queries: int) -> dict[str, float]:
    from pivotal.memory.storage.embeddings import _cached_vector

    folder = tempfile.mkdtemp(prefix="bench-store-")
    data = lessons(size)
    store = open_store(f"{folder}/pivotal")
    started = time.perf_counter()
    store.put(data)
    insert_s = time.perf_counter() - started

    baseline = _baseline(f"{folder}/baseline", store, data)
    asked = queries(n_queries)
    seen = observations(n_queries)
    default_embedding()(["warm up"])

    def ours(query: str, family: str) -> None:
        store.search(query, family=family, k=5, min_similarity=0.0)

    def cold(query: str, family: str) -> None:
        _cached_vector.cache_clear()  # every query pays for its embedding
        store.shelf.forget_vectors(on_disk=True)  # none read back from the folder either
        ours(query, family)

    where = _latencies(
        lambda q, f: baseline.query(
            query_texts=[q], n_results=5, where={"$and": [{"status": "approved"}, {"family": f}]}
        ),
        asked,
    )
    short = _latencies(cold, asked)
    full = _latencies(cold, [(observation, family) for observation, _, family in seen])
    situation = _latencies(cold, [(text, family) for _, text, family in seen])
    _cached_vector.cache_clear()
    store.shelf.forget_vectors(on_disk=True)
    repeats = _latencies(ours, [(text, family) for _, text, family in seen])  # a run's own repeats hit the cache
    close_stores()
    return {
        "lessons": size,
        "insert_per_s": round(size / insert_s, 1),
        "recall_p50_ms": round(percentile(short, 0.5), 2),
        "recall_p95_ms": round(percentile(short, 0.95), 2),
        "baseline_p50_ms": round(percentile(where, 0.5), 2),
        "baseline_p95_ms": round(percentile(where, 0.95), 2),
        "p95_ratio_baseline_over_ours": round(percentile(where, 0.95) / percentile(short, 0.95), 2),
        "full_observation_p95_ms": round(percentile(full, 0.95), 2),
        "situation_p95_ms": round(percentile(situation, 0.95), 2),
        "situation_cached_p95_ms": round(percentile(repeats, 0.95), 2),
        "situation_cached_p50_ms": round(percentile(repeats, 0.5), 2),
        "disk_mb": round(_disk(f"{folder}/pivotal") / 1e6, 1),
    }


def _baseline(path: str, store, data: list[Lesson]):
    """The same lessons and vectors in one collection (vectors copied, so only queries are compared)."""
    vectors = [c for c in store.io.storage.client.list_collections() if c.name.startswith(PREFIX)]  # not the ledger
    by_id = {}
    for collection in vectors:
        got = store.io.storage.client.get_collection(collection.name, embedding_function=default_embedding()).get(
            include=["embeddings"]
        )
        by_id.update(zip(got["ids"], got["embeddings"], strict=False))
    collection = chromadb.PersistentClient(path=path).get_or_create_collection(
        "baseline", embedding_function=default_embedding(), configuration={"hnsw": {"space": "cosine"}}
    )
    for start in range(0, len(data), 500):
        chunk = data[start : start + 500]
        collection.add(
            ids=[lesson.id for lesson in chunk],
            embeddings=[by_id[lesson.id] for lesson in chunk],
            documents=[lesson.document for lesson in chunk],
            metadatas=[lesson.metadata() for lesson in chunk],
        )
    return collection


def _latencies(query, asked: list[tuple[str, str]]) -> list[float]:
    timings = []
    for text, family in asked:
        started = time.perf_counter()
        query(text, family)
        timings.append((time.perf_counter() - started) * 1000)
    return timings


def _disk(path: str) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = [bench(size, args.queries) for size in args.sizes]
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(
        f"{'lessons':>8} {'insert/s':>9} {'recall p50':>11} {'p95':>7} {'where p50':>10} {'p95':>7} "
        f"{'p95 ratio':>10} {'obs p95':>8} {'situation p95':>14} {'cached p95':>11} {'disk MB':>8}"
    )
    for r in rows:
        print(
            f"{r['lessons']:>8} {r['insert_per_s']:>9} {r['recall_p50_ms']:>9} ms {r['recall_p95_ms']:>4} ms "
            f"{r['baseline_p50_ms']:>7} ms {r['baseline_p95_ms']:>4} ms {r['p95_ratio_baseline_over_ours']:>9}x "
            f"{r['full_observation_p95_ms']:>5} ms {r['situation_p95_ms']:>11} ms {r['situation_cached_p95_ms']:>8} ms "
            f"{r['disk_mb']:>8}"
        )
    if len(rows) > 1:
        print(f"situation p95 growth {rows[0]['lessons']} -> {rows[-1]['lessons']} lessons: "
              f"{rows[-1]['situation_p95_ms'] / rows[0]['situation_p95_ms']:.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
