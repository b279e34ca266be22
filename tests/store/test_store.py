from __future__ import annotations

import json
import math
import os
import stat

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from acute.errors import CorruptStoreError, IncompatibleStoreError
from acute.store import Store, StoreWriter, open_store, verify_store
from acute.store.header import read_safetensors_header

L, D = 3, 5  # 3 decoder layers -> 4 rows per record, hidden size 5


def make_manifest(**overrides):
    m = {
        "model": "tiny-llama",
        "model_fingerprint": {"architecture": "LlamaForCausalLM", "num_layers": L, "hidden_size": D,
                              "vocab_size": 320},
        "tokenizer": "tiny",
        "generation": {"max_new_tokens": 8, "do_sample": False},
        "task": "default",
        "task_settings": {"split": "test"},
        "num_layers": L,
        "hidden_size": D,
        "model_dtype": "float32",
    }
    m.update(overrides)
    return m


def make_data(n, seed=0, start=0):
    """n records with random layer means and variable-length (some empty) log-prob arrays."""
    rng = np.random.default_rng(seed)
    lm = rng.normal(scale=3.0, size=(n, L + 1, D))
    lps = [-rng.exponential(0.3, size=int(rng.integers(0, 6))) for _ in range(n)]
    records = [
        {
            "id": f"q{start + i}",
            "prompt": f"Question {start + i}?",
            "generation": "Paris",
            "answer": "Paris",
            "gold": ["Paris"],
            "correct": bool((start + i) % 3 == 0),
            "task": "default",
            "finish_reason": "eos",
            "meta": {"k": start + i},
        }
        for i in range(n)
    ]
    return records, lm, lps


def write_store(path, n=10, batches=(3, 4, 3), shard_size=4, dtype="float16", seed=0):
    records, lm, lps = make_data(n, seed)
    with StoreWriter(path, make_manifest(), dtype=dtype, shard_size=shard_size) as w:
        i = 0
        for b in batches:
            w.add(records[i:i + b], lm[i:i + b], lps[i:i + b])
            i += b
    return records, lm, lps


# ---------------------------------------------------------------------------------------------
# round trip
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_round_trip(tmp_path, dtype):
    records, lm, lps = write_store(tmp_path / "s", dtype=dtype)
    # 10 records in shards of 4: 4 + 4 + 2
    names = sorted(os.listdir(tmp_path / "s"))
    assert names == ["manifest.json", "shard-00000.jsonl", "shard-00000.safetensors",
                     "shard-00001.jsonl", "shard-00001.safetensors",
                     "shard-00002.jsonl", "shard-00002.safetensors"]
    store = open_store(tmp_path / "s")
    assert len(store) == 10
    assert store.layer_means.shape == (10, L + 1, D)
    assert store.layer_means.dtype == np.dtype(dtype)
    # exactly the cast values, and close to the originals within the storage precision
    np.testing.assert_array_equal(store.layer_means, lm.astype(dtype))
    rtol = 1e-3 if dtype == "float16" else 1e-7
    np.testing.assert_allclose(store.layer_means.astype(np.float64), lm, rtol=rtol, atol=1e-6)
    assert store.ids == [r["id"] for r in records]
    for got, want, lp in zip(store.records, records, lps):
        assert {k: got[k] for k in want} == want
        assert got["n_tokens"] == len(lp)
    np.testing.assert_array_equal(store.correct, [r["correct"] for r in records])
    assert store.correct.dtype == bool
    for got, want in zip(store.token_logprobs, lps):
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, want.astype(np.float32))
    expected_conf = [math.exp(sum(float(x) for x in lp.astype(np.float32))) for lp in lps]
    assert store.raw_confidence.dtype == np.float64
    np.testing.assert_allclose(store.raw_confidence, expected_conf, rtol=1e-12)
    assert any(len(lp) == 0 for lp in lps)  # the empty-generation case is exercised
    assert store.raw_confidence[[len(lp) == 0 for lp in lps]].tolist() == [1.0] * sum(
        len(lp) == 0 for lp in lps)


