"""Fault injection: SIGKILL and SIGTERM at random moments of a collection and of a protocol
study, a full disk, then a resume; and property-based tests (hypothesis) of the metrics and of
the store reader against random inputs.

Every scenario runs the real command (``python -m acute ...``) on a tiny random model in a
subprocess, so the kill lands wherever the process happens to be (generating, writing a shard,
renaming, updating the manifest). Each is bounded by timeouts.
"""

from __future__ import annotations

import errno
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from acute import metrics
from acute.cli import main
from acute.errors import AcuteError, CorruptStoreError
from acute.store import StoreWriter, open_store, verify_store

REPO = Path(__file__).resolve().parents[2]
N = 48
COMMON = ["--max-new-tokens", "4", "--batch-size", "2", "--shard-size", "4", "--quiet", "-O", "shots=0"]


@pytest.fixture(scope="module")
def questions(tmp_path_factory):
    path = tmp_path_factory.mktemp("faults") / "q.jsonl"
    path.write_text("".join(json.dumps({"id": f"q{i:03d}", "question": f"What is {i} times {i + 3}?",
                                        "answers": [str(i * (i + 3))]}) + "\n" for i in range(N)),
                    encoding="utf-8")
    return path


def collect_argv(model_dir, questions, out):
    return ["collect", "--model", str(model_dir), "--task", str(questions), "--out", str(out), *COMMON]


@pytest.fixture(scope="module")
def reference(tmp_path_factory, tiny_model_dir, questions):
    out = tmp_path_factory.mktemp("reference") / "store"
    assert main(collect_argv(tiny_model_dir, questions, out)) == 0
    return open_store(out)


