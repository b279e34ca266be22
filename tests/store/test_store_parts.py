"""Multi-process (data-parallel) stores: part writers, prepare/finalize, locks, shard identity."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from acute.errors import CorruptStoreError, IncompatibleStoreError, StoreError
from acute.store import StoreWriter, finalize_store, open_store, prepare_store, verify_store
from acute.store.format import collection_key

L, D = 2, 3  # 2 decoder layers -> 3 rows per record, hidden size 3


def make_manifest(**overrides):
    m = {
        "model": "tiny",
        "model_fingerprint": {"architecture": "Tiny", "num_layers": L, "hidden_size": D},
        "generation": {"max_new_tokens": 4, "do_sample": False},
        "task": "default",
        "task_settings": {"shots": 0},
        "num_layers": L,
        "hidden_size": D,
    }
    m.update(overrides)
    return m


def make_items(ids, seed=0):
    """{id: (record, layer_means [L+1, D], log-probs)}; every third id (by number) is correct."""
    rng = np.random.default_rng(seed)
    out = {}
    for rid in ids:
        k = int(rid[1:])
        rec = {"id": rid, "prompt": f"Q{k}?", "correct": k % 3 == 0}
        out[rid] = (rec, rng.normal(size=(L + 1, D)), -rng.exponential(0.5, int(rng.integers(0, 5))))
    return out


def add(writer, items, ids):
    ids = list(ids)
    writer.add([items[i][0] for i in ids], np.stack([items[i][1] for i in ids]),
               [items[i][2] for i in ids])


def shard_files(path):
    return sorted(e for e in os.listdir(path) if e.startswith("shard-"))


def assert_store_holds(store, items, ids):
    """The store's rows are exactly ``ids`` in that order, with their data round-tripped."""
    assert store.ids == list(ids)
    np.testing.assert_array_equal(store.layer_means,
                                  np.stack([items[i][1] for i in ids]).astype(np.float16))
    for got, rid in zip(store.token_logprobs, ids):
        np.testing.assert_array_equal(got, items[rid][2].astype(np.float32))


def header_metadata(st_path):
    """The ``__metadata__`` of a safetensors file, parsed by hand."""
    raw = st_path.read_bytes()
    return json.loads(raw[8:8 + int.from_bytes(raw[:8], "little")])["__metadata__"]


IDS = [f"q{i}" for i in range(12)]


# ---------------------------------------------------------------------------------------------
# writing in parts
# ---------------------------------------------------------------------------------------------


def test_two_parts_interleaved_read_as_one_store(tmp_path):
    path = tmp_path / "s"
    items = make_items(IDS)
    prepared = prepare_store(path, make_manifest(), shard_size=2)
    manifest_bytes = (path / "manifest.json").read_bytes()
    w0 = StoreWriter(path, make_manifest(), shard_size=2, part=0)
    w1 = StoreWriter(path, make_manifest(), shard_size=2, part=1)
    assert w0.done_ids == w1.done_ids == frozenset()
    add(w1, items, ["q6", "q7", "q8"])  # part 1 commits first
    add(w0, items, ["q0", "q1", "q2"])
    add(w1, items, ["q9"])
    add(w0, items, ["q3", "q4"])
    assert {".part-000.lock", ".part-001.lock"} <= set(os.listdir(path))
    w0.close()
    w1.close()
    assert shard_files(path) == [f"shard-p{p:03d}-{i:05d}.{e}" for p, n in ((0, 3), (1, 2))
                                 for i in range(n) for e in ("jsonl", "safetensors")]
    assert not [e for e in os.listdir(path) if e.startswith(".")]  # lock files removed
    assert (path / "manifest.json").read_bytes() == manifest_bytes  # parts never write it
    assert prepared["status"] == "collecting" and prepared["num_records"] == 0

    order = ["q0", "q1", "q2", "q3", "q4", "q6", "q7", "q8", "q9"]  # part 0's shards, then 1's
    store = open_store(path)
    assert_store_holds(store, items, order)
    assert verify_store(path)["shards"] == [
        {"file": f, "num_records": n, "checksummed": True} for f, n in [
            ("shard-p000-00000.safetensors", 2), ("shard-p000-00001.safetensors", 2),
            ("shard-p000-00002.safetensors", 1), ("shard-p001-00000.safetensors", 2),
            ("shard-p001-00001.safetensors", 2)]]
    # the order does not depend on which process committed first
    assert open_store(path).ids == order


