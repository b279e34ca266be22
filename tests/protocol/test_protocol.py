"""Tests for acute.protocol: readouts, cells, shifts and provenance on hand-made per-record
values, n/a marking, and end-to-end runs on tiny random models."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from acute import metrics
from acute.models import name_model
from acute.protocol import load_protocol, run_protocol, write_protocol_report
from acute.protocol.analysis import cell_data, checklist, gap_cells, provenance_table, readout, shift_table
from acute.protocol.render import render_report
from acute.protocol.settings import CONTEXTS, ESTIMATORS, PROVENANCES, READOUTS, ROBUSTNESS, SCORED
from acute.store.generation import GenerationSettings

LOG = math.log


# --------------------------------------------------------------------------------------------
# readouts
# --------------------------------------------------------------------------------------------


def test_readouts_on_hand_logprobs():
    lp = [LOG(0.5), LOG(0.25), LOG(0.8)]  # product 0.1
    assert readout(lp, "T1") == pytest.approx(0.1 ** (1 / 3), rel=1e-12)
    assert readout(lp, "T2") == pytest.approx(0.5, rel=1e-12)
    assert readout(lp, "product") == pytest.approx(0.1, rel=1e-12)
    one = [LOG(0.3)]
    assert readout(one, "T1") == readout(one, "T2") == readout(one, "product") == pytest.approx(0.3)
    assert readout([1e-7], "T1") == 1.0  # float32 rounding above 0 is clipped


def test_readout_errors():
    with pytest.raises(ValueError, match="empty"):
        readout([], "T1")
    with pytest.raises(ValueError, match="kind"):
        readout([0.0], "T3")
    with pytest.raises(ValueError, match="NaN"):
        readout([float("nan")], "T1")


# --------------------------------------------------------------------------------------------
# synthetic per-record values
# --------------------------------------------------------------------------------------------


def _slot(status="ok", logprobs=None):
    return {"status": status, "logprobs": logprobs}


def make_record(rid, correct, verbal, token, answers=None):
    """A record as run_protocol stores it.

    ``verbal``: {provenance: c_verb (float) or a status string}; ``token``: {provenance:
    {context: list of log-probs or a status string}}. Provenances not given are unavailable.
    """
    answers = answers or {p: (f"{p}-{rid}" if p in verbal else None) for p in PROVENANCES}
    rec = {"id": rid, "status": "ok", "correct": correct, "answers": answers,
           "verbal": {}, "token": {}}
    for p in PROVENANCES:
        v = verbal.get(p, "unavailable")
        rec["verbal"][p] = ({"status": "ok", "c_verb": float(v), "raw": str(v)} if not isinstance(v, str)
                            else {"status": v, "c_verb": None, "raw": "no number"})
        rec["token"][p] = {}
        for c in CONTEXTS:
            t = token.get(p, {}).get(c, "unavailable")
            rec["token"][p][c] = _slot(t) if isinstance(t, str) else _slot("ok", list(t))
    return rec


def _gen(rid, correct, c_verb, q, v):
    return make_record(rid, correct, {"generated": c_verb}, {"generated": {"query": q, "verbal": v}})


#: generated-answer rows: c_verb; query-context probs (two tokens for r1, r2); verbal-context probs
GEN_RECORDS = [
    _gen("r1", True, 0.9, [LOG(0.9), LOG(0.5)], [LOG(0.65)]),
    _gen("r2", False, 0.9, [LOG(0.35)], [LOG(0.25), LOG(0.8)]),
    _gen("r3", True, 0.5, [LOG(0.75)], [LOG(0.55)]),
    _gen("r4", False, 0.05, [LOG(0.15)], [LOG(0.12)]),
    _gen("r5", True, "parse_failure", [LOG(0.5)], [LOG(0.5)]),
    _gen("r6", False, 0.4, [LOG(0.5)], "empty_span"),
    {"id": "r7", "status": "too_long", "correct": None, "answers": {p: None for p in PROVENANCES},
     "verbal": {}, "token": {}},
]


def test_cell_data_rows_and_counts():
    d = cell_data(GEN_RECORDS, "generated")
    assert d.ids == ["r1", "r2", "r3", "r4"]
    np.testing.assert_array_equal(d.c_verb, [0.9, 0.9, 0.5, 0.05])
    np.testing.assert_array_equal(d.correct, [True, False, True, False])
    assert d.n_rows == 6 and d.n_elicited == 6 and d.n_parse_failures == 1
    assert d.parse_failure_rate == pytest.approx(1 / 6)
    assert d.excluded == {"verbal:parse_failure": 1, "token:verbal:empty_span": 1}
    assert d.status() == "ok"
    np.testing.assert_allclose(d.confidences("T1", "query"), [math.sqrt(0.45), 0.35, 0.75, 0.15])
    np.testing.assert_allclose(d.confidences("T2", "query"), [0.9, 0.35, 0.75, 0.15])
    np.testing.assert_allclose(d.confidences("product", "verbal"), [0.65, 0.2, 0.55, 0.12])
    np.testing.assert_allclose(d.confidences("T2", "verbal"), [0.65, 0.25, 0.55, 0.12])


def test_gap_cells_hand_computed_ece():
    cells = gap_cells(GEN_RECORDS, n_bootstrap=20, seed=0, estimators={"ECE": metrics.ece})
    by = {(c["scored"], c["readout"], c["context"]): c for c in cells}
    assert len(cells) == len(SCORED) * len(READOUTS) * len(CONTEXTS)
    # ECE(c_verb): bin 9 {0.9 wrong, 0.9 right} -> 2/4 * |0.9 - 0.5|; bin 5 {0.5 right}; bin 0 {0.05 wrong}
    ece_verb = 0.5 * 0.4 + 0.25 * 0.5 + 0.25 * 0.05
    assert ece_verb == pytest.approx(0.3375)
    # T2 under the query: 0.9 (right), 0.35 (wrong), 0.75 (right), 0.15 (wrong), each alone in a bin
    ece_t2_query = (0.1 + 0.35 + 0.25 + 0.15) / 4
    # T1 under the verbal prefix: 0.65 (right), sqrt(0.2) (wrong), 0.55 (right), 0.12 (wrong)
    ece_t1_verbal = (0.35 + math.sqrt(0.2) + 0.45 + 0.12) / 4
    c = by[("generated", "T2", "query")]
    assert c["status"] == "ok" and c["n"] == 4
    assert c["verb"] == pytest.approx(ece_verb)
    assert c["tok"] == pytest.approx(ece_t2_query)
    assert c["gap"] == pytest.approx(ece_verb - ece_t2_query)
    assert by[("generated", "T1", "verbal")]["gap"] == pytest.approx(ece_verb - ece_t1_verbal)
    assert c["parse_failure_rate"] == pytest.approx(1 / 6)
    # no provided answers in these records: the gold cells are n/a, not filled
    gold = by[("gold", "T1", "query")]
    assert gold["status"].startswith("n/a: no usable rows") and gold["gap"] is None


def test_gap_interval_equals_metrics_paired_bootstrap():
    """Our cached-resample interval is acute.metrics.paired_bootstrap's for the same seed."""
    cells = gap_cells(GEN_RECORDS, n_bootstrap=200, seed=7,
                      estimators={"KS-Cal": metrics.ks_cal, "Brier": metrics.brier})
    d = cell_data(GEN_RECORDS, "generated")
    for c in cells:
        if c["scored"] != "generated":
            continue
        f = metrics.ks_cal if c["estimator"] == "KS-Cal" else metrics.brier
        ref = metrics.paired_bootstrap(f, d.c_verb, d.confidences(c["readout"], c["context"]),
                                       d.correct, n=200, seed=7)
        assert c["gap"] == pytest.approx(ref.estimate, abs=1e-12)
        assert c["low"] == pytest.approx(ref.low, abs=1e-12)
        assert c["high"] == pytest.approx(ref.high, abs=1e-12)
        assert c["low"] <= c["gap"] + 1e-12 or c["high"] >= c["gap"] - 1e-12


