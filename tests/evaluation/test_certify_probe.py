"""Certified thresholds for an exported probe (acute.evaluation.certification, ``acute export
--max-error``): calibrated on records the probe was not fitted on (out-of-fold predictions, or a
calibration store), recorded in probe.json valid or not, and every bad input refused by name.

Stores are synthetic (StoreWriter): 3 decoder layers, hidden size 12, label signal in one
hidden dimension and in the raw confidence, so a pca10 probe of 5-10 trees certifies a
threshold at max_error 0.1 from 300 records and none at 0.05 (hand-checked in the tests below
against certify_threshold on independently computed confidences)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy.special import expit
from sklearn.base import clone
from sklearn.model_selection import StratifiedKFold

from acute.estimators.inputs import Inputs
from acute.cli import main
from cli_run import run  # tests/cli_run.py
from acute.errors import IncompatibleStoreError, InputError, ProbeFormatError
from acute.estimators import load_probe
from acute.estimators.certificates import certificate_entry, find_certificate
from acute.evaluation.certification import certify_probe
from acute.evaluation.training import train_probe
from acute.metrics.certify import certify_threshold, min_calibration_records
from acute.store import StoreWriter, open_store

pytest.importorskip("mapie", reason="MAPIE (the acute[risk] extra) runs the default backend")

L, D = 3, 12
FINGERPRINT = {"architecture": "LlamaForCausalLM", "num_layers": L, "hidden_size": D, "vocab_size": 320}


def make_store(path: Path, n: int = 300, seed: int = 0, signal: float = 1.0, prefix: str = "q",
               meta=None, **manifest) -> object:
    """``n`` labelled records (accuracy ~0.6) whose dimension 0 and raw confidence carry the label;
    ``meta(i)``: record i's metadata (default none)."""
    rng = np.random.default_rng(seed)
    y = rng.uniform(size=n) < 0.6
    lm = rng.normal(size=(n, L + 1, D))
    lm[:, :, 0] += signal * (2 * y - 1)[:, None]
    raw = expit(signal * (2 * y - 1) + rng.normal(size=n))
    m = {"model": "tiny-llama", "model_fingerprint": dict(FINGERPRINT), "tokenizer": "tiny",
         "generation": {"max_new_tokens": 8, "do_sample": False, "chat": False, "pool": "decoding"},
         "task": "default", "task_settings": {"name": "default"}, "num_layers": L, "hidden_size": D,
         "model_dtype": "float32", **manifest}
    records = [{"id": f"{prefix}{i}", "prompt": f"Q{i}?", "generation": "a", "answer": "a",
                "gold": ["a"], "correct": bool(y[i]), "task": m["task"], "finish_reason": "eos",
                "meta": {} if meta is None else meta(i)} for i in range(n)]
    with StoreWriter(path, m, dtype="float32") as w:
        w.add(records, lm, [np.array([np.log(r)]) for r in raw])
    return open_store(path)


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    root = tmp_path_factory.mktemp("certify-stores")
    return {
        "train": make_store(root / "train"),
        "cal": make_store(root / "cal", seed=1, prefix="c"),
        "few": make_store(root / "few", n=50, seed=2, prefix="w"),
        "other-model": make_store(root / "other-model", seed=3, prefix="o",
                                  model_fingerprint={**FINGERPRINT, "vocab_size": 999}),
        "other-format": make_store(root / "other-format", seed=4, prefix="f",
                                   generation={"max_new_tokens": 8, "do_sample": False, "chat": True,
                                               "pool": "decoding"}),
        "same-ids": make_store(root / "same-ids", seed=5),
    }


def _out_of_fold(store, probe, seed=0):
    """The probe's out-of-fold P(correct) over StratifiedKFold(5, shuffle, seed), computed here."""
    y = store.correct.astype(int)
    X = np.asarray(store.layer_means, dtype=np.float32)
    out = np.empty(len(y))
    for tr, te in StratifiedKFold(5, shuffle=True, random_state=seed).split(np.zeros(len(y)), y):
        est = clone(probe).fit(Inputs.of(X[tr], store.raw_confidence[tr]), y[tr])
        out[te] = est.predict_proba(Inputs.of(X[te], store.raw_confidence[te]))[:, 1]
    return out


