"""benchmarks/evaluate_speed.py runs on a tiny synthetic store (the real stores are measured on a
quiet machine; issue 28)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

from acute.store import StoreWriter

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "evaluate_speed.py"


def tiny_store(path: Path, n: int = 48, n_out: int = 5, d: int = 24) -> Path:
    """A store whose correctness is written into the states of layer 2 onwards, with the
    metadata, prompts and last-prompt states every control reads."""
    rng = np.random.default_rng(0)
    t = rng.uniform(size=n)
    correct = rng.uniform(size=n) < 1 / (1 + np.exp(-10 * (t - 0.5)))
    states = []
    for k in range(3):
        h = rng.normal(scale=0.3, size=(n, n_out, d))
        h[:, 2:, k] += 2.0 * t[:, None]
        states.append(h.astype(np.float32))
    lps = [np.log(rng.uniform(0.5, 1.0, size=2)) for _ in range(n)]
    records = [{"id": f"q{i}", "prompt": f"Question {i}?", "generation": "x", "answer": "x", "gold": ["y"],
                "correct": bool(c), "task": "default", "finish_reason": "eos",
                "meta": {"category": "abc"[i % 3], "difficulty": "easy" if i % 2 else "hard"}}
               for i, c in enumerate(correct)]
    manifest = {"model": "synthetic", "tokenizer": "synthetic", "task": "default",
                "model_fingerprint": {"architecture": "Synthetic", "num_layers": n_out - 1, "hidden_size": d,
                                      "vocab_size": 10},
                "generation": {"max_new_tokens": 2, "do_sample": False}, "task_settings": {"name": "default"},
                "num_layers": n_out - 1, "hidden_size": d, "model_dtype": "float32"}
    with StoreWriter(path, manifest, dtype="float32") as w:
        w.add(records, states[0], lps, last_prompt=states[1], last_answer=states[2])
    return path


def test_evaluate_speed_prints_every_phase_and_writes_them(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("bench_evaluate_speed", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    store = tiny_store(tmp_path / "store")
    out = tmp_path / "speed.md"
    assert bench.main(["--store", str(store), "--out", str(out), "--folds", "3", "--repeats", "1",
                       "--n-bootstrap", "10", "--n-estimators", "3", "--lc-repeats", "2",
                       "--n-jobs", "1"]) == 0  # threads cost more than 3-tree forests gain
    printed = capsys.readouterr().out
    text = out.read_text()
    assert text.strip() in printed
    for phase in ("open the store", "read the states", "cross-validated fits and predictions",
                  "metric table and bootstrap intervals", "write tables and plots", "| question-only |",
                  "| acute-pca10-stacked |", "(c) learning curve", "fits at", "x the evaluation (a)"):
        assert phase in text, phase
    assert "(b) acute demo" not in text  # only with --demo
    reused = int(text.split("estimator fits read from (a)")[0].rsplit(";", 1)[1])
    assert reused > 0  # the learning curve's whole training folds are (a)'s
