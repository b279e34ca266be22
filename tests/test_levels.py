"""One level checker (``acute.validation.check_level``) for every probability-like setting: a risk
level, ``max_error``, ``delta``, a precheck threshold, a run config's ``test_fraction``. Each
refuses booleans, strings, NaN and out-of-range values in one line naming the setting, its range
and its meaning, in the same words from Python, the command line (argparse), a run config and
the HTTP service; and the decision they feed is parsed once into a ``Gate``."""

from __future__ import annotations

import math

import numpy as np
import pytest

from acute.cli import build_parser
from acute.errors import InputError
from acute.evaluation.curves import binned_reliability, constant_euro_curve
from acute.metrics.certify import DEFAULT_DELTA, check_delta, check_max_error
from acute.metrics.selective import coverage_at_error
from acute.scoring import Gate, parse_gate
from acute.scoring.gate import check_gates, parse_gates, per_prompt, resolve_gate
from acute.scoring.precheck import check_precheck
from acute.scoring.risk import DEFAULT_RISK, check_risk
from acute.validation import check_level

#: (checker, name, range, meaning)
LEVELS = [
    (check_risk, "risk", "[0, 1]", "the risk level u: trust iff confidence > u"),
    (check_max_error, "max_error", "(0, 1)", "the error rate allowed among trusted answers"),
    (check_delta, "delta", "(0, 1)", "the probability that the guarantee fails"),
    (check_precheck, "precheck", "(0, 1)", "answer only when the question-only probe's P(correct) exceeds it"),
]
REFUSED_EVERYWHERE = [True, False, np.bool_(True), "0.3", "0.5", None, float("nan"), float("inf"), -0.1, 1.5,
                      10 ** 400, [0.3], {"u": 0.3}, complex(0.3, 0)]


def _message(name, span, meaning, value):
    shown = f"an integer of {value.bit_length()} bits" if isinstance(value, int) and value > 2 ** 320 else repr(value)
    return f"{name} must be a number in {span} ({meaning}), got {shown}"


@pytest.mark.parametrize("check, name, span, meaning", LEVELS, ids=[lv[1] for lv in LEVELS])
@pytest.mark.parametrize("value", REFUSED_EVERYWHERE, ids=repr)
def test_every_level_refuses_booleans_strings_nan_and_out_of_range(check, name, span, meaning, value):
    with pytest.raises(InputError) as e:
        check(value)
    assert str(e.value) == _message(name, span, meaning, value)
    with pytest.raises(InputError, match="^--opt must be a number in "):  # the name given is the name shown
        check(value, "--opt")


def test_check_risk_true_and_a_string_are_refused():  # issue 43: check_risk(True) was 1.0, check_risk("0.3") 0.3
    for value in (True, "0.3"):
        with pytest.raises(InputError, match=r"^risk must be a number in \[0, 1\]"):
            check_risk(value)


@pytest.mark.parametrize("check, name, span, meaning", LEVELS, ids=[lv[1] for lv in LEVELS])
def test_the_range_of_each_level(check, name, span, meaning):
    for ok in (0.3, np.float32(0.25), np.float64(0.75), 1e-9, 1 - 1e-9):
        assert check(ok) == float(ok) and type(check(ok)) is float
    for edge in (0, 1, 0.0, 1.0, np.int64(1)):
        if span == "[0, 1]":
            assert check(edge) == float(edge)
        else:
            with pytest.raises(InputError, match=f"^{name} must be a number in \\(0, 1\\)"):
                check(edge)


def test_a_huge_value_is_not_echoed_whole():
    with pytest.raises(InputError) as e:
        check_risk("9" * 10_000)
    assert len(str(e.value)) < 200 and str(e.value).endswith("...")
    with pytest.raises(InputError, match=r"got an integer of 16610 bits$"):
        check_risk(10 ** 5000)


def test_check_level_is_the_one_rule():
    assert check_level(0.5, "x") == 0.5 and check_level(0, "x", closed=True) == 0.0
    with pytest.raises(InputError, match=r"^x must be a number in \(0, 1\), got 0$"):
        check_level(0, "x")
    assert math.isclose(check_level(np.float16(0.5), "x"), 0.5)


