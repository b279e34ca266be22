"""The safetensors layer of a shard: its header parsed and checked against the file without
reading the data, a small tensor read into memory, and the sha256 of the tensor bytes.

Sizes are computed with Python ints (:func:`math.prod`), which do not wrap: a header whose shape
claims more bytes than its offsets span, or offsets outside the file, is a
:class:`CorruptStoreError` before anything is read or allocated.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path

import numpy as np

from ..errors import CorruptStoreError

__all__ = ["array_bytes_sha256", "read_safetensors_header", "read_small", "tensors_sha256"]

#: the safetensors dtypes a shard may hold
_ST_DTYPES = {
    "F16": np.dtype("<f2"),
    "F32": np.dtype("<f4"),
    "F64": np.dtype("<f8"),
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
}
_MAX_HEADER = 100_000_000  # the safetensors format caps headers at 100 MB


def read_safetensors_header(path: str | os.PathLike) -> tuple[dict, int]:
    """Parse a ``.safetensors`` header without reading the tensor data.

    Returns ``(tensors, data_start)``: ``tensors`` maps each name to ``{"dtype": np.dtype,
    "shape": tuple, "offset": absolute byte offset, "nbytes": int}`` (``__metadata__`` is returned
    under that key as a dict of strings); ``data_start`` is the absolute offset of the byte buffer.
    Raises :class:`CorruptStoreError` naming the file if it is truncated, the header length is
    impossible, the header is not JSON, or a tensor's byte span is not exactly its shape times
    its dtype's size (computed exactly: no int64 wrap-around) or lies outside the file.
    """
    path = Path(path)
    size = path.stat().st_size
    if size < 8:
        raise CorruptStoreError(f"{path}: truncated file ({size} bytes, no header length)")
    with open(path, "rb") as f:
        header_len = int.from_bytes(f.read(8), "little")
        if header_len < 2 or header_len > _MAX_HEADER or 8 + header_len > size:
            raise CorruptStoreError(
                f"{path}: header length {header_len} is impossible for a file of {size} bytes "
                "(truncated or not a safetensors file)"
            )
        raw = f.read(header_len)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CorruptStoreError(f"{path}: header is not valid JSON ({err})") from None
    if not isinstance(header, dict):
        raise CorruptStoreError(f"{path}: header is not a JSON object")
    data_start = 8 + header_len
    buffer_len = size - data_start
    tensors: dict = {}
    for name, info in header.items():
        if name == "__metadata__":
            tensors[name] = dict(info or {})
            continue
        try:
            dtype = _ST_DTYPES[info["dtype"]]
            shape = tuple(int(s) for s in info["shape"])
            begin, end = (int(x) for x in info["data_offsets"])
        except (KeyError, TypeError, ValueError) as err:
            raise CorruptStoreError(f"{path}: bad header entry for tensor {name!r} ({err!r})") from None
        nbytes = math.prod(shape) * dtype.itemsize  # Python ints: a crafted shape cannot wrap to a small size
        if any(s < 0 for s in shape) or begin < 0 or end - begin != nbytes:
            raise CorruptStoreError(
                f"{path}: tensor {name!r} has data_offsets {[begin, end]} inconsistent with "
                f"dtype {info['dtype']} and shape {list(shape)}"
            )
        if end > buffer_len:
            raise CorruptStoreError(
                f"{path}: truncated file: tensor {name!r} ends at byte {data_start + end} "
                f"but the file has {size} bytes"
            )
        tensors[name] = {"dtype": dtype, "shape": shape, "offset": data_start + begin, "nbytes": nbytes}
    return tensors, data_start


def tensors_sha256(path: Path, tensors: dict) -> str:
    """sha256 over the raw bytes of a shard's tensors, in name order (read in 16 MiB blocks)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for name in sorted(k for k in tensors if k != "__metadata__"):
            info = tensors[name]
            f.seek(info["offset"])
            left = info["nbytes"]
            while left:
                block = f.read(min(left, 1 << 24))
                if not block:
                    raise CorruptStoreError(f"{path}: truncated while reading tensor {name!r}")
                h.update(block)
                left -= len(block)
    return h.hexdigest()


def array_bytes_sha256(arrays: dict[str, np.ndarray]) -> str:
    """What :func:`tensors_sha256` reads back from a shard written from ``arrays``."""
    h = hashlib.sha256()
    for name in sorted(arrays):
        h.update(np.ascontiguousarray(arrays[name]).astype(arrays[name].dtype.newbyteorder("<")).tobytes())
    return h.hexdigest()


def read_small(path: Path, info: dict) -> np.ndarray:
    """Read a (small) tensor fully into memory."""
    with open(path, "rb") as f:
        f.seek(info["offset"])
        buf = f.read(info["nbytes"])
    return np.frombuffer(buf, dtype=info["dtype"]).reshape(info["shape"]).astype(
        info["dtype"].newbyteorder("=")
    )
