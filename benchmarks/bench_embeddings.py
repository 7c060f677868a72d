"""Measures why memory.embeddings pads dynamically instead of to 256 like Chroma.

Both variants run the same ONNX session and tokenizer file; only the padding
differs, so the ratio isolates the cost of Chroma's fixed 256-token padding.

Run: python benchmarks/bench_embeddings.py  (from the repo root)
"""

from __future__ import annotations

import random
import statistics
import time

from memory.embeddings import MAX_TOKENS, MiniLMEmbedding, load_tokenizer

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


def main() -> None:
    texts = sentences(N_SENTENCES)
    dynamic, fixed = MiniLMEmbedding(), fixed_padding_embedding()
    dynamic(texts[:8])  # load the session outside the timed runs
    dyn_rate = throughput(dynamic, texts)
    fixed_rate = throughput(fixed, texts)
    print(f"{N_SENTENCES} sentences, median of {RUNS} runs, 1 ORT thread")
    print(f"dynamic padding : {dyn_rate:8.1f} sentences/s")
    print(f"fixed pad to 256: {fixed_rate:8.1f} sentences/s")
    print(f"speed-up        : {dyn_rate / fixed_rate:8.1f}x")


if __name__ == "__main__":
    main()
