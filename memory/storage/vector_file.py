"""A private store's embeddings of the texts it was asked about, kept in its folder for the next process.

Why: step recall embeds each new situation once per process (memory/storage/embeddings.py
`query_vector`, ~4-7 ms of CPU each in int8), and a batch's next process meets the same
situations again: in the bench's cold pass the 29 situation and lesson embeddings were the largest
part of memory's cost per step (benchmarks/bench_batch.py `--overhead-only`). A vector read back
from this file costs microseconds.

The file is a cache, never the truth: a record holds a key (a hash of the embedding model's name,
its compute and the text), the vector and a CRC of both; one that does not check out (a torn last
append after a kill, a damaged block) is skipped and its text embedded again. Records are appended
without a sync, since a lost one costs only its embedding. The folder is locked to this process
(memory/storage/chroma.py), so nothing else writes the file meanwhile. It stops growing at
MAX_VECTORS records (~31 MB): the situations met first stay, later ones are embedded per process.
"""

import hashlib
import os
import struct
import threading
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import numpy as np

DIMENSIONS = 384
"""all-MiniLM-L6-v2's (memory/storage/embeddings.py `DIMENSIONS`; that module loads onnxruntime)."""
KEY = 16
RECORD = KEY + 4 * DIMENSIONS + 4
"""Key, float32 vector (little-endian), CRC32 of both."""
MAX_VECTORS = 20_000

Compute = TypeVar("Compute", bound=str)
"""How the model multiplies (memory/storage/embeddings.py `Compute`)."""


class VectorFile:
    def __init__(self, path: str) -> None:
        self.path = Path(path)
        self._vectors: dict[bytes, np.ndarray] | None = None
        """Read from the file at first use; None until then, and after `forget`."""
        self._lock = threading.Lock()

    def vector(
        self, text: str, compute: Compute, embed: Callable[[str, Compute], list[float]], model: str
    ) -> list[float]:
        """`text`'s vector from the file, else `embed`'s, appended to the file. `model` names the
        embedding model and its version, part of each key with the compute: another model's
        vectors are never read as this one's.
        """
        key = hashlib.sha256(f"{model}\0{compute}\0{text}".encode()).digest()[:KEY]
        with self._lock:
            kept = self._kept().get(key)
        if kept is not None:
            return kept.tolist()
        vector = embed(text, compute)
        with self._lock:
            vectors = self._kept()
            row = np.asarray(vector, dtype="<f4")
            if key not in vectors and len(vectors) < MAX_VECTORS and row.shape == (DIMENSIONS,):
                body = key + row.tobytes()
                self._append(body + struct.pack("<I", zlib.crc32(body)))
                vectors[key] = row
        return vector

    def forget(self, *, on_disk: bool = False) -> None:
        """Read the file again at next use, as a new process would (benchmarks); `on_disk`: empty it too."""
        with self._lock:
            self._vectors = None
            if on_disk:
                self.path.unlink(missing_ok=True)

    def __len__(self) -> int:
        with self._lock:
            return len(self._kept())

    def _kept(self) -> dict[bytes, np.ndarray]:
        if self._vectors is None:
            self._vectors = _read(self.path)
        return self._vectors

    def _append(self, record: bytes) -> None:
        """One whole record at the end; a file left with a torn record is cut back to whole ones first."""
        try:
            descriptor = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        except OSError:
            return  # a read-only folder: the vectors are embedded again next time
        try:
            size = os.fstat(descriptor).st_size
            if size % RECORD:
                os.ftruncate(descriptor, size - size % RECORD)
            os.write(descriptor, record)
        except OSError:
            pass  # a full disk: the same; the store's own writes report it
        finally:
            os.close(descriptor)


def _read(path: Path) -> dict[bytes, np.ndarray]:
    """The file's records that check out, by key."""
    try:
        data = path.read_bytes()
    except OSError:
        return {}
    vectors: dict[bytes, np.ndarray] = {}
    for start in range(0, len(data) - RECORD + 1, RECORD):
        body, crc = data[start : start + RECORD - 4], data[start + RECORD - 4 : start + RECORD]
        if struct.unpack("<I", crc)[0] == zlib.crc32(body):
            vectors[body[:KEY]] = np.frombuffer(body[KEY:], dtype="<f4").copy()
    return vectors