def start(argv):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    return subprocess.Popen([sys.executable, "-m", "acute", *map(str, argv)], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for(condition, timeout=120.0, poll=0.05):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(poll)
    return False


def freeze_with_shards_left(proc, out, committed: int) -> int:
    """Stop ``proc`` (SIGSTOP) once ``committed`` shards exist and return how many exist then; the
    test asserts that shards remain, so the signal it sends next lands mid-collection, every run."""
    assert wait_for(lambda: len(list(out.glob("shard-*.safetensors"))) >= committed, poll=0.002)
    proc.send_signal(signal.SIGSTOP)
    n = len(list(out.glob("shard-*.safetensors")))
    assert n < N // 4, f"the collection committed all {n} shards before it was stopped"
    return n


def same_as_reference(store, reference):
    assert sorted(store.ids) == sorted(reference.ids) and len(set(store.ids)) == N
    order = [reference.ids.index(i) for i in store.ids]
    assert [r["generation"] for r in store.records] == [reference.records[i]["generation"] for i in order]
    assert [r["correct"] for r in store.records] == [reference.records[i]["correct"] for i in order]
    # batches group differently after a resume: equal up to the rounding of padded batches
    np.testing.assert_allclose(store.layer_means, reference.layer_means[order], rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sigkill_during_collection_then_resume_equals_an_uninterrupted_run(
        seed, tmp_path, tiny_model_dir, questions, reference):
    out = tmp_path / "store"
    proc = start(collect_argv(tiny_model_dir, questions, out))
    try:
        freeze_with_shards_left(proc, out, committed=1 + seed)
        # thaw for a moment, so the kill lands anywhere: generating, committing, renaming
        proc.send_signal(signal.SIGCONT)
        time.sleep(random.Random(seed).uniform(0.0, 0.02))
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
    partial = verify_store(out)  # whatever was committed is intact
    assert partial["num_records"] % 4 == 0 and partial["num_records"] < N  # the resume below has work
    assert main(collect_argv(tiny_model_dir, questions, out)) == 0
    store = open_store(out)
    assert store.manifest["status"] == "complete"
    assert not [p for p in os.listdir(out) if p.startswith(".")]  # no temporaries left behind
    same_as_reference(store, reference)


def test_sigterm_marks_the_store_interrupted_and_exits_143(tmp_path, tiny_model_dir, questions, reference):
    out = tmp_path / "store"
    proc = start(collect_argv(tiny_model_dir, questions, out))
    try:
        freeze_with_shards_left(proc, out, committed=1)
    finally:
        proc.send_signal(signal.SIGTERM)  # delivered as the process continues
        proc.send_signal(signal.SIGCONT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143 and "terminated; committed shards are kept" in err
    assert "Traceback" not in err
    assert json.loads((out / "manifest.json").read_text(encoding="utf-8"))["status"] == "interrupted"
    assert main(collect_argv(tiny_model_dir, questions, out)) == 0
    same_as_reference(open_store(out), reference)


def test_a_full_disk_leaves_the_store_consistent_and_resumable(tmp_path, tiny_model_dir, questions, reference,
                                                               monkeypatch, capsys):
    """The disk fills up while the third shard is written (a patched writer raising ENOSPC)."""
    import safetensors.numpy

    real = safetensors.numpy.save_file
    calls = []

    def full_disk(tensors, filename, metadata=None):
        calls.append(filename)
        if len(calls) == 3:
            Path(filename).write_bytes(b"\0" * 100)  # a partial write before the error
            raise OSError(errno.ENOSPC, "No space left on device", filename)
        return real(tensors, filename, metadata=metadata)

    monkeypatch.setattr(safetensors.numpy, "save_file", full_disk)
    out = tmp_path / "store"
    assert main(collect_argv(tiny_model_dir, questions, out)) == 2
    err = capsys.readouterr().err
    assert "No space left on device" in err and "a rerun resumes" in err and "Traceback" not in err
    report = verify_store(out)
    assert report["num_records"] == 8 and report["status"] == "interrupted" and not report["orphans"]
    monkeypatch.setattr(safetensors.numpy, "save_file", real)
    assert main(collect_argv(tiny_model_dir, questions, out)) == 0
    same_as_reference(open_store(out), reference)


PROTOCOL_ROWS = [{"id": f"p{i}", "question": f"Which number follows {i}?", "answers": [str(i + 1)],
                  "plausible_wrong": [str(i + 2)]} for i in range(6)]


def test_sigkill_during_a_protocol_study_leaves_no_partial_report(tmp_path, tiny_model_dir):
    """Killed after its first record shard (frozen there, so the kill lands mid-study every run):
    the committed shard is kept byte for byte, no report is half-written, and the rerun finishes
    with the records an uninterrupted run has."""
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps(r) + "\n" for r in PROTOCOL_ROWS), encoding="utf-8")
    argv = ["protocol", "--model", tiny_model_dir, "--task", rows, "-O", "shots=0", "--n-bootstrap", 5,
            "--batch-size", 2, "--shard-size", 2]
    ref = tmp_path / "ref"
    assert main([*map(str, argv), "--out", str(ref)]) == 0
    out = tmp_path / "killed"
    first = out / "records" / "shard-00000.jsonl"
    proc = start([*argv, "--out", out])
    try:
        assert wait_for(first.is_file, poll=0.002)
        proc.send_signal(signal.SIGSTOP)
        shards = sorted((out / "records").glob("shard-*.jsonl"))
        assert len(shards) < len(PROTOCOL_ROWS) // 2, "the study committed every shard before it was stopped"
        assert not (out / "protocol.json").exists()
        kept = first.read_bytes()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
    for f in out.glob("*.json"):
        json.loads(f.read_text(encoding="utf-8"))  # any file there is whole, never half-written
    assert main([*map(str, argv), "--out", str(out)]) == 0
    assert first.read_bytes() == kept  # resumed, not recomputed
    done, want = (json.loads((d / "protocol.json").read_text(encoding="utf-8")) for d in (out, ref))
    assert done["records"] == want["records"] and done["cells"] == want["cells"]


# ----------------------------------------------------------------------------- properties
probabilities = st.lists(st.floats(0.0, 1.0, allow_nan=False), min_size=2, max_size=200)


@settings(max_examples=60, deadline=None)
@given(probabilities, st.data())
def test_metric_ranges_and_perfect_predictions(p, data):
    p = np.asarray(p)
    y = np.asarray(data.draw(st.lists(st.booleans(), min_size=p.size, max_size=p.size)), dtype=int)
    for name in ("ece", "smece", "brier"):
        value = getattr(metrics, name)(p, y)
        assert 0.0 <= value <= 1.0 + 1e-9, (name, value)
    assert 0.0 <= metrics.auc_euro(p, y) <= 1.0 + 1e-9
    assert metrics.brier(y.astype(float), y) == 0.0  # predicting the labels exactly
    assert metrics.ece(y.astype(float), y) == pytest.approx(0.0, abs=1e-12)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(0.0, 1.0, allow_nan=False), min_size=2, max_size=100), st.data())
