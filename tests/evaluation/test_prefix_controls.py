"""The prefix controls (acute.estimators.prefix_controls) against independent truth: the reply so
far and its surface worked out by hand from a tokenizer of known pieces, the log-prob rule as a
logistic regression fitted by hand, and a store whose answers are changed after token k giving
every row at k the same predictions (no row reads past k), on hand-built stores with checkpoints."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from acute.errors import InputError
from acute.estimators.inputs import CONFIDENCE, LOGPROB_STATS, PROMPT_REPLY, VISIBLE, Inputs
from acute.estimators.prefix_controls import (CALL_FIELDS, PREFIX_CONTROLS, PREFIX_FIELDS, LogprobRule, bracket_state,
                                              logprob_stats, prefix_records, prefix_sources, reply_so_far)
from acute.estimators.visible import VISIBLE_COLUMNS
from acute.evaluation.crossval import cv_folds
from acute.evaluation.prefix import ROW_USES, evaluate_prefixes
from acute.store import StoreWriter, open_store
from acute.store.checkpoints import DEFAULT_CHECKPOINTS, checkpoint_counts, parse_schedule
from acute.tasks.tool_calls import REPLY_FIELDS
from acute.testing import hash_label

#: token id -> the text it decodes to; id 0 is the special end-of-sequence token
PIECES = ["<eos>", "[", '{"name": "f"', '{"name": "h"', ', "arguments": {"a": 1}}', "]", " ok", " sure",
          "<tool_call>", "</tool_call>"]


class PieceTokenizer:
    """Decodes ids by joining their pieces (the special EOS skipped on request)."""

    def decode(self, ids, skip_special_tokens=False):
        return "".join(PIECES[i] for i in ids if not (skip_special_tokens and i == 0))


TOK = PieceTokenizer()


def text(ids):
    return TOK.decode(ids, skip_special_tokens=True)


def calling_record(rid, ids, **extra):
    return {"id": rid, "prompt": f"Call f or g ({rid}).", "generation": text(ids), "token_ids": list(ids),
            "finish_reason": "eos", "parse_error": False,
            "meta": {**dict.fromkeys(REPLY_FIELDS, 9), "toolset": "f|g"}, **extra}


# ------------------------------------------------------------------------------- by hand
HAND = [calling_record("a", [1, 2, 4, 5, 0]),   # [{"name": "f", "arguments": {"a": 1}}] then EOS
        calling_record("b", [8, 3, 4, 9, 0]),   # <tool_call>{"name": "h", ...}</tool_call>: h not offered
        calling_record("c", [6, 7, 6], finish_reason="length")]  # prose, no call
HAND_LP = [np.array([-0.5, -0.1, -0.2, -0.4, -0.3]), np.array([-1.0, -2.0, -0.5, -0.5, -0.1]),
           np.array([-0.3, -0.6, -0.9])]


def test_the_reply_so_far_is_the_first_k_tokens_decoded_then_the_reply():
    assert reply_so_far(HAND, HAND_LP, 2, TOK) == ['[{"name": "f"', '<tool_call>{"name": "h"', " ok sure"]
    assert reply_so_far(HAND, HAND_LP, 3, TOK)[0] == '[{"name": "f", "arguments": {"a": 1}}'
    # an answer that has ended is its reply (EOS skipped), whatever k
    assert reply_so_far(HAND, HAND_LP, 5, TOK) == [r["generation"] for r in HAND]
    assert reply_so_far(HAND, HAND_LP, 64, TOK)[2] == " ok sure ok"


def test_brackets_by_hand():
    assert bracket_state("") == (False, 0, False)
    assert bracket_state('[{"name": "f"') == (True, 2, False)
    assert bracket_state('[{"name": "f", "arguments": {"a": 1}}') == (True, 1, False)
    assert bracket_state('[{"name": "f", "arguments": {"a": 1}}]') == (True, 0, True)
    assert bracket_state('[{"s": "a ] } \\" ["') == (True, 2, False)  # brackets inside strings do not count
    assert bracket_state("<tool_call>") == (True, 0, False)
    assert bracket_state("so (it) is") == (False, 0, False)


def surface(k):
    recs, lps = prefix_records(HAND, HAND_LP, k, TOK)
    return [{f: r["meta"][f] for f in PREFIX_FIELDS + CALL_FIELDS} | {"parse_error": r["parse_error"]}
            for r in recs], recs, lps


def test_the_surface_so_far_by_hand():
    rows, recs, lps = surface(2)
    assert rows[0] == {"ended": 0, "opened": 1, "open_brackets": 2, "closed": 0, "parse_error": True,
                       "calls": 0, "functions": 0, "arguments": 0, "unknown_functions": 0}
    assert rows[1] == rows[0] | {"open_brackets": 1}  # the tag and one brace
    assert rows[2] == {"ended": 0, "opened": 0, "open_brackets": 0, "closed": 0, "parse_error": True,
                       "calls": 0, "functions": 0, "arguments": 0, "unknown_functions": 0}
    assert [r["generation"] for r in recs] == ['[{"name": "f"', '<tool_call>{"name": "h"', " ok sure"]
    assert all(r["finish_reason"] is None for r in recs) and [lp.tolist() for lp in lps] == [
        [-0.5, -0.1], [-1.0, -2.0], [-0.3, -0.6]]
    rows, _, _ = surface(3)
    assert rows[0]["open_brackets"] == 1 and rows[0]["parse_error"]  # a list not closed yet does not parse
    rows, _, _ = surface(4)
    assert rows[0] == {"ended": 0, "opened": 1, "open_brackets": 0, "closed": 1, "parse_error": False,
                       "calls": 1, "functions": 1, "arguments": 1, "unknown_functions": 0}
    assert rows[1] == rows[0] | {"unknown_functions": 1}  # h is not among the offered f|g
    assert rows[2]["ended"] == 1  # three tokens: ended by 4
    rows, _, _ = surface(5)
    assert [r["ended"] for r in rows] == [1, 1, 1]


def test_the_visible_array_so_far_by_hand():
    X = prefix_sources(HAND, HAND_LP, 2, TOK)
    assert set(X.sources) == {CONFIDENCE, LOGPROB_STATS, VISIBLE, PROMPT_REPLY}
    np.testing.assert_allclose(X[CONFIDENCE], [math.exp(-0.6), math.exp(-3.0), math.exp(-0.9)])
    np.testing.assert_allclose(X[LOGPROB_STATS], [[-0.3, -0.3], [-1.5, -1.5], [-0.45, -0.45]])
    vis = X[VISIBLE]
    col = {c: vis[:, i].astype(float) for i, c in enumerate(VISIBLE_COLUMNS)}
    np.testing.assert_allclose(col["logprob_mean"], [-0.3, -1.5, -0.45])
    np.testing.assert_allclose(col["logprob_min"], [-0.5, -2.0, -0.6])
    assert col["n_tokens"].tolist() == [2, 2, 2]
    assert all(col[f"finish_{r}"].tolist() == [0, 0, 0] for r in ("eos", "stop", "length"))
    assert col["parse_error"].tolist() == [1, 1, 1]
    structure = vis[:, len(VISIBLE_COLUMNS):-2].astype(float)  # PREFIX_FIELDS then CALL_FIELDS
    assert structure[0].tolist() == [0, 1, 2, 0, 0, 0, 0, 0]
    assert list(vis[:, -1]) == ['[{"name": "f"', '<tool_call>{"name": "h"', " ok sure"]
    assert X[PROMPT_REPLY][2] == "Call f or g (c).\n ok sure"
    # past every answer's end: the whole answers, with the tokens they have
    X = prefix_sources(HAND, HAND_LP, 10, TOK)
    assert X[VISIBLE][:, VISIBLE_COLUMNS.index("n_tokens")].astype(float).tolist() == [5, 5, 3]
    np.testing.assert_allclose(X[CONFIDENCE], [math.exp(lp.sum()) for lp in HAND_LP])


def test_records_without_calls_get_no_call_columns():
    plain = [{k: v for k, v in r.items() if k != "meta"} | {"meta": {"category": "x"}} for r in HAND]
    recs, _ = prefix_records(plain, HAND_LP, 4, TOK)
    assert set(recs[0]["meta"]) == set(PREFIX_FIELDS) and not any(r["parse_error"] for r in recs)
    assert prefix_sources(plain, HAND_LP, 4, TOK)[VISIBLE].shape[1] == len(VISIBLE_COLUMNS) + len(PREFIX_FIELDS) + 2


def test_a_record_without_token_ids_or_with_too_few_is_named():
    with pytest.raises(InputError, match="record 'a' has no token_ids.*acute collect"):
        reply_so_far([{k: v for k, v in HAND[0].items() if k != "token_ids"}], HAND_LP[:1], 2, TOK)
    with pytest.raises(InputError, match="record 'a' has 5 token_ids but 4 token log-probs"):
        reply_so_far(HAND[:1], [HAND_LP[0][:4]], 2, TOK)
    with pytest.raises(InputError, match="positive int"):
        prefix_records(HAND, HAND_LP, 0, TOK)


def test_the_log_prob_rule_is_a_logistic_regression_on_the_stats():
    rng = np.random.default_rng(0)
    lps = [-rng.exponential(0.5, size=rng.integers(1, 12)) for _ in range(40)]
    y = np.array([hash_label(str(i)) for i in range(40)], dtype=int)
    stats = logprob_stats(lps, 6)
    # by hand: mean of the first 6 (or fewer) and the lowest mean over windows of 4 (or the whole)
    for lp, row in zip(lps, stats):
        x = lp[:6]
        w = min(4, x.size)
        assert row.tolist() == pytest.approx([x.mean(), min(x[i:i + w].mean() for i in range(x.size - w + 1))])
    fitted = LogprobRule().fit(Inputs({LOGPROB_STATS: stats}), y)
    by_hand = make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=1000)).fit(stats, y)
    np.testing.assert_allclose(fitted.predict_proba(Inputs({LOGPROB_STATS: stats})), by_hand.predict_proba(stats))
    one_class = LogprobRule().fit(Inputs({LOGPROB_STATS: stats[:5]}), np.ones(5, dtype=int))
    assert one_class.predict_proba(Inputs({LOGPROB_STATS: stats}))[:, 1].tolist() == [1.0] * 40


# ---------------------------------------------------------------------- hand-built stores
SCHEDULE = parse_schedule(DEFAULT_CHECKPOINTS)
SHAPE = (3, 12)  # L+1 layers, hidden size (PCA-10 needs at least 10)


def hand_answers(n=48, seed=0):
    """Records of calls, tool-call blocks and prose (2 to 14 tokens), with their arrays."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        kind = i % 3
        filler = [6] * int(rng.integers(0, 9))
        fn = int(rng.integers(2, 4))
        ids = (filler + [1, fn, 4, 5, 0] if kind == 0 else filler + [8, fn, 4, 9, 0] if kind == 1
               else [int(t) for t in rng.integers(6, 8, size=int(rng.integers(2, 15)))])
        rec = calling_record(f"r{i:02d}", ids, correct=hash_label(f"r{i:02d}"),
                             finish_reason="eos" if ids[-1] == 0 else "length")
        counts = checkpoint_counts(len(ids), SCHEDULE)
        out.append({"record": rec, "lp": -rng.exponential(0.4, size=len(ids)),
                    "mean": rng.normal(size=SHAPE), "last_prompt": rng.normal(size=SHAPE),
                    "last_answer": rng.normal(size=SHAPE), "ckpt": (counts, rng.normal(size=(counts.size,) + SHAPE))})
    return out