def test_finalize_store_recounts_from_shards(tmp_path):
    path = tmp_path / "s"
    items = make_items(IDS)
    prepare_store(path, make_manifest(), shard_size=4)
    for part, ids in enumerate([IDS[:5], IDS[5:7], IDS[7:]]):
        with StoreWriter(path, make_manifest(), shard_size=4, part=part) as w:
            add(w, items, ids)
    assert json.loads((path / "manifest.json").read_text())["num_records"] == 0
    m = finalize_store(path)
    # by hand: 12 records; q0, q3, q6, q9 correct; shards of 4: 2 + 1 + 2 = 5
    assert m["num_records"] == 12 and m["num_shards"] == 5 and m["status"] == "complete"
    assert m["summary"] == {"num_records": 12, "num_labelled": 12, "num_correct": 4,
                            "accuracy": pytest.approx(4 / 12)}
    assert json.loads((path / "manifest.json").read_text()) == m
    assert open_store(path).manifest == m
    assert finalize_store(path, status="interrupted")["status"] == "interrupted"
    with pytest.raises(ValueError, match="status"):
        finalize_store(path, status="done")
    with pytest.raises(FileNotFoundError):
        finalize_store(tmp_path / "missing")


def test_shape_inferred_by_parts_is_recorded_at_finalize(tmp_path):
    path = tmp_path / "s"
    man = make_manifest()
    del man["num_layers"], man["hidden_size"], man["model_fingerprint"]
    items = make_items(IDS[:2])
    prepare_store(path, man)
    with StoreWriter(path, man, part=0) as w:
        add(w, items, ["q0"])
        with pytest.raises(ValueError, match="hidden size"):
            w.add([{"id": "x"}], np.zeros((1, L + 1, D + 1)), [np.zeros(1)])
    with StoreWriter(path, man, part=1) as w:
        assert (w.manifest["num_layers"], w.manifest["hidden_size"]) == (L, D)  # from the shards
        add(w, items, ["q1"])
    assert json.loads((path / "manifest.json").read_text()).get("num_layers") is None
    m = finalize_store(path)
    assert (m["num_layers"], m["hidden_size"]) == (L, D)


def test_collection_key_is_written_into_every_shard(tmp_path):
    path = tmp_path / "s"
    items = make_items(IDS[:3])
    stored = prepare_store(path, make_manifest(), shard_size=2)
    with StoreWriter(path, make_manifest(), shard_size=2, part=0) as w:
        add(w, items, IDS[:3])
    fields = ("model_fingerprint", "task", "dtype", "generation", "task_settings")
    # the store is at format_version 2; the key hashes the shard format, 1
    assert stored["format_version"] == 2
    want = hashlib.sha256(json.dumps({"format_version": 1, **{k: stored[k] for k in fields}},
                                     sort_keys=True).encode()).hexdigest()[:16]
    assert collection_key(stored) == want
    for name in ("shard-p000-00000.safetensors", "shard-p000-00001.safetensors"):
        assert header_metadata(path / name)["collection_key"] == want
    # settings outside the key do not change it; settings inside do
    assert collection_key({**stored, "tokenizer": "other"}) == want
    assert collection_key({**stored, "format_version": 1}) == want  # the layout is not in it
    assert collection_key({**stored, "generation": {"max_new_tokens": 5}}) != want