def test_metrics_ignore_the_order_of_records(p, data):
    p = np.asarray(p)
    y = np.asarray(data.draw(st.lists(st.booleans(), min_size=p.size, max_size=p.size)), dtype=int)
    perm = np.random.default_rng(0).permutation(p.size)
    for name in ("ece", "smece", "brier", "auc_euro"):
        assert getattr(metrics, name)(p[perm], y[perm]) == pytest.approx(getattr(metrics, name)(p, y), abs=1e-9)


def _write(path, n, seed, dtype="float16"):
    rng = np.random.default_rng(seed)
    records = [{"id": f"r{i}", "correct": bool(rng.integers(2))} for i in range(n)]
    lm = rng.normal(size=(n, 3, 4)).astype(np.float32)
    lps = [-rng.random(int(rng.integers(0, 5))) for _ in range(n)]
    manifest = {"model": "m", "model_fingerprint": {"architecture": "A", "num_layers": 2, "hidden_size": 4},
                "task": "t"}
    with StoreWriter(path, manifest, dtype=dtype, shard_size=int(rng.integers(1, 6))) as w:
        w.add(records, lm, lps)
    return records, lm, lps


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(1, 12), seed=st.integers(0, 10_000), dtype=st.sampled_from(["float16", "float32"]))
def test_store_round_trips_random_records(tmp_path, n, seed, dtype):
    path = Path(tempfile.mkdtemp(dir=tmp_path)) / "store"  # hypothesis may repeat an example
    records, lm, lps = _write(path, n, seed, dtype)
    store = open_store(path)
    assert store.ids == [r["id"] for r in records]
    np.testing.assert_allclose(store.layer_means, lm, rtol=1e-3 if dtype == "float16" else 0, atol=1e-3)
    for got, want in zip(store.token_logprobs, lps):
        np.testing.assert_allclose(got, want, rtol=1e-6)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), where=st.floats(0.0, 1.0), width=st.integers(1, 64),
       target=st.sampled_from(["safetensors", "jsonl"]))
def test_a_corrupted_shard_is_reported_never_misread(tmp_path, seed, where, width, target):
    """Random bytes overwritten anywhere in a shard: the reader raises a store error naming the
    file, or (when the bytes happened to be equal) reads exactly what was written."""
    path = Path(tempfile.mkdtemp(dir=tmp_path)) / "store"  # hypothesis may repeat an example
    records, lm, _ = _write(path, 6, seed)
    shard = sorted(path.glob(f"shard-*.{target}"))[0]
    raw = bytearray(shard.read_bytes())
    start = int(where * max(len(raw) - 1, 0))
    noise = np.random.default_rng(seed).integers(0, 256, size=width, dtype=np.uint8).tobytes()
    raw[start:start + width] = noise[:len(raw) - start]
    shard.write_bytes(bytes(raw))
    try:
        store = open_store(path)
    except (CorruptStoreError, AcuteError) as e:
        assert path.name in str(e) or shard.name in str(e)
        return
    assert store.ids == [r["id"] for r in records]
    np.testing.assert_allclose(store.layer_means, lm, atol=1e-3, rtol=1e-3)