# ------------------------------------------------------------------------ out of fold
def test_a_named_probe_is_certified_on_its_cross_fitted_predictions(stores, tmp_path):
    store = stores["train"]
    trained = train_probe(store, view="pca10", n_estimators=10, max_error=[0.1, 0.05], delta=0.1,
                          certify_fwer="bonferroni_holm")
    valid, invalid = trained.certificates
    conf = _out_of_fold(store, trained.probe)
    expected = certify_threshold(conf, store.correct, 0.1, 0.1, fwer="bonferroni_holm")
    assert valid["valid"] and valid["threshold"] == expected.threshold
    assert valid["n_calibration"] == 300 and valid["source"] == "out-of-fold"
    assert valid["calibration_coverage"] == pytest.approx(np.mean(conf >= valid["threshold"]))
    assert 1 - store.correct[conf >= valid["threshold"]].mean() <= 0.1
    assert valid["folds"] == {"n_splits": 5, "seed": 0, "estimator": "view pca10",
                              "from": "cross-fitted for the certificate"}
    assert valid["backend"] == "binomial" and valid["alpha"] == 0.1 and valid["delta"] == 0.1
    # none at 0.05 from these 300 records: recorded as such, with the projected records needed
    assert not invalid["valid"] and invalid["threshold"] is None and invalid["n_needed"] > 300
    assert "no threshold passed" in invalid["reason"]
    trained.save(tmp_path / "p")
    probe = load_probe(tmp_path / "p")
    assert probe.certificates == json.loads(json.dumps(trained.certificates))
    assert find_certificate(probe.certificates, 0.1)["threshold"] == expected.threshold
    with pytest.raises(InputError, match=r"max_error=0.05: .*invalid.*would be needed"):
        find_certificate(probe.certificates, 0.05)
    with pytest.raises(InputError, match=r"max_error=0.2: this probe carries no certificate.*0.1, 0.05 \(invalid\)"):
        find_certificate(probe.certificates, 0.2)
    # the default procedure certifies at 0.05 from the same predictions, where Holm over the grid
    # could not (its best, 115 records all correct at 0.9, p = 0.0027, misses 0.1 / 100)
    [default] = train_probe(store, view="pca10", n_estimators=10, max_error=0.05, delta=0.1).certificates
    assert default["valid"] and default["fwer"] == "quantile_sequence"
    assert default["threshold"] == certify_threshold(conf, store.correct, 0.05, 0.1).threshold
    assert 1 - store.correct[conf >= default["threshold"]].mean() <= 0.05


def test_the_default_export_reuses_autos_out_of_fold_predictions(stores):
    store = stores["train"]
    trained = train_probe(store, n_estimators=5, max_error=0.1, delta=0.2, certify_backend="binomial")
    auto = trained.auto
    assert trained.label == auto.chosen_ == "acute-pca10-stacked"
    [entry] = trained.certificates
    expected = certify_threshold(auto.oof_[auto.chosen_], store.correct, 0.1, 0.2, backend="binomial")
    assert entry["threshold"] == expected.threshold and entry["p_value"] == expected.p_value
    assert entry["folds"]["from"] == "auto's cross-validated comparison"
    assert entry["backend"] == "binomial" and entry["delta"] == 0.2


