"""The protocol study through a store and resumable record shards: a run killed with SIGKILL and
rerun writes the same protocol.json as an uninterrupted run; other settings are refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from acute.errors import IncompatibleStoreError
from acute.protocol import analyze_protocol, run_protocol
from acute.store.generation import GenerationSettings

ROWS = [
    {"id": f"q{i}", "question": q, "answers": [a], "plausible_wrong": [w]}
    for i, (q, a, w) in enumerate([
        ("What is the capital of France?", "Paris", "Lyon"), ("How many legs does a spider have?", "8", "6"),
        ("What is the chemical symbol for gold?", "Au", "Ag"), ("Who wrote Hamlet?", "Shakespeare", "Marlowe"),
        ("Which planet is the red planet?", "Mars", "Venus"), ("What is H2O?", "Water", "Salt"),
        ("What colour is the sky?", "Blue", "Green")])
]

# A tiny Llama biased towards "0" (so verbalizations parse) with other tokens keeping some mass.
SETUP = """
import torch
from acute.testing import make_tiny_model, make_tiny_tokenizer
from acute.store.generation import GenerationSettings
from acute.tasks import get_task

def setup(task_path):
    tok = make_tiny_tokenizer(chat_template=False)
    model = make_tiny_model("llama", seed=5, max_position_embeddings=1024)
    old = model.lm_head
    head = torch.nn.Linear(old.in_features, old.out_features, bias=True)
    head.weight = old.weight
    with torch.no_grad():
        head.bias.zero_()
        head.bias[tok.convert_tokens_to_ids("0")] = 4.0
    model.lm_head = head
    task = get_task(task_path)
    return model, tok, task, task.load()

KW = dict(generation=GenerationSettings(batch_size=2, max_new_tokens=3), n_bootstrap=20, seed=0, progress=False,
          shard_size=2)
"""

KILLED = """
import os, signal, sys
sys.path.insert(0, {setup_dir!r})
from protocol_setup import setup, KW
import acute.protocol.records as records
from acute.protocol import run_protocol

commit = records.RecordShards.commit
def commit_then_die(self, recs):
    commit(self, recs)
    os.kill(os.getpid(), signal.SIGKILL)  # after the first committed shard
records.RecordShards.commit = commit_then_die
model, tok, task, examples = setup({task_path!r})
run_protocol(model, tok, task, examples, {out!r}, **KW)
"""


@pytest.fixture(scope="module")
def setup_module_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("protocol-resume")
    (root / "protocol_setup.py").write_text(SETUP, encoding="utf-8")
    task_path = root / "tiny.jsonl"
    task_path.write_text("".join(json.dumps(r) + "\n" for r in ROWS), encoding="utf-8")
    sys.path.insert(0, str(root))
    try:
        import protocol_setup
    finally:
        sys.path.remove(str(root))
    return root, task_path, protocol_setup


def _comparable(path):
    doc = json.loads((path / "protocol.json").read_text())
    for key in ("created", "wall_time_s"):
        doc.pop(key)
    return doc


def test_killed_run_resumes_to_the_uninterrupted_result(setup_module_dir, tmp_path):
    root, task_path, ps = setup_module_dir
    model, tok, task, examples = ps.setup(str(task_path))
    whole = run_protocol(model, tok, task, examples, tmp_path / "whole", **ps.KW)
    assert len(list((tmp_path / "whole" / "records").glob("shard-*.jsonl"))) == 4  # 7 examples, 2 per shard

    out = tmp_path / "killed"
    script = KILLED.format(setup_dir=str(root), task_path=str(task_path), out=str(out))
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
                          env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=600)
    assert proc.returncode == -9, proc.stderr[-2000:]
    assert [p.name for p in sorted((out / "records").glob("shard-*"))] == ["shard-00000.jsonl"]
    assert not (out / "protocol.json").exists()

    resumed = run_protocol(model, tok, task, examples, out, **ps.KW)
    assert _comparable(out) == _comparable(tmp_path / "whole")
    assert resumed.counts == whole.counts
    # the verbalizations parsed, so the comparison covers real cells
    assert any(c["status"] == "ok" for c in resumed.cells)


def test_other_settings_are_refused_naming_the_key(setup_module_dir, tmp_path):
    _, task_path, ps = setup_module_dir
    model, tok, task, examples = ps.setup(str(task_path))
    out = tmp_path / "run"
    run_protocol(model, tok, task, examples[:2], out, **ps.KW)
    with pytest.raises(IncompatibleStoreError, match="'variant': stored 'unit', new 'percent'"):
        run_protocol(model, tok, task, examples[:2], out, **{**ps.KW, "variant": "percent"})
    # a store of answers generated with other settings is refused by the store, naming the key
    with pytest.raises(IncompatibleStoreError, match="'generation' differs"):
        run_protocol(model, tok, task, examples[:2], tmp_path / "other", store=out / "store",
                     **{**ps.KW, "generation": GenerationSettings(batch_size=2, max_new_tokens=5)})
    assert not (tmp_path / "other" / "records").exists()


def test_a_store_of_another_model_is_refused(setup_module_dir, tmp_path):
    """Answers generated by other weights are never scored as this model's (issue 31)."""
    from acute.testing import make_tiny_model

    _, task_path, ps = setup_module_dir
    model, tok, task, examples = ps.setup(str(task_path))
    run_protocol(model, tok, task, examples[:2], tmp_path / "run", **ps.KW)
    other = make_tiny_model("llama", seed=6, max_position_embeddings=1024)
    with pytest.raises(IncompatibleStoreError, match="manifest.json: cannot resume with other weights"):
        run_protocol(other, tok, task, examples[:2], tmp_path / "other", store=tmp_path / "run" / "store",
                     **ps.KW)
    assert not (tmp_path / "other" / "records").exists()


def test_existing_store_is_reused_and_the_analysis_reruns_alone(setup_module_dir, tmp_path):
    _, task_path, ps = setup_module_dir
    model, tok, task, examples = ps.setup(str(task_path))
    first = run_protocol(model, tok, task, examples[:4], tmp_path / "a", **ps.KW)
    shards = sorted((tmp_path / "a" / "store").glob("shard-*"))
    before = {p: p.stat().st_mtime_ns for p in shards}
    # a second study on the same answers: no example is generated again
    import acute.extraction as generate

    calls = []
    original = generate.generate_and_record
    generate.generate_and_record = lambda *a, **k: calls.append(1) or original(*a, **k)
    try:
        second = run_protocol(model, tok, task, examples[:4], tmp_path / "b", store=tmp_path / "a" / "store",
                              **ps.KW)
    finally:
        generate.generate_and_record = original
    assert calls == [] and {p: p.stat().st_mtime_ns for p in shards} == before
    assert [r["generation"] for r in second.records] == [r["generation"] for r in first.records]
    assert second.store_dir == tmp_path / "a" / "store"

    again = analyze_protocol(tmp_path / "b", n_bootstrap=7, seed=3, progress=False)
    doc = json.loads(again.json_path.read_text())
    assert doc["settings"]["n_bootstrap"] == 7 and doc["settings"]["seed"] == 3
    assert doc["records"] == json.loads(second.json_path.read_text())["records"]
    with pytest.raises(FileNotFoundError, match="holds no protocol records"):
        analyze_protocol(tmp_path / "nothing")