def test_parts_sort_numerically_after_unpartitioned_shards(tmp_path):
    path = tmp_path / "s"
    items = make_items(IDS)
    with StoreWriter(path, make_manifest(), shard_size=1) as w:  # shard-00000 .. shard-00001
        add(w, items, ["q0", "q1"])
    prepare_store(path, make_manifest(), shard_size=1)
    for part, rid in [(1000, "q5"), (999, "q4"), (2, "q3")]:  # "p1000" < "p999" as strings
        with StoreWriter(path, make_manifest(), part=part) as w:
            add(w, items, [rid])
    assert "shard-p1000-00000.safetensors" in os.listdir(path)
    assert open_store(path).ids == ["q0", "q1", "q3", "q4", "q5"]


# ---------------------------------------------------------------------------------------------
# resuming
# ---------------------------------------------------------------------------------------------


def test_resumed_part_continues_its_numbering_and_sees_every_part(tmp_path):
    path = tmp_path / "s"
    items = make_items(IDS)
    prepare_store(path, make_manifest(), shard_size=2)
    with StoreWriter(path, make_manifest(), shard_size=2, part=0) as w:
        add(w, items, ["q0", "q1", "q2"])  # p000-00000, p000-00001
    with StoreWriter(path, make_manifest(), shard_size=2, part=1) as w:
        add(w, items, ["q5", "q6"])  # p001-00000
    prepare_store(path, make_manifest(), shard_size=2)
    with StoreWriter(path, make_manifest(), shard_size=2, part=0) as w:
        assert w.done_ids == {"q0", "q1", "q2", "q5", "q6"}
        with pytest.raises(ValueError, match="duplicate id 'q5'.*committed"):
            add(w, items, ["q5"])  # another part's record
        add(w, items, ["q3", "q4"])
        assert w.done_ids == {"q0", "q1", "q2", "q3", "q4", "q5", "q6"}
    assert "shard-p000-00002.safetensors" in os.listdir(path)
    assert "shard-p000-00000.safetensors" in os.listdir(path)  # nothing overwritten
    assert_store_holds(open_store(path), items, ["q0", "q1", "q2", "q3", "q4", "q5", "q6"])


def run_parts(path, items, num_parts, *, crash_part=None, shard_size=2):
    """One data-parallel run: prepare, every part reads done_ids, writes its slice of the rest,
    finalize. ``crash_part`` commits one shard and then dies with a buffered record.
    Returns the ids each part generated."""
    prepare_store(path, make_manifest(), shard_size=shard_size)
    writers = [StoreWriter(path, make_manifest(), shard_size=shard_size, part=k)
               for k in range(num_parts)]
    done = [w.done_ids for w in writers]
    assert all(d == done[0] for d in done)  # the barrier: all parts see the same done_ids
    todo = [i for i in items if i not in done[0]]
    generated = {}
    for k, w in enumerate(writers):
        mine = todo[k::num_parts]
        if k == crash_part:
            mine = mine[:shard_size + 1]
            add(w, items, mine)
            w.abort()  # the buffered last record is lost, the committed shard stays
        else:
            add(w, items, mine)
            w.close()
        generated[k] = mine
    finalize_store(path, status="interrupted" if crash_part is not None else "complete")
    return generated


def test_resume_with_a_different_number_of_parts(tmp_path):
    path = tmp_path / "s"
    items = make_items(IDS)
    # part 2's slice is q2, q5, q8, q11: it commits q2, q5, dies with q8 buffered, never gets to q11
    first = run_parts(path, items, 3, crash_part=2)
    assert first[2] == ["q2", "q5", "q8"]
    after_crash = open_store(path)
    assert sorted(after_crash.ids) == sorted(set(IDS) - {"q8", "q11"})
    assert after_crash.manifest["status"] == "interrupted"
    assert after_crash.manifest["num_records"] == 10

    second = run_parts(path, items, 2)
    assert second == {0: ["q8"], 1: ["q11"]}  # only the missing records are redone
    store = open_store(path)
    assert sorted(store.ids) == sorted(IDS) and len(set(store.ids)) == len(IDS)
    for rid, row, lp in zip(store.ids, store.layer_means, store.token_logprobs):
        np.testing.assert_array_equal(row, items[rid][1].astype(np.float16))
        np.testing.assert_array_equal(lp, items[rid][2].astype(np.float32))
    assert store.manifest["status"] == "complete" and store.manifest["num_records"] == 12
    assert store.manifest["summary"]["num_correct"] == 4


