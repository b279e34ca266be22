"""The command line end to end on the tiny model, in process via ``acute.cli.main`` (plus one real
subprocess of the entry point). Random tiny models answer everything wrong, so the stores used
for train/evaluate/export/score get deterministic mixed labels."""

from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from acute.estimators.inputs import Inputs
from acute.cli import main
from cli_run import run  # tests/cli_run.py
from acute.extraction import generate_and_record
from acute.models import load_model
from acute.estimators import load_probe
from acute.estimators.controls import CONTROLS
from acute.store.pooling import generation_states
from acute.store import open_store
from acute.tasks import get_task
from acute.testing import hash_label
from smaller import small_searches  # tests/smaller.py
from stores import relabel  # tests/stores.py

N = 48


@pytest.fixture(autouse=True)
def smaller_searches():
    """The commands' evaluations run the default controls with smaller searches: these tests check
    the commands, not which strength a logistic control's search picks (tests/smaller.py)."""
    with small_searches():
        yield




@pytest.fixture(scope="module")
def work(tmp_path_factory, tiny_model_dir):
    """A collected tiny-model store (via the CLI) and its relabelled copy."""
    root = tmp_path_factory.mktemp("cli")
    questions = root / "q.jsonl"
    with open(questions, "w") as f:
        for i in range(N):
            f.write(json.dumps({"id": f"q{i:03d}", "question": f"What is {i} plus {i + 1}?",
                                "answers": [str(2 * i + 1)]}) + "\n")
    rc = main(["collect", "--model", str(tiny_model_dir), "--task", str(questions),
               "--out", str(root / "store"), "--max-new-tokens", "4", "--batch-size", "8", "--quiet",
               "--task-option", "shots=0"])  # the tiny model's context is 256 tokens
    assert rc == 0
    relabel(root / "store", root / "mixed")
    return root


def test_collect_output_and_store(work, tiny_model_dir):
    store = open_store(work / "store")
    assert store.layer_means.shape == (N, 5, 64)
    assert store.manifest["model"] == str(Path(tiny_model_dir).resolve())
    assert store.manifest["generation"]["max_new_tokens"] == 4
    mixed = open_store(work / "mixed")
    np.testing.assert_array_equal(mixed.layer_means, store.layer_means)
    assert 0 < mixed.correct.sum() < N


def test_collect_default_out_and_summary(tmp_path, tiny_model_dir, capsys, monkeypatch):
    questions = tmp_path / "few.jsonl"
    questions.write_text('{"id": 1, "question": "Who wrote Hamlet?", "answers": ["Shakespeare"]}\n')
    monkeypatch.chdir(tmp_path)
    rc, out, _ = run(["collect", "--model", tiny_model_dir, "--task", questions,
                      "--max-new-tokens", "3", "--quiet", "-O", "shots=0"], capsys)
    assert rc == 0
    expected = Path("runs") / f"{Path(tiny_model_dir).name}-few"
    assert len(open_store(expected)) == 1
    assert "records:             1 (1 new, 0 resumed)" in out and str(expected) in out


def test_tasks_and_models(capsys):
    rc, out, _ = run(["tasks"], capsys)
    assert rc == 0 and out.splitlines()[0].startswith("default") and "triviaqa" in out
    rc, out, _ = run(["models"], capsys)
    assert rc == 0 and "smollm2-135m-instruct" in out and "30 layers" in out


def test_evaluate(work, capsys):
    rc, out, _ = run(["evaluate", "--store", work / "mixed", "--n-estimators", 10,
                      "--search-n-estimators", 10, "--n-bootstrap", 20, "--reliability", "best",
                      "--quiet"], capsys)
    assert rc == 0
    ev = work / "mixed" / "evaluation"
    res = json.loads((ev / "results.json").read_text())
    from acute.estimators import TABLE_ESTIMATORS

    # the default table, then the control rows the store can feed (acute.estimators.controls)
    assert res["complete"] and [r["estimator"] for r in res["results"]] == (list(TABLE_ESTIMATORS)
                                                                            + res["params"]["controls"])
    assert res["params"]["probe_params"] == {"n_estimators": 10, "search_n_estimators": 10}
    assert res["split"]["mode"] == "cv" and (res["split"]["n_splits"], res["split"]["n_repeats"]) == (5, 2)
    assert "| acute-pca10 |" in out and "| platt |" in out and "| acute-pca10-stacked |" in out
    assert "Δ auc-euro all vs" in out and "| auto (acute-" in out
    for name in ("predictions.csv", "predictions-repeat1.csv"):
        with open(ev / name) as f:
            rows = list(csv.DictReader(f))
        assert len(rows) == N  # every record, out of fold
        assert all(r["correct"] == str(int(hash_label(r["id"]))) for r in rows)