def test_out_of_fold_certification_keeps_each_group_on_one_side(tmp_path):
    """Folds grouped as the evaluation's (StratifiedGroupKFold over the metadata field): a named
    probe is cross-fitted on them; the default export's comparison (auto) ran on the same folds
    and its out-of-fold predictions are the ones certified; the folds say so."""
    from sklearn.model_selection import StratifiedGroupKFold

    store = make_store(tmp_path / "grouped", meta=lambda i: {"toolset": f"t{i % 17}"})
    groups = np.array([f"t{i % 17}" for i in range(len(store))])
    y, X = store.correct.astype(int), np.asarray(store.layer_means, dtype=np.float32)
    codes = np.unique(groups, return_inverse=True)[1]
    folds = list(StratifiedGroupKFold(5, shuffle=True, random_state=0).split(np.zeros(len(y)), y, codes))
    assert all(not set(groups[tr]) & set(groups[te]) for tr, te in folds)
    trained = train_probe(store, view="pca10", n_estimators=10, max_error=0.1, delta=0.2, certify_backend="binomial",
                          group_by="toolset")
    conf = np.empty(len(y))
    for tr, te in folds:
        est = clone(trained.probe).fit(Inputs.of(X[tr], store.raw_confidence[tr]), y[tr])
        conf[te] = est.predict_proba(Inputs.of(X[te], store.raw_confidence[te]))[:, 1]
    [entry] = trained.certificates
    assert entry["threshold"] == certify_threshold(conf, store.correct, 0.1, 0.2, backend="binomial").threshold
    assert entry["folds"] == {"n_splits": 5, "seed": 0, "estimator": trained.label,
                              "from": "cross-fitted for the certificate", "group_by": "toolset"}
    trained = train_probe(store, n_estimators=5, max_error=0.1, delta=0.2, certify_backend="binomial",
                          group_by="toolset")
    auto = trained.auto
    assert [te.tolist() for _, te in auto.folds_] == [te.tolist() for _, te in folds]
    [entry] = trained.certificates
    expected = certify_threshold(auto.oof_[auto.chosen_], store.correct, 0.1, 0.2, backend="binomial")
    assert entry["threshold"] == expected.threshold
    assert entry["folds"] == {"n_splits": 5, "seed": 0, "estimator": trained.label,
                              "from": "auto's cross-validated comparison", "group_by": "toolset"}
    assert trained.selection["cv"] == {"n_splits": 5, "given": True, "group_by": "toolset"}
    common = ["export", "--store", str(tmp_path / "grouped"), "--view", "pca10", "--n-estimators", "10",
              "--max-error", "0.1", "--delta", "0.2", "--certify-backend", "binomial"]
    for group_by, folds_field in (("toolset", "toolset"), ("id", None)):  # acute export --group-by
        assert main([*common, "--out", str(tmp_path / group_by), "--group-by", group_by]) == 0
        [entry] = json.loads((tmp_path / group_by / "probe.json").read_text())["certificates"]
        assert entry["folds"].get("group_by") == folds_field
    with pytest.raises(InputError, match=r"3 distinct values of 'toolset', fewer than the 5 folds"):
        train_probe(make_store(tmp_path / "three", meta=lambda i: {"toolset": f"t{i % 3}"}), view="pca10",
                    max_error=0.1, group_by="toolset")


def test_a_held_out_split_keeps_each_group_on_one_side(tmp_path):
    """acute train's --test-fraction on a task that groups its records: each tool set lies wholly
    in the training or the held-out records, decided by sha256 of "seed:group:value" (by hand);
    group_by="id" splits record by record again."""
    import hashlib

    store = make_store(tmp_path / "apigen", task="apigen", meta=lambda i: {"toolset": f"t{i % 13}"})
    groups = np.array([f"t{i % 13}" for i in range(len(store))])
    trained = train_probe(store, view="pca10", n_estimators=5, test_fraction=0.3, seed=3)
    held = {g for g in set(groups)
            if int.from_bytes(hashlib.sha256(f"3:group:{g}".encode()).digest()[:8], "big") / 2.0**64 < 0.3}
    assert 0 < len(held) < 13
    assert sorted(trained.train_index.tolist()) == [i for i in range(len(store)) if groups[i] not in held]
    assert trained.held_out["n"] == sum(g in held for g in groups)
    assert trained.training_summary["split"] == {"test_fraction": 0.3, "seed": 3, "group_by": "toolset"}
    by_id = train_probe(store, view="pca10", n_estimators=5, test_fraction=0.3, seed=3, group_by="id")
    assert set(groups[by_id.train_index]) == set(groups) and "group_by" not in by_id.training_summary["split"]


