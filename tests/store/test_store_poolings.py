"""Stores that keep the last-prompt and last-answer states next to the layer means (poolings)."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from acute.errors import InputError
from acute.errors import CorruptStoreError, IncompatibleStoreError
from acute.store import POOLINGS, StoreWriter, finalize_store, open_store, prepare_store, verify_store
from acute.store.header import read_safetensors_header

L, D = 2, 3  # 2 decoder layers -> 3 rows per record, hidden size 3
TENSORS = {"mean": "layer_means", "last-prompt": "last_prompt", "last-answer": "last_answer"}
REMEDY = "re-record it with `acute rerecord STORE --out NEW` to add them"


def make_manifest(**overrides):
    m = {"model": "tiny", "model_fingerprint": {"architecture": "Tiny", "num_layers": L, "hidden_size": D},
         "generation": {"max_new_tokens": 4}, "task": "default", "task_settings": {"shots": 0},
         "num_layers": L, "hidden_size": D}
    m.update(overrides)
    return m


def make_data(n, seed=0, start=0):
    """Records q{start}.., {pooling: [n, L+1, D]} (distinct values per pooling) and log-probs."""
    rng = np.random.default_rng(seed)
    records = [{"id": f"q{start + i}", "correct": (start + i) % 3 == 0} for i in range(n)]
    states = {p: rng.normal(scale=2.0, size=(n, L + 1, D)) + 10 * k for k, p in enumerate(POOLINGS)}
    lps = [-rng.exponential(0.5, int(rng.integers(0, 4))) for _ in range(n)]
    return records, states, lps


def add(writer, records, states, lps, rows=slice(None), extras=True):
    kw = {"last_prompt": states["last-prompt"][rows], "last_answer": states["last-answer"][rows]} if extras else {}
    writer.add(records[rows], states["mean"][rows], lps[rows], **kw)


def write(path, n=10, batches=(3, 4, 3), shard_size=4, dtype="float16", extras=True, seed=0):
    records, states, lps = make_data(n, seed)
    with StoreWriter(path, make_manifest(), dtype=dtype, shard_size=shard_size) as w:
        i = 0
        for b in batches:
            add(w, records, states, lps, slice(i, i + b), extras)
            i += b
    return records, states, lps


def rewrite_shard(st_path, fn):
    """Replace a shard's tensors by ``fn(tensors)``, keeping its metadata."""
    meta = read_safetensors_header(st_path)[0]["__metadata__"]
    save_file(fn(load_file(str(st_path))), str(st_path), metadata=meta)


# ---------------------------------------------------------------------------------------------
# round trip
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_round_trip_of_all_poolings(tmp_path, dtype):
    records, states, lps = write(tmp_path / "s", dtype=dtype)
    store = open_store(tmp_path / "s")
    assert store.poolings == POOLINGS
    assert store.manifest["poolings"] == list(POOLINGS)
    assert len(store._shards) == 3  # 4 + 4 + 2
    assert store.ids == [r["id"] for r in records]
    assert store.states() is store.layer_means and store.states("mean") is store.layer_means
    rtol = 1e-3 if dtype == "float16" else 1e-7
    for p in POOLINGS:
        got = store.states(p)
        assert got.shape == (10, L + 1, D) and got.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(got, states[p].astype(dtype))
        np.testing.assert_allclose(got.astype(np.float64), states[p], rtol=rtol, atol=1e-6)
        assert store.states(p) is got  # cached
        for i in (0, -1):
            np.testing.assert_array_equal(store.layer(i, pooling=p), got[:, i])
    # the shard files hold the three tensors under their names
    info, _ = read_safetensors_header(tmp_path / "s" / "shard-00002.safetensors")
    assert sorted(k for k in info if k != "__metadata__") == [
        "last_answer", "last_prompt", "layer_means", "token_logprobs", "token_offsets"]
    assert info["last_prompt"]["shape"] == (2, L + 1, D)
    report = verify_store(tmp_path / "s")
    assert report["poolings"] == list(POOLINGS) and report["problems"] == []
    store.check_finite()