def test_evaluate_single_split(work, capsys, tmp_path):
    rc, out, _ = run(["evaluate", "--store", work / "mixed", "--estimators", "raw,platt",
                      "--test-fraction", 0.3, "--n-bootstrap", 10, "--out", tmp_path, "--quiet"], capsys)
    assert rc == 0 and "Held-out evaluation" in out
    res = json.loads((tmp_path / "results.json").read_text())
    assert res["split"]["mode"] == "split" and res["split"]["test_fraction"] == 0.3
    rc, _, err = run(["evaluate", "--store", work / "mixed", "--estimators", "raw,nonsense",
                      "--out", tmp_path / "x", "--quiet"], capsys)
    assert rc == 2 and "nonsense" in err and "acute-pca10-stacked" in err


def test_train_without_view_chooses_by_cross_validation(work, capsys, tmp_path):
    from acute.estimators import AUTO_CANDIDATES
    from acute.estimators.baselines import BASELINES

    out = tmp_path / "auto"
    rc, text, _ = run(["train", "--store", work / "mixed", "--out", out, "--n-estimators", 10], capsys)
    assert rc == 0 and "acute-pca10-stacked: the default" in text and "platt" in text.splitlines()[-4]
    probe = load_probe(out)
    sel = probe.selection
    assert sel["chosen"] == "acute-pca10-stacked" and sel["best_by_cv"] in AUTO_CANDIDATES
    assert sel["cv"]["n_splits"] == 5
    scored = [r["estimator"] for r in sel["scores"]]
    assert set(scored) == set(AUTO_CANDIDATES) | set(BASELINES)
    assert sel["best_baseline"] in BASELINES
    assert probe.view == "pca10" and probe.calibration == "stacked"
    assert "platt_auc_euro" in probe.metrics
    # --estimator auto ships what benchmarks/every_signal.md's rule picks (tests/evaluation/test_choice.py)
    rc, text, _ = run(["train", "--store", work / "mixed", "--out", tmp_path / "a", "--estimator", "auto",
                       "--n-estimators", 10, "--auto-folds", 3, "--auto-repeats", 1], capsys)
    picked = load_probe(tmp_path / "a").selection
    assert rc == 0 and text.count("auto: on this store the hidden states added") == 1
    assert (picked.get("auto") or picked)["chosen"] in ("acute-all", "visible-all", "acute-pca10-stacked")


def test_export_named_estimator(work, capsys, tmp_path):
    rc, text, _ = run(["export", "--store", work / "mixed", "--estimator", "acute-cosine-stacked",
                       "--out", tmp_path / "p", "--n-estimators", 10], capsys)
    assert rc == 0 and "acute-cosine-stacked" in text
    probe = load_probe(tmp_path / "p")
    assert probe.calibration == "stacked" and probe.view == "cosine" and probe.selection is None
    rc, _, err = run(["export", "--store", work / "mixed", "--estimator", "platt", "--out", tmp_path / "q"],
                     capsys)
    assert rc == 2 and "baseline cannot be exported" in err


