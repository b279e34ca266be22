"""Writing an evaluation (:class:`acute.evaluation.result.EvaluationResult`) into a folder:
``results.md``, ``results.csv``, ``results.json`` (last, with ``"complete": true``),
``predictions.csv`` (and one per further repeat), ``folds.json`` or ``split.json``, the euro curves,
the risk-coverage curves (the best activation estimator, the best baseline, raw confidence) and the
reliability diagrams."""

from __future__ import annotations

import csv
import gzip
import io
import json
import logging
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from ..fileio import fsync_dir, json_ready
from .table import best_estimators
from ..errors import InputError

__all__ = ["COMMITTED_PREDICTIONS", "compact_predictions", "intro_markdown", "read_predictions", "write_evaluation"]

logger = logging.getLogger(__name__)


def intro_markdown(res) -> str:
    """The paragraph above the results table: how the records were scored, what the intervals
    are, which controls were left out."""
    sp = res.split
    ref = next((r.get("reference") for r in res.rows if r.get("reference")), None)
    paired = (f" The last column is each estimator's auc-euro (all) minus the best baseline's ({ref}) "
              "with a paired bootstrap interval (the same resampled records for both), bold where it "
              "lies above zero." if ref else "")
    if sp["mode"] == "cv":
        grouped = (f"grouped by {sp['group_by']!r}: records sharing a value stay on one side of every split and "
                   "are resampled together" if sp.get("group_by") else "grouped by record id")
        head = (f"Cross-validated evaluation: {sp['n_splits']}-fold stratified x {sp['n_repeats']} repeats "
                f"({grouped}) on {sp['n_records']} records (accuracy {sp['accuracy']:.3f}); "
                "every record is scored out of fold and each metric is the mean over repeats.")
    else:
        head = (f"Held-out evaluation: {sp['n_train']} training / {sp['n_test']} test records "
                f"(test accuracy {sp['accuracy_test']:.3f}).")
    skipped = res.skipped or {}
    left = "".join(f"\n- `{n}` left out: {why}" for n, why in skipped.items())
    return (f"{head} 95% percentile-bootstrap intervals in brackets (smECE's shifted by the bootstrap "
            f"bias, so it is centred on its estimate); differences also show the corrected resampled "
            f"t-interval over folds x repeats (Nadeau and Bengio 2003), which belongs to the mean of the "
            f"per-fold differences (results.json: diff_*_t_mean), not to the pooled difference.{paired}"
            f"{' Controls left out:' if left else ''}{left}\n\n")


#: the compact copy of an evaluation's repeat-0 out-of-fold predictions a report keeps beside its tables
COMMITTED_PREDICTIONS = "predictions.csv.gz"
#: significant digits of the committed predictions (enough for any metric or threshold re-analysis)
PREDICTION_DIGITS = 6


def compact_predictions(text: str) -> bytes:
    """``predictions.csv`` (id, correct, one column per estimator) with every probability written
    to :data:`PREDICTION_DIGITS` significant digits, gzip-compressed with no timestamp (the same
    bytes for the same predictions)."""
    rows = list(csv.reader(io.StringIO(text)))
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(rows[0])
    for row in rows[1:]:
        w.writerow(row[:2] + [format(float(v), f".{PREDICTION_DIGITS}g") for v in row[2:]])
    return gzip.compress(out.getvalue().encode("utf-8"), mtime=0)


