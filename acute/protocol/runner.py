"""Running the protocol grid on a model: answers, verbalizations, teacher-forced log-probs."""

from __future__ import annotations

import datetime as _dt
import json
import logging
import time
import warnings
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .._util import json_ready, progress as _progress, write_text_atomic
from ..errors import InputError
from ..validation import check_count
from ..tasks.base import use_chat as resolve_chat
from ..verbalize import TEMPLATES, build_verbal_prompt, parse_confidence, question_text, split_answer
from .settings import (
    ALPHA,
    CONTEXTS,
    ESTIMATORS,
    FORMAT,
    PROVENANCES,
    PROVIDED_LABELS,
    READOUTS,
    ROBUSTNESS,
    SCORED,
    VERBAL_MAX_NEW_TOKENS,
)
from .analysis import analyze_records
from .render import render_report

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------------
# Running the grid
# --------------------------------------------------------------------------------------------


@dataclass
class ProtocolResult:
    """What :func:`run_protocol` wrote and computed.

    ``cells`` (:func:`gap_cells`), ``shifts`` (:func:`shift_table`), ``provenance``
    (:func:`provenance_table`), ``checklist``, ``counts`` (exclusions), ``records`` (per-record
    values as in ``protocol.json``), ``wall_time_s``, and the output paths.
    """

    out_dir: Path
    json_path: Path
    md_path: Path
    cells: list[dict]
    shifts: dict
    provenance: dict
    checklist: list[dict]
    counts: dict
    records: list[dict]
    wall_time_s: float


def _context_limit(model) -> int | None:
    try:
        from ..extraction import context_window
    except ImportError:  # pragma: no cover
        context_window = None
    if context_window is not None:
        return context_window(model)
    value = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    return int(value) if value else None


def _model_name(model, model_name: str | None) -> str:
    if model_name:
        return str(model_name)
    config = getattr(model, "config", None)
    return str(getattr(config, "_name_or_path", "") or type(model).__name__)


def _fingerprint(model) -> dict | None:
    try:
        from ..models import model_fingerprint
        return model_fingerprint(model)
    except Exception:  # noqa: BLE001 - informative only
        return None


def _first_text(values) -> str | None:
    for v in values or []:
        if isinstance(v, str) and v.strip():
            return v
    return None


def _provided_answers(task, ex) -> dict[str, str | None]:
    gold = task.gold_answer(ex)
    wrong = _first_text(task.plausible_wrong(ex))
    wtype = task.wrong_type(ex)
    out = {}
    for prov, ans in (("gold", gold), ("plausible_wrong", wrong), ("wrong_type", wtype)):
        out[prov] = None if ans is None else str(task.answer_text(ex, ans)).strip()
    return out


def _count(statuses) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for s in statuses:
        out[s] += 1
    return dict(sorted(out.items()))


