"""The commit protocol shared by stores and protocol records (acute.store.commit), tested on its
own: shard order and the next index by hand, a kill at each step of a commit, the identity check
naming the differing key, and the protocol's record shards written the way they always were."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from acute.errors import IncompatibleStoreError, InputError, StoreError
from acute.protocol.records import RecordShards
from acute.store.commit import ShardDirectory, check_identity

STORE_FILES = ("jsonl", "safetensors")


def _touch(path, *names):
    for name in names:
        (path / name).write_bytes(b"x")


def test_committed_order_and_next_index_by_hand(tmp_path):
    _touch(tmp_path, "shard-p001-00000.safetensors", "shard-00002.safetensors", "shard-p000-00003.safetensors",
           "shard-00000.safetensors", "shard-p000-00001.safetensors", "shard-00005.jsonl", "manifest.json",
           "shard-00007.safetensors.txt", ".shard-00009.safetensors.ab12.tmp")
    d = ShardDirectory(tmp_path, STORE_FILES)
    assert [(part, index, p.name) for part, index, p in d.committed()] == [
        (None, 0, "shard-00000.safetensors"), (None, 2, "shard-00002.safetensors"),
        (0, 1, "shard-p000-00001.safetensors"), (0, 3, "shard-p000-00003.safetensors"),
        (1, 0, "shard-p001-00000.safetensors")]
    # one past the highest index of the writer's own part, never a gap's index
    assert d.next_index() == 3
    assert ShardDirectory(tmp_path, STORE_FILES, part=0).next_index() == 4
    assert ShardDirectory(tmp_path, STORE_FILES, part=1).next_index() == 1
    assert ShardDirectory(tmp_path, STORE_FILES, part=2).next_index() == 0
    # with the .jsonl as the marker (protocol records), the one .jsonl is the one shard
    assert [p.name for _, _, p in ShardDirectory(tmp_path, ("jsonl",)).committed()] == ["shard-00005.jsonl"]
    assert ShardDirectory(tmp_path, ("jsonl",)).next_index() == 6


def test_orphans_are_temporaries_and_unmarked_files_of_the_writers_part(tmp_path):
    _touch(tmp_path, "shard-00000.jsonl", "shard-00000.safetensors", "shard-00001.jsonl",
           ".shard-00002.jsonl.ab12.tmp", ".tmpAb12Cd", "shard-p000-00000.jsonl",
           ".shard-p001-00004.safetensors.x.tmp", "manifest.json", ".manifest.json.y.tmp")
    owner = ShardDirectory(tmp_path, STORE_FILES)
    assert owner.orphans() == sorted([".manifest.json.y.tmp", ".shard-00002.jsonl.ab12.tmp",
                                      ".shard-p001-00004.safetensors.x.tmp", ".tmpAb12Cd",
                                      "shard-00001.jsonl", "shard-p000-00000.jsonl"])
    assert ShardDirectory(tmp_path, STORE_FILES, part=1).orphans() == [".shard-p001-00004.safetensors.x.tmp"]
    assert ShardDirectory(tmp_path, STORE_FILES, part=0).remove_temporaries() == ["shard-p000-00000.jsonl"]
    assert not (tmp_path / "shard-p000-00000.jsonl").exists()
    # a one-file shard has no unmarked files: every .jsonl is committed
    assert "shard-00001.jsonl" not in ShardDirectory(tmp_path, ("jsonl",)).orphans()
    owner.remove_temporaries()
    assert sorted(os.listdir(tmp_path)) == ["manifest.json", "shard-00000.jsonl", "shard-00000.safetensors"]


def test_commit_writes_bytes_and_callbacks_in_order(tmp_path):
    d = ShardDirectory(tmp_path, STORE_FILES, part=2)
    marker = d.commit(0, {"jsonl": b'{"id": 1}\n', "safetensors": lambda p: p.write_bytes(b"tensors")})
    assert marker == tmp_path / "shard-p002-00000.safetensors"
    assert (tmp_path / "shard-p002-00000.jsonl").read_bytes() == b'{"id": 1}\n'
    assert marker.read_bytes() == b"tensors"
    assert sorted(os.listdir(tmp_path)) == ["shard-p002-00000.jsonl", "shard-p002-00000.safetensors"]
    assert d.next_index() == 1
    mask = os.umask(0)
    os.umask(mask)
    assert marker.stat().st_mode & 0o777 == 0o666 & ~mask


def test_commit_refuses_a_committed_shard_and_wrong_payloads(tmp_path):
    d = ShardDirectory(tmp_path, ("jsonl",))
    d.commit(0, {"jsonl": b"first\n"})
    with pytest.raises(StoreError, match="shard-00000.jsonl: already committed"):
        d.commit(0, {"jsonl": b"second\n"})
    assert (tmp_path / "shard-00000.jsonl").read_bytes() == b"first\n"
    with pytest.raises(InputError, match=r"\['jsonl'\], got payloads for \['safetensors'\]"):
        d.commit(1, {"safetensors": b""})
    with pytest.raises(InputError, match="distinct"):
        ShardDirectory(tmp_path, ("jsonl", "jsonl"))


def test_a_failing_writer_commits_nothing_and_leaves_no_temporary(tmp_path):
    d = ShardDirectory(tmp_path, STORE_FILES)
    d.commit(0, {"jsonl": b"a\n", "safetensors": b"A"})

    def full_disk(path):
        path.write_bytes(b"\0" * 10)
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space"):
        d.commit(1, {"jsonl": b"b\n", "safetensors": full_disk})
    assert sorted(os.listdir(tmp_path)) == ["shard-00000.jsonl", "shard-00000.safetensors"]


KILL = """
import os, signal, sys
from acute.store import commit as c
d = c.ShardDirectory(sys.argv[1], ("jsonl", "safetensors"))
d.commit(0, {"jsonl": b"a\\n", "safetensors": b"A"})
d.commit(1, {"jsonl": b"b\\n", "safetensors": b"B"})
step, real, calls = sys.argv[2], os.replace, []