def _provided(rid, gold, wrong, wtype, lp_gold, lp_wrong, lp_wtype):
    verbal = {"generated": 0.5, "gold": gold, "plausible_wrong": wrong}
    token = {"generated": {"query": [LOG(0.5)], "verbal": [LOG(0.5)]},
             "gold": {"query": lp_gold, "verbal": lp_gold},
             "plausible_wrong": {"query": lp_wrong, "verbal": lp_wrong}}
    if wtype is not None:
        verbal["wrong_type"] = wtype
        token["wrong_type"] = {"query": lp_wtype, "verbal": lp_wtype}
    return make_record(rid, True, verbal, token)


PROVIDED_RECORDS = [
    _provided("a", 0.9, 0.6, 0.2, [LOG(0.8)], [LOG(0.3)], [LOG(0.05)]),
    _provided("b", 0.7, "parse_failure", None, [LOG(0.6)], [LOG(0.4)], None),
    _provided("c", "parse_failure", 0.3, 0.1, [LOG(0.7)], [LOG(0.2)], [LOG(0.1)]),
]


def test_gold_cells_pool_provided_answers_with_known_labels():
    d = cell_data(PROVIDED_RECORDS, "gold")
    assert d.ids == ["a/gold", "a/plausible_wrong", "a/wrong_type", "b/gold",
                     "c/plausible_wrong", "c/wrong_type"]
    np.testing.assert_array_equal(d.correct, [True, False, False, True, False, False])
    np.testing.assert_array_equal(d.c_verb, [0.9, 0.6, 0.2, 0.7, 0.3, 0.1])
    np.testing.assert_allclose(d.confidences("T1", "query"), [0.8, 0.3, 0.05, 0.6, 0.2, 0.1])
    assert (d.n_rows, d.n_elicited, d.n_parse_failures) == (8, 8, 2)
    cells = gap_cells(PROVIDED_RECORDS, n_bootstrap=10, estimators={"Brier": metrics.brier})
    c = next(c for c in cells if c["scored"] == "gold" and c["readout"] == "T1" and c["context"] == "query")
    brier_verb = np.mean((np.array([0.9, 0.6, 0.2, 0.7, 0.3, 0.1]) - [1, 0, 0, 1, 0, 0]) ** 2)
    brier_tok = np.mean((np.array([0.8, 0.3, 0.05, 0.6, 0.2, 0.1]) - [1, 0, 0, 1, 0, 0]) ** 2)
    assert c["gap"] == pytest.approx(brier_verb - brier_tok)