def run_protocol(model, tokenizer, task, examples, out_dir, *, model_name: str | None = None,
                 batch_size: int = 8, max_new_tokens: int | None = None, n_bootstrap: int = 1000,
                 seed: int = 0, variant: str = "unit", progress: bool = True,
                 chat: bool | None = None,
                 verbal_max_new_tokens: int = VERBAL_MAX_NEW_TOKENS) -> ProtocolResult:
    """Run the protocol grid on ``examples`` and write ``protocol.json`` and ``protocol.md``.

    Passes (all batched): (1) greedy generation of an answer per example under the task prompt
    (``generate_and_record``, ``max_new_tokens`` defaults to the task's); (2) greedy
    verbalization (``verbal_max_new_tokens`` tokens) of the generated answer and of the provided
    gold, plausible-wrong and wrong-type answers with template ``variant`` (``"unit"`` or
    ``"percent"``, see :mod:`acute.verbalize`); (3) teacher-forced scoring
    (``score_continuations``) of each of these answers under the bare query and under its
    verbalization prefix. Then the cells, shift and provenance tables and the checklist are
    computed (``n_bootstrap`` paired resamples, ``seed``) and written atomically to ``out_dir``.
    ``chat=None`` uses the chat template when the tokenizer has one (instruct models), plain
    prompts otherwise (base models).

    Bad input is counted, reported and excluded, never filled in: a query beyond the context
    window (the example is skipped), an empty generated answer, a verbalization without a
    parseable number, a verbalization prompt or scored pair beyond the context window. Raises
    ``ValueError`` for bad arguments (no examples, unknown variant, non-positive sizes).
    """
    start = time.perf_counter()
    examples = list(examples)
    _check_arguments(examples, variant, batch_size, n_bootstrap, verbal_max_new_tokens, max_new_tokens)
    use_chat = resolve_chat(tokenizer, chat)
    template = TEMPLATES[variant]
    out = Path(out_dir)
    gen_tokens = check_count(max_new_tokens, "max_new_tokens", default=getattr(task, "max_new_tokens", 32))

    records = _answer_pass(model, tokenizer, task, examples, use_chat, gen_tokens, batch_size, progress)
    vjobs, vprompts, sjobs, counts = _plan_jobs(tokenizer, task, examples, records, variant, use_chat)
    _verbalize_pass(model, tokenizer, records, vjobs, vprompts, template, verbal_max_new_tokens,
                    batch_size, progress)
    _score_pass(model, tokenizer, records, sjobs, batch_size, progress)

    ok_records = [r for r in records if r["status"] == "ok"]
    counts = {
        "n_examples": len(records),
        "n_query_too_long": sum(r["status"] == "too_long" for r in records),
        **counts,
        "verbal": {p: _count(r["verbal"][p]["status"] for r in ok_records) for p in PROVENANCES},
        "token": {p: {c: _count(r["token"][p][c]["status"] for r in ok_records) for c in CONTEXTS}
                  for p in PROVENANCES},
    }
    analysis = analyze_records(records, template=variant, n_bootstrap=n_bootstrap, seed=seed,
                               progress=progress)
    wall = time.perf_counter() - start
    settings = {
        "n_examples": len(records), "chat": use_chat, "variant": variant,
        "scale": template.scale, "batch_size": batch_size, "max_new_tokens": gen_tokens,
        "verbal_max_new_tokens": verbal_max_new_tokens, "n_bootstrap": n_bootstrap,
        "seed": seed, "decoding": "greedy", "alpha": ALPHA,
        "scored": list(SCORED), "readouts": list(READOUTS), "contexts": list(CONTEXTS),
        "estimators": list(ESTIMATORS), "robustness": list(ROBUSTNESS),
    }
    doc = json_ready(_document(model, model_name, task, settings, template, wall, counts, analysis, records),
                     nonfinite="clip")
    json_path, md_path = out / "protocol.json", out / "protocol.md"
    write_text_atomic(json_path, json.dumps(doc, indent=1, ensure_ascii=False))
    write_text_atomic(md_path, render_report(doc))
    logger.info("protocol study: wrote %s and %s", json_path, md_path)
    return ProtocolResult(out_dir=out, json_path=json_path, md_path=md_path,
                          cells=doc["cells"], shifts=doc["shifts"], provenance=doc["provenance"],
                          checklist=doc["checklist"], counts=counts, records=doc["records"],
                          wall_time_s=wall)


def _check_arguments(examples, variant, batch_size, n_bootstrap, verbal_max_new_tokens, max_new_tokens) -> None:
    if not examples:
        raise InputError("examples is empty: nothing to run the protocol on")
    if variant not in TEMPLATES:
        raise InputError(f"variant must be one of {sorted(TEMPLATES)}, got {variant!r}")
    for name, value in (("batch_size", batch_size), ("n_bootstrap", n_bootstrap),
                        ("verbal_max_new_tokens", verbal_max_new_tokens)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f"{name} must be a positive integer, got {value!r}")
    if max_new_tokens is not None and (not isinstance(max_new_tokens, int) or max_new_tokens < 1):
        raise InputError(f"max_new_tokens must be a positive integer or None, got {max_new_tokens!r}")