def test_a_probe_of_another_pooling_trains_evaluates_and_scores(work, capsys, tmp_path, tiny_model_dir):
    store = open_store(work / "store")
    assert store.poolings == ("mean", "last-prompt", "last-answer")  # a new collection keeps them all
    rc, out, _ = run(["evaluate", "--store", work / "mixed", "--estimators",
                      "platt,acute-cosine-stacked,acute-cosine-stacked@last-answer,acute-pca10@mean+last-prompt",
                      "--n-estimators", 5, "--n-bootstrap", 20, "--out", tmp_path / "ev", "--quiet"], capsys)
    assert rc == 0 and "| acute-cosine-stacked@last-answer |" in out and "| acute-pca10@mean+last-prompt |" in out
    rc, text, _ = run(["export", "--store", work / "mixed", "--estimator", "acute-cosine-stacked@last-answer",
                       "--out", tmp_path / "p", "--n-estimators", 10], capsys)
    assert rc == 0
    probe = load_probe(tmp_path / "p")
    assert probe.pooling == "last-answer" and probe.manifest["format_version"] == 3
    q = "What is 3 plus 4?"
    rc, out, _ = run(["score", q, "--probe", tmp_path / "p", "--model", tiny_model_dir], capsys)
    conf = float(dict(line.split(":", 1) for line in out.strip().splitlines())["confidence"])
    assert rc == 0 and conf == pytest.approx(_expected_confidences(tiny_model_dir, tmp_path / "p", [q])[0], abs=5e-4)
    rc, _, err = run(["evaluate", "--store", work / "mixed", "--estimators", "platt,acute-cosine@median",
                      "--out", tmp_path / "bad", "--quiet"], capsys)
    assert rc == 2 and "median" in err


def test_learning_curve(work, capsys, tmp_path):
    rc, out, _ = run(["learning-curve", "--store", work / "mixed", "--out", tmp_path, "--cv", 4,
                      "--repeats", 2, "--sizes", "20,36", "--n-estimators", 5, "--quiet"], capsys)
    assert rc == 0 and "| 20 |" in out and "| 36 |" in out
    doc = json.loads((tmp_path / "learning_curve.json").read_text())
    assert doc["complete"] and doc["sizes"] == [20, 36]
    assert doc["shown"] == [doc["best_baseline"], "acute-pca10", "acute-pca10-stacked"]
    assert (tmp_path / "learning_curve.png").read_bytes()[:4] == b"\x89PNG"
    assert len(doc["rows"]) == 3 * 2
    rc, _, err = run(["learning-curve", "--store", work / "mixed", "--out", tmp_path / "big",
                      "--sizes", "40"], capsys)
    assert rc == 2 and "size 40 is larger than the 38 training records" in err
    rc, _, err = run(["learning-curve", "--store", work / "mixed", "--out", tmp_path / "bad",
                      "--estimators", "acute-magic"], capsys)
    assert rc == 2 and "unknown estimator 'acute-magic'" in err and "acute-pca10-stacked" in err


def test_evaluate_subset_and_plot(work, capsys, tmp_path):
    out_dir = tmp_path / "ev"
    rc, out, _ = run(["evaluate", "--store", work / "mixed", "--estimators", "raw,acute-pca10", "--no-controls",
                      "--n-estimators", 10, "--n-bootstrap", 20, "--out", out_dir, "--quiet"], capsys)
    assert rc == 0 and "| platt |" not in out and "| acute-pca10 |" in out and "| constant |" not in out
    rc, out, _ = run(["plot", "--predictions", out_dir / "predictions.csv", "--out", tmp_path / "pl"],
                     capsys)
    assert rc == 0
    names = sorted(p.name for p in (tmp_path / "pl").iterdir())
    assert names == ["euro_curves.png", "reliability_acute-pca10.png", "reliability_raw.png"]
    assert all((tmp_path / "pl" / n).read_bytes()[:4] == b"\x89PNG" for n in names)


@pytest.mark.parametrize("view", [["--view", "pca10"], ["--view", "mean", "--layer", "late"]])
def test_train(work, capsys, tmp_path, view):
    out = tmp_path / "probe"
    rc, text, _ = run(["train", "--store", work / "mixed", *view, "--out", out,
                       "--n-estimators", 10], capsys)
    assert rc == 0 and "held-out records" in text
    probe = load_probe(out)
    assert probe.view == view[1]
    if view[1] == "mean":
        assert probe.layers[0] in (3, 4)  # the late third of 5 layer outputs
    summary = probe.training_summary
    assert summary["generation"]["max_new_tokens"] == 4
    from acute.evaluation import split_ids

    store = open_store(work / "mixed")
    train, test = split_ids(store.ids, test_fraction=0.3, seed=0)
    assert summary["n_train"] == train.sum() == probe.training_summary["n_records"]
    assert probe.metrics["n"] == test.sum()


