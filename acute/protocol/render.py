"""Markdown of a protocol study (one run or several combined), and writing / loading them."""

from __future__ import annotations

import json
import logging
import os
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


from ..fileio import json_ready, read_json, write_text_atomic
from ..errors import InputError
from .settings import (
    AXES,
    ESTIMATORS,
    FORMAT,
    PAPER_SHIFTS,
    PROVIDED,
    ROBUSTNESS,
    AXIS_TITLES,
    CONTEXT_NAMES,
)
from .analysis import checklist, shift_table

__all__ = ["load_protocol", "render_report", "write_protocol_report"]

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------------
# Markdown
# --------------------------------------------------------------------------------------------


def _f(x: float | None, digits: int = 3) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _gap_text(c: Mapping) -> str:
    if c["status"] != "ok":
        return c["status"]
    if c["gap"] is None:
        return "n/a: undefined"
    ci = "" if c["low"] is None else f" [{c['low']:+.3f}, {c['high']:+.3f}]"
    return f"{c['gap']:+.3f}{ci}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(x).replace("|", "\\|").replace("\n", " ") for x in r) + " |"
              for r in rows]
    return lines


def _row_key(c: Mapping, with_run: bool) -> tuple:
    key = (c["scored"], c["readout"], CONTEXT_NAMES[c["context"]])
    return ((c["run"],) + key) if with_run else key


def _gap_tables(cells: Sequence[Mapping], with_run: bool) -> list[str]:
    lead = (["run"] if with_run else []) + ["scored answer", "readout", "context"]
    lines: list[str] = []
    for title, names, calibration in (
            ("Calibration gap g = metric(c_verb) - metric(c_tok), 95% paired bootstrap interval",
             tuple(ESTIMATORS), True),
            ("Robustness metrics: metric(c_verb) - metric(c_tok) (AUROC: higher is better)",
             tuple(ROBUSTNESS), False)):
        grid: dict[tuple, dict[str, Mapping]] = defaultdict(dict)
        for c in cells:
            if c["estimator"] in names:
                grid[_row_key(c, with_run)][c["estimator"]] = c
        present = [n for n in names if any(n in g for g in grid.values())]
        if not present:
            continue
        rows = []
        for key, by_est in grid.items():
            first = next(iter(by_est.values()))
            rows.append(list(key) + [_gap_text(by_est[n]) if n in by_est else "" for n in present]
                        + [first["n"], _pct(first["parse_failure_rate"])])
        lines += [f"### {title}", ""]
        lines += _table(lead + present + ["n", "parse failures"], rows) + [""]
        if calibration:
            vrows = []
            for key, by_est in grid.items():
                vrows.append(list(key) + [
                    "n/a" if by_est[n]["status"] != "ok" else
                    f"{_f(by_est[n]['verb'])} / {_f(by_est[n]['tok'])}" if n in by_est else ""
                    for n in present])
            lines += ["Underlying values, metric(c_verb) / metric(c_tok):", ""]
            lines += _table(lead + present, vrows) + [""]
    return lines


def _shift_lines(shifts: Mapping[str, Mapping], per_run: Mapping[str, Mapping] | None = None) -> list[str]:
    header = ["axis toggled", "mean abs change in g", "max", "pairs", "paper"]
    rows = [[AXIS_TITLES[a], _f(shifts[a]["mean_abs_change"]), _f(shifts[a]["max_abs_change"]),
             shifts[a]["n_pairs"], _f(PAPER_SHIFTS.get(a))] for a in AXES]
    lines = ["## Shift table", "",
             "Mean |g(a) - g(b)| over pairs of cells that differ in one axis only (calibration "
             "estimators, readouts T1/T2; n/a cells left out).", ""]
    lines += _table(header, rows) + [""]
    if per_run:
        lines += ["Per run (mean abs change in g):", ""]
        lines += _table(["run"] + list(AXES),
                        [[run] + [_f(s[a]["mean_abs_change"]) for a in AXES]
                         for run, s in per_run.items()]) + [""]
    return lines