def test_a_task_that_groups_its_records_certifies_on_grouped_folds_by_default(tmp_path):
    """No group_by given: an APIGen store's certificate is cross-fitted on folds that keep each
    tool set whole (the task's default_group_by, as acute evaluate's folds do)."""
    from sklearn.model_selection import StratifiedGroupKFold

    store = make_store(tmp_path / "apigen", task="apigen", meta=lambda i: {"toolset": f"t{i % 13}"})
    groups = np.array([f"t{i % 13}" for i in range(len(store))])
    y, X = store.correct.astype(int), np.asarray(store.layer_means, dtype=np.float32)
    codes = np.unique(groups, return_inverse=True)[1]
    folds = list(StratifiedGroupKFold(5, shuffle=True, random_state=0).split(np.zeros(len(y)), y, codes))
    trained = train_probe(store, view="pca10", n_estimators=10, max_error=0.1, delta=0.2, certify_backend="binomial")
    conf = np.empty(len(y))
    for tr, te in folds:
        assert not set(groups[tr]) & set(groups[te])
        est = clone(trained.probe).fit(Inputs.of(X[tr], store.raw_confidence[tr]), y[tr])
        conf[te] = est.predict_proba(Inputs.of(X[te], store.raw_confidence[te]))[:, 1]
    [entry] = trained.certificates
    assert entry["folds"]["group_by"] == "toolset" and entry["folds"]["from"] == "cross-fitted for the certificate"
    expected = certify_threshold(conf, store.correct, 0.1, 0.2, backend="binomial")
    assert entry["threshold"] == expected.threshold and entry["fwer"] == expected.fwer == "quantile_sequence"


# ------------------------------------------------------------------- calibration store
def test_a_calibration_store_is_scored_by_the_exported_probe(stores):
    store, cal = stores["train"], stores["cal"]
    trained = train_probe(store, view="pca10", n_estimators=10, max_error=0.1, delta=0.1,
                          calibration_store=cal, calibration_path=cal.path)
    [entry] = trained.certificates
    conf = trained.probe.predict_proba(Inputs.of(np.asarray(cal.layer_means, np.float32), cal.raw_confidence))[:, 1]
    expected = certify_threshold(conf, cal.correct, 0.1, 0.1)
    assert entry["valid"] and entry["threshold"] == expected.threshold
    assert entry["source"] == "calibration-store" and entry["n_calibration"] == len(cal)
    assert entry["calibration_store"] == str(Path(cal.path).resolve()) and "folds" not in entry


@pytest.mark.parametrize("which, message", [
    ("other-model", r"another model or prompt format: 'model_fingerprint' differs \('model_fingerprint'\['vocab_size'\]: "
                    r"the training store \S*train 320, \S*other-model 999\)"),
    ("other-format", r"prompt format: 'prompt_format' differs \('prompt_format'\['chat'\]: the training store "
                     r"\S*train False, \S*other-format True\)"),
])
def test_a_calibration_store_of_another_model_or_prompt_format_is_refused(stores, which, message):
    cal = stores[which]
    with pytest.raises(IncompatibleStoreError, match=message):
        train_probe(stores["train"], view="pca10", n_estimators=5, max_error=0.1,
                    calibration_store=cal, calibration_path=cal.path)


def test_a_calibration_store_holding_training_records_is_refused(stores):
    with pytest.raises(InputError, match=r"is the training store \S*train itself"):
        train_probe(stores["train"], view="pca10", max_error=0.1, calibration_store=stores["train"])
    with pytest.raises(InputError, match="300 of the 300 record ids .* are training records"):
        train_probe(stores["train"], view="pca10", max_error=0.1, calibration_store=stores["same-ids"])


# ------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("kw, message", [
    ({"max_error": 0.0}, r"^max_error must be a number in \(0, 1\) \(the error rate allowed among trusted answers\)"),
    ({"max_error": 1.5}, r"^max_error must be a number in \(0, 1\) \(the error rate allowed among trusted answers\)"),
    ({"max_error": float("nan")}, r"^max_error must be a number in \(0, 1\) \(the error rate allowed among trusted answers\)"),
    ({"max_error": 0.1, "delta": 1.0}, r"^delta must be a number in \(0, 1\) \(the probability that the guarantee fails\)"),
    ({"max_error": 0.1, "delta": -0.1}, r"^delta must be a number in \(0, 1\) \(the probability that the guarantee fails\)"),
    ({"max_error": [0.1, 0.1]}, "give each error rate once"),
    ({"max_error": []}, "at least one error rate"),
    ({"max_error": ["0.1"]}, r"^max_error must be a number in \(0, 1\) .*got '0.1'"),
])
def test_bad_levels_are_refused_before_anything_is_fitted(stores, monkeypatch, kw, message):
    import acute.evaluation.training as training

    monkeypatch.setattr(training, "probe_estimator", lambda *a, **k: pytest.fail("fitted"))
    with pytest.raises(InputError, match=message):
        train_probe(stores["train"], **kw)