def test_shard_files_are_standard_safetensors(tmp_path):
    """An independent reader (the safetensors library) sees the documented layout."""
    records, lm, lps = write_store(tmp_path / "s", dtype="float16")
    t = load_file(str(tmp_path / "s" / "shard-00001.safetensors"))
    assert set(t) == {"layer_means", "token_logprobs", "token_offsets"}
    np.testing.assert_array_equal(t["layer_means"], lm[4:8].astype(np.float16))
    lengths = [len(lp) for lp in lps[4:8]]
    np.testing.assert_array_equal(t["token_offsets"], np.concatenate([[0], np.cumsum(lengths)]))
    assert t["token_offsets"].dtype == np.int64
    np.testing.assert_array_equal(t["token_logprobs"], np.concatenate(lps[4:8]).astype(np.float32))
    lines = (tmp_path / "s" / "shard-00001.jsonl").read_text().splitlines()
    assert [json.loads(x)["id"] for x in lines] == ["q4", "q5", "q6", "q7"]
    # our header parser agrees with the library
    header, _ = read_safetensors_header(tmp_path / "s" / "shard-00001.safetensors")
    assert header["layer_means"]["shape"] == (4, L + 1, D)
    assert header["layer_means"]["dtype"] == np.float16


def test_manifest_contents(tmp_path):
    write_store(tmp_path / "s")
    m = json.loads((tmp_path / "s" / "manifest.json").read_text())
    assert m["model"] == "tiny-llama" and m["task"] == "default"
    assert m["generation"] == {"max_new_tokens": 8, "do_sample": False}
    assert m["dtype"] == "float16" and m["format_version"] == 1  # single writer
    assert m["num_layers"] == L and m["hidden_size"] == D
    assert m["num_records"] == 10 and m["num_shards"] == 3 and m["status"] == "complete"
    # q0, q3, q6, q9 are correct
    assert m["summary"]["num_correct"] == 4 and m["summary"]["accuracy"] == pytest.approx(0.4)
    assert "created" in m and "acute_version" in m
    assert open_store(tmp_path / "s").manifest == m


def test_manifest_counts_every_committed_shard_while_collecting(tmp_path):
    """A long collection's manifest (and ``acute verify``) shows what is committed so far: after
    two shards of 4 (q0, q3, q6 correct) and 1 buffered record, 8 records, 3 correct, still
    collecting; the only problem verify names is the unfinished status."""
    records, lm, lps = make_data(9)
    w = StoreWriter(tmp_path / "s", make_manifest(), shard_size=4)
    w.add(records, lm, lps)
    m = json.loads((tmp_path / "s" / "manifest.json").read_text())
    assert (m["num_records"], m["num_shards"], m["status"]) == (8, 2, "collecting")
    assert m["summary"]["num_correct"] == 3 and m["summary"]["accuracy"] == pytest.approx(3 / 8)
    assert verify_store(tmp_path / "s")["problems"] == ["status is 'collecting': the collection did not finish"]
    w.close()
    m = json.loads((tmp_path / "s" / "manifest.json").read_text())
    assert (m["num_records"], m["num_shards"], m["status"]) == (9, 3, "complete")


def test_num_layers_inferred_when_manifest_lacks_it(tmp_path):
    man = make_manifest()
    del man["num_layers"], man["hidden_size"], man["model_fingerprint"]
    records, lm, lps = make_data(3)
    with StoreWriter(tmp_path / "s", man, shard_size=2) as w:
        w.add(records[:2], lm[:2], lps[:2])
        with pytest.raises(ValueError, match="hidden size"):
            w.add(records[2:], np.zeros((1, L + 1, D + 1)), lps[2:])
        w.add(records[2:], lm[2:], lps[2:])
    m = open_store(tmp_path / "s").manifest
    assert (m["num_layers"], m["hidden_size"]) == (L, D)