def changed_after(answers, k, seed=1):
    """The answers with everything after token k changed where they run past k: other tokens,
    log-probs, lengths, reply texts, finish reasons, parse status, reply fields, final states and
    checkpoints past k (those at or below k kept)."""
    rng = np.random.default_rng(seed)
    out = []
    for a in answers:
        rec, lp = a["record"], a["lp"]
        if len(lp) <= k:
            out.append(a)
            continue
        tail = [int(t) for t in rng.integers(1, 10, size=int(rng.integers(1, 12)))]
        ids = rec["token_ids"][:k] + tail
        new_lp = np.concatenate([lp[:k], -rng.exponential(2.0, size=len(tail))])
        counts = checkpoint_counts(len(ids), SCHEDULE)
        means = rng.normal(size=(counts.size,) + SHAPE)
        kept = a["ckpt"][0] <= k
        means[:int(kept.sum())] = a["ckpt"][1][kept]
        new = {**rec, "token_ids": ids, "generation": "something else entirely", "finish_reason": "stop",
               "parse_error": not rec["parse_error"], "meta": {**rec["meta"], **dict.fromkeys(REPLY_FIELDS, 3)}}
        out.append({**a, "record": new, "lp": new_lp, "mean": rng.normal(size=SHAPE),
                    "last_answer": rng.normal(size=SHAPE), "ckpt": (counts, means)})
    return out