def test_all_parse_failures_are_marked_not_filled():
    records = [_gen(f"r{i}", bool(i % 2), "parse_failure", [LOG(0.5)], [LOG(0.4)]) for i in range(5)]
    cells = gap_cells(records, n_bootstrap=5)
    gen = [c for c in cells if c["scored"] == "generated"]
    assert len(gen) == len(READOUTS) * len(CONTEXTS) * (len(ESTIMATORS) + len(ROBUSTNESS))
    for c in gen:
        assert c["status"] == "n/a: 100% parse failures (5/5)"
        assert c["gap"] is None and c["verb"] is None and c["low"] is None
        assert c["parse_failure_rate"] == 1.0 and c["n"] == 0
    # the shift table skips n/a cells instead of treating them as zeros
    assert shift_table(cells)["context"] == {"mean_abs_change": None, "max_abs_change": None,
                                             "n_pairs": 0}


# --------------------------------------------------------------------------------------------
# shift, provenance, checklist
# --------------------------------------------------------------------------------------------

E_OFF = {"ECE": 0.0, "KDE-ECE": 0.01, "KS-Cal": 0.02, "smECE": 0.04}


def _synthetic_cells():
    cells = []
    for s, r, c, e in itertools.product(SCORED, READOUTS, CONTEXTS, list(ESTIMATORS) + list(ROBUSTNESS)):
        if e in ROBUSTNESS or r == "product":
            gap = 9.0  # must be ignored by the shift table
        else:
            gap = 0.1 * (c == "verbal") + 0.03 * (r == "T2") + E_OFF[e] + 0.5 * (s == "gold")
        cells.append({"scored": s, "readout": r, "context": c, "estimator": e, "gap": gap,
                      "status": "ok", "n": 10, "parse_failure_rate": 0.1})
    return cells


def test_shift_table_on_additive_gaps():
    shifts = shift_table(_synthetic_cells())
    assert shifts["context"]["mean_abs_change"] == pytest.approx(0.1)
    assert shifts["context"]["n_pairs"] == 2 * 2 * 4  # scored x readout(T1, T2) x estimator
    assert shifts["readout"]["mean_abs_change"] == pytest.approx(0.03)
    assert shifts["scored"]["mean_abs_change"] == pytest.approx(0.5)
    # estimator pairs: |0-.01|, |0-.02|, |0-.04|, |.01-.02|, |.01-.04|, |.02-.04|
    assert shifts["estimator"]["mean_abs_change"] == pytest.approx(0.13 / 6)
    assert shifts["estimator"]["n_pairs"] == 6 * 2 * 2 * 2
    assert shifts["estimator"]["max_abs_change"] == pytest.approx(0.04)