@pytest.fixture(scope="module")
def exported(work):
    out = work / "exported"
    assert main(["export", "--store", str(work / "mixed"), "--view", "pca10", "--out", str(out),
                 "--n-estimators", "10"]) == 0
    return out


def test_export_fits_everything(exported, work):
    probe = load_probe(exported)
    assert probe.training_summary["n_records"] == N and probe.view == "pca10"
    store = open_store(work / "mixed")
    # the architecture fingerprint of the store plus the weights it was collected from
    assert probe.model_fingerprint == {**store.manifest["model_fingerprint"],
                                       "weights_sha256": store.manifest["model_weights"]["sha256"],
                                       "weights_bf16_sha256": store.manifest["model_weights"]["bf16_sha256"]}
    assert probe.model_name == store.manifest["model"]


def _expected_confidences(tiny_model_dir, probe_dir, questions):
    """The probe applied to activations recorded separately with the probe's settings and the
    task prompt of its training store."""
    model, tok = load_model(tiny_model_dir)
    probe = load_probe(probe_dir)
    settings = probe.training_summary["task_settings"]
    assert settings["shots"] == 0
    task = get_task(settings["name"], shots=0)
    gen = probe.training_summary["generation"]
    from acute.tasks import Example

    prompts = [task.prompt(tok, Example(id="x", question=q, answers=[]), chat=gen["chat"])
               for q in questions]
    gens = generate_and_record(model, tok, prompts, max_new_tokens=gen["max_new_tokens"],
                               stop_strings=gen["stop_strings"])
    X = generation_states(gens, probe.pooling)
    raw = np.array([g.raw_confidence for g in gens])
    return probe.predict_proba(Inputs.of(X, raw, pooling=probe.pooling))[:, 1]


def test_score_question(exported, tiny_model_dir, capsys):
    q = "What is 3 plus 4?"
    rc, out, _ = run(["score", q, "--probe", exported, "--model", tiny_model_dir, "--risk", 0.4],
                     capsys)
    assert rc == 0
    fields = dict(line.split(":", 1) for line in out.strip().splitlines())
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    assert fields["question"] == q
    conf = float(fields["confidence"])
    expected = _expected_confidences(tiny_model_dir, exported, [q])[0]
    assert conf == pytest.approx(expected, abs=5e-4)
    assert fields["decision"].split()[0] == ("trust" if expected > 0.4 else "abstain")
    # without --model the model recorded with the probe (the tiny folder) is used
    rc, out2, _ = run(["score", q, "--probe", exported, "--risk", 0.4], capsys)
    assert rc == 0 and out2 == out


def test_score_jsonl_file_and_stdin(exported, tiny_model_dir, capsys, tmp_path, monkeypatch):
    qs = ["What is 3 plus 4?", "What is 10 plus 11?", "Who wrote Hamlet?"]
    lines = [json.dumps({"id": "a", "prompt": qs[0]}), "", json.dumps({"question": qs[1]}),
             json.dumps(qs[2])]
    path = tmp_path / "p.jsonl"
    path.write_text("\n".join(lines) + "\n")
    rc, out, _ = run(["score", "--jsonl", path, "--probe", exported, "--model", tiny_model_dir,
                      "--risk", 0.6], capsys)
    assert rc == 0
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["id"] for r in rows] == ["a", 3, 4]  # given id, else the line number
    assert [r["question"] for r in rows] == qs
    expected = _expected_confidences(tiny_model_dir, exported, qs)
    np.testing.assert_allclose([r["confidence"] for r in rows], expected, atol=5e-4)
    assert all(r["decision"] == ("trust" if r["confidence"] > 0.6 else "abstain") for r in rows)
    assert all(r["risk"] == 0.6 for r in rows)

    monkeypatch.setattr(sys, "stdin", io.StringIO(path.read_text()))
    rc, out_stdin, _ = run(["score", "--jsonl", "-", "--probe", exported, "--model", tiny_model_dir,
                            "--risk", 0.6], capsys)
    assert rc == 0 and out_stdin == out


