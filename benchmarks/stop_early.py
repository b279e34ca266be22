"""Stopping early, measured by the rule of benchmarks/stop_early.md (read it first: this script
follows it and changes nothing it fixes).

For each outer fold (the evaluation's folds, grouped as it groups them), a grouped 60/40 split of
the training fold fits the rules and the final gate on 60% and certifies each rule's threshold on
40% (``acute.metrics.stopping.certify_stopping``, delta 0.1); the rules and the gate are then
refitted on the whole training fold and applied to the test fold with the certified threshold.
Rules: ``probe`` (one default-design prefix probe per checkpoint), ``log-prob`` (a logistic
regression on the prefix's mean token log-prob and lowest 4-token window), ``precheck`` (the
question-only probe at k = 0) and ``precheck+probe``. Reported per rule and epsilon, out of fold:
tokens saved, the cost (right would-be-trusted answers stopped), errors avoided (wrong
would-be-trusted answers stopped), and the probe minus log-prob difference in tokens saved with a
paired cluster-bootstrap interval; with several stores, the rule's reading (Holm over them).

    python benchmarks/stop_early.py runs/evidence/qwen2.5-coder-0.5b-instruct/bfcl/store \\
        runs/evidence/qwen2.5-coder-1.5b-instruct/{bfcl,scitldr,truthfulqa-gen}/store \\
        --out benchmarks/stop_early-results.md --repeats 5 --n-jobs 1
"""

from __future__ import annotations

import sys
import time

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GroupShuffleSplit
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from acute.estimators.prefix_controls import logprob_stats
from acute.estimators.registry import STATES_PROBE, make_estimator
from acute.evaluation.checkpoint_model import fits_prefix_probe
from acute.evaluation.crossval import cv_folds, inputs_for
from acute.evaluation.grouping import store_groups
from acute.evaluation.prefix import PREFIX_CHECKPOINTS, prefix_inputs
from acute.metrics.intervals import holm
from acute.metrics.resampling import bootstrap_indices
from acute.metrics.stopping import certify_stopping, first_stop
from acute.store import open_store

from _study import command_line, publish, study_parser

EPSILONS = (0.02, 0.05, 0.10)
DELTA = 0.1
RULES = ("probe", "log-prob", "precheck", "precheck+probe")
CERTIFY_SHARE = 0.4
TRUST_AT = 0.5


def fit_rules(data: dict, rows: np.ndarray, seed: int, n_jobs: int, n_estimators: int | None):
    """Fitted final gate, per-checkpoint probes and log-prob rules, and the question-only probe."""
    params = {"n_estimators": n_estimators} if n_estimators else None
    y, n_tokens = data["y"], data["n_tokens"]

    def fitted(name, X, idx):
        est = make_estimator(name, random_state=seed, n_jobs=n_jobs, probe_params=params)
        return est.fit(X.take(idx), y[idx])

    models = {"final": fitted(STATES_PROBE, data["final"], rows),
              "question": fitted("question-only", data["question"], rows), "probe": {}, "log-prob": {}}
    per_class = models["final"].cv  # the prefix probes' own stratified folds
    for k in PREFIX_CHECKPOINTS:
        live = rows[n_tokens[rows] > k]
        if not fits_prefix_probe(y[live], per_class):  # the rule acute export --with-stop-early applies
            continue
        models["probe"][k] = fitted(STATES_PROBE, data["prefix"][k], live)
        lr = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
        models["log-prob"][k] = lr.fit(data["stats"][k][live], y[live])
    return models


def rule_scores(data: dict, models: dict, rows: np.ndarray) -> dict:
    """Per rule, scores [len(rows), J] (NaN where the answer had ended or no model exists), the
    checkpoints they sit at, and the final gate's P(correct)."""
    n_tokens = data["n_tokens"][rows]
    ks = list(PREFIX_CHECKPOINTS)
    out = {}
    for rule in ("probe", "log-prob"):
        s = np.full((rows.size, len(ks)), np.nan)
        for j, k in enumerate(ks):
            model = models[rule].get(k)
            if model is None:
                continue
            live = n_tokens > k
            if not live.any():
                continue
            if rule == "probe":
                p = model.predict_proba(data["prefix"][k].take(rows[live]))[:, 1]
            else:
                p = model.predict_proba(data["stats"][k][rows[live]])[:, 1]
            s[live, j] = p
        out[rule] = (s, ks)
    q = models["question"].predict_proba(data["question"].take(rows))[:, 1][:, None]
    out["precheck"] = (q, [0])
    out["precheck+probe"] = (np.hstack([q, out["probe"][0]]), [0] + ks)
    final = models["final"].predict_proba(data["final"].take(rows))[:, 1]
    return out, final