def test_shift_table_drops_missing_cells_and_groups_by_run():
    cells = _synthetic_cells()
    target = next(c for c in cells if (c["scored"], c["readout"], c["context"], c["estimator"])
                  == ("generated", "T1", "verbal", "ECE"))
    target["gap"] = 0.5  # was 0.1: its context pair now differs by 0.5
    shifts = shift_table(cells)
    assert shifts["context"]["mean_abs_change"] == pytest.approx((15 * 0.1 + 0.5) / 16)
    target["gap"] = None
    assert shift_table(cells)["context"]["n_pairs"] == 15
    assert shift_table(cells)["context"]["mean_abs_change"] == pytest.approx(0.1)
    # two runs: pairs are formed within a run only, then pooled
    run_a = [{**c, "run": "a"} for c in _synthetic_cells()]
    run_b = [{**c, "run": "b", "gap": c["gap"] * 2} for c in _synthetic_cells()]
    pooled = shift_table(run_a + run_b)
    assert pooled["context"]["mean_abs_change"] == pytest.approx((0.1 + 0.2) / 2)
    assert pooled["context"]["n_pairs"] == 32


def test_provenance_table_by_hand():
    prov = provenance_table(PROVIDED_RECORDS, n_bootstrap=50, seed=0)
    rows = prov["rows"]
    assert rows["gold"]["mean"] == pytest.approx((0.9 + 0.7) / 2)
    assert rows["gold"]["n"] == 2 and rows["gold"]["parse_failure_rate"] == pytest.approx(1 / 3)
    assert rows["plausible_wrong"]["mean"] == pytest.approx((0.6 + 0.3) / 2)
    assert rows["wrong_type"]["mean"] == pytest.approx((0.2 + 0.1) / 2)
    assert rows["wrong_type"]["n_rows"] == 2
    assert rows["generated"]["mean"] == pytest.approx(0.5) and rows["generated_wrong"]["n"] == 0
    assert rows["generated_wrong"]["status"] == "n/a: no rows"
    # paired differences: only example "a" has both gold and plausible-wrong parsed
    d = prov["differences"]["gold - plausible_wrong"]
    assert d["n"] == 1 and d["mean"] == pytest.approx(0.3)
    assert d["low"] == pytest.approx(0.3) and d["high"] == pytest.approx(0.3)
    assert prov["differences"]["gold - wrong_type"]["mean"] == pytest.approx(0.7)
    lo, hi = rows["gold"]["low"], rows["gold"]["high"]
    assert 0.7 <= lo <= rows["gold"]["mean"] <= hi <= 0.9


def test_checklist_has_every_field_per_calibration_comparison():
    rows = checklist(_synthetic_cells(), "unit")
    assert len(rows) == len(SCORED) * len(READOUTS) * len(CONTEXTS) * len(ESTIMATORS)
    for r in rows:
        assert set(r) == {"comparison", "provenance", "scored", "readout", "context", "estimator",
                          "template", "parse_failure_rate", "n"}
        assert r["template"] == "unit"
    assert {r["provenance"] for r in rows} == {
        "generated (the model's own answer)", "provided: gold + plausible-wrong + wrong-type, pooled"}


# --------------------------------------------------------------------------------------------
# end to end on tiny random models
# --------------------------------------------------------------------------------------------

TINY_ROWS = [
    {"id": "q1", "question": "What is the capital of France?", "answers": ["Paris"],
     "plausible_wrong": ["Lyon"], "wrong_type": "1889"},
    {"id": "q2", "question": "How many legs does a spider have?", "answers": ["8", "eight"],
     "plausible_wrong": ["6"]},
    {"id": "q3", "question": "What is the chemical symbol for gold?", "answers": ["Au"],
     "plausible_wrong": ["Ag"]},
    {"id": "q4", "question": "Who wrote Hamlet?", "answers": ["Shakespeare"],
     "plausible_wrong": ["Marlowe"]},
    {"id": "q5", "question": "Which planet is the red planet?", "answers": ["Mars"],
     "plausible_wrong": ["Venus"]},
    {"id": "q6", "question": "What is H2O?", "answers": ["Water"], "plausible_wrong": ["Salt"]},
]