def test_single_shard_is_memmap(tmp_path):
    records, lm, lps = write_store(tmp_path / "s", n=4, batches=(4,), shard_size=8)
    store = open_store(tmp_path / "s")
    arr = store.layer_means
    assert isinstance(arr, np.memmap)
    assert os.path.samefile(arr.filename, tmp_path / "s" / "shard-00000.safetensors")
    assert not arr.flags.writeable
    np.testing.assert_array_equal(arr, lm.astype(np.float16))
    assert store.layer_means is arr  # cached


def test_layer_matches_layer_means(tmp_path):
    write_store(tmp_path / "s")  # 3 shards
    store = open_store(tmp_path / "s")
    for i in range(-(L + 1), L + 1):
        got = store.layer(i)  # before layer_means is materialised (gathered from memmaps)
        assert got.shape == (10, D)
        np.testing.assert_array_equal(got, store.layer_means[:, i])
        np.testing.assert_array_equal(store.layer(i), got)  # after materialisation
    with pytest.raises(IndexError):
        store.layer(L + 1)
    with pytest.raises(IndexError):
        store.layer(-(L + 2))


def test_select(tmp_path):
    records, lm, lps = write_store(tmp_path / "s")
    store = open_store(tmp_path / "s")
    idx = [7, 0, 5, -1]
    sub = store.select(idx)
    assert isinstance(sub, Store) and len(sub) == 4
    assert sub.ids == ["q7", "q0", "q5", "q9"]
    want = lm.astype(np.float16)[[7, 0, 5, 9]]
    np.testing.assert_array_equal(sub.layer(2), want[:, 2])  # gathered before materialising
    np.testing.assert_array_equal(sub.layer_means, want)
    np.testing.assert_array_equal(sub.correct, [False, True, False, True])
    np.testing.assert_array_equal(sub.raw_confidence, store.raw_confidence[[7, 0, 5, 9]])
    for got, k in zip(sub.token_logprobs, [7, 0, 5, 9]):
        np.testing.assert_array_equal(got, lps[k].astype(np.float32))
    # selection of a selection, boolean masks, empty selections
    subsub = sub.select(np.array([False, True, True, False]))
    assert subsub.ids == ["q0", "q5"]
    np.testing.assert_array_equal(subsub.layer_means, want[[1, 2]])
    empty = store.select([])
    assert len(empty) == 0 and empty.layer_means.shape == (0, L + 1, D) and empty.ids == []
    with pytest.raises(IndexError):
        store.select([10])
    with pytest.raises(ValueError, match="mask"):
        store.select(np.ones(3, dtype=bool))


# ---------------------------------------------------------------------------------------------
# crash and resume
# ---------------------------------------------------------------------------------------------


class Boom(RuntimeError):
    pass


def test_resume_after_crash(tmp_path):
    path = tmp_path / "s"
    records, lm, lps = make_data(10)
    with pytest.raises(Boom):
        with StoreWriter(path, make_manifest(), shard_size=4) as w:
            w.add(records[:3], lm[:3], lps[:3])
            w.add(records[3:6], lm[3:6], lps[3:6])  # commits q0..q3, buffers q4, q5
            assert w.done_ids == {"q0", "q1", "q2", "q3"}
            raise Boom("model crashed")
    assert sorted(os.listdir(path)) == ["manifest.json", "shard-00000.jsonl", "shard-00000.safetensors"]
    partial = open_store(path)
    assert partial.ids == ["q0", "q1", "q2", "q3"]
    assert partial.manifest["status"] == "interrupted" and partial.manifest["num_records"] == 4
    created = partial.manifest["created"]

    with StoreWriter(path, make_manifest(), shard_size=4) as w:
        assert w.done_ids == {"q0", "q1", "q2", "q3"}
        todo = [i for i, r in enumerate(records) if r["id"] not in w.done_ids]
        assert todo == list(range(4, 10))
        w.add([records[i] for i in todo], lm[todo], [lps[i] for i in todo])
    # numbering continued after the committed shard
    assert {"shard-00001.safetensors", "shard-00002.safetensors"} <= set(os.listdir(path))
    store = open_store(path)
    assert sorted(store.ids, key=lambda s: int(s[1:])) == [r["id"] for r in records]
    assert len(set(store.ids)) == 10
    order = [int(i[1:]) for i in store.ids]
    np.testing.assert_array_equal(store.layer_means, lm.astype(np.float16)[order])
    assert store.manifest["status"] == "complete" and store.manifest["created"] == created
    assert store.manifest["num_records"] == 10