def test_too_few_calibration_records_say_how_many_are_needed(stores, monkeypatch):
    import acute.evaluation.training as training

    monkeypatch.setattr(training, "probe_estimator", lambda *a, **k: pytest.fail("fitted"))
    need = min_calibration_records(0.02, 0.1)  # 114: 0.98 ** 114 <= 0.1
    with pytest.raises(InputError, match=rf"max_error=0.02, delta=0.1: the 50 calibration records "
                                         rf"\(out-of-fold .*at least {need} are needed \(quantile_sequence\)"):
        train_probe(stores["few"], max_error=0.02, delta=0.1)
    with pytest.raises(InputError, match=rf"the 50 calibration records \(all records of .*few\).*"
                                         rf"at least {need}"):
        train_probe(stores["train"], max_error=0.02, calibration_store=stores["few"],
                    calibration_path=stores["few"].path)
    need = min_calibration_records(0.1, 0.1, fwer="bonferroni_holm")  # 66: Holm over 100 thresholds
    with pytest.raises(InputError, match=rf"at least {need} are needed \(bonferroni_holm over the default 100"):
        train_probe(stores["few"], max_error=0.1, delta=0.1, certify_fwer="bonferroni_holm")


def test_certify_probe_needs_the_trained_probe_of_its_store(stores):
    trained = train_probe(stores["train"], view="pca10", n_estimators=5)
    assert trained.certificates == []
    trained.train_index = None
    with pytest.raises(InputError, match="needs the TrainedProbe"):
        certify_probe(trained, stores["train"], 0.1)


# ---------------------------------------------------------------------- probe files
def test_a_probe_without_certificates_loads_and_a_malformed_one_is_refused(stores, tmp_path):
    trained = train_probe(stores["train"], view="pca10", n_estimators=5)
    trained.save(tmp_path / "old")
    manifest = json.loads((tmp_path / "old" / "probe.json").read_text())
    assert "certificates" not in manifest and load_probe(tmp_path / "old").certificates == []
    cert = certify_threshold(np.linspace(0, 1, 200), np.linspace(0, 1, 200) > 0.3, 0.1, 0.1)
    entry = certificate_entry(cert, backend="mapie", source="out-of-fold")
    for bad, message in ((dict(entry, threshold=1.5), "certificates\\[0\\]: certificate: threshold"),
                         (dict(entry, source="somewhere"), "certificates\\[0\\]: backend must be"),
                         ([entry, entry], "certificates\\[1\\]: a second certificate at max_error=0.1")):
        manifest["certificates"] = bad if isinstance(bad, list) else [bad]
        (tmp_path / "old" / "probe.json").write_text(json.dumps(manifest))
        with pytest.raises(ProbeFormatError, match=r"probe.json: " + message):
            load_probe(tmp_path / "old")


# ------------------------------------------------------------------------------ CLI
def test_cli_export_writes_the_certificate_and_says_what_it_certifies(stores, tmp_path, capsys):
    out = tmp_path / "probe"
    rc, text, err = run(["export", "--store", stores["train"].path, "--view", "pca10", "--n-estimators", 10,
                         "--max-error", 0.1, 0.02, "--delta", 0.1, "--out", out], capsys)
    assert rc == 0, err
    probe = load_probe(out)
    valid = find_certificate(probe.certificates, 0.1)
    assert f"certificate at max_error 0.1, delta 0.1: trust iff confidence >= {valid['threshold']:g}" in text
    assert "300 calibration records, out-of-fold predictions of the training records" in text
    assert "acute: warning: NO certificate at max_error 0.02, delta 0.1" in err
    assert "the quantile sequence stopped at its first threshold" in err
    assert "scoring with --max-error 0.02 is refused" in err
    # the same as the library's
    trained = train_probe(stores["train"], view="pca10", n_estimators=10, max_error=[0.1, 0.02], delta=0.1,
                          store_path=stores["train"].path)
    assert probe.certificates == json.loads(json.dumps(trained.certificates))
    # another procedure by name: recorded in the certificate
    rc, text, err = run(["export", "--store", stores["train"].path, "--view", "pca10", "--n-estimators", 10,
                         "--max-error", 0.1, "--certify-procedure", "split_sequence", "--out", tmp_path / "s"],
                        capsys)
    assert rc == 0, err
    [entry] = load_probe(tmp_path / "s").certificates
    assert entry["fwer"] == "split_sequence" and "binomial, split_sequence" in text
    trained = train_probe(stores["train"], view="pca10", n_estimators=10, max_error=0.1,
                          store_path=stores["train"].path, certify_fwer="split_sequence")
    assert load_probe(tmp_path / "s").certificates == json.loads(json.dumps(trained.certificates))