@pytest.fixture(scope="module")
def tiny_task(tmp_path_factory):
    from acute.tasks import get_task

    path = tmp_path_factory.mktemp("task") / "tiny.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in TINY_ROWS), encoding="utf-8")
    task = get_task(str(path))
    return task, task.load()




def _biased_model(tokenizer, boost=(), forbid_digits=False, forbid=(), boost_value=1e4):
    """A tiny random Llama whose output layer gets a fixed bias (deterministic behaviours)."""
    from acute.testing import make_tiny_model

    model = make_tiny_model("llama", max_position_embeddings=1024)  # room for 3-shot prompts
    old = model.lm_head
    head = torch.nn.Linear(old.in_features, old.out_features, bias=True)
    head.weight = old.weight
    with torch.no_grad():
        head.bias.zero_()
        for i in range(old.out_features):
            text = tokenizer.decode([i])
            if forbid_digits and any(ch.isdigit() for ch in text):
                head.bias[i] = -1e4
        for i in forbid:
            head.bias[i] = -1e4
        for i in boost:
            head.bias[i] = boost_value
    model.lm_head = head
    return model


def _direct_logprobs(model, tokenizer, prompt, continuation):
    """Teacher-forced log-probs by one unpadded forward pass (independent of continuation_logprobs)."""
    p = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    c = tokenizer(continuation, add_special_tokens=False)["input_ids"]
    ids = torch.tensor([p + c])
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids).logits[0].double(), dim=-1)
    return np.array([logp[len(p) - 1 + k, t].item() for k, t in enumerate(c)])


@pytest.fixture(scope="module")
def na_run(tiny_task, tmp_path_factory):
    """Chat model that never emits a digit (nor ends early): every verbalization fails to parse."""
    from acute.testing import make_tiny_tokenizer

    task, examples = tiny_task
    tok = make_tiny_tokenizer()
    newline = tok("\n", add_special_tokens=False)["input_ids"]
    model = name_model(_biased_model(tok, forbid_digits=True, forbid=[tok.eos_token_id, *newline]), "tiny-no-digits")
    out = tmp_path_factory.mktemp("na-run")
    with pytest.warns(UserWarning, match="exceed the context window"):
        result = run_protocol(model, tok, task, examples + [_long_example(examples[0])], out,
                              GenerationSettings(batch_size=4, max_new_tokens=4), n_bootstrap=5,
                              progress=False)
    return model, tok, result


def _long_example(ex):
    import dataclasses

    return dataclasses.replace(ex, id="too-long", question="Paris " * 1100)


def test_end_to_end_reports_parse_failures_as_na(na_run):
    model, tok, result = na_run
    doc = load_protocol(result.out_dir)
    assert doc["model"] == "tiny-no-digits" and doc["settings"]["chat"] is True
    assert doc["templates"]["used"]["chat"] and doc["templates"]["used"]["plain"]
    assert doc["wall_time_s"] > 0
    # every cell is present and marked, none filled
    keys = {(c["scored"], c["readout"], c["context"], c["estimator"]) for c in doc["cells"]}
    assert keys == set(itertools.product(SCORED, READOUTS, CONTEXTS, list(ESTIMATORS) + list(ROBUSTNESS)))
    for c in doc["cells"]:
        assert c["status"].startswith("n/a: 100% parse failures"), c["status"]
        assert c["gap"] is None and c["parse_failure_rate"] == 1.0
    md = result.md_path.read_text()
    assert "n/a: 100% parse failures (6/6)" in md  # generated answers
    n_provided = sum(r["answers"][p] is not None for r in doc["records"] for p in PROVENANCES[1:])
    assert n_provided >= 13  # 6 gold + 6 plausible-wrong + wrong-type answers (given or assigned)
    assert f"n/a: 100% parse failures ({n_provided}/{n_provided})" in md
    assert "**Warning:** no verbalization" in md
    # the over-long example is counted and skipped
    assert doc["counts"]["n_query_too_long"] == 1
    assert [r["status"] for r in doc["records"]][-1] == "too_long"
    # raw verbalizations and prompts are recorded
    rec = doc["records"][0]
    assert rec["verbal"]["gold"]["status"] == "parse_failure"
    assert isinstance(rec["verbal"]["gold"]["raw"], str) and rec["verbal"]["gold"]["raw"]
    assert "probability that the answer above is correct" in rec["verbal"]["gold"]["prompt"]
    # the answers are a store, the per-record results committed shards; no temporary files
    assert sorted(p.name for p in result.out_dir.iterdir()) == ["protocol.json", "protocol.md", "records", "store"]
    assert result.store_dir == result.out_dir / "store"
    assert sorted(p.name for p in (result.out_dir / "records").iterdir()) == ["manifest.json", "shard-00000.jsonl"]