def write_store(path, answers, tokenizer=None):
    manifest = {"model": "m", "task": "t", "checkpoints": DEFAULT_CHECKPOINTS, "tokenizer": tokenizer}
    with StoreWriter(path, manifest, dtype="float32") as w:
        w.add([a["record"] for a in answers], np.stack([a["mean"] for a in answers]), [a["lp"] for a in answers],
              last_prompt=np.stack([a["last_prompt"] for a in answers]),
              last_answer=np.stack([a["last_answer"] for a in answers]),
              checkpoints=([a["ckpt"][0] for a in answers], [a["ckpt"][1] for a in answers]))
    return open_store(path)


FIT = {"n_jobs": 1, "probe_params": {"n_estimators": 10}}


@pytest.fixture(scope="module")
def answers():
    return hand_answers()


@pytest.fixture(scope="module")
def store(answers, tmp_path_factory):
    return write_store(tmp_path_factory.mktemp("prefix-controls") / "s", answers)


def test_every_row_at_a_checkpoint(store):
    y = store.correct
    groups = [str(i % 8) for i in range(len(store))]
    folds = cv_folds(store.ids, y, 3, 1, seed=0, groups=groups)
    result = evaluate_prefixes(store, folds, checkpoints=(4,), tokenizer=TOK, groups=groups, **FIT)
    assert [(r["row"], r["k"]) for r in result.rows] == [("question-only", 0), ("probe", 4)] + [
        (c, 4) for c in PREFIX_CONTROLS] + [("final", None)]
    for p in result.predictions.values():
        assert p.shape == (1, len(store)) and np.all((p >= 0) & (p <= 1))
    assert result.uses == {name: ROW_USES[name] for name in ("question-only", "probe", *PREFIX_CONTROLS, "final")}
    assert result.rows[2]["generating"] == pytest.approx(np.mean(store.n_tokens > 4))
    assert "`visible-so-far`: stack of" in result.to_markdown()