def test_cli_export_with_a_calibration_store(stores, tmp_path, capsys):
    cal = stores["cal"]
    rc, text, err = run(["export", "--store", stores["train"].path, "--view", "pca10", "--n-estimators", 10,
                         "--max-error", 0.1, "--calibration-store", cal.path, "--certify-backend", "binomial",
                         "--out", tmp_path / "p"], capsys)
    assert rc == 0, err
    [entry] = load_probe(tmp_path / "p").certificates
    assert entry["source"] == "calibration-store" and entry["backend"] == "binomial"
    assert f"the calibration store {Path(cal.path).resolve()}" in text


@pytest.mark.parametrize("extra, message", [
    (["--max-error", 1.5], "argument --max-error: must be a number in (0, 1) (the error rate allowed among "
                           "trusted answers), got 1.5"),
    (["--max-error", 0.1, "--delta", 0], "argument --delta: must be a number in (0, 1) (the probability that the "
                                         "guarantee fails), got 0.0"),
    (["--delta", 0.2], "--delta and --calibration-store go with --max-error"),
    (["--group-by", "toolset"], "TRAIN: record 'q0' has no metadata field 'toolset'"),
    (["--max-error", 0.1, "--calibration-store", "OTHER"], "train 320,"),
])
def test_cli_export_refuses_bad_input_by_name(stores, tmp_path, capsys, extra, message):
    extra = [stores["other-model"].path if a == "OTHER" else a for a in extra]
    message = message.replace("TRAIN", str(stores["train"].path))  # the store is named by its folder
    rc, _, err = run(["export", "--store", stores["train"].path, "--view", "pca10", "--out", tmp_path / "p",
                      *extra], capsys)
    assert rc == 2 and message in err and "Traceback" not in err
    assert not (tmp_path / "p").exists()


def test_cli_export_with_too_few_records_says_how_many(stores, tmp_path, capsys):
    rc, _, err = run(["export", "--store", stores["few"].path, "--max-error", 0.02, "--out", tmp_path / "p"],
                     capsys)
    need = min_calibration_records(0.02, 0.1)
    assert rc == 2 and "the 50 calibration records" in err and f"at least {need} are needed" in err