def test_orphans_ignored_and_cleaned(tmp_path):
    path = tmp_path / "s"
    records, lm, lps = write_store(path, n=8, batches=(8,), shard_size=4)  # shards 0, 1
    # a crash between the jsonl rename and the safetensors rename of shard 2, plus temporaries
    (path / "shard-00002.jsonl").write_text(json.dumps({"id": "q8"}) + "\n")
    (path / ".shard-00003.safetensors.abc.tmp").write_bytes(b"\x00" * 5)
    (path / ".shard-00003.jsonl.abc.tmp").write_text("garbage")
    store = open_store(path)
    assert len(store) == 8 and "q8" not in store.ids
    assert verify_store(path)["orphans"] == [".shard-00003.jsonl.abc.tmp",
                                             ".shard-00003.safetensors.abc.tmp",
                                             "shard-00002.jsonl"]
    more, lm2, lps2 = make_data(2, seed=1, start=8)
    with StoreWriter(path, make_manifest(), shard_size=4) as w:
        assert "q8" not in w.done_ids
        assert sorted(os.listdir(path)) == ["manifest.json"] + [
            f"shard-0000{i}.{e}" for i in range(2) for e in ("jsonl", "safetensors")]
        w.add(more, lm2, lps2)
    store = open_store(path)
    assert store.ids == [f"q{i}" for i in range(10)]
    np.testing.assert_array_equal(store.layer_means[8:], lm2.astype(np.float16))
    assert (path / "shard-00002.safetensors").exists()


def test_deleting_a_corrupt_shard_then_resuming_recomputes_it(tmp_path):
    path = tmp_path / "s"
    records, lm, lps = write_store(path)  # shards 0 (q0-q3), 1 (q4-q7), 2 (q8, q9)
    _rewrite(path / "shard-00001.safetensors", lambda b: b[:-3])
    with pytest.raises(CorruptStoreError):
        StoreWriter(path, make_manifest(), shard_size=4)
    for ext in ("safetensors", "jsonl"):
        (path / f"shard-00001.{ext}").unlink()
    with StoreWriter(path, make_manifest(), shard_size=4) as w:
        assert w.done_ids == {"q0", "q1", "q2", "q3", "q8", "q9"}
        w.add(records[4:8], lm[4:8], lps[4:8])
    assert (path / "shard-00003.safetensors").exists()  # numbering continues after the gap
    store = open_store(path)
    assert store.ids == ["q0", "q1", "q2", "q3", "q8", "q9", "q4", "q5", "q6", "q7"]
    order = [int(i[1:]) for i in store.ids]
    np.testing.assert_array_equal(store.layer_means, lm.astype(np.float16)[order])


def test_exception_before_first_shard_leaves_empty_resumable_store(tmp_path):
    path = tmp_path / "s"
    records, lm, lps = make_data(3)
    with pytest.raises(Boom):
        with StoreWriter(path, make_manifest(), shard_size=4) as w:
            w.add(records, lm, lps)
            raise Boom()
    assert len(open_store(path)) == 0
    with StoreWriter(path, make_manifest(), shard_size=4) as w:
        assert w.done_ids == frozenset()
        w.add(records, lm, lps)
    assert open_store(path).ids == ["q0", "q1", "q2"]