def test_no_row_reads_past_token_k(answers, store, tmp_path):
    k = 4
    other = write_store(tmp_path / "changed", changed_after(answers, k))
    assert np.sum(other.n_tokens != store.n_tokens) > 10 and other.correct.tolist() == store.correct.tolist()
    # the controls read these inputs only: equal in every source and row (the stack reads them too)
    mine, theirs = (prefix_sources(s.records, s.token_logprobs, k, TOK) for s in (store, other))
    for source in mine.sources:
        assert np.array_equal(mine[source], theirs[source]), source
    folds = cv_folds(store.ids, store.correct, 3, 1, seed=0)
    controls = ("log-prob", "surface-so-far", "text-so-far")
    got = [evaluate_prefixes(s, folds, checkpoints=(k,), controls=controls, tokenizer=TOK, **FIT).predictions
           for s in (store, other)]
    for row in [("question-only", 0), ("probe", k)] + [(c, k) for c in controls]:
        np.testing.assert_array_equal(got[0][row], got[1][row], err_msg=str(row))
    assert not np.allclose(got[0][("final", None)], got[1][("final", None)])  # the change is real


def test_the_text_controls_need_a_tokenizer(store):
    folds = cv_folds(store.ids, store.correct, 3, 1, seed=0)
    with pytest.raises(InputError, match="names no tokenizer.*--tokenizer PATH.*--controls log-prob"):
        evaluate_prefixes(store, folds, checkpoints=(4,), **FIT)
    with pytest.raises(InputError, match="unknown prefix controls \\['surface'\\]"):
        evaluate_prefixes(store, folds, checkpoints=(4,), controls=("surface",), **FIT)
    result = evaluate_prefixes(store, folds, checkpoints=(4,), controls=("log-prob",), **FIT)
    assert [r["row"] for r in result.rows] == ["question-only", "probe", "log-prob", "final"]