def test_single_writer_after_parts(tmp_path):
    path = tmp_path / "s"
    items = make_items(IDS)
    run_parts(path, items={i: items[i] for i in IDS[:6]}, num_parts=2)
    with StoreWriter(path, make_manifest(), shard_size=4) as w:
        assert w.done_ids == set(IDS[:6])
        add(w, items, IDS[6:])  # unpartitioned shard-00000, shard-00001
    assert {"shard-00000.safetensors", "shard-00001.safetensors"} <= set(os.listdir(path))
    store = open_store(path)
    # unpartitioned shards first, then part 0 (q0, q2, q4), then part 1 (q1, q3, q5)
    assert_store_holds(store, items, IDS[6:] + ["q0", "q2", "q4", "q1", "q3", "q5"])
    m = store.manifest
    assert m["num_records"] == 12 and m["num_shards"] == 2 + 2 + 2 and m["status"] == "complete"


# ---------------------------------------------------------------------------------------------
# locks
# ---------------------------------------------------------------------------------------------


def test_second_claimant_of_a_part_is_refused(tmp_path):
    path = tmp_path / "s"
    prepare_store(path, make_manifest())
    w = StoreWriter(path, make_manifest(), part=3)
    with pytest.raises(StoreError, match=f"{path}.*part 3 is already being written"):
        StoreWriter(path, make_manifest(), part=3)
    StoreWriter(path, make_manifest(), part=4).close()  # other parts are free
    w.close()
    StoreWriter(path, make_manifest(), part=3).close()  # released on close


def test_single_writer_and_part_writers_exclude_each_other(tmp_path):
    path = tmp_path / "s"
    prepare_store(path, make_manifest())
    with StoreWriter(path, make_manifest(), part=0):
        for call in (lambda: StoreWriter(path, make_manifest()),
                     lambda: prepare_store(path, make_manifest()),
                     lambda: finalize_store(path)):
            with pytest.raises(StoreError, match="being written by another process"):
                call()
    with StoreWriter(path, make_manifest()):
        with pytest.raises(StoreError, match="being written by another process"):
            StoreWriter(path, make_manifest(), part=0)
        with pytest.raises(StoreError, match="being written by another process"):
            StoreWriter(path, make_manifest())
    assert not (path / ".part-000.lock").exists()  # the refused part never created its lock
    StoreWriter(path, make_manifest(), part=0).abort()  # released after the single writer


def test_locks_released_when_a_part_writer_raises(tmp_path):
    path = tmp_path / "s"
    items = make_items(IDS[:3])
    prepare_store(path, make_manifest(), shard_size=2)
    with pytest.raises(RuntimeError):
        with StoreWriter(path, make_manifest(), shard_size=2, part=0) as w:
            add(w, items, IDS[:3])  # q0, q1 committed; q2 buffered
            raise RuntimeError("model crashed")
    assert open_store(path).ids == ["q0", "q1"]
    assert open_store(path).manifest["status"] == "collecting"  # a part never writes it
    with StoreWriter(path, make_manifest(), shard_size=2, part=0) as w:
        assert w.done_ids == {"q0", "q1"}
    with pytest.raises(ValueError, match="closed"):
        add(w, items, ["q2"])