def test_select_and_layer_read_the_rows_of_every_pooling(tmp_path):
    _, states, _ = write(tmp_path / "s")
    store = open_store(tmp_path / "s")
    rows = [7, 1, 9, 4, 1]
    for sub in (store.select(rows), store.select(np.isin(np.arange(10), rows))):
        want = rows if len(sub) == 5 else sorted(set(rows))
        assert sub.ids == [f"q{i}" for i in want]
        for p in POOLINGS:
            np.testing.assert_array_equal(sub.layer(1, p), states[p][want, 1].astype(np.float16))  # before caching
            np.testing.assert_array_equal(sub.states(p), states[p][want].astype(np.float16))
            np.testing.assert_array_equal(sub.layer(-1, p), states[p][want, -1].astype(np.float16))
    nested = store.select([9, 8, 7]).select([2, 0])
    np.testing.assert_array_equal(nested.states("last-answer"), states["last-answer"][[7, 9]].astype(np.float16))
    with pytest.raises(IndexError):
        store.layer(L + 1, "last-prompt")


def test_single_shard_states_are_memmaps(tmp_path):
    write(tmp_path / "s", n=3, batches=(3,))
    store = open_store(tmp_path / "s")
    assert all(isinstance(store.states(p), np.memmap) for p in POOLINGS)


def test_empty_store_that_chose_the_poolings(tmp_path):
    with StoreWriter(tmp_path / "s", make_manifest(poolings=list(POOLINGS))):
        pass
    store = open_store(tmp_path / "s")
    assert store.poolings == POOLINGS and len(store) == 0
    assert store.states("last-prompt").shape == (0, L + 1, D)


def test_checksum_covers_the_extra_tensors(tmp_path):
    write(tmp_path / "s")
    st = tmp_path / "s" / "shard-00000.safetensors"
    info, _ = read_safetensors_header(st)
    raw, h = st.read_bytes(), hashlib.sha256()
    for name in sorted(k for k in info if k != "__metadata__"):  # all five, by name
        h.update(raw[info[name]["offset"]:info[name]["offset"] + info[name]["nbytes"]])
    assert info["__metadata__"]["tensors_sha256"] == h.hexdigest()


# ---------------------------------------------------------------------------------------------
# stores without them
# ---------------------------------------------------------------------------------------------


def test_a_store_written_without_them_holds_the_mean_only(tmp_path):
    _, states, _ = write(tmp_path / "s", extras=False)
    store = open_store(tmp_path / "s")
    assert store.poolings == ("mean",) and store.manifest["poolings"] == ["mean"]
    np.testing.assert_array_equal(store.states("mean"), states["mean"].astype(np.float16))
    assert "last_prompt" not in read_safetensors_header(tmp_path / "s" / "shard-00000.safetensors")[0]


def test_old_store_without_the_manifest_key(tmp_path):
    path = tmp_path / "s"
    records, states, lps = write(path, extras=False)
    manifest = json.loads((path / "manifest.json").read_text())
    del manifest["poolings"]  # as written before acute kept other poolings
    (path / "manifest.json").write_text(json.dumps(manifest))
    store = open_store(path)
    assert store.poolings == ("mean",)
    np.testing.assert_array_equal(store.layer_means, states["mean"].astype(np.float16))
    np.testing.assert_array_equal(store.layer(1), states["mean"][:, 1].astype(np.float16))
    store.check_finite()
    assert verify_store(path)["poolings"] == ["mean"]
    for read in (lambda: store.states("last-answer"), lambda: store.select([0]).layer(0, "last-prompt")):
        with pytest.raises(InputError, match="no 'last-.*' states") as err:
            read()
        assert str(path) in str(err.value) and REMEDY in str(err.value)
    with pytest.raises(InputError, match="unknown pooling 'first'"):
        store.states("first")
    # resuming it: the records it holds decide
    more, more_states, more_lps = make_data(2, seed=1, start=10)
    with StoreWriter(path, make_manifest()) as w:
        with pytest.raises(InputError, match=r"holds the poolings \['mean'\]") as err:
            add(w, more, more_states, more_lps)
        assert str(path) in str(err.value)
        add(w, more, more_states, more_lps, extras=False)
    assert open_store(path).manifest["poolings"] == ["mean"] and len(open_store(path)) == 12


# ---------------------------------------------------------------------------------------------
# writer errors
# ---------------------------------------------------------------------------------------------


