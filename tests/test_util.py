"""The shared helpers: one JSON conversion, one JSONL reader, the error hierarchy."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import numpy as np
import pytest

from acute.estimators.inputs import Inputs
from acute import errors
from acute.fileio import iter_jsonl, json_ready


def test_json_ready_converts_numpy_and_applies_one_nonfinite_policy():
    obj = {1: np.float32(0.5), "a": (np.int64(3), np.bool_(True)), "p": Path("x/y"),
           "arr": np.arange(3), "bad": [math.nan, math.inf, -np.inf]}
    out = json_ready(obj)
    assert out == {"1": 0.5, "a": [3, True], "p": "x/y", "arr": [0, 1, 2], "bad": [None, None, None]}
    assert isinstance(out["a"][1], bool) and isinstance(out["a"][0], int)
    json.dumps(out, allow_nan=False)
    assert json_ready([math.nan, math.inf, -math.inf], nonfinite="clip") == [None, 1e30, -1e30]
    with pytest.raises(errors.InputError, match=r"manifest\['bad'\] is nan"):
        json_ready({"bad": math.nan}, where="manifest", nonfinite="error")
    with pytest.raises(errors.InputError, match=r"value\['s'\] of type set"):
        json_ready({"s": {1}})


def test_iter_jsonl_names_file_and_line(tmp_path):
    p = tmp_path / "rows.jsonl"
    p.write_bytes(b'\xef\xbb\xbf{"id": 1}\n\n{"id": 2}\n')
    assert list(iter_jsonl(p)) == [(1, {"id": 1}), (3, {"id": 2})]
    p.write_bytes(b'{"id": 1}\n{"q": "caf\xe9"}\n')  # latin-1, not UTF-8
    with pytest.raises(errors.DataError, match=r"rows.jsonl:2: not valid UTF-8"):
        list(iter_jsonl(p))
    p.write_text('{"id": 1}\n{oops\n')
    with pytest.raises(errors.InputError, match=r"rows.jsonl:2: invalid JSON"):
        list(iter_jsonl(p, error=errors.InputError))
    p.write_text('"a string"\n')
    with pytest.raises(errors.DataError, match=r":1: expected a JSON object, got str"):
        list(iter_jsonl(p))
    assert list(iter_jsonl(io.StringIO('"a"\n[1]\n'), "<stdin>", objects=False)) == [(1, "a"), (2, [1])]


def test_every_error_class_is_an_acute_error_defined_in_errors():
    import acute.estimators
    import acute.estimators.probes
    import acute.extraction
    import acute.store
    import acute.tasks.base

    for mod in (acute.store, acute.estimators.probes, acute.estimators, acute.extraction, acute.tasks.base):
        for name in dir(mod):
            obj = getattr(mod, name)
            if isinstance(obj, type) and issubclass(obj, Exception) and obj.__module__.startswith("acute"):
                assert obj.__module__ == "acute.errors", (mod.__name__, name)
                assert issubclass(obj, errors.AcuteError), name


def test_cli_maps_domain_errors_and_lets_bugs_show_their_traceback(monkeypatch, capsys):
    from acute import cli

    def boom(args):
        raise errors.InputError("--thing must be positive")

    def bug(args):
        raise ValueError("an internal bug")

    monkeypatch.setattr(cli.collecting, "cmd_models", boom)
    assert cli.main(["models"]) == 2
    assert "acute: error: --thing must be positive" in capsys.readouterr().err
    monkeypatch.setattr(cli.collecting, "cmd_models", bug)
    with pytest.raises(ValueError, match="an internal bug"):
        cli.main(["models"])


@pytest.mark.parametrize("conf,message", [
    ([0.5, np.nan, 0.2], "confidence: contains NaN (a non-finite value) in row 1"),
    ([0.5, 0.2, np.inf], "confidence: values must lie in [0, 1]; row 2 is inf"),
    ([0.5, -0.1, 0.2], "confidence: values must lie in [0, 1]; row 1 is -0.1"),
])
def test_one_confidence_rule_everywhere(conf, message):
    """Features, probes, baselines, estimators and metrics refuse the same input the same way."""
    from acute import metrics
    from acute.estimators.calibration import make_calibrator
    from acute.estimators import make_estimator
    from acute.validation import check_confidence

    y = [1, 0, 1]
    X = np.zeros((3, 3, 4), dtype=np.float32)
    calls = [lambda: check_confidence(conf, 3), lambda: make_calibrator("platt").fit(conf, y),
             lambda: metrics.smece(conf, y), lambda: make_estimator("acute-cosine").fit(Inputs.of(X, conf), y)]
    for call in calls:
        with pytest.raises(errors.InputError) as e:
            call()
        assert str(e.value) == message


def test_one_label_rule_everywhere():
    from acute import metrics
    from acute.estimators.calibration import make_calibrator
    from acute.validation import check_correct

    for call in (lambda: check_correct([1, 2, 0], 3), lambda: make_calibrator("hre").fit([0.1, 0.2, 0.3], [1, 2, 0]),
                 lambda: metrics.brier([0.1, 0.2, 0.3], [1, 2, 0])):
        with pytest.raises(errors.InputError, match=r"^correct: labels must be 0/1 or booleans; row 1 is 2$"):
            call()
    assert check_correct([True, False]).dtype == np.int64
    assert check_correct([1.0, 1.0]).tolist() == [1, 1]  # one class is fine unless asked
    with pytest.raises(errors.InputError, match="single class: all records are correct"):
        check_correct([1.0, 1.0], both_classes=True)


def test_one_list_of_metric_specs_drives_the_tables():
    from acute import metrics
    from acute.evaluation import evaluate_predictions
    from acute.evaluation.markdown import results_markdown, selective_markdown
    from acute.evaluation.table import TABLE_COLUMNS
    from acute.report.runs import REPORT_METRICS

    assert [k for k, _, _ in TABLE_COLUMNS] == [m.name for m in metrics.METRIC_SPECS]
    assert REPORT_METRICS[:-1] == TABLE_COLUMNS[:6] + tuple(c for c in TABLE_COLUMNS if c[0] in ("aurc", "coverage_10"))
    assert REPORT_METRICS[-1][0] == "certified_coverage_10"  # beside coverage_10: cross-validation only
    assert metrics.METRICS["smece"].direction == -1 and metrics.METRICS["auroc"].direction == 1
    assert metrics.METRICS["brier"].format(0.12345) == "0.123" and metrics.METRICS["brier"].format(math.nan) == "n/a"
    y = np.array([1, 0, 1, 1, 0, 0, 1, 0])
    c = np.array([0.9, 0.2, 0.7, 0.6, 0.4, 0.1, 0.8, 0.3])
    row = evaluate_predictions({"x": c}, y, n_bootstrap=0)[0]
    for spec in metrics.METRIC_SPECS[1:]:
        assert row[spec.name] == pytest.approx(spec.fn(c, y))
    header = results_markdown([row]).splitlines()[0]
    assert all(m.header in header for m in metrics.METRIC_SPECS if m.table == "calibration")
    selective = selective_markdown([row]).splitlines()[0]
    assert all(m.header in selective for m in metrics.METRIC_SPECS if m.table == "selective")
