"""Data-parallel collection: ``acute collect --num-processes 2`` (accelerate launch, two CPU
processes on gloo) writes one store that equals a single-process run on the same records, and a
rerun generates only what is missing."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from acute.cli import main
from acute.store import open_store

N = 14
REPO = Path(__file__).resolve().parents[2]
COMMON = ["--max-new-tokens", "4", "--batch-size", "3", "--shard-size", "4", "--quiet",
          "--task-option", "shots=0"]  # the tiny model's context is 256 tokens


@pytest.fixture(scope="module")
def questions(tmp_path_factory):
    path = tmp_path_factory.mktemp("par") / "q.jsonl"
    with open(path, "w") as f:
        for i in range(N):
            f.write(json.dumps({"id": f"q{i:03d}", "question": f"What is {i} plus {i * 7}?" + " ok" * (i % 5),
                                "answers": [str(8 * i)]}) + "\n")
    return path


def collect_cmd(model_dir, questions, out, *extra):
    return ["collect", "--model", str(model_dir), "--task", str(questions), "--out", str(out),
            *COMMON, *extra]


def run_parallel(argv, n=2):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "acute", *argv, "--num-processes", str(n)],
                          capture_output=True, text=True, cwd=REPO, env=env, timeout=600)


def by_id(store):
    return {r["id"]: (r, store.layer_means[k], store.token_logprobs[k])
            for k, r in enumerate(store.records)}


def digest(path: Path) -> dict:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.glob("shard-*")) if p.is_file()}


@pytest.fixture(scope="module")
def single(tmp_path_factory, tiny_model_dir, questions):
    out = tmp_path_factory.mktemp("single") / "store"
    assert main(collect_cmd(tiny_model_dir, questions, out)) == 0
    return out


def test_two_processes_equal_one(tmp_path, tiny_model_dir, questions, single):
    out = tmp_path / "store"
    proc = run_parallel(collect_cmd(tiny_model_dir, questions, out))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    par, ref = open_store(out), open_store(single)
    assert par.manifest["status"] == "complete" and par.manifest["num_records"] == N
    names = sorted(p.name for p in out.glob("shard-*.safetensors"))
    assert any(n.startswith("shard-p000-") for n in names) and any(n.startswith("shard-p001-") for n in names)
    assert sorted(par.ids) == sorted(ref.ids) and len(set(par.ids)) == N
    a, b = by_id(par), by_id(ref)
    for rid in ref.ids:
        (ra, la, ta), (rb, lb, tb) = a[rid], b[rid]
        assert ra["generation"] == rb["generation"] and ra["correct"] == rb["correct"]
        np.testing.assert_allclose(la.astype(np.float32), lb.astype(np.float32), rtol=2e-3, atol=2e-3)
        np.testing.assert_allclose(ta, tb, rtol=0, atol=1e-4)
    # deterministic order: reading twice gives the same order, part 0's records before part 1's
    assert open_store(out).ids == par.ids
    part = {json.loads(line)["id"]: p.name[:10] for p in out.glob("shard-p*.jsonl")
            for line in p.read_text().splitlines()}
    parts = [part[rid] for rid in par.ids]
    assert parts == sorted(parts) and set(parts) == {"shard-p000", "shard-p001"}


def test_rerun_generates_only_missing_records(tmp_path, tiny_model_dir, questions):
    out = tmp_path / "store"
    assert main(collect_cmd(tiny_model_dir, questions, out, "--limit", "5")) == 0
    before = digest(out)
    proc = run_parallel(collect_cmd(tiny_model_dir, questions, out))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    store = open_store(out)
    assert len(store) == N and len(set(store.ids)) == N
    after = digest(out)
    assert {k: after[k] for k in before} == before  # committed shards untouched
    new = [p for p in out.glob("shard-p*.jsonl")]
    assert sum(len(p.read_text().splitlines()) for p in new) == N - 5
    # a third run (one process) finds nothing to do
    assert main(collect_cmd(tiny_model_dir, questions, out)) == 0
    assert digest(out) == after


def test_resuming_with_other_settings_is_refused(tmp_path, tiny_model_dir, questions, single):
    out = tmp_path / "store"
    assert main(collect_cmd(tiny_model_dir, questions, out, "--limit", "4")) == 0
    before = digest(out)
    argv = collect_cmd(tiny_model_dir, questions, out)
    argv[argv.index("--max-new-tokens") + 1] = "5"
    proc = run_parallel(argv)
    assert proc.returncode != 0
    assert "cannot resume" in proc.stderr and "generation" in proc.stderr
    assert digest(out) == before and len(open_store(out)) == 4


def test_num_processes_must_be_positive(capsys, tiny_model_dir, questions, tmp_path):
    rc = main(collect_cmd(tiny_model_dir, questions, tmp_path / "s", "--num-processes", "0"))
    assert rc == 2 and "--num-processes" in capsys.readouterr().err


def test_device_map_needs_one_process(capsys, tiny_model_dir, questions, tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    rc = main(collect_cmd(tiny_model_dir, questions, tmp_path / "s", "--device-map", "auto"))
    assert rc == 2 and "single process" in capsys.readouterr().err
