"""Hand-made shards whose sizes or offsets only look right in wrapping int64 arithmetic.

A shard's header is checked with Python ints (issue 32, item 7): ``np.prod(shape, dtype=np.int64)``
let a ~500-byte shard declare ``layer_means`` of shape [1, 2^32, 2^32] in 0 bytes, pass
:func:`verify_store`, and make ``Store.layer(0)`` try to allocate 8 GiB. Such a shard is now a
:class:`CorruptStoreError` naming the file before anything of its declared size is read or made.
"""

import json
import re
import struct
import tracemalloc

import numpy as np
import pytest

from acute.errors import AcuteError
from acute.errors import CorruptStoreError
from acute.store import StoreWriter, open_store, verify_store
from acute.store.format import collection_key
from acute.store.header import read_safetensors_header

#: (tensor, shape) whose int64 element count wraps: to 0 (so np.prod(shape, dtype=np.int64) said
#: 0 bytes) or to 4; "junk" is an extra tensor that readers otherwise ignore
WRAPPING = [("layer_means", [1, 2**32, 2**32]), ("layer_means", [1, 2**62 + 1, 4]), ("junk", [2**32, 2**32])]


def craft(path, header: dict, data: bytes = b"") -> None:
    """Write a safetensors file by hand: 8-byte little-endian header length, JSON header, data."""
    raw = json.dumps(header).encode("utf-8")
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)


def hand_made_store(tmp_path, tensors: dict, num_records: int = 1):
    """A store of one hand-made shard; returns (store directory, shard path).

    ``tensors`` maps names to ``(safetensors dtype, shape, bytes)``, laid out in that order with
    ``data_offsets`` spanning each one's bytes. The records are bare ids (no ``n_tokens`` to
    cross-check the offsets). The manifest does not know L and d (as in a store whose collection
    never recorded them), so nothing but the shard's own checks stands between its header and a
    reader; the shard has the manifest's ``collection_key`` and no checksums (as a shard written
    before checksums existed).
    """
    path = tmp_path / "s"
    manifest = {"model": "tiny", "task": "default", "model_fingerprint": {"architecture": "X"}}
    StoreWriter(path, manifest).close()
    stored = json.loads((path / "manifest.json").read_text(encoding="utf-8"))
    assert "num_layers" not in stored
    records = "".join(json.dumps({"id": f"q{i}", "correct": True}) + "\n" for i in range(num_records))
    (path / "shard-00000.jsonl").write_text(records, encoding="utf-8")
    header = {"__metadata__": {"format": "acute-store", "num_records": str(num_records),
                               "collection_key": collection_key(stored)}}
    data = b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    shard = path / "shard-00000.safetensors"
    craft(shard, header, data)
    return path, shard


def one_record(**tensors) -> dict:
    """A valid one-record shard (layer_means [1, 2, 3]; one log-prob), with ``tensors`` replacing
    or added to its tensors."""
    return {"layer_means": ("F16", [1, 2, 3], np.zeros(6, "<f2").tobytes()),
            "token_logprobs": ("F32", [1], np.array([-0.5], "<f4").tobytes()),
            "token_offsets": ("I64", [2], np.array([0, 1], "<i8").tobytes()), **tensors}


def assert_refused(path, shard, message: str) -> None:
    """verify_store and open_store (with or without checksums) raise a CorruptStoreError naming
    ``shard`` and ``message``, without allocating more than a few MiB."""
    where = re.escape(f"{shard}: ") + message
    tracemalloc.start()
    try:
        with pytest.raises(CorruptStoreError, match=where) as err:
            verify_store(path)
        assert isinstance(err.value, AcuteError)
        for verify in (True, False):
            with pytest.raises(CorruptStoreError, match=where):
                open_store(path, verify=verify)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20  # refused from the header: no array of the declared shape was made


def test_a_hand_made_store_is_valid_as_such(tmp_path):
    path, _ = hand_made_store(tmp_path, one_record())
    assert verify_store(path)["num_records"] == 1
    assert open_store(path).layer(0).shape == (1, 3)


@pytest.mark.parametrize("name, shape", WRAPPING, ids=["1x2^32x2^32", "1x(2^62+1)x4", "extra"])
def test_a_shape_whose_int64_size_wraps_is_refused_by_verify_and_by_reading(tmp_path, name, shape):
    span = int(np.prod(shape, dtype=np.int64)) * 2  # what the check used to trust
    path, shard = hand_made_store(tmp_path, one_record(**{name: ("F16", shape, b"\0" * span)}))
    assert span < 10 and shard.stat().st_size < 1000
    assert_refused(path, shard, re.escape(f"tensor {name!r} has data_offsets ") + r"\[\d+, \d+\]"
                   + re.escape(f" inconsistent with dtype F16 and shape {shape}"))
    with pytest.raises(CorruptStoreError, match=re.escape(f"{shard}: tensor {name!r}")):
        read_safetensors_header(shard)


def test_token_offsets_whose_int64_differences_wrap_are_refused(tmp_path):
    """[0, 6.9e18, -4.6e18, 3] decreases, but np.diff wraps it to three positive steps."""
    offsets = np.array([0, 6917529027641081856, -4611686018427387904, 3], "<i8")
    assert (np.diff(offsets) > 0).all()
    path, shard = hand_made_store(tmp_path, {
        "layer_means": ("F16", [3, 2, 3], np.zeros(18, "<f2").tobytes()),
        "token_logprobs": ("F32", [3], np.full(3, -0.5, "<f4").tobytes()),
        "token_offsets": ("I64", [4], offsets.tobytes())}, num_records=3)
    assert_refused(path, shard, re.escape("token_offsets must start at 0, be non-decreasing"))


def test_pooled_states_with_an_empty_dimension_are_refused(tmp_path):
    """[1, 0, 2^62] spans 0 bytes exactly; the writer never makes an empty layer or hidden axis."""
    path, shard = hand_made_store(tmp_path, one_record(layer_means=("F16", [1, 0, 2**62], b"")))
    assert_refused(path, shard, re.escape("layer_means has an empty dimension: [1, 0, 4611686018427387904]"))


def test_the_exact_size_of_a_huge_tensor_is_checked_against_the_file(tmp_path):
    """A shape whose true size is enormous is named with its span when the offsets claim it: the
    span disagrees with nothing, but it lies outside the file."""
    shard = tmp_path / "x.safetensors"
    n = 2**40
    craft(shard, {"t": {"dtype": "F32", "shape": [n], "data_offsets": [0, 4 * n]}}, b"\0" * 8)
    with pytest.raises(CorruptStoreError, match=re.escape(f"{shard}: truncated file: tensor 't' ends at byte")):
        read_safetensors_header(shard)
    craft(shard, {"t": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, b"\0" * 8)
    with pytest.raises(CorruptStoreError, match=re.escape(f"{shard}: truncated file: tensor 't'")):
        read_safetensors_header(shard)
    craft(shard, {"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 8)
    info = read_safetensors_header(shard)[0]["t"]
    assert (info["shape"], info["nbytes"]) == ((2,), 8)
