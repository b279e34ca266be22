"""Apply every_signal.md's rule ("Which becomes the default") to the committed evaluations.

Reads ``docs/results/evaluations/<model>/<evaluation>/results.json`` (no fit: the out-of-fold
rows and paired intervals ``acute evaluate`` wrote). Evidence, as the rule says: every evaluation
with at least 600 records, 5-fold x 5 cross-validation. For each, the best single control is the
better (auc-euro, all) of the evaluation's best baseline (``reference``) and its best control
without hidden states (``best_visible_reference``: the visible controls, sampling's included);
each candidate (A ``acute-all``, V ``visible-all``, D today's default) is compared with it by the
paired cluster-bootstrap interval the evaluation computed against that control. A candidate is
admissible on an evaluation when the interval's upper bound is above 0 and the point estimate is
at least -0.002. An evaluation without the stacks' rows (evaluated before they existed) is listed
as missing, and the reading is then interim: the rule decides only when none is missing.

    python benchmarks/every_signal.py --out benchmarks/every_signal-results.md
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from acute.evaluation.choice import CANDIDATES, MARGIN, verdict

from _study import publish

MIN_RECORDS = 600
FOLDS, REPEATS = 5, 5


def read_evaluation(path: Path) -> dict:
    """One evaluation's rows by estimator and its split (``results.json``)."""
    results = json.loads(path.read_text(encoding="utf-8"))
    return {"name": f"{path.parent.parent.name}/{path.parent.name}", "split": results.get("split", {}),
            "reference": results.get("reference"), "rows": {r["estimator"]: r for r in results["results"]}}


def compare(ev: dict) -> dict:
    """The evaluation's best single control and each candidate's difference to it (``None``
    where the candidate has no row)."""
    rows = ev["rows"]
    any_row = next(iter(rows.values()))
    controls = [(prefix, name) for prefix, name in (("diff", ev["reference"]),
                                                    ("diff_best_visible", any_row.get("best_visible_reference")))
                if name in rows]
    prefix, best = max(controls, key=lambda c: rows[c[1]]["auc_euro_all"])
    out = {"best": best, "best_auc": rows[best]["auc_euro_all"], "candidates": {}}
    for c in CANDIDATES:
        r = rows.get(c)
        if r is None:
            out["candidates"][c] = None
            continue
        assert r.get("reference" if prefix == "diff" else "best_visible_reference") == best, (ev["name"], c)
        d, low, high = (r[f"{prefix}_auc_euro_all{s}"] for s in ("", "_ci_low", "_ci_high"))
        out["candidates"][c] = {"auc": r["auc_euro_all"], "diff": d, "low": low, "high": high,
                                "admissible": high > 0 and d >= -MARGIN}
    return out


def reading(compared: dict[str, dict], interim: bool) -> list[str]:
    """The rule's three steps (:func:`acute.evaluation.choice.verdict`) over the evaluations where
    every candidate has a row (``interim``: others have none yet, so the choice is what the rule
    would make on these)."""
    a, v = CANDIDATES[:2]
    pairs = list(compared.values())
    adm = {c: sum(p["candidates"][c]["admissible"] for p in pairs) for c in CANDIDATES}
    everywhere = {c: adm[c] == len(pairs) for c in CANDIDATES}
    a_minus_v = min(p["candidates"][a]["auc"] - p["candidates"][v]["auc"] for p in pairs)
    lines = [f"- admissible on every evaluation with the stacks' rows: {', '.join(c for c in CANDIDATES if everywhere[c]) or 'none'} "
             f"(on how many of {len(pairs)}: " + ", ".join(f"{c} {adm[c]}" for c in CANDIDATES) + ")",
             f"- acute-all minus visible-all, lowest over the evaluations: {a_minus_v:+.4f} (step 2 allows -{MARGIN})"]
    chosen, why = verdict(everywhere, a_minus_v, fallback=a if adm[a] >= adm[v] else v)
    if not any(everywhere.values()):
        why += "; where it fails: " + ", ".join(
            name for name, p in compared.items() if not p["candidates"][chosen]["admissible"])
    choice = f"on the evaluations with every candidate ({len(pairs)}) the rule would choose {chosen}" if interim else \
        f"**the rule chooses {chosen}**"
    return lines + [f"- {choice} ({why})"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", default="docs/results/evaluations", help="folder of <model>/<evaluation>/results.json")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    evals = [read_evaluation(p) for p in sorted(Path(args.results).glob("*/*/results.json"))]
    lines = ["# Every signal in: the rule applied", "",
             f"`python benchmarks/every_signal.py --results {args.results}` (the rule: [every_signal.md](every_signal.md); "
             "auc-euro (all), out of fold, differences to the best single control with their paired "
             "95% cluster-bootstrap intervals as each evaluation computed them)", "",
             f"| evaluation | records | best single control | acute-all | visible-all | {CANDIDATES[2]} (default) | A - V |",
             "|---|---:|---|---|---|---|---:|"]
    compared, missing, outside = {}, [], []
    for ev in evals:
        sp = ev["split"]
        n = int(sp.get("n_records") or 0)
        if n < MIN_RECORDS or (sp.get("n_splits"), sp.get("n_repeats")) != (FOLDS, REPEATS):
            outside.append(f"{ev['name']} ({n} records, {sp.get('n_splits')} x {sp.get('n_repeats')})")
            continue
        c = compare(ev)
        cells = []
        for cand in CANDIDATES:
            r = c["candidates"][cand]
            cells.append("not evaluated" if r is None else
                         f"{r['auc']:.4f}: {r['diff']:+.4f} [{r['low']:+.4f}, {r['high']:+.4f}]"
                         + ("" if r["admissible"] else " **not admissible**"))
        a, v = (c["candidates"][x] for x in CANDIDATES[:2])
        gap = f"{a['auc'] - v['auc']:+.4f}" if a and v else "n/a"
        lines.append(f"| {ev['name']} | {n} | {c['best']} {c['best_auc']:.4f} | " + " | ".join(cells) + f" | {gap} |")
        if any(r is None for r in c["candidates"].values()):
            missing.append(ev["name"])
        else:
            compared[ev["name"]] = c
    lines += ["", "## Reading", ""]
    if outside:
        lines.append("- outside the rule's evidence (under 600 records or not 5 x 5): " + "; ".join(outside))
    if compared:
        lines += reading(compared, interim=bool(missing))
    if missing:
        lines.append(f"- **interim**: {len(missing)} of {len(missing) + len(compared)} evaluations have no stacks' rows "
                     f"yet (evaluated before acute-all and visible-all existed; their stores are to be collected and "
                     f"evaluated again): {', '.join(missing)}. The rule decides only when none is missing; until then "
                     "the default stays as it is.")
    publish("\n".join(lines) + "\n", args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