def test_part_lock_won_on_a_deleted_lock_file_is_retried(tmp_path, monkeypatch):
    """The holder of a part deletes its lock file on release; a claimant that opened the old file
    just before and locks it just after must not believe it holds the part."""
    import acute.store.locks as locks

    path = tmp_path / "s"
    prepare_store(path, make_manifest())
    real = locks._try_flock
    calls = []

    def racing_flock(fd, exclusive):
        calls.append(exclusive)
        if len(calls) == 2:  # the first try on the part lock: its holder releases it meanwhile
            (path / ".part-000.lock").unlink()
        return real(fd, exclusive)

    monkeypatch.setattr(locks, "_try_flock", racing_flock)
    w = StoreWriter(path, make_manifest(), part=0)
    monkeypatch.setattr(locks, "_try_flock", real)
    assert calls == [False, True, True]  # store lock (shared), part lock, retried part lock
    assert (path / ".part-000.lock").exists()
    with pytest.raises(StoreError, match="part 0 is already being written"):
        StoreWriter(path, make_manifest(), part=0)
    w.close()


def test_part_writer_needs_a_prepared_store(tmp_path):
    with pytest.raises(StoreError, match=f"{tmp_path / 'new' / 'manifest.json'}.*prepare_store"):
        StoreWriter(tmp_path / "new", make_manifest(), part=0)
    assert not (tmp_path / "new").exists()
    # a single writer's store (format_version 1) must be prepared too
    path = tmp_path / "single"
    StoreWriter(path, make_manifest()).close()
    before = (path / "manifest.json").read_bytes()
    with pytest.raises(StoreError, match="format_version 1 .*prepare_store"):
        StoreWriter(path, make_manifest(), part=0)
    assert (path / "manifest.json").read_bytes() == before
    prepare_store(path, make_manifest())
    StoreWriter(path, make_manifest(), part=0).close()
    with pytest.raises(ValueError, match="part"):
        StoreWriter(tmp_path / "new", make_manifest(), part=-1)
    with pytest.raises(ValueError, match="part"):
        StoreWriter(tmp_path / "new", make_manifest(), part=True)


CHILD = textwrap.dedent("""
    import sys
    import numpy as np
    from acute.store import StoreWriter
    path, manifest = sys.argv[1], {manifest}
    w = StoreWriter(path, manifest, shard_size=2, part=0)
    recs = [{{"id": f"c{{i}}"}} for i in range(3)]
    w.add(recs, np.zeros((3, {rows}, {d})), [np.zeros(1)] * 3)  # c0, c1 committed, c2 buffered
    print("ready", flush=True)
    sys.stdin.read()  # hold the locks until killed
""")