def read_predictions(eval_dir, names: Sequence[str] | None = None
                     ) -> tuple[list[str], np.ndarray, dict[str, np.ndarray]]:
    """What :func:`write_evaluation` wrote as predictions, read back: ``(ids, correct, {name:
    [repeats, n]})`` from ``predictions.csv`` and every ``predictions-repeat<r>.csv`` (in ``r``
    order), or from the compact copy a report keeps beside an evaluation's tables
    (:data:`COMMITTED_PREDICTIONS`, :func:`compact_predictions`: repeat 0), records in the file's order, ``correct`` as int ``[n]``; ``names`` (default:
    every estimator column). A missing folder or file, a repeat with other records or a name that is
    no column is an :class:`~acute.errors.InputError` naming the file."""
    folder = Path(eval_dir)
    first = folder / "predictions.csv"
    if not first.is_file() and (folder / COMMITTED_PREDICTIONS).is_file():
        first = folder / COMMITTED_PREDICTIONS  # a report's copy: repeat 0 only
    if not first.is_file():
        raise InputError(f"{first} does not exist: {folder} is not an evaluation folder")
    files = [first] + (sorted(folder.glob("predictions-repeat*.csv"), key=lambda f: int(f.stem.rsplit("repeat", 1)[1]))
                       if first.name == "predictions.csv" else [])
    ids: list[str] = []
    correct = np.zeros(0, dtype=np.int64)
    out: dict[str, list] = {}
    for f in files:
        opener = gzip.open if f.suffix == ".gz" else open
        with opener(f, "rt", newline="", encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
        if not rows or "id" not in rows[0] or "correct" not in rows[0]:
            raise InputError(f"{f}: expected a header 'id,correct,<estimator>...' and rows")
        by_id = {r["id"]: r for r in rows}
        if f == first:
            ids = [r["id"] for r in rows]
            correct = np.array([int(r["correct"]) for r in rows], dtype=np.int64)
            wanted = [k for k in rows[0] if k not in ("id", "correct")] if names is None else list(names)
            out = {n: [] for n in wanted}
        elif set(by_id) != set(ids):
            raise InputError(f"{f}: its records are not those of {first}")
        missing = [n for n in out if n not in rows[0]]
        if missing:
            raise InputError(f"{f}: no column for {missing}; evaluate with these estimators first")
        for n in out:
            out[n].append([float(by_id[i][n]) for i in ids])
    return ids, correct, {n: np.asarray(v, dtype=np.float64) for n, v in out.items()}



def read_folds(eval_dir, ids: Sequence[str] | None = None) -> list[list[tuple[np.ndarray, np.ndarray]]]:
    """The cross-validation folds :func:`write_evaluation` wrote (``folds.json``), read back as
    :func:`acute.evaluation.crossval.cv_folds` gives them: one list per repeat of ``(train_index,
    test_index)`` pairs, indices over ``ids`` (default: the order of ``folds.json``; e.g. the ids
    of :func:`read_predictions`). A missing file (a held-out evaluation writes ``split.json``) or
    ``ids`` that are not the file's records is an :class:`~acute.errors.InputError` naming it."""
    path = Path(eval_dir) / "folds.json"
    if not path.is_file():
        raise InputError(f"{path} does not exist: {eval_dir} is not a cross-validated evaluation")
    saved = json.loads(path.read_text(encoding="utf-8"))
    position = {str(i): k for k, i in enumerate(saved["ids"])}
    order = np.arange(len(position)) if ids is None else [position.get(str(i), -1) for i in ids]
    if ids is not None and (len(ids) != len(position) or min(order, default=0) < 0
                            or len(set(order)) != len(position)):
        raise InputError(f"{path}: its records are not the {len(ids)} records given")
    fold = np.asarray(saved["fold"], dtype=np.int64)[:, np.asarray(order, dtype=np.int64)]
    return [[(np.flatnonzero(row != k), np.flatnonzero(row == k)) for k in range(int(saved["n_splits"]))]
            for row in fold]

def _write_predictions(path: Path, ids: Sequence, y: np.ndarray, preds: Mapping[str, np.ndarray]) -> None:
    names = list(preds)
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["id", "correct", *names])
        for i, rid in enumerate(ids):
            w.writerow([rid, int(y[i]), *(repr(float(preds[n][i])) for n in names)])