# ------------------------------------------------------------------------ the benchmark
def test_the_labels_benchmark_reads_a_store_and_a_predictions_file(stores, tmp_path, capsys):
    import runpy

    bench = Path(__file__).resolve().parents[2] / "benchmarks" / "certify_labels.py"
    mod = runpy.run_path(str(bench))
    mod["main"](["--store", str(stores["train"].path), "--n-estimators", "5", "--draws", "10"])
    out = capsys.readouterr().out
    assert "### default (acute-pca10-stacked): AUROC" in out and "### best baseline (" in out
    assert "| 150 | 0.05 |" in out and "| 150 | 0.10 |" in out  # half of 300: the rest is the test set
    # an evaluation's predictions.csv: columns per estimator, out of fold
    rng = np.random.default_rng(7)
    y = rng.uniform(size=600) < 0.7
    raw = np.clip(0.5 + 0.3 * (2 * y - 1) + rng.normal(0, 0.2, 600), 0, 1)
    lines = ["id,correct,raw,platt,acute-pca10-stacked"] + [
        f"q{i},{int(y[i])},{raw[i]:.6f},{raw[i]:.6f},{float(y[i]):.1f}" for i in range(600)]
    (tmp_path / "predictions.csv").write_text("\n".join(lines) + "\n")
    mod["main"](["--predictions", str(tmp_path / "predictions.csv"), "--draws", "10"])
    out = capsys.readouterr().out
    # a perfect default certifies from 200 records: the correct ones (about 0.69 of the test set)
    assert "| 200 | 0.10 | 1.00 | 0.69" in out.split("### best baseline")[0]
    assert "quantile_sequence (acute's binomial test)" in out and "too few" not in out  # 45 suffice
    assert "### best baseline (raw)" in out and "### raw" not in out  # raw and platt tie: shown once
    mod["main"](["--predictions", str(tmp_path / "predictions.csv"), "--draws", "10", "--fwer", "bonferroni_holm"])
    assert "| 100 | 0.05 | too few (< 135) |" in capsys.readouterr().out
    # beside an evaluation's results.json, its own best baseline is shown (one name per pair)
    (tmp_path / "results.json").write_text('{"reference": "platt"}')
    mod["main"](["--predictions", str(tmp_path / "predictions.csv"), "--draws", "10"])
    out = capsys.readouterr().out
    assert "### best baseline (platt)" in out and "### raw" in out


def test_cli_export_without_mapie_says_what_to_install(stores, tmp_path, capsys, monkeypatch):
    import sys

    import acute.evaluation.training as training

    monkeypatch.setitem(sys.modules, "mapie", None)  # as if the acute[risk] extra were not installed
    monkeypatch.setattr(training, "probe_estimator", lambda *a, **k: pytest.fail("fitted"))
    rc, _, err = run(["export", "--store", stores["train"].path, "--max-error", 0.1, "--certify-backend", "mapie",
                      "--out", tmp_path / "p"], capsys)
    assert rc == 2 and "pip install 'acute[risk]'" in err and "--certify-backend" in err


def test_the_q_style_benchmark_exports_on_one_part_and_checks_on_the_others(tmp_path, capsys):
    """benchmarks/q_style_check.py measure: per split, the default probe exported (with its
    certificate) from a seeded random part of the store and its certified threshold applied to
    disjoint other records; the split, the trusted answers and their precision checked by hand."""
    import runpy

    from scipy.stats import binomtest

    bench = runpy.run_path(str(Path(__file__).resolve().parents[2] / "benchmarks" / "q_style_check.py"))
    store = make_store(tmp_path / "s", n=300, signal=1.5)
    out = tmp_path / "out"
    assert bench["main"](["measure", "--store", str(tmp_path / "s"), "--export", "200", "--check", "80",
                          "--splits", "2", "--max-error", "0.2", "--delta", "0.2", "--out", str(out)]) == 0
    res = json.loads((out / "q_style_check.json").read_text())
    assert [r["seed"] for r in res["splits"]] == [0, 1] and res["n_store"] == 300
    for row in res["splits"]:
        order = np.random.default_rng(row["seed"]).permutation(300)
        export, check = np.sort(order[:200]), np.sort(order[200:280])
        assert not set(export) & set(check)
        trained = train_probe(store.select(export), max_error=0.2, delta=0.2, seed=row["seed"], n_jobs=1)
        [cert] = trained.certificates
        assert row["certified"] and cert["valid"] and row["threshold"] == cert["threshold"]
        X = np.asarray(store.layer_means, dtype=np.float32)[check]
        conf = trained.probe.predict_proba(Inputs.of(X, store.raw_confidence[check]))[:, 1]
        trusted = conf >= cert["threshold"]
        k, n = int(store.correct[check][trusted].sum()), int(trusted.sum())
        assert (row["n_trusted"], row["n_check"]) == (n, 80) and row["precision"] == pytest.approx(k / n)
        ci = binomtest(k, n).proportion_ci(0.95, method="exact")
        assert row["precision_ci"] == pytest.approx([ci.low, ci.high])
    assert res["issue_check_passes"] == (res["splits"][0]["precision"] >= 0.77)
    assert "| 0 | yes |" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="holds 300 records; --export 800 \\+ --check 500 need 1300"):
        bench["main"](["measure", "--store", str(tmp_path / "s"), "--out", str(out)])