def test_duplicate_ids(tmp_path):
    path = tmp_path / "s"
    records, lm, lps = make_data(6)
    with StoreWriter(path, make_manifest(), shard_size=2) as w:
        with pytest.raises(ValueError, match="duplicate id 'q0'"):
            w.add([records[0], records[0]], lm[:2], lps[:2])  # within a batch
        w.add(records[:3], lm[:3], lps[:3])  # q0, q1 committed; q2 buffered
        with pytest.raises(ValueError, match="duplicate id 'q2'.*buffered"):
            w.add([records[2]], lm[2:3], lps[2:3])
        with pytest.raises(ValueError, match="duplicate id 'q1'.*committed"):
            w.add([records[1]], lm[1:2], lps[1:2])
    with StoreWriter(path, make_manifest(), shard_size=2) as w:
        with pytest.raises(ValueError, match="duplicate id 'q2'"):
            w.add([records[2]], lm[2:3], lps[2:3])  # committed in the earlier run
    assert open_store(path).ids == ["q0", "q1", "q2"]


@pytest.mark.parametrize(
    "change, key",
    [
        ({"task": "triviaqa"}, "task"),
        ({"model_fingerprint": {"architecture": "Other", "num_layers": L, "hidden_size": D}},
         "model_fingerprint"),
        ({"num_layers": L + 1}, "num_layers"),
        ({"hidden_size": D + 1}, "hidden_size"),
    ],
)
def test_incompatible_manifest(tmp_path, change, key):
    write_store(tmp_path / "s", n=4, batches=(4,))
    with pytest.raises(IncompatibleStoreError, match=f"'{key}'"):
        StoreWriter(tmp_path / "s", make_manifest(**change), shard_size=4)


def test_incompatible_dtype(tmp_path):
    write_store(tmp_path / "s", n=4, batches=(4,), dtype="float16")
    with pytest.raises(ValueError, match="'dtype'"):
        StoreWriter(tmp_path / "s", make_manifest(), dtype="float32")
    # compatible resume with non-key changes (e.g. a new tokenizer note) is fine
    with StoreWriter(tmp_path / "s", make_manifest(tokenizer="tiny-2")) as w:
        assert len(w.done_ids) == 4
    assert open_store(tmp_path / "s").manifest["tokenizer"] == "tiny-2"


def test_bad_arguments(tmp_path):
    records, lm, lps = make_data(2)
    with pytest.raises(ValueError, match="dtype"):
        StoreWriter(tmp_path / "a", make_manifest(), dtype="bfloat16")
    with pytest.raises(ValueError, match="shard_size"):
        StoreWriter(tmp_path / "a", make_manifest(), shard_size=0)
    with StoreWriter(tmp_path / "s", make_manifest()) as w:
        with pytest.raises(ValueError, match="num_layers"):
            w.add(records, np.zeros((2, L, D)), lps)
        with pytest.raises(ValueError, match="hidden size"):
            w.add(records, np.zeros((2, L + 1, D + 1)), lps)
        with pytest.raises(ValueError, match="shape"):
            w.add(records, np.zeros((2, D)), lps)
        with pytest.raises(ValueError, match="rows"):
            w.add(records, lm[:1], lps)
        with pytest.raises(ValueError, match="token_logprobs"):
            w.add(records, lm, lps[:1])
        bad = lm.copy()
        bad[1, 2, 3] = np.nan
        with pytest.raises(ValueError, match="non-finite.*'q1'"):
            w.add(records, bad, lps)
        with pytest.raises(ValueError, match="overflows float16"):
            w.add(records, lm * 1e6, lps)
        with pytest.raises(ValueError, match="non-finite"):
            w.add(records, lm, [lps[0], np.array([-0.1, -np.inf])])
        with pytest.raises(ValueError, match="positive"):
            w.add(records, lm, [lps[0], np.array([0.5])])
        with pytest.raises(ValueError, match="no 'id'"):
            w.add([{"prompt": "x"}, records[1]], lm, lps)
        with pytest.raises(ValueError, match="n_tokens"):
            w.add([dict(records[0], n_tokens=99), records[1]], lm, lps)
        with pytest.raises(ValueError, match="JSON"):
            w.add([dict(records[0], meta=object()), records[1]], lm, lps)
        assert w.num_buffered == 0  # failed batches leave nothing behind
        w.add(records, lm, lps)
    with pytest.raises(ValueError, match="closed"):
        w.add(records, lm, lps)
    assert open_store(tmp_path / "s").ids == ["q0", "q1"]