def write_evaluation(res, out_dir) -> dict[str, Path]:
    """Write the evaluation ``res`` (an :class:`acute.evaluation.result.EvaluationResult`) into
    ``out_dir`` and return name -> path (also set as ``res.files``, and ``res.out_dir``).

    Every output goes into a staging folder inside ``out_dir``, is fsync'ed, then moved into place
    with ``results.json`` last (an older results.json is removed first), so a crash never leaves a
    results.json that describes files of another run (a multi-file commit, like a store shard or
    a probe folder; single files go through :func:`acute.fileio.atomic_path`)."""
    from .plots import euro_curves, reliability_diagram, risk_coverage_plot  # heavy: matplotlib

    out_dir = Path(out_dir)
    res.out_dir = out_dir
    train_ids, params, fold_of = res.train_ids, res.params, res.fold_of
    manifest, test_manifest, plot_names = res.store_manifest, res.test_store_manifest, res.plot_names
    out_dir.mkdir(parents=True, exist_ok=True)
    stage = out_dir / f".partial-{uuid.uuid4().hex[:12]}"
    stage.mkdir()
    try:
        y = res.test_correct.astype(int)
        (stage / "results.md").write_text(res.markdown(), encoding="utf-8")
        _write_csv(stage / "results.csv", res.rows)
        _write_predictions(stage / "predictions.csv", res.test_ids, y, res.predictions)
        if res.cv_predictions is not None:
            for r in range(1, next(iter(res.cv_predictions.values())).shape[0]):
                _write_predictions(stage / f"predictions-repeat{r}.csv", res.test_ids, y,
                                   {n: p[r] for n, p in res.cv_predictions.items()})
            (stage / "folds.json").write_text(json.dumps(json_ready(
                {k: res.split[k] for k in ("mode", "seed", "n_splits", "n_repeats")}
                | {"ids": res.test_ids, "fold": fold_of})), encoding="utf-8")
        else:
            (stage / "split.json").write_text(json.dumps(json_ready(
                {**{k: res.split[k] for k in ("mode", "seed", "test_fraction")},
                 "train": train_ids, "test": res.test_ids})), encoding="utf-8")
        n_eval = res.split.get("n_test", res.split.get("n_records"))
        label = "out-of-fold, repeat 0" if res.cv_predictions is not None else "test"
        euro_curves(res.predictions, y, stage / "euro_curves.png",
                    title=f"euro curves ({n_eval} {label} records)")
        best = best_estimators(res.rows)
        shown = list(dict.fromkeys(n for n in (best.get("acute"), best.get("baseline"), "raw")
                                   if n is not None and n in res.predictions))
        if shown:
            risk_coverage_plot({n: res.predictions[n] for n in shown}, y, stage / "risk_coverage.png",
                               title=f"risk-coverage ({n_eval} {label} records)")
        for n in plot_names:
            reliability_diagram(res.predictions[n], y, stage / f"reliability_{n}.png", title=n)
        files = sorted(p.name for p in stage.iterdir())
        payload = {
            "complete": True,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "split": res.split,
            "params": params,
            "store_manifest": manifest,
            "test_store_manifest": test_manifest,
            "best": best_estimators(res.rows),
            "reference": next((r.get("reference") for r in res.rows if r.get("reference")), None),
            "results": res.rows,
            "skipped": res.skipped,
            "files": files + ["results.json"],
        }
        (stage / "results.json").write_text(json.dumps(json_ready(payload), indent=2), encoding="utf-8")

        for name in files + ["results.json"]:
            with open(stage / name, "rb+") as fh:
                os.fsync(fh.fileno())
        final = out_dir / "results.json"
        if final.exists():
            final.unlink()
        for name in files:
            os.replace(stage / name, out_dir / name)
        os.replace(stage / "results.json", final)
        fsync_dir(out_dir)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    res.files = {name: out_dir / name for name in files + ["results.json"]}
    sp = res.split
    what = (f"{sp['n_splits']}-fold x {sp['n_repeats']} cross-validation on {sp['n_records']} records"
            if sp["mode"] == "cv" else f"{sp['n_train']} train / {sp['n_test']} test records")
    logger.info("evaluation of %d estimators (%s) written to %s", len(res.rows), what, out_dir.resolve())
    return res.files


def _write_csv(path: Path, rows: list[dict]) -> None:
    keys: list[str] = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if r.get(k) is None else (repr(r[k]) if isinstance(r[k], float) else r[k]))
                        for k in keys})