def _provenance_lines(prov_by_run: Mapping[str, Mapping]) -> list[str]:
    names = ["generated", "generated_correct", "generated_wrong"] + list(PROVIDED)
    lines = ["## Provenance table", "",
             "Mean verbalized confidence by the answer being rated (95% bootstrap interval; n; "
             "parse-failure rate).", ""]
    rows = []
    for run, prov in prov_by_run.items():
        for name in names:
            r = prov["rows"][name]
            value = (r["status"] if r["status"] != "ok" else
                     f"{_f(r['mean'])} [{_f(r['low'])}, {_f(r['high'])}]")
            rows.append(([run] if run else []) + [name, value, r["n"], _pct(r["parse_failure_rate"])])
        for name, d in prov["differences"].items():
            value = ("n/a: no example with both parsed" if d["mean"] is None else
                     f"{d['mean']:+.3f} [{_f(d['low'])}, {_f(d['high'])}]")
            rows.append(([run] if run else []) + [name + " (paired)", value, d["n"], ""])
    lead = ["run"] if any(prov_by_run) else []
    return lines + _table(lead + ["answer rated", "mean c_verb", "n", "parse failures"], rows) + [""]


def _checklist_lines(rows: Sequence[Mapping]) -> list[str]:
    keys = (["run"] if rows and "run" in rows[0] else []) + [
        "comparison", "provenance", "scored", "readout", "context", "estimator", "template",
        "parse_failure_rate", "n"]
    body = [[_pct(r[k]) if k == "parse_failure_rate" else r[k] for k in keys] for r in rows]
    return ["## Reporting checklist", "",
            "Every comparison states: elicitation provenance, scored answer, token readout, "
            "conditioning context, estimator, template, parse-failure rate, n.", ""] + \
        _table(keys, body) + [""]


def _definitions_lines() -> list[str]:
    return [
        "## What each cell compares", "",
        "* scored answer = generated: c_verb elicited on the model's generated answer vs c_tok of "
        "that answer (teacher-forced); label = the task's correctness of the generated answer.",
        "* scored answer = gold: provided answers pooled (gold -> 1, plausible-wrong -> 0, "
        "wrong-type -> 0); c_verb elicited on that provided answer vs c_tok of that answer by "
        "teacher forcing.",
        "* readout: T1 = geometric mean of the span's token probabilities, T2 = first-token "
        "probability, product = product of all span probabilities.",
        "* context: bare query = the task's own prompt; verbalization prefix = the verbalization "
        "prompt up to and including the answer.",
        "* g > 0: verbalized confidence is worse by that metric (for AUROC, better). Rows with an "
        "unparseable verbalization are excluded and counted; a cell whose elicitations all failed "
        "reads n/a.", ""]


def _counts_lines(doc: Mapping) -> list[str]:
    c = doc["counts"]
    lines = ["## Counts and exclusions", "",
             f"* examples: {c['n_examples']}; queries beyond the context window (skipped): "
             f"{c['n_query_too_long']}; empty generated answers (excluded): {c['n_empty_generated']}",
             f"* verbalization prompts equal to the bare query up to the answer: "
             f"{c['n_context_identical']} of {c['n_context_compared']} generated answers"]
    for prov, v in c["verbal"].items():
        lines.append(f"* verbalization on {prov}: " + ", ".join(f"{k} {n}" for k, n in v.items()))
    for prov, by_ctx in c["token"].items():
        lines.append(f"* token scoring of {prov}: " + "; ".join(
            f"{ctx}: " + ", ".join(f"{k} {n}" for k, n in v.items()) for ctx, v in by_ctx.items()))
    return lines + [""]


def _template_lines(templates: Mapping) -> list[str]:
    used = templates["used"]
    return ["## Elicitation template", "",
            f"Variant `{used['name']}` (scale {used['scale']}), greedy decoding.", "",
            "Chat (final user turn after user: question, assistant: answer):", "",
            "```", used["chat"], "```", "", "Plain (base models):", "", "```", used["plain"], "```", ""]


