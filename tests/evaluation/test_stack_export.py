"""A stack exported as a folder (acute.estimators.stack_file): written and read with skops and an
explicit list of trusted types, scoring bit for bit as the fitted stack; a changed file, an
untrusted type and ``acute recertify`` are refused, each naming what."""

from __future__ import annotations

import json

import numpy as np
import pytest

from acute.errors import InputError, ProbeFormatError
from acute.estimators import load_probe
from acute.estimators.probe_format import STACK_FILE
from acute.estimators.stack_file import ExportedStack, is_stack_folder
from acute.evaluation.choice import stack_inputs, train_stack
from cli_run import run  # tests/cli_run.py
from smaller import small_searches  # tests/smaller.py
from test_stack_rows import write_store

sio = pytest.importorskip("skops.io")


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    base = tmp_path_factory.mktemp("stack-export")
    store = write_store(base / "store", n=120)
    with small_searches():
        trained = train_stack(store, "acute-all", np.arange(100), np.arange(120) >= 100, setting="store",
                              n_estimators=10)
    trained.save(base / "acute-all")
    return base, store, trained


def test_the_folder_scores_as_the_fitted_stack(exported):
    base, store, trained = exported
    assert is_stack_folder(base / "acute-all")
    loaded = load_probe(base / "acute-all")
    assert isinstance(loaded, ExportedStack) and loaded.name == "acute-all" and loaded.scoring == "store"
    X = stack_inputs(store, "acute-all", "store")[0]
    np.testing.assert_array_equal(loaded.predict_proba(X), trained.exported.estimator.predict_proba(X))
    man = json.loads((base / "acute-all" / "probe.json").read_text())
    assert man["format_version"] == 4 and man["kind"] == "stack"
    assert set(man["scoring"]["sources"]) == set(loaded.sources)
    assert man["stack"]["estimators_used"] == trained.exported.estimator.estimators_used_
    assert trained.held_out["n"] == 20 and "platt_auc_euro" in trained.held_out
    assert loaded.estimator_name == "acute-all" and loaded.precheck is None and loaded.certificates == []


def test_a_changed_file_and_an_untrusted_type_are_refused(exported, tmp_path):
    base, _, trained = exported
    folder = tmp_path / "changed"
    trained.save(folder)
    with open(folder / STACK_FILE, "ab") as f:
        f.write(b"x")
    with pytest.raises(ProbeFormatError, match="sha256 does not match"):
        load_probe(folder)

    class Stranger:  # defined here: in no trusted list
        pass

    est = trained.exported.estimator
    est.stranger_ = Stranger()
    try:
        trained.save(tmp_path / "stranger")
    finally:
        del est.stranger_
    with pytest.raises(ProbeFormatError, match="holds types acute does not trust.*Stranger"):
        load_probe(tmp_path / "stranger")


def test_recertify_refuses_a_stack_naming_it(exported, tmp_path, capsys):
    base, _, _ = exported
    rc, _, err = run(["recertify", "--probe", base / "acute-all", "--store", base / "store",
                      "--out", tmp_path / "r"], capsys)
    assert rc != 0 and "holds a stack (acute-all)" in err and "acute recertify" in err
    with pytest.raises(InputError, match="not a stack"):
        train_stack(None, "acute-pca10", np.arange(3), np.zeros(3, bool), setting="store")