def test_a_killed_process_leaves_no_lock_and_loses_only_its_buffer(tmp_path):
    path = tmp_path / "s"
    prepare_store(path, make_manifest())
    code = CHILD.format(manifest=repr(make_manifest()), rows=L + 1, d=D)
    child = subprocess.Popen([sys.executable, "-c", code, str(path)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        with pytest.raises(StoreError, match="part 0 is already being written"):
            StoreWriter(path, make_manifest(), part=0)
        with pytest.raises(StoreError, match="being written by another process"):
            prepare_store(path, make_manifest())
    finally:
        child.kill()
        child.wait()
    assert (path / ".part-000.lock").exists()  # left behind by the dead process, but unlocked
    with StoreWriter(path, make_manifest(), part=0) as w:
        assert w.done_ids == {"c0", "c1"}
    assert not (path / ".part-000.lock").exists()
    assert open_store(path).ids == ["c0", "c1"]


# ---------------------------------------------------------------------------------------------
# bad input
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("change, key", [
    ({"task": "triviaqa"}, "task"),
    ({"generation": {"max_new_tokens": 99, "do_sample": False}}, "generation"),
    ({"task_settings": {"shots": 3}}, "task_settings"),
    ({"hidden_size": D + 1}, "hidden_size"),
])
def test_incompatible_manifest_is_refused(tmp_path, change, key):
    path = tmp_path / "s"
    prepare_store(path, make_manifest())
    before = (path / "manifest.json").read_text()
    with pytest.raises(IncompatibleStoreError, match=f"manifest.json.*'{key}'"):
        prepare_store(path, make_manifest(**change))
    with pytest.raises(IncompatibleStoreError, match=f"manifest.json.*'{key}'"):
        StoreWriter(path, make_manifest(**change), part=0)
    with pytest.raises(IncompatibleStoreError, match=f"'{key}'"):
        StoreWriter(path, make_manifest(**change))
    assert (path / "manifest.json").read_text() == before
    with pytest.raises(IncompatibleStoreError, match="'dtype'"):
        StoreWriter(path, make_manifest(), dtype="float32", part=0)
    StoreWriter(path, make_manifest(), part=0).close()  # the refused writers released the locks


@pytest.mark.parametrize("change", [{"task": "sciq"}, {"generation": {"max_new_tokens": 9}}])
def test_shard_copied_from_another_collection_is_refused(tmp_path, change):
    items = make_items(IDS)
    a, b = tmp_path / "a", tmp_path / "b"
    run_parts(a, {i: items[i] for i in IDS[:4]}, 1)
    prepare_store(b, make_manifest(**change))
    with StoreWriter(b, make_manifest(**change), part=0) as w:
        add(w, items, IDS[4:6])
    for ext in ("jsonl", "safetensors"):  # copied in under a part number that a has not used
        (a / f"shard-p005-00000.{ext}").write_bytes((b / f"shard-p000-00000.{ext}").read_bytes())
    for call in (lambda: open_store(a), lambda: verify_store(a), lambda: finalize_store(a),
                 lambda: StoreWriter(a, make_manifest(), part=0),
                 lambda: prepare_store(a, make_manifest())):
        with pytest.raises(IncompatibleStoreError,
                           match="shard-p005-00000.safetensors.*different collection"):
            call()
    (a / "shard-p005-00000.safetensors").unlink()  # removing it repairs the store
    assert open_store(a).ids == IDS[:4]


def test_same_id_in_two_parts_is_corrupt(tmp_path):
    path = tmp_path / "s"
    items = make_items(IDS)
    prepare_store(path, make_manifest())
    w0 = StoreWriter(path, make_manifest(), part=0)
    w1 = StoreWriter(path, make_manifest(), part=1)
    add(w0, items, ["q0", "q1"])
    add(w1, items, ["q2", "q1"])  # concurrent writers cannot see each other's buffers
    w0.close()
    w1.close()
    for call in (lambda: open_store(path), lambda: verify_store(path),
                 lambda: finalize_store(path)):
        with pytest.raises(CorruptStoreError,
                           match=r"shard-p001-00000.jsonl: id 'q1' already appears in "
                                 r"shard-p000-00000.jsonl"):
            call()


def test_crashed_part_leftovers(tmp_path):
    path = tmp_path / "s"
    items = make_items(IDS)
    prepare_store(path, make_manifest(), shard_size=2)
    with StoreWriter(path, make_manifest(), shard_size=2, part=0) as w:
        add(w, items, ["q0", "q1"])
    # part 0 died while committing its next shard; part 1 is (as far as we know) mid-commit
    mine = ["shard-p000-00001.jsonl", ".shard-p000-00002.jsonl.ab12.tmp",
            ".shard-p000-00002.safetensors.ab12.tmp"]
    theirs = [".shard-p001-00000.safetensors.cd34.tmp", "shard-p001-00003.jsonl"]
    (path / mine[0]).write_text(json.dumps({"id": "q2"}) + "\n")
    for name in mine[1:] + theirs:
        (path / name).write_bytes(b"\x00partial")
    (path / ".part-000.lock").write_text("")  # dead holders' lock files
    (path / ".part-007.lock").write_text("")

    store = open_store(path)
    assert store.ids == ["q0", "q1"]  # readers ignore the leftovers
    assert verify_store(path)["orphans"] == sorted(mine + theirs)
    with StoreWriter(path, make_manifest(), shard_size=2, part=0) as w:
        assert w.done_ids == {"q0", "q1"}
        assert verify_store(path)["orphans"] == sorted(theirs)  # only its own were deleted
        add(w, items, ["q2", "q3"])
    assert "shard-p000-00001.safetensors" in os.listdir(path)
    assert_store_holds(open_store(path), items, ["q0", "q1", "q2", "q3"])
    prepare_store(path, make_manifest(), shard_size=2)  # the main process cleans the rest
    assert verify_store(path)["orphans"] == []
    assert not [e for e in os.listdir(path) if e.startswith(".")]


def test_store_without_collection_keys_still_opens_and_resumes(tmp_path):
    path = tmp_path / "s"
    items = make_items(IDS)
    with StoreWriter(path, make_manifest(), shard_size=2) as w:
        add(w, items, IDS[:4])
    for name in ("shard-00000.safetensors", "shard-00001.safetensors"):
        # as written before collection keys existed
        save_file(load_file(str(path / name)), str(path / name),
                  metadata={"format": "acute-store", "num_records": "2"})
        assert "collection_key" not in header_metadata(path / name)
    assert_store_holds(open_store(path), items, IDS[:4])
    run_parts(path, items, 2)
    store = open_store(path)
    assert sorted(store.ids) == sorted(IDS) and store.manifest["num_records"] == 12
    assert_store_holds(store.select(range(4)), items, IDS[:4])


# ---------------------------------------------------------------------------------------------
# format versions
# ---------------------------------------------------------------------------------------------


def test_format_version_1_until_prepared_for_parts_and_keys_survive_the_upgrade(tmp_path):
    path = tmp_path / "s"
    items = make_items(IDS)
    with StoreWriter(path, make_manifest(), shard_size=2) as w:
        add(w, items, IDS[:3])
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["format_version"] == 1  # older acute releases read it
    key_v1 = header_metadata(path / "shard-00000.safetensors")["collection_key"]
    assert prepare_store(path, make_manifest(), shard_size=2)["format_version"] == 2
    with StoreWriter(path, make_manifest(), shard_size=2, part=0) as w:
        add(w, items, IDS[3:6])
    assert header_metadata(path / "shard-p000-00000.safetensors")["collection_key"] == key_v1
    finalize_store(path)
    # a single writer resuming the partitioned store keeps it at 2
    with StoreWriter(path, make_manifest(), shard_size=2) as w:
        add(w, items, IDS[6:8])
    store = open_store(path)
    assert store.manifest["format_version"] == 2
    assert sorted(store.ids) == sorted(IDS[:8])


@pytest.mark.parametrize("version, error, match", [
    (3, StoreError, "format_version 3 is newer than this acute supports \\(2\\).*upgrade"),
    ("2", CorruptStoreError, "format_version must be a positive int, got '2'"),
    (0, CorruptStoreError, "format_version must be a positive int, got 0"),
])
def test_unreadable_format_version_is_refused_untouched(tmp_path, version, error, match):
    path = tmp_path / "s"
    with StoreWriter(path, make_manifest(), shard_size=2) as w:
        add(w, make_items(IDS[:2]), IDS[:2])
    mpath = path / "manifest.json"
    mpath.write_text(json.dumps({**json.loads(mpath.read_text()), "format_version": version}))
    before = sorted((e, (path / e).read_bytes()) for e in os.listdir(path))
    for action in (lambda: open_store(path),
                   lambda: StoreWriter(path, make_manifest()),
                   lambda: prepare_store(path, make_manifest())):
        with pytest.raises(error, match=f"{mpath}: {match}"):
            action()
    assert sorted((e, (path / e).read_bytes()) for e in os.listdir(path)) == before