def test_one_value_or_one_per_prompt_is_read_one_way():
    """``per_prompt`` reads the levels of ``parse_gates``, ``Scorer.precheck``'s thresholds and a
    list of gates: one for all, or one per prompt with each item named."""
    with pytest.raises(InputError, match=r"^risk must be a number in \[0, 1\].*got True"):
        parse_gates(None, 2, risk=True)
    with pytest.raises(InputError, match=r"^risk\[1\] must be a number in \[0, 1\].*got '0.3'"):
        parse_gates(None, 2, risk=[0.2, "0.3"])
    assert per_prompt(0.3, 2, check_precheck, "threshold") == [0.3, 0.3]
    with pytest.raises(InputError, match=r"^threshold has 1 values for 2 prompts"):
        per_prompt([0.3], 2, check_precheck, "threshold")
    with pytest.raises(InputError, match=r"^gate\[1\] must be an acute.scoring.gate.Gate .*got NoneType"):
        check_gates([Gate(), None], 2)
    with pytest.raises(InputError, match=r"^gate has 3 values for 2 prompts"):
        check_gates([Gate()] * 3, 2)


def test_defaults_are_named_constants():
    assert DEFAULT_RISK == 0.5 and DEFAULT_DELTA == 0.1
    assert Gate().rule.rule == "risk" and Gate().rule.threshold == DEFAULT_RISK and Gate().precheck is None
    parser = build_parser()
    helps = {a.dest: a.help for a in parser._subparsers._group_actions[0].choices["score"]._actions}
    assert f"(default {DEFAULT_RISK})" in helps["risk"]
    helps = {a.dest: a.help for a in parser._subparsers._group_actions[0].choices["export"]._actions}
    assert f"(default {DEFAULT_DELTA})" in helps["delta"]


# ------------------------------------------------------------------ the command line: argparse errors
@pytest.mark.parametrize("argv, option, check, text", [
    (["score", "Q?", "--risk"], "--risk", check_risk, "1.5"),
    (["score", "Q?", "--risk"], "--risk", check_risk, "nan"),
    (["score", "Q?", "--risk"], "--risk", check_risk, "high"),
    (["score", "Q?", "--max-error"], "--max-error", check_max_error, "0"),
    (["score", "Q?", "--precheck"], "--precheck", check_precheck, "1"),
    (["serve", "--risk"], "--risk", check_risk, "-0.1"),
    (["serve", "--max-error"], "--max-error", check_max_error, "True"),
    (["export", "--store", "S", "--out", "O", "--max-error"], "--max-error", check_max_error, "1.0"),
    (["export", "--store", "S", "--out", "O", "--max-error", "0.1", "--delta"], "--delta", check_delta, "0"),
])
def test_the_command_line_refuses_a_level_while_parsing_in_the_same_words(capsys, argv, option, check, text):
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args([*argv, text])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    try:
        value = float(text)
    except ValueError:
        value = text
    with pytest.raises(InputError) as library:
        check(value, option)
    assert e.value.code == 2 and err.endswith(f"error: argument {option}: {str(library.value)[len(option) + 1:]}")


def test_the_command_line_takes_good_levels_as_floats():
    args = build_parser().parse_args(["score", "Q?", "--risk", "0", "--precheck", "0.2"])
    assert (args.risk, args.precheck, args.max_error) == (0.0, 0.2, None)
    args = build_parser().parse_args(["export", "--store", "S", "--out", "O", "--max-error", "0.1", "0.05",
                                      "--delta", "0.2"])
    assert (args.max_error, args.delta) == ([0.1, 0.05], 0.2)


# ------------------------------------------------------------------ a run config
@pytest.mark.parametrize("text, shown", [("true", "True"), ('"0.3"', "'0.3'"), ("1.5", "1.5"), ("0", "0"),
                                          ("nan", "nan")])
def test_a_run_config_refuses_a_level_in_the_same_words(tmp_path, text, shown):
    from acute.pipeline.config import load_config

    path = tmp_path / "c.toml"
    path.write_text(f'[run]\ntest_fraction = {text}\n[tasks.a]\ndata = "x.jsonl"\nrecords = 5\n[models.m]\n')
    with pytest.raises(InputError) as e:
        load_config(path, data_root=tmp_path)
    assert str(e.value) == f"{path}: run.test_fraction must be a number in (0, 1) (the share of records held out), got {shown}"


# ------------------------------------------------------------------ the HTTP service
@pytest.mark.parametrize("field, value", [("risk", True), ("risk", "0.3"), ("risk", 1.5), ("risk", -0.1),
                                          ("max_error", True), ("max_error", 0), ("max_error", "0.1"),
                                          ("precheck", False), ("precheck", 1), ("precheck", "0.2")])