def test_mixing_with_and_without_is_an_error_naming_the_store(tmp_path):
    path = tmp_path / "s"
    records, states, lps = make_data(6)
    with StoreWriter(path, make_manifest(), shard_size=2) as w:
        add(w, records, states, lps, slice(0, 3))
        with pytest.raises(InputError, match="holds the poolings"):
            add(w, records, states, lps, slice(3, 4), extras=False)  # same writer
    with StoreWriter(path, make_manifest(), shard_size=2) as w:  # resumed
        with pytest.raises(InputError) as err:
            add(w, records, states, lps, slice(3, 6), extras=False)
        msg = str(err.value)
        assert str(path) in msg and str(list(POOLINGS)) in msg and "['mean']" in msg
        assert w.num_buffered == 0
        add(w, records, states, lps, slice(3, 6))
    assert open_store(path).ids == [f"q{i}" for i in range(6)]
    # the other way round, and a manifest that declares the other choice
    with StoreWriter(tmp_path / "m", make_manifest()) as w:
        add(w, records, states, lps, slice(0, 2), extras=False)
    with pytest.raises(IncompatibleStoreError, match="poolings") as err:
        StoreWriter(tmp_path / "m", make_manifest(poolings=list(POOLINGS)))
    assert str(tmp_path / "m") in str(err.value)


def test_an_empty_add_decides_nothing(tmp_path):
    records, states, lps = make_data(2)
    with StoreWriter(tmp_path / "s", make_manifest()) as w:
        w.add([], np.zeros((0, L + 1, D)), [])
        add(w, records, states, lps)
    assert open_store(tmp_path / "s").poolings == POOLINGS


def test_bad_extra_states(tmp_path):
    records, states, lps = make_data(2)
    lm, lp_, la = states["mean"], states["last-prompt"], states["last-answer"]
    with StoreWriter(tmp_path / "s", make_manifest()) as w:
        for kw in ({"last_prompt": lp_}, {"last_answer": la}):
            with pytest.raises(InputError, match="both last_prompt and last_answer"):
                w.add(records, lm, lps, **kw)
        with pytest.raises(InputError, match="last_prompt has 1 rows"):
            w.add(records, lm, lps, last_prompt=lp_[:1], last_answer=la)
        with pytest.raises(InputError, match="last_answer hidden size"):
            w.add(records, lm, lps, last_prompt=lp_, last_answer=np.zeros((2, L + 1, D + 1)))
        with pytest.raises(InputError, match="last_prompt has 2 layers"):
            w.add(records, lm, lps, last_prompt=lp_[:, 1:], last_answer=la)
        bad = la.copy()
        bad[1, 0, 0] = np.inf
        with pytest.raises(InputError, match="last_answer has non-finite values.*'q1'"):
            w.add(records, lm, lps, last_prompt=lp_, last_answer=bad)
        big = lp_.copy()
        big[1] *= 1e6
        with pytest.raises(InputError, match="last_prompt overflows float16.*'q1'.*float32"):
            w.add(records, lm, lps, last_prompt=big, last_answer=la)
        with pytest.raises(InputError, match="must be a float array"):
            w.add(records, lm, lps, last_prompt=lp_.astype(int), last_answer=la)
        assert w.num_buffered == 0
        w.add(records, lm, lps, last_prompt=lp_, last_answer=la)
    with pytest.raises(InputError, match="'poolings' must be"):
        StoreWriter(tmp_path / "t", make_manifest(poolings=["mean", "last-answer"]))


# ---------------------------------------------------------------------------------------------
# corruption
# ---------------------------------------------------------------------------------------------


def test_flipped_bytes_in_the_extra_states_are_detected(tmp_path):
    write(tmp_path / "s")
    shard = tmp_path / "s" / "shard-00001.safetensors"
    start = read_safetensors_header(shard)[0]["last_answer"]["offset"] + 4
    raw = shard.read_bytes()
    shard.write_bytes(raw[:start] + bytes(x ^ 0xFF for x in raw[start:start + 8]) + raw[start + 8:])
    with pytest.raises(CorruptStoreError, match="shard-00001.safetensors.*differ from what was committed"):
        verify_store(tmp_path / "s")
    with pytest.raises(CorruptStoreError, match="shard-00001.safetensors"):
        open_store(tmp_path / "s")
    assert len(open_store(tmp_path / "s", verify=False)) == 10


def test_a_non_finite_extra_state_is_named_by_record_and_tensor(tmp_path):
    write(tmp_path / "s")
    shard = tmp_path / "s" / "shard-00001.safetensors"  # records q4..q7
    at = read_safetensors_header(shard)[0]["last_prompt"]["offset"] + 2 * (L + 1) * D * 2  # q6
    raw = shard.read_bytes()
    shard.write_bytes(raw[:at] + np.array([np.nan], "<f2").tobytes() + raw[at + 2:])
    store = open_store(tmp_path / "s", verify=False)
    with pytest.raises(CorruptStoreError, match=r"record 'q6' \(shard-00001.safetensors\) .*in last_prompt"):
        store.check_finite()
    store.select([0, 1, 2]).check_finite()  # other rows are fine