def test_numpy_scalars_in_records(tmp_path):
    records, lm, lps = make_data(1)
    rec = dict(records[0], id=np.int64(7), correct=np.bool_(True), meta={"s": np.float32(0.5)})
    with StoreWriter(tmp_path / "s", make_manifest()) as w:
        w.add([rec], lm, lps)
    store = open_store(tmp_path / "s")
    assert store.ids == [7] and store.records[0]["meta"] == {"s": 0.5}
    assert store.correct.tolist() == [True]


# ---------------------------------------------------------------------------------------------
# empty and corrupt stores
# ---------------------------------------------------------------------------------------------


def test_empty_store(tmp_path):
    with StoreWriter(tmp_path / "s", make_manifest()):
        pass
    store = open_store(tmp_path / "s")
    assert len(store) == 0 and store.records == [] and store.ids == []
    assert store.layer_means.shape == (0, L + 1, D)
    assert store.layer(0).shape == (0, D)
    assert store.correct.shape == (0,) and store.correct.dtype == bool
    assert store.raw_confidence.shape == (0,) and store.token_logprobs == []
    assert store.manifest["num_records"] == 0 and store.manifest["status"] == "complete"


def test_missing_dir_and_manifest(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        open_store(tmp_path / "nope")
    (tmp_path / "d").mkdir()
    with pytest.raises(FileNotFoundError, match="manifest.json"):
        open_store(tmp_path / "d")


def _rewrite(path, fn):
    data = bytearray(path.read_bytes())
    path.write_bytes(bytes(fn(data)))


def test_truncated_shard(tmp_path):
    write_store(tmp_path / "s")
    shard = tmp_path / "s" / "shard-00001.safetensors"
    _rewrite(shard, lambda b: b[:-7])
    with pytest.raises(CorruptStoreError, match="shard-00001.safetensors.*truncated"):
        open_store(tmp_path / "s")
    with pytest.raises(CorruptStoreError, match="shard-00001.safetensors"):
        verify_store(tmp_path / "s")
    _rewrite(shard, lambda b: b[:5])
    with pytest.raises(CorruptStoreError, match="shard-00001.safetensors.*truncated"):
        open_store(tmp_path / "s")


def test_header_length_wrong(tmp_path):
    write_store(tmp_path / "s")
    shard = tmp_path / "s" / "shard-00000.safetensors"
    _rewrite(shard, lambda b: (10**9).to_bytes(8, "little") + b[8:])
    with pytest.raises(CorruptStoreError, match="shard-00000.safetensors.*header length"):
        open_store(tmp_path / "s")
    # a header length pointing inside the JSON: not valid JSON
    write_store(tmp_path / "t")
    shard = tmp_path / "t" / "shard-00000.safetensors"
    _rewrite(shard, lambda b: (20).to_bytes(8, "little") + b[8:])
    with pytest.raises(CorruptStoreError, match="shard-00000.safetensors.*JSON"):
        open_store(tmp_path / "t")


def test_jsonl_count_mismatch(tmp_path):
    write_store(tmp_path / "s")
    jl = tmp_path / "s" / "shard-00002.jsonl"
    jl.write_text(jl.read_text().splitlines()[0] + "\n")
    with pytest.raises(CorruptStoreError, match="shard-00002.jsonl.*1 records.*2 rows"):
        open_store(tmp_path / "s")
    jl.unlink()
    with pytest.raises(CorruptStoreError, match="shard-00002.jsonl.*missing"):
        open_store(tmp_path / "s")


def test_bad_offsets_and_shapes(tmp_path):
    """Shards written by hand with inconsistent tensors are rejected, naming the file."""
    write_store(tmp_path / "s", n=4, batches=(4,), shard_size=4)
    path = tmp_path / "s"
    good = load_file(str(path / "shard-00000.safetensors"))

    def write(**tensors):
        (path / "shard-00001.jsonl").write_text(
            "".join(json.dumps({"id": f"x{i}"}) + "\n" for i in range(2)))
        save_file({**good, **tensors},
                  str(path / "shard-00001.safetensors"))

    two = {"layer_means": good["layer_means"][:2]}
    write(**two, token_offsets=np.array([0, 3, 1], dtype=np.int64),
          token_logprobs=np.zeros(1, np.float32))
    with pytest.raises(CorruptStoreError, match="shard-00001.safetensors.*non-decreasing"):
        open_store(path)
    write(**two, token_offsets=np.array([0, 1, 2], dtype=np.int64),
          token_logprobs=np.zeros(5, np.float32))
    with pytest.raises(CorruptStoreError, match="shard-00001.safetensors.*token_offsets"):
        open_store(path)
    write(layer_means=np.zeros((2, L + 2, D), np.float16),
          token_offsets=np.array([0, 1, 2], dtype=np.int64), token_logprobs=np.zeros(2, np.float32))
    with pytest.raises(CorruptStoreError, match="shard-00001.safetensors.*num_layers"):
        open_store(path)
    write(layer_means=np.zeros((2, L + 1, D), np.float32),
          token_offsets=np.array([0, 1, 2], dtype=np.int64), token_logprobs=np.zeros(2, np.float32))
    with pytest.raises(CorruptStoreError, match="shard-00001.safetensors.*dtype"):
        open_store(path)
    # a duplicate id across shards
    write(**two, token_offsets=np.array([0, 1, 2], dtype=np.int64),
          token_logprobs=np.zeros(2, np.float32))
    (path / "shard-00001.jsonl").write_text(
        json.dumps({"id": "q0"}) + "\n" + json.dumps({"id": "x"}) + "\n")
    with pytest.raises(CorruptStoreError, match="shard-00001.jsonl.*'q0'"):
        open_store(path)
    # repaired: a consistent hand-written shard is accepted
    write(**two, token_offsets=np.array([0, 2, 3], dtype=np.int64),
          token_logprobs=np.array([-0.5, -0.25, -1.0], np.float32))
    (path / "shard-00001.jsonl").write_text(
        json.dumps({"id": "y0", "n_tokens": 2}) + "\n" + json.dumps({"id": "y1"}) + "\n")
    assert verify_store(path)["num_records"] == 6
    store = open_store(path)
    np.testing.assert_allclose(store.raw_confidence[4:], [math.exp(-0.75), math.exp(-1.0)])
    # n_tokens disagreeing with the offsets
    (path / "shard-00001.jsonl").write_text(
        json.dumps({"id": "y0", "n_tokens": 3}) + "\n" + json.dumps({"id": "y1"}) + "\n")
    with pytest.raises(CorruptStoreError, match="shard-00001.jsonl.*n_tokens=3"):
        open_store(path)


def test_shards_without_manifest_refused(tmp_path):
    write_store(tmp_path / "s", n=4, batches=(4,))
    (tmp_path / "s" / "manifest.json").unlink()
    with pytest.raises(ValueError, match="manifest.json"):
        StoreWriter(tmp_path / "s", make_manifest())


def test_store_files_get_default_permissions_not_private(tmp_path):
    import os
    import stat

    from acute.fileio import write_text_atomic

    mask = os.umask(0o022)
    try:
        path = write_text_atomic(tmp_path / "x" / "out.json", "{}")
    finally:
        os.umask(mask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert path.read_text() == "{}" and not [p for p in path.parent.iterdir() if p.name.startswith(".")]


# ---------------------------------------------------------------------------------------------
# checksums, temporaries and file modes
# ---------------------------------------------------------------------------------------------


def test_flipped_bytes_in_hidden_states_or_records_are_detected(tmp_path):
    write_store(tmp_path / "s")
    shard = tmp_path / "s" / "shard-00001.safetensors"
    info, _ = read_safetensors_header(shard)
    start = info["layer_means"]["offset"] + 100
    _rewrite(shard, lambda b: b[:start] + bytes(x ^ 0xFF for x in b[start:start + 200]) + b[start + 200:])
    with pytest.raises(CorruptStoreError, match="shard-00001.safetensors.*differ from what was committed"):
        open_store(tmp_path / "s")
    with pytest.raises(CorruptStoreError, match="sha256 mismatch"):
        verify_store(tmp_path / "s")
    assert len(open_store(tmp_path / "s", verify=False)) == 10  # the structure is intact

    write_store(tmp_path / "t")
    jl = tmp_path / "t" / "shard-00000.jsonl"
    lines = jl.read_text(encoding="utf-8").splitlines()
    rec = json.loads(lines[1])
    rec["correct"] = not rec.get("correct")  # a valid record with another label
    jl.write_text("\n".join([lines[0], json.dumps(rec), *lines[2:]]) + "\n", encoding="utf-8")
    with pytest.raises(CorruptStoreError, match="shard-00000.jsonl: the records differ"):
        open_store(tmp_path / "t")


def test_checksums_are_what_the_files_hold(tmp_path):
    """Recomputed here from the files with hashlib, independently of the store reader."""
    import hashlib

    write_store(tmp_path / "s")
    for i in range(3):
        st = tmp_path / "s" / f"shard-{i:05d}.safetensors"
        info, _ = read_safetensors_header(st)
        meta = info["__metadata__"]
        raw = st.read_bytes()
        h = hashlib.sha256()
        for name in ("layer_means", "token_logprobs", "token_offsets"):
            h.update(raw[info[name]["offset"]:info[name]["offset"] + info[name]["nbytes"]])
        assert meta["tensors_sha256"] == h.hexdigest()
        assert meta["records_sha256"] == hashlib.sha256(st.with_suffix(".jsonl").read_bytes()).hexdigest()


def test_resume_removes_a_safetensors_temporary_and_shards_get_the_usual_mode(tmp_path):
    records, lm, lps = make_data(8, 0)
    path = tmp_path / "s"
    with StoreWriter(path, make_manifest(), shard_size=4) as w:
        w.add(records[:4], lm[:4], lps[:4])
    (path / ".tmpAb12Cd").write_bytes(b"\0" * 1000)  # what a kill inside safetensors' save leaves
    with StoreWriter(path, make_manifest(), shard_size=4) as w:
        assert ".tmpAb12Cd" not in os.listdir(path)
        w.add(records[4:], lm[4:], lps[4:])
    mask = os.umask(0)
    os.umask(mask)
    for name in os.listdir(path):
        assert stat.S_IMODE(os.stat(path / name).st_mode) == 0o666 & ~mask, name


def test_a_non_finite_value_is_named_by_record_id_and_shard(tmp_path):
    records, _, _ = write_store(tmp_path / "s")  # shards of 4: records 4-7 in shard-00001
    shard = tmp_path / "s" / "shard-00001.safetensors"
    info = read_safetensors_header(shard)[0]["layer_means"]
    row_bytes = (L + 1) * D * 2  # float16
    nan16 = np.array([np.nan], dtype="<f2").tobytes()
    at = info["offset"] + 2 * row_bytes + 6  # record 6, somewhere in its first layer
    _rewrite(shard, lambda b: b[:at] + nan16 + b[at + 2:])
    store = open_store(tmp_path / "s", verify=False)  # past the checksum, as a hand-made store would be
    with pytest.raises(CorruptStoreError, match=r"record 'q6' \(shard-00001.safetensors\) has a non-finite hidden"):
        store.check_finite()
    assert store.where(9) == "record 'q9' (shard-00002.safetensors)"
    assert store.select([9, 2]).where(0) == "record 'q9' (shard-00002.safetensors)"