def test_score_raw_question_without_task(exported, tiny_model_dir, capsys):
    rc, out, _ = run(["score", "Hi", "--probe", exported, "--model", tiny_model_dir,
                      "--task", "none"], capsys)
    assert rc == 0 and "question:       Hi" in out


# ------------------------------------------------------------------------- errors
def test_unknown_task_lists_known(capsys):
    rc, out, err = run(["collect", "--task", "no-such-task"], capsys)
    assert rc == 2 and "unknown task 'no-such-task'" in err and "default" in err and "triviaqa" in err
    assert "Traceback" not in err


def test_unknown_model_lists_cards(capsys, tmp_path):
    questions = tmp_path / "q.jsonl"
    questions.write_text('{"id": 1, "question": "Q?", "answers": ["A"]}\n')
    rc, _, err = run(["collect", "--task", questions, "--model", "no-such-model",
                      "--out", tmp_path / "s"], capsys)
    assert rc == 2 and "no-such-model" in err and "smollm2-135m-instruct" in err
    assert "Traceback" not in err


def test_malformed_task_file_names_line(capsys, tmp_path):
    questions = tmp_path / "q.jsonl"
    questions.write_text('{"id": 1, "question": "Q?", "answers": ["A"]}\n{oops\n')
    rc, _, err = run(["collect", "--task", questions, "--out", tmp_path / "s"], capsys)
    assert rc == 2 and "q.jsonl:2" in err


def test_empty_task_file(capsys, tmp_path):
    questions = tmp_path / "empty.jsonl"
    questions.write_text("")
    rc, _, err = run(["collect", "--task", questions, "--out", tmp_path / "s"], capsys)
    assert rc == 2 and f"no examples in {questions}" in err


def test_out_is_a_file_is_one_line(capsys, tmp_path, tiny_model_dir):
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"id": 1, "question": "Q?", "answers": ["A"]}) + "\n")
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    rc, _, err = run(["collect", "--task", questions, "--model", tiny_model_dir, "--out", blocker / "store",
                      "--quiet", "-O", "shots=0"], capsys)
    assert rc == 2 and "Traceback" not in err
    assert err.strip().splitlines()[-1] == f"acute: error: Not a directory: {blocker / 'store'}"


@pytest.mark.parametrize("bad, message", [
    (["--max-new-tokens", -5], "max_new_tokens must be >= 1, got -5"),
    (["--max-new-tokens", 0], "max_new_tokens must be >= 1, got 0"),  # never silently the task default
    (["--batch-size", 0], "batch_size must be >= 1"),
    (["--shard-size", -1], "shard_size must be >= 1"),
    (["-O", "shots=abc"], "option shots='abc' must be a int"),
    (["-O", "shots=-1"], "option shots=-1 must be >= 0"),
    (["-O", "numeric=3"], "option numeric=3 must be a bool"),
])
def test_bad_settings_fail_before_anything_is_written(bad, message, capsys, tmp_path, tiny_model_dir):
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"id": 1, "question": "Q?", "answers": ["A"]}) + "\n")
    base = ["collect", "--task", questions, "--model", tiny_model_dir, "--out", tmp_path / "s", "--quiet"]
    rc, _, err = run(base + bad, capsys)
    assert rc == 2 and message in err and "Traceback" not in err
    assert not (tmp_path / "s").exists()  # no manifest that would refuse the corrected command
    rc, out, _ = run(base + ["--max-new-tokens", 2, "-O", "shots=0"], capsys)
    assert rc == 0 and "records:             1 (1 new" in out