def test_shards_must_hold_exactly_the_store_poolings(tmp_path):
    write(tmp_path / "s")
    shard = tmp_path / "s" / "shard-00000.safetensors"
    rewrite_shard(shard, lambda t: {k: v for k, v in t.items() if k != "last_answer"})
    with pytest.raises(CorruptStoreError, match="shard-00000.safetensors: tensor 'last_answer' is missing"):
        open_store(tmp_path / "s")

    write(tmp_path / "t")
    shard = tmp_path / "t" / "shard-00002.safetensors"
    rewrite_shard(shard, lambda t: {**t, "last_prompt": t["last_prompt"][:, :, :2].copy()})
    with pytest.raises(CorruptStoreError, match=r"shard-00002.safetensors: last_prompt hidden size 2"):
        verify_store(tmp_path / "t")
    rewrite_shard(shard, lambda t: {**t, "last_prompt": t["layer_means"][:1].copy()})
    with pytest.raises(CorruptStoreError, match=r"shard-00002.safetensors: last_prompt is float16 \[1, 3, 3\] "
                                                r"but layer_means is float16 \[2, 3, 3\]"):
        verify_store(tmp_path / "t")
    rewrite_shard(shard, lambda t: {**t, "last_prompt": t["layer_means"].astype(np.float32)})
    with pytest.raises(CorruptStoreError, match="shard-00002.safetensors: last_prompt dtype float32"):
        open_store(tmp_path / "t")

    write(tmp_path / "m", extras=False)  # a mean-only store whose shard holds another tensor
    shard = tmp_path / "m" / "shard-00000.safetensors"
    rewrite_shard(shard, lambda t: {**t, "last_prompt": t["layer_means"]})
    with pytest.raises(CorruptStoreError, match=r"shard-00000.safetensors: has a tensor 'last_prompt'.*\['mean'\]"):
        open_store(tmp_path / "m")

    manifest = json.loads((tmp_path / "m" / "manifest.json").read_text())
    (tmp_path / "m" / "manifest.json").write_text(json.dumps({**manifest, "poolings": ["last-prompt"]}))
    with pytest.raises(CorruptStoreError, match="manifest.json: 'poolings' must be"):
        open_store(tmp_path / "m")


# ---------------------------------------------------------------------------------------------
# part writers
# ---------------------------------------------------------------------------------------------


def test_part_writers_with_all_poolings_merge(tmp_path):
    path = tmp_path / "s"
    records, states, lps = make_data(9)
    man = make_manifest(poolings=list(POOLINGS))
    assert prepare_store(path, man, shard_size=2)["poolings"] == list(POOLINGS)
    w0 = StoreWriter(path, man, shard_size=2, part=0)
    w1 = StoreWriter(path, make_manifest(), shard_size=2, part=1)  # adopts the stored choice
    add(w1, records, states, lps, slice(5, 9))
    add(w0, records, states, lps, slice(0, 3))
    with pytest.raises(InputError, match="holds the poolings"):
        add(w0, records, states, lps, slice(3, 5), extras=False)
    add(w0, records, states, lps, slice(3, 5))
    w0.close()
    w1.close()
    assert finalize_store(path)["poolings"] == list(POOLINGS)
    store = open_store(path)
    assert store.ids == [f"q{i}" for i in range(9)] and store.poolings == POOLINGS
    for p in POOLINGS:
        np.testing.assert_array_equal(store.states(p), states[p].astype(np.float16))
    np.testing.assert_array_equal(store.select([8, 0]).states("last-prompt"),
                                  states["last-prompt"][[8, 0]].astype(np.float16))


def test_part_writers_agree_through_the_prepared_manifest(tmp_path):
    path = tmp_path / "s"
    records, states, lps = make_data(4)
    assert prepare_store(path, make_manifest())["poolings"] == ["mean"]  # prepared without: mean only
    with StoreWriter(path, make_manifest(), part=0) as w:
        with pytest.raises(InputError, match=r"holds the poolings \['mean'\]") as err:
            add(w, records, states, lps)
        assert str(path) in str(err.value)
        add(w, records, states, lps, slice(0, 2), extras=False)
    with pytest.raises(IncompatibleStoreError, match="poolings"):
        StoreWriter(path, make_manifest(poolings=list(POOLINGS)), part=1)
    with pytest.raises(IncompatibleStoreError, match="poolings"):  # it has records now
        prepare_store(path, make_manifest(poolings=list(POOLINGS)))
    assert open_store(path).poolings == ("mean",)