def test_end_to_end_t1_under_bare_query_matches_direct_forward_pass(na_run, tiny_task):
    model, tok, result = na_run
    task, examples = tiny_task
    checked = 0
    for ex, rec in zip(examples, result.records):
        assert rec["answers"]["generated"]  # the model cannot stop early, so answers are non-empty
        for prov in ("generated", "gold"):
            slot = rec["token"][prov]["query"]
            assert slot["status"] == "ok"
            prompt = task.prompt(tok, ex)
            assert rec["query_prompt"] == prompt
            cont = rec["answers"][prov]  # chat prompt ends in a newline: no leading space
            direct = _direct_logprobs(model, tok, prompt, cont)
            assert readout(slot["logprobs"], "T1") == pytest.approx(math.exp(direct.mean()), abs=1e-5)
            assert readout(slot["logprobs"], "T2") == pytest.approx(math.exp(direct[0]), abs=1e-5)
            checked += 1
        # the verbal-context log-probs are those of the same answer after the verbalization prefix
        vprompt = rec["verbal"]["generated"]["prompt"]
        head = vprompt[: vprompt.index(rec["answers"]["generated"] + "<|im_end|>")]
        direct = _direct_logprobs(model, tok, head, rec["answers"]["generated"])
        np.testing.assert_allclose(rec["token"]["generated"]["verbal"]["logprobs"], direct, atol=1e-5)
    assert checked == 2 * len(examples)


@pytest.fixture(scope="module")
def zero_run(tiny_task, tmp_path_factory):
    """Base-model path (plain prompts) with a model that always emits "0": every verbalization
    parses (to 0.0) and the cells get values."""
    from acute.testing import make_tiny_tokenizer

    task, examples = tiny_task
    tok = make_tiny_tokenizer(chat_template=False)
    zero = tok.convert_tokens_to_ids("0")
    model = name_model(_biased_model(tok, boost=[zero], boost_value=6.0), "tiny-zero")  # greedy "0", others keep some mass
    out = tmp_path_factory.mktemp("zero-run")
    result = run_protocol(model, tok, task, examples, out, GenerationSettings(batch_size=3, max_new_tokens=3),
                          n_bootstrap=8, seed=1, progress=False, variant="percent")
    return model, tok, result


def test_end_to_end_base_model_values(zero_run, tiny_task):
    model, tok, result = zero_run
    task, examples = tiny_task
    doc = json.loads(result.json_path.read_text())
    assert doc["settings"]["chat"] is False and doc["settings"]["variant"] == "percent"
    rec = doc["records"][0]
    assert rec["generation"].strip().startswith("000")
    assert rec["verbal"]["gold"]["prompt"].endswith("Probability that the proposed answer is correct (0 to 100):")
    assert rec["verbal"]["gold"]["prompt"].startswith("Question: What is the capital of France?\nProposed answer: Paris\n")
    for c in doc["cells"]:
        if c["estimator"] == "AUROC" and c["scored"] == "generated":
            continue  # every generated answer is wrong: AUROC undefined
        assert c["status"] == "ok" and c["gap"] is not None, c
        n_provided = sum(r["answers"][p] is not None for r in doc["records"] for p in PROVENANCES[1:])
        assert c["n"] == (6 if c["scored"] == "generated" else n_provided)
        assert c["parse_failure_rate"] == 0.0
    # c_verb = 0 everywhere: ECE(c_verb) = accuracy; generated answers are all wrong -> 0
    ece = {(c["scored"], c["readout"], c["context"]): c for c in doc["cells"] if c["estimator"] == "ECE"}
    assert ece[("generated", "T1", "query")]["verb"] == pytest.approx(0.0)
    n_provided = ece[("gold", "T1", "query")]["n"]
    assert ece[("gold", "T1", "query")]["verb"] == pytest.approx(6 / n_provided)
    # recompute one cell from the stored per-record values, independently
    rows = [(r["token"]["gold"]["verbal"]["logprobs"], 1) for r in doc["records"]]
    rows += [(r["token"][p]["verbal"]["logprobs"], 0) for r in doc["records"]
             for p in ("plausible_wrong", "wrong_type") if r["answers"][p] is not None]
    conf = np.array([np.exp(lp[0]) for lp, _ in rows])
    label = np.array([y for _, y in rows])
    assert ece[("gold", "T2", "verbal")]["tok"] == pytest.approx(metrics.ece(conf, label), abs=1e-9)
    # plain prompt: the teacher-forced answer after "Answer:" carries a leading space
    ex = examples[0]
    direct = _direct_logprobs(model, tok, task.prompt(tok, ex), " " + rec["answers"]["gold"])
    np.testing.assert_allclose(rec["token"]["gold"]["query"]["logprobs"], direct, atol=1e-5)
    md = result.md_path.read_text()
    for section in ("## Gap table", "## Shift table", "## Provenance table", "## Reporting checklist",
                    "## Elicitation template", "## What each cell compares"):
        assert section in md
    assert doc["shifts"]["context"]["n_pairs"] > 0
    assert doc["provenance"]["rows"]["gold"]["mean"] == 0.0