def _empty_record(ex, query: str, status: str) -> dict[str, Any]:
    return {
        "id": str(ex.id), "question": ex.question, "gold": list(ex.answers),
        "query_prompt": query, "status": status,
        "generation": None, "extracted": None, "correct": None, "finish_reason": None,
        "gen_logprobs": None, "answers": {p: None for p in PROVENANCES},
        "labels": {p: None for p in PROVENANCES},
        "verbal": {p: {"status": "unavailable", "raw": None, "c_verb": None, "prompt": None}
                   for p in PROVENANCES},
        "token": {p: {c: {"status": "unavailable", "logprobs": None} for c in CONTEXTS}
                  for p in PROVENANCES},
    }


def _answer_pass(model, tokenizer, task, examples, use_chat, gen_tokens, batch_size, progress) -> list[dict]:
    """Pass 1: a greedy answer per example under the task prompt; one record per example."""
    from ..extraction import generate_and_record

    queries = [task.prompt(tokenizer, ex, chat=use_chat) for ex in examples]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # too-long prompts: counted and reported below
        gens = generate_and_record(model, tokenizer, queries, max_new_tokens=gen_tokens,
                                   batch_size=batch_size,
                                   stop_strings=tuple(getattr(task, "stop_strings", ()) or ()),
                                   progress=progress)
    records = []
    for ex, query, gen in zip(examples, queries, gens):
        rec = _empty_record(ex, query, "ok" if gen is not None else "too_long")
        if gen is not None:
            rec.update(generation=gen.text, extracted=task.extract(ex, gen.text),
                       correct=bool(task.is_correct(ex, gen.text)), finish_reason=gen.finish_reason,
                       gen_logprobs=[float(x) for x in np.asarray(gen.token_logprobs)])
            rec["answers"]["generated"] = gen.text.strip()
            rec["labels"]["generated"] = rec["correct"]
            for prov, ans in _provided_answers(task, ex).items():
                rec["answers"][prov] = ans
                rec["labels"][prov] = PROVIDED_LABELS[prov] if ans is not None else None
        records.append(rec)
    n_too_long = sum(r["status"] == "too_long" for r in records)
    if n_too_long:
        warnings.warn(f"{n_too_long} of {len(records)} prompts exceed the context window and were "
                      "skipped (counted in the report)", UserWarning, stacklevel=3)
    return records


def _plan_jobs(tokenizer, task, examples, records, variant, use_chat):
    """The verbalization prompts of every answer and the (prefix, continuation) pairs to score
    under each context. Returns ``(vjobs, vprompts, sjobs, counts)``."""
    vjobs: list[tuple[int, str]] = []
    vprompts: list[str] = []
    sjobs: list[tuple[int, str, str, str, str]] = []  # (record, provenance, context, prefix, cont)
    n_empty = n_compared = n_identical = 0
    for i, (ex, rec) in enumerate(zip(examples, records)):
        if rec["status"] != "ok":
            continue
        qtext = question_text(task, ex)
        for prov in PROVENANCES:
            ans = rec["answers"][prov]
            if ans is None:
                continue
            if not ans:
                rec["verbal"][prov]["status"] = "empty_answer"
                for ctx in CONTEXTS:
                    rec["token"][prov][ctx]["status"] = "empty_span"
                n_empty += prov == "generated"
                continue
            try:
                vp = build_verbal_prompt(tokenizer, qtext, ans, variant=variant, chat=use_chat)
            except ValueError as exc:
                rec["verbal"][prov].update(status="template_error", raw=str(exc))
                rec["token"][prov]["verbal"]["status"] = "template_error"
                vp = None
            if vp is not None:
                rec["verbal"][prov]["prompt"] = vp.prompt
                vjobs.append((i, prov))
                vprompts.append(vp.prompt)
                sjobs.append((i, prov, "verbal", vp.prefix, vp.continuation))
            qprefix, qcont = split_answer(rec["query_prompt"], ans)
            sjobs.append((i, prov, "query", qprefix, qcont))
            if prov == "generated" and vp is not None:
                n_compared += 1
                n_identical += (qprefix + qcont) == (vp.prefix + vp.continuation)
    if n_empty:
        warnings.warn(f"{n_empty} generated answers are empty (the answer span has no tokens); "
                      "excluded and counted", UserWarning, stacklevel=3)
    counts = {"n_empty_generated": n_empty, "n_context_compared": n_compared,
              "n_context_identical": n_identical}
    return vjobs, vprompts, sjobs, counts