def evaluate(store_dir: str, repeats: int, folds_n: int, seed: int, n_jobs: int, n_estimators: int | None,
             group_by: str | None):
    store = open_store(store_dir)
    y = np.asarray(store.correct).astype(np.int64)
    field, groups = store_groups(store, group_by)
    group_of = np.asarray(groups if groups is not None else [str(i) for i in store.ids])
    data = {"y": y, "n_tokens": np.asarray(store.n_tokens), "final": inputs_for(store, [STATES_PROBE]),
            "question": inputs_for(store, ["question-only"]),
            "prefix": {k: prefix_inputs(store, k) for k in PREFIX_CHECKPOINTS},
            "stats": {k: logprob_stats(store.token_logprobs, k) for k in PREFIX_CHECKPOINTS}}
    folds = cv_folds(store.ids, y, folds_n, repeats, seed=seed, groups=groups, group_name=field or "record ids")
    # per repeat, rule and epsilon: each record's stop checkpoint token count (-1: not stopped)
    stops = {(r, rule, eps): np.full(y.size, -1) for r in range(repeats) for rule in RULES for eps in EPSILONS}
    trusted = np.zeros((repeats, y.size), dtype=bool)
    thresholds = {}
    for r, rep in enumerate(folds):
        for f, (tr, te) in enumerate(rep):
            started = time.perf_counter()
            split = GroupShuffleSplit(1, test_size=CERTIFY_SHARE, random_state=seed + 1000 * r + f)
            fit_part, cert_part = next(split.split(tr, groups=group_of[tr]))
            fit_rows, cert_rows = np.sort(tr[fit_part]), np.sort(tr[cert_part])
            cert_scores, cert_final = rule_scores(data, fit_rules(data, fit_rows, seed, n_jobs, n_estimators),
                                                  cert_rows)
            test_scores, test_final = rule_scores(data, fit_rules(data, np.sort(tr), seed, n_jobs, n_estimators),
                                                  te)
            trusted[r, te] = test_final > TRUST_AT
            for rule in RULES:
                s_cert, ks = cert_scores[rule]
                s_test, _ = test_scores[rule]
                for eps in EPSILONS:
                    cert = certify_stopping(s_cert, cert_final > TRUST_AT, y[cert_rows].astype(bool), eps, DELTA)
                    thresholds.setdefault((rule, eps), []).append(cert.threshold)
                    at = first_stop(s_test, cert.threshold)
                    stops[(r, rule, eps)][te] = np.where(at >= 0, np.asarray(ks)[np.maximum(at, 0)], -1)
            print(f"repeat {r + 1}/{repeats} fold {f + 1}/{folds_n}: {time.perf_counter() - started:.0f} s",
                  file=sys.stderr, flush=True)
    return store, data, group_of, stops, trusted, thresholds, repeats