def replace(src, dst):
    calls.append(dst)
    if step == "before-renames" or len(calls) == 2:  # before the first rename, or between the two
        os.kill(os.getpid(), signal.SIGKILL)
    real(src, dst)

c.os.replace = replace
d.commit(2, {"jsonl": b"c\\n", "safetensors": b"C"})
"""


@pytest.mark.parametrize("step", ["before-renames", "between-renames"])
def test_a_kill_during_a_commit_leaves_the_earlier_shards_and_no_partial_one(tmp_path, step):
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(KILL), str(tmp_path), step],
                          capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=120)
    assert proc.returncode == -9, proc.stderr[-2000:]
    d = ShardDirectory(tmp_path, STORE_FILES)
    assert [p.name for _, _, p in d.committed()] == ["shard-00000.safetensors", "shard-00001.safetensors"]
    assert d.next_index() == 2
    left = d.orphans()  # the killed commit's temporaries and, between the renames, its .jsonl
    temps = [name for name in left if name != "shard-00002.jsonl"]
    assert all(re.match(r"^\.shard-00002\.(jsonl|safetensors)\..+\.tmp$", name) for name in temps)
    assert len(temps) == (2 if step == "before-renames" else 1)
    assert ("shard-00002.jsonl" in left) == (step == "between-renames")
    assert d.remove_temporaries() == left
    assert sorted(os.listdir(tmp_path)) == [f"shard-0000{i}.{e}" for i in range(2) for e in STORE_FILES]
    d.commit(2, {"jsonl": b"c\n", "safetensors": b"C"})  # the resumed writer commits the shard again
    assert (tmp_path / "shard-00002.jsonl").read_bytes() == b"c\n"


def test_check_identity_names_each_differing_key(tmp_path):
    where = tmp_path / "manifest.json"
    check_identity(where, {"a": 1, "b": [1]}, {"b": [1], "a": 1}, what="it", remedy="-")
    with pytest.raises(IncompatibleStoreError) as err:
        check_identity(where, {"a": 1, "b": 2, "c": 3}, {"a": 1, "b": 5, "c": 4}, what="the store",
                       remedy="use another folder")
    assert str(err.value) == (f"{where}: cannot resume the store: 'b', 'c' differ ('b': stored 2, new 5; "
                              "'c': stored 3, new 4); use another folder")
    with pytest.raises(IncompatibleStoreError, match=r"'task' differs \('task': stored 'x', new None\)"):
        check_identity(where, {"task": "x"}, {}, what="it", remedy="-")
    with pytest.raises(IncompatibleStoreError, match=r"'task' differs \('task': stored None, new 'y'\)"):
        check_identity(where, None, {"task": "y"}, what="it", remedy="-")
    # only the keys asked for count
    check_identity(where, {"a": 1, "extra": 1}, {"a": 1, "extra": 2}, ["a"], what="it", remedy="-")


def test_record_shards_write_and_read_the_files_they_always_did(tmp_path):
    """A records folder as acute wrote it before the shared protocol (manifest indented by 1,
    shards written whole by write_text_atomic) loads, and new shards continue it byte for byte."""
    folder = tmp_path / "records"
    folder.mkdir()
    manifest = {"key": {"task": "t", "variant": "unit"}, "model": "tiny"}
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=1, ensure_ascii=False), encoding="utf-8")
    old = [{"id": "q0", "text": "café"}, {"id": "q1", "x": 1.5}]
    (folder / "shard-00000.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in old),
                                              encoding="utf-8")
    (folder / ".shard-00001.jsonl.k1ll3d.tmp").write_text('{"id": "q2"', encoding="utf-8")
    shards = RecordShards(folder, manifest)
    assert shards.records == old and set(shards.done) == {"q0", "q1"}
    assert sorted(os.listdir(folder)) == ["manifest.json", "shard-00000.jsonl"]  # the stale temporary is gone
    new = [{"id": "q2", "inf": float("inf"), "word": "naïve"}]
    shards.commit(new)
    expected = json.dumps({"id": "q2", "inf": 1e30, "word": "naïve"}, ensure_ascii=False) + "\n"
    assert (folder / "shard-00001.jsonl").read_bytes() == expected.encode("utf-8")
    assert RecordShards(folder).records == old + [{"id": "q2", "inf": 1e30, "word": "naïve"}]
    with pytest.raises(IncompatibleStoreError, match="'variant': stored 'unit', new 'percent'"):
        RecordShards(folder, {**manifest, "key": {"task": "t", "variant": "percent"}})


def test_record_shards_continue_after_a_gap(tmp_path):
    folder = tmp_path / "records"
    shards = RecordShards(folder, {"key": {}})
    shards.commit([{"id": 0}])
    shards.commit([{"id": 1}])
    (folder / "shard-00000.jsonl").unlink()  # a shard moved out by hand
    again = RecordShards(folder)
    again.commit([{"id": 2}])  # goes after shard 1, never over it
    assert sorted(p.name for p in folder.glob("shard-*")) == ["shard-00001.jsonl", "shard-00002.jsonl"]
    assert [r["id"] for r in RecordShards(folder).records] == [1, 2]