def test_too_long_fails_with_flag(capsys, tmp_path, tiny_model_dir):
    questions = tmp_path / "long.jsonl"
    questions.write_text(json.dumps({"id": 1, "question": "Think. " * 300, "answers": ["A"]}) + "\n")
    rc, out, err = run(["collect", "--task", questions, "--model", tiny_model_dir, "--out",
                        tmp_path / "s", "--quiet", "--max-new-tokens", 3, "-O", "shots=0"], capsys)
    assert rc == 0 and "skipped (too long):  1" in out
    rc, _, err = run(["collect", "--task", questions, "--model", tiny_model_dir, "--out",
                      tmp_path / "s2", "--quiet", "--max-new-tokens", 3, "-O", "shots=0",
                      "--fail-on-too-long"], capsys)
    assert rc == 2 and "context window" in err


def test_probe_missing_file(capsys, exported, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(exported, broken)
    (broken / "probe.safetensors").unlink()
    rc, _, err = run(["score", "Q?", "--probe", broken], capsys)
    assert rc == 2 and "probe.safetensors" in err and "Traceback" not in err
    rc, _, err = run(["score", "Q?", "--probe", tmp_path / "nowhere"], capsys)
    assert rc == 2 and "does not exist" in err


def test_score_needs_a_question_and_a_valid_risk(capsys, exported):
    rc, _, err = run(["score", "--probe", exported], capsys)
    assert rc == 2 and "give a question" in err
    rc, _, err = run(["score", "Q?", "--probe", exported, "--risk", 1.5], capsys)
    assert rc == 2 and "argument --risk: must be a number in [0, 1] (the risk level u: trust iff confidence > u), got 1.5" in err


def test_bad_jsonl_line(capsys, exported, tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "ok"}\n{"nothing": 1}\n')
    rc, _, err = run(["score", "--jsonl", path, "--probe", exported], capsys)
    assert rc == 2 and "p.jsonl:2" in err


def test_bad_task_option(capsys):
    rc, _, err = run(["collect", "-O", "shots"], capsys)
    assert rc == 2 and "KEY=VALUE" in err
    rc, _, err = run(["collect", "-O", "colour=red"], capsys)
    assert rc == 2 and "unknown option" in err and "colour" in err


def test_store_missing(capsys, tmp_path):
    rc, _, err = run(["train", "--store", tmp_path / "none", "--out", tmp_path / "p"], capsys)
    assert rc == 2 and "not found" in err


def test_entry_point_subprocess():
    proc = subprocess.run([sys.executable, "-m", "acute.cli", "models"], capture_output=True,
                          text=True, cwd=Path(__file__).resolve().parents[2], timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "smollm2-135m-instruct" in proc.stdout


def test_every_model_loading_command_takes_the_model_options(capsys, exported, tmp_path):
    from acute.cli import build_parser

    parser = build_parser()
    extra = {"collect": [], "score": ["Q?"], "protocol": ["--task", "sciq"], "demo": []}
    for cmd, rest in extra.items():
        args = parser.parse_args([cmd, *rest, "--device", "cuda:1", "--model-dtype", "bfloat16",
                                  "--device-map", "auto"])
        assert (args.device, args.model_dtype, args.device_map) == ("cuda:1", "bfloat16", "auto"), cmd
    # the options reach load_model, which checks them before loading anything
    rc, _, err = run(["score", "Q?", "--probe", exported, "--device", "cuda", "--device-map", "auto"], capsys)
    assert rc == 2 and "device" in err and "Traceback" not in err


def test_run_is_the_reproduction_pipeline(capsys, tmp_path):
    with pytest.raises(SystemExit) as e:
        main(["run", "--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0 and out.startswith("usage: acute run") and "--device" in out and "--plan" in out
    rc, _, err = run(["run", tmp_path / "missing.toml", "--plan"], capsys)
    assert rc == 2 and "missing.toml" in err and "Traceback" not in err
    from acute.cli import build_parser

    assert "run" in build_parser().format_help()


def test_probe_vs_baselines_benchmark(work, tmp_path, capsys):
    import runpy

    bench = Path(__file__).resolve().parents[2] / "benchmarks" / "probe_vs_baselines.py"
    mod = runpy.run_path(str(bench))
    rc = mod["main"](["--store", str(work / "mixed"), "--out", str(tmp_path), "--cv", "3", "--repeats", "1",
                      "--estimators", "raw,platt,acute-cosine-stacked", "--n-estimators", "5",
                      "--n-bootstrap", "20"])
    out = capsys.readouterr().out
    assert rc == 0 and "Against Platt scaling" in out
    doc = json.loads((tmp_path / "vs-platt.json").read_text())
    rows = {r["estimator"]: r for r in doc["rows"]}
    assert rows["platt"]["diff_auc_euro_all"] == 0.0 and rows["raw"]["reference"] == "platt"
    assert set(rows) - set(CONTROLS) == {
        "raw", "platt", "acute-cosine-stacked"} and doc["n_records"] == N
    with pytest.raises(SystemExit):
        mod["main"](["--store", str(work / "mixed"), "--estimators", "raw"])  # platt is required


# ------------------------------------------------------------------------- verify / partial stores
def test_verify_reports_a_sound_store_and_names_problems(work, tmp_path, capsys):
    rc, out, _ = run(["verify", work / "mixed"], capsys)
    assert rc == 0 and "records:  48 in 1 shard(s)" in out and "1 shard(s) with checksums" in out
    assert out.rstrip().endswith("ok")

    copy = tmp_path / "copy"
    shutil.copytree(work / "mixed", copy)
    manifest = json.loads((copy / "manifest.json").read_text(encoding="utf-8"))
    manifest["status"] = "interrupted"
    (copy / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    (copy / ".tmpQw3Rt5").write_bytes(b"partial shard")
    rc, out, _ = run(["verify", copy], capsys)
    assert rc == 1 and "status is 'interrupted'" in out and ".tmpQw3Rt5" in out

    shard = copy / "shard-00000.safetensors"
    raw = bytearray(shard.read_bytes())
    raw[-40:-20] = bytes(b ^ 0x55 for b in raw[-40:-20])  # inside the last tensor's data
    shard.write_bytes(bytes(raw))
    rc, _, err = run(["verify", copy], capsys)
    assert rc == 2 and "shard-00000.safetensors" in err and "sha256 mismatch" in err and "Traceback" not in err


def test_evaluate_and_train_refuse_an_unfinished_store_unless_allowed(work, tmp_path, capsys):
    copy = tmp_path / "partial"
    shutil.copytree(work / "mixed", copy)
    manifest = json.loads((copy / "manifest.json").read_text(encoding="utf-8"))
    manifest["status"] = "interrupted"
    (copy / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    for cmd in (["evaluate", "--store", copy, "--estimators", "raw,platt", "--quiet"],
                ["train", "--store", copy, "--out", tmp_path / "p", "--view", "cosine", "--n-estimators", 5]):
        rc, _, err = run(cmd, capsys)
        assert rc == 2 and "did not finish (status 'interrupted')" in err and "--allow-partial" in err
    rc, _, _ = run(["evaluate", "--store", copy, "--estimators", "raw,platt", "--quiet", "--allow-partial",
                    "--no-controls", "--out", tmp_path / "e"], capsys)  # the flag lets it run (controls: test_evaluate)
    assert rc == 0 and json.loads((tmp_path / "e" / "results.json").read_text())["complete"]


def test_a_test_store_sharing_ids_with_the_training_store_is_an_error(work, tmp_path, capsys):
    base = ["evaluate", "--store", work / "mixed", "--test-store", work / "mixed", "--estimators", "raw,platt",
            "--quiet", "--out", tmp_path / "e"]
    rc, _, err = run(base, capsys)
    assert rc == 2 and "48 of the test store's 48 record ids also occur in the training store" in err
    rc, _, _ = run(base + ["--allow-overlap"], capsys)
    assert rc == 0


def test_every_argument_of_every_command_says_what_it_is():
    import argparse

    from acute.cli import build_parser

    commands = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)][0].choices
    missing = {name: [a.option_strings[0] if a.option_strings else a.dest
                      for a in sp._actions if a.dest != "help" and not a.help]
               for name, sp in commands.items()}
    assert {k: v for k, v in missing.items() if v} == {}
    assert "--test-fraction" not in commands["export"].format_help()  # export fits on every record