def summarise(data, group_of, stops, trusted, thresholds, repeats, n_bootstrap: int, seed: int):
    """The table's lines and the primary comparison: ``(estimate, low, high, p, probe cost at 0.05)``."""
    y, n_tokens = data["y"].astype(bool), data["n_tokens"]
    lines = ["| rule | epsilon | tokens saved | cost: right trusted stopped | errors avoided: wrong trusted stopped "
             "| answers stopped | mean threshold |", "|---|---:|---:|---:|---:|---:|---:|"]
    saved_of, cost_of = {}, {}
    for rule in RULES:
        for eps in EPSILONS:
            saved, cost, avoided, stopped = [], [], [], []
            per_record = np.zeros(y.size)
            for r in range(repeats):
                at = stops[(r, rule, eps)]
                hit = at >= 0
                s = np.where(hit, n_tokens - at, 0).clip(min=0)
                per_record += s / repeats
                saved.append(s.sum() / n_tokens.sum())
                right, wrong = trusted[r] & y, trusted[r] & ~y
                cost.append(hit[right].mean() if right.any() else np.nan)
                avoided.append(hit[wrong].mean() if wrong.any() else np.nan)
                stopped.append(hit.mean())
            saved_of[(rule, eps)] = per_record
            cost_of[(rule, eps)] = float(np.nanmean(cost))
            lines.append(f"| {rule} | {eps:.2f} | {np.mean(saved):.3f} | {np.nanmean(cost):.3f} | "
                         f"{np.nanmean(avoided):.3f} | {np.mean(stopped):.3f} | "
                         f"{np.mean(thresholds[(rule, eps)]):.2f} |")
    # the primary comparison: probe minus log-prob tokens saved at epsilon 0.05, groups resampled whole
    codes, inverse = np.unique(group_of, return_inverse=True)
    diff_tokens = saved_of[("probe", 0.05)] - saved_of[("log-prob", 0.05)]
    by_group = np.bincount(inverse, weights=diff_tokens)
    tokens_by_group = np.bincount(inverse, weights=n_tokens.astype(float))
    estimate = by_group.sum() / tokens_by_group.sum()
    draws = []
    for idx in bootstrap_indices(codes.size, n_bootstrap, seed):
        draws.append(by_group[idx].sum() / tokens_by_group[idx].sum())
    draws = np.asarray(draws)
    low, high = np.percentile(draws, [2.5, 97.5])
    p = min(1.0, 2 * min(np.mean(draws <= 0), np.mean(draws >= 0)))
    lines += ["", f"Probe minus log-prob, tokens saved at epsilon 0.05: {estimate:+.4f} [{low:+.4f}, {high:+.4f}] "
                  f"(95% cluster bootstrap over {codes.size} groups, {n_bootstrap} resamples, repeats pooled; "
                  f"bootstrap p {p:.3f})."]
    return lines, (float(estimate), float(low), float(high), float(p), cost_of[("probe", 0.05)])


def reading(per_pair) -> list[str]:
    """The rule's verdict per pair: the probe wins when Holm over the pairs rejects, the interval's
    lower bound is above zero and its realised cost at epsilon 0.05 is at most 0.06."""
    lines = ["## Reading (the rule of stop_early.md, epsilon 0.05)", ""]
    rejected = holm([c[3] for _, c in per_pair])
    for (name, (est, low, high, _, cost)), rej in zip(per_pair, rejected):
        wins = rej and low > 0 and cost <= 0.05 + 0.01
        lines.append(f"- {name}: the probe {'wins' if wins else 'does not win'} against the log-prob rule "
                     f"({est:+.4f} [{low:+.4f}, {high:+.4f}] tokens saved, Holm over {len(per_pair)} pairs "
                     f"{'rejects' if rej else 'does not reject'}; realised cost {cost:.3f}).")
    if not any("probe wins" in line for line in lines):
        lines.append("- The states do not beat the log-prob rule at stopping early on any pair given.")
    return lines


def main(argv=None) -> int:
    ap = study_parser(__doc__.split("\n\n")[0], "stores with prefix checkpoints and last-prompt states (one per pair)")
    args = ap.parse_args(argv)
    lines, per_pair = [command_line("stop_early.py", args), ""], []
    for path in args.stores:
        store, data, group_of, stops, trusted, thresholds, repeats = evaluate(
            path, args.repeats, args.cv, args.seed, args.n_jobs, args.n_estimators, args.group_by)
        name = f"{store.manifest.get('model')} on {store.manifest.get('task')}"
        table, comparison = summarise(data, group_of, stops, trusted, thresholds, repeats, args.n_bootstrap,
                                      args.seed)
        lines += [f"## {name} ({len(store)} records, accuracy {np.mean(data['y']):.3f})", ""] + table + [""]
        per_pair.append((name, comparison))
    lines += reading(per_pair)
    publish("\n".join(lines) + "\n", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