def _verbalize_pass(model, tokenizer, records, vjobs, vprompts, template, max_new_tokens, batch_size,
                    progress) -> None:
    """Pass 2: greedy verbalizations, parsed into ``c_verb`` (never filled in when unparseable)."""
    from ..extraction import generate_and_record

    if not vprompts:
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        vgens = generate_and_record(model, tokenizer, vprompts, max_new_tokens=max_new_tokens,
                                    batch_size=batch_size, progress=progress)
    for (i, prov), g in zip(vjobs, vgens):
        slot = records[i]["verbal"][prov]
        if g is None:
            slot["status"] = "too_long"
            continue
        value = parse_confidence(g.text, template.scale)
        slot.update(raw=g.text, c_verb=value, status="ok" if value is not None else "parse_failure")
    n_vlong = sum(g is None for g in vgens)
    if n_vlong:
        warnings.warn(f"{n_vlong} verbalization prompts exceed the context window; skipped and "
                      "counted (verbal status too_long)", UserWarning, stacklevel=3)


def _score_pass(model, tokenizer, records, sjobs, batch_size, progress) -> None:
    """Pass 3: teacher-forced log-probs of every answer span under each context."""
    from ..extraction import score_continuations

    limit = _context_limit(model)
    runnable: list[int] = []
    if sjobs:
        p_ids = tokenizer([j[3] for j in sjobs], add_special_tokens=False)["input_ids"]
        c_ids = tokenizer([j[4] for j in sjobs], add_special_tokens=False)["input_ids"]
        for k, (i, prov, ctx, _, _) in enumerate(sjobs):
            slot = records[i]["token"][prov][ctx]
            if not c_ids[k]:
                slot["status"] = "empty_span"
            elif not p_ids[k] or (limit is not None and len(p_ids[k]) + len(c_ids[k]) > limit):
                slot["status"] = "too_long" if p_ids[k] else "empty_context"
            else:
                runnable.append(k)
    chunk = max(1, batch_size * 16)
    chunks = [runnable[s: s + chunk] for s in range(0, len(runnable), chunk)]
    for part in _progress(chunks, len(chunks), progress, "score"):
        scores = score_continuations(model, tokenizer, [sjobs[k][3] for k in part],
                                     [sjobs[k][4] for k in part], batch_size=batch_size)
        for k, lp in zip(part, scores):
            i, prov, ctx, _, _ = sjobs[k]
            records[i]["token"][prov][ctx].update(
                status="ok", logprobs=[float(x) for x in np.asarray(lp, dtype=np.float64)])
    n_span_empty = sum(records[i]["token"][prov][ctx]["status"] == "empty_span" for i, prov, ctx, _, _ in sjobs)
    if n_span_empty:
        warnings.warn(f"{n_span_empty} answer spans tokenize to nothing; excluded and counted",
                      UserWarning, stacklevel=3)


def _document(model, model_name, task, settings, template, wall, counts, analysis, records) -> dict:
    settings_fn = getattr(task, "settings", None)
    try:
        task_settings = settings_fn() if callable(settings_fn) else None
    except Exception:  # noqa: BLE001 - informative only
        task_settings = None
    return {
        "format": FORMAT,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "model": _model_name(model, model_name),
        "model_fingerprint": _fingerprint(model),
        "task": str(getattr(task, "name", type(task).__name__)),
        "task_settings": task_settings,
        "settings": settings,
        "templates": {"used": template.as_dict(),
                      "all": {k: t.as_dict() for k, t in TEMPLATES.items()}},
        "wall_time_s": wall,
        "counts": counts,
        **analysis,
        "records": records,
    }