def render_report(doc: Mapping) -> str:
    """The markdown report (``protocol.md``) of one run's ``protocol.json`` document."""
    s = doc["settings"]
    lines = [f"# Protocol study: {doc['model']} on {doc['task']}", "",
             f"Verbalized vs token confidence. {s['n_examples']} examples, "
             f"{'chat template' if s['chat'] else 'plain prompts'}, template variant "
             f"`{s['variant']}`, {s['n_bootstrap']} bootstrap resamples (seed {s['seed']}), "
             f"wall time {doc['wall_time_s']:.1f} s.", ""]
    parse = {c["scored"]: c for c in doc["cells"]}
    for scored, c in parse.items():
        if c["status"].startswith("n/a: 100% parse failures"):
            lines.append(f"**Warning:** no verbalization for scored answer `{scored}` gave a "
                         f"parseable number ({c['status'][5:]}); its cells are marked n/a.")
    lines += ["", "## Gap table", ""] + _gap_tables(doc["cells"], with_run=False)
    lines += _shift_lines(doc["shifts"])
    lines += _provenance_lines({"": doc["provenance"]})
    lines += _counts_lines(doc)
    lines += _checklist_lines(doc["checklist"])
    lines += _template_lines(doc["templates"])
    lines += _definitions_lines()
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Writing and combining
# --------------------------------------------------------------------------------------------



def load_protocol(path: str | os.PathLike) -> dict[str, Any]:
    """Read a run's ``protocol.json`` (``path`` is the file or the run folder).

    Raises ``FileNotFoundError`` when it is missing and ``ValueError`` when it is not a protocol
    document of this format.
    """
    p = Path(path)
    if p.is_dir():
        p = p / "protocol.json"
    doc = read_json(p, "run `acute protocol` first")
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise InputError(f"{p}: not an {FORMAT} document (format={doc.get('format') if isinstance(doc, dict) else None!r})")
    return doc


def render_combined_report(docs: Sequence[Mapping], labels: Sequence[str]) -> tuple[str, dict]:
    """Markdown and JSON summary combining several runs (``labels[i]`` names ``docs[i]``).

    Cells of all runs are tabulated together; the shift table pools pairs over runs (pairs are
    only formed within a run) and is also given per run.
    """
    cells, checks, per_run, prov = [], [], {}, {}
    for doc, label in zip(docs, labels):
        variant = doc["settings"]["variant"]
        run_cells = [{**c, "run": label, "template": variant} for c in doc["cells"]]
        cells += run_cells
        checks += checklist(run_cells, variant)
        per_run[label] = shift_table(run_cells)
        prov[label] = doc["provenance"]
    pooled = shift_table(cells)
    lines = ["# Protocol study: combined report", "",
             f"{len(docs)} runs: " + "; ".join(
                 f"{lab} ({d['settings']['n_examples']} examples, variant {d['settings']['variant']})"
                 for lab, d in zip(labels, docs)), ""]
    lines += ["## Gap table", ""] + _gap_tables(cells, with_run=True)
    lines += _shift_lines(pooled, per_run)
    lines += _provenance_lines(prov)
    lines += _checklist_lines(checks)
    lines += _definitions_lines()
    summary = {"format": FORMAT + "-report", "runs": list(labels), "shifts": pooled,
               "shifts_per_run": per_run, "cells": cells}
    return "\n".join(lines), summary


def write_protocol_report(run_dirs: Sequence[str | os.PathLike], out_dir: str | os.PathLike) -> Path:
    """Combine protocol runs (models x tasks) into ``out_dir/protocol-report.md`` (returned) and
    ``protocol-report.json``, written atomically.

    Each entry of ``run_dirs`` is a run folder or its ``protocol.json``. Raises ``ValueError`` for
    no runs and the errors of :func:`load_protocol`.
    """
    if isinstance(run_dirs, (str, os.PathLike)) or not run_dirs:
        raise InputError("run_dirs must be a non-empty list of run folders")
    docs = [load_protocol(p) for p in run_dirs]
    labels, seen = [], defaultdict(int)
    for doc in docs:
        label = f"{doc['model']} on {doc['task']}"
        seen[label] += 1
        labels.append(label if seen[label] == 1 else f"{label} #{seen[label]}")
    md, summary = render_combined_report(docs, labels)
    out = Path(out_dir)
    md_path = out / "protocol-report.md"
    write_text_atomic(out / "protocol-report.json", json.dumps(json_ready(summary, nonfinite="clip"), indent=1))
    write_text_atomic(md_path, md)
    logger.info("protocol report: wrote %s and %s", md_path, out / "protocol-report.json")
    return md_path