def test_render_report_is_reproducible_from_json(zero_run):
    _, _, result = zero_run
    doc = load_protocol(result.json_path)
    assert render_report(doc) == result.md_path.read_text()


def test_write_protocol_report_combines_runs(na_run, zero_run, tmp_path):
    md_path = write_protocol_report([na_run[2].out_dir, zero_run[2].json_path], tmp_path / "combined")
    md = md_path.read_text()
    assert "| tiny-no-digits on " in md and "| tiny-zero on " in md
    assert "## Shift table" in md and "Per run" in md
    summary = json.loads((tmp_path / "combined" / "protocol-report.json").read_text())
    # the no-digit run contributes no pairs; the pooled shifts equal the zero run's
    assert summary["shifts"] == json.loads(json.dumps(zero_run[2].shifts))
    with pytest.raises(FileNotFoundError):
        write_protocol_report([tmp_path / "missing"], tmp_path / "x")
    with pytest.raises(ValueError):
        write_protocol_report([], tmp_path / "x")


def test_run_protocol_argument_errors(tiny_task, tmp_path):
    from acute.testing import make_tiny_model, make_tiny_tokenizer

    task, examples = tiny_task
    model, tok = make_tiny_model(), make_tiny_tokenizer()
    with pytest.raises(ValueError, match="examples"):
        run_protocol(model, tok, task, [], tmp_path)
    with pytest.raises(ValueError, match="variant"):
        run_protocol(model, tok, task, examples, tmp_path, variant="logit")
    with pytest.raises(ValueError, match="batch_size"):
        run_protocol(model, tok, task, examples, tmp_path, GenerationSettings(batch_size=0))


def test_verbal_candidates_differences_by_hand():
    """benchmarks/verbal_candidates.py: gold minus another provenance over the rows where both
    parse, and a bootstrap interval that brackets the mean (and collapses when all are equal)."""
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "verbal_candidates.py"
    spec = importlib.util.spec_from_file_location("verbal_candidates", path)
    vc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(vc)

    def rec(gold, plausible, wrong):
        slot = lambda c: {"c_verb": c, "status": "ok" if c is not None else "unparsed"}  # noqa: E731
        return {"verbal": {"generated": slot(0.5), "gold": slot(gold), "plausible_wrong": slot(plausible),
                           "wrong_type": slot(wrong)}}

    doc = {"model": "m", "task": "t", "records": [rec(0.9, 0.5, 0.1), rec(0.8, None, 0.2), rec(0.7, 0.6, 0.3)]}
    np.testing.assert_allclose(vc.gold_minus(doc), [0.4, 0.1])  # the row without a plausible-wrong c_verb drops
    np.testing.assert_allclose(vc.gold_minus(doc, "wrong_type"), [0.8, 0.6, 0.4])
    mean, low, high = vc.mean_interval(vc.gold_minus(doc, "wrong_type"))
    assert mean == pytest.approx(0.6) and 0.4 - 1e-12 <= low <= mean <= high <= 0.8 + 1e-12
    assert vc.mean_interval(np.full(5, 0.2))[1:] == (pytest.approx(0.2), pytest.approx(0.2))
    row = vc.summary_row(doc)
    assert row[:4] == ["m", "t", "3", "1/12"] and row[5].startswith("+0.250 [")