def test_a_request_refuses_a_level_in_the_same_words(field, value):
    pytest.importorskip("pydantic")
    from acute.serving.errors import RequestError
    from acute.serving.schemas import score_job

    body = {"prompt": "Q?", "risk": 0.5, field: value}
    if field == "max_error":
        body.pop("risk")
    with pytest.raises(RequestError) as e:
        score_job(body)
    with pytest.raises(InputError) as library:
        dict(risk=check_risk, max_error=check_max_error, precheck=check_precheck)[field](value)
    assert (e.value.status, e.value.param, str(e.value)) == (400, field, str(library.value))
    with pytest.raises(RequestError) as e:  # an item of a list names its index
        score_job(body, prefix=(1,))
    assert e.value.param == f"[1].{field}" and str(e.value).startswith(f"[1].{field} must be a number in")


def test_a_request_takes_the_risk_levels_the_library_takes():
    pytest.importorskip("pydantic")
    from acute.serving.schemas import score_job

    for u in (0, 1, 0.0, 1.0, 0.3):  # [0, 1], as in Scorer and acute score (risk 0 and 1 were a 400)
        job = score_job({"prompt": "Q?", "risk": u})
        assert job.gate.rule.rule == "risk" and job.gate.rule.threshold == float(u)


# ------------------------------------------------------------------ the gate, parsed once
class _Probe:
    certificates = [{"alpha": 0.1, "delta": 0.1, "valid": True, "threshold": 0.62, "n_calibration": 500,
                     "calibration_coverage": 0.4, "calibration_precision": 0.93, "fwer": "bonferroni_holm",
                     "backend": "binomial", "source": "out-of-fold"}]


def test_a_gate_decides_by_one_comparison_without_checking_again(monkeypatch):
    import acute.estimators.certificates as certificates
    import acute.metrics.certify as certify

    gate = parse_gate(_Probe(), max_error=0.1, precheck=0.2)
    assert (gate.rule.rule, gate.rule.threshold, gate.rule.max_error, gate.precheck) == ("certificate", 0.62, 0.1, 0.2)
    # deciding rebuilds no certificate and checks no level
    for module, name in ((certify.Certificate, "from_dict"), (certificates, "find_certificate"),
                         (certificates, "certificate_of")):
        monkeypatch.setattr(module, name, lambda *a, **k: pytest.fail("re-checked while deciding"))
    import acute.scoring.gate as gate_module

    monkeypatch.setattr(gate_module, "LEVEL_CHECKS", {})
    assert gate.decide(np.array([0.61, 0.62, 0.9])).tolist() == [False, True, True]
    assert Gate().decide(np.array([0.5, 0.51])).tolist() == [False, True]


def test_equal_requests_share_one_gate_and_errors_name_the_item():
    gates = parse_gates(_Probe(), 4, risk=[0.2, None, 0.2, None], max_error=[None, 0.1, None, 0.1])
    assert gates[0] is gates[2] and gates[1] is gates[3] and gates[1].rule.threshold == 0.62
    with pytest.raises(InputError, match=r"^risk\[1\] must be a number in \[0, 1\].*got True"):
        parse_gates(_Probe(), 2, risk=[0.2, True])
    with pytest.raises(InputError, match=r"^precheck has 1 values for 2 prompts"):
        parse_gates(_Probe(), 2, precheck=[0.2])
    with pytest.raises(InputError, match=r"give --risk \(a risk level\) or --max-error"):
        resolve_gate(_Probe(), 0.2, 0.1, name={"risk": "--risk", "max_error": "--max-error"}.get)
    with pytest.raises(InputError, match=r"^max_error=0.2: this probe carries no certificate"):
        parse_gate(_Probe(), max_error=0.2)


@pytest.mark.parametrize("call, text", [
    (lambda v: coverage_at_error([0.9, 0.2], [1, 0], v),
     "alpha must be a number in [0, 1] (the largest error rate allowed), got"),
    (lambda v: constant_euro_curve([1, 0, 1], base_rate=v),
     "base_rate must be a number in [0, 1] (a probability), got"),
    (lambda v: binned_reliability(
        [0.9, 0.2, 0.6], [1, 0, 1], alpha=v),
     "alpha must be a number in (0, 1) (one minus the intervals' coverage), got"),
])
@pytest.mark.parametrize("value", [True, "0.3", float("nan"), 1.5])
def test_other_probability_like_arguments_go_through_the_one_rule(call, text, value):
    with pytest.raises(InputError) as e:
        call(value)
    assert str(e.value).startswith(text)


def test_a_task_option_that_is_a_level_goes_through_the_one_rule(tmp_path):
    from acute.tasks import get_task

    with pytest.raises(InputError, match=r"option threshold must be a number in \[0, 1\] \(the ROUGE-L F1 a "
                                         r"summary needs\), got 1\.5"):
        get_task("scitldr", threshold=1.5).load(tmp_path)
