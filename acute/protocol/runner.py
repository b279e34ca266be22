"""Running the protocol grid on a model: answers, verbalizations, teacher-forced log-probs."""

from __future__ import annotations

import dataclasses
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

from ..fileio import json_ready, progress_bar, write_text_atomic
from ..errors import IncompatibleStoreError, InputError
from ..metrics.resampling import DEFAULT_N_BOOTSTRAP
from ..store.generation import GenerationSettings
from ..validation import check_count
from ..tasks.base import use_chat as resolve_chat
from .verbalize import TEMPLATES, build_verbal_prompt, parse_confidence, question_text, split_answer
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
from .records import KEY, RecordShards, protocol_key
from .render import render_report
from ..collect import collect
from ..models import model_name
from ..store import ModelIdentity, open_store
from ..store.format import collection_key

__all__ = ["ProtocolResult", "analyze_protocol", "run_protocol"]

#: How a protocol study generates its answers unless told: the task's length and stop strings, 8
#: prompts per batch.
PROTOCOL_GENERATION = GenerationSettings(batch_size=8)

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------------
# Running the grid
# --------------------------------------------------------------------------------------------


@dataclass
class ProtocolResult:
    """What :func:`run_protocol` (or :func:`analyze_protocol`) wrote and computed.

    ``cells`` (:func:`gap_cells`), ``shifts`` (:func:`shift_table`), ``provenance``
    (:func:`provenance_table`), ``checklist``, ``counts`` (exclusions), ``records`` (per-record
    values as in ``protocol.json``), ``wall_time_s``, and the output paths (``store_dir``: the
    store holding the answers; None when only the analysis ran).
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
    store_dir: Path | None = None


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


# Long because of its docstring; the passes live in the functions below.
def run_protocol(model, tokenizer, task, examples, out_dir, generation: GenerationSettings = PROTOCOL_GENERATION, *,
                 store: str | Path | None = None,
                 n_bootstrap: int = DEFAULT_N_BOOTSTRAP, seed: int = 0, variant: str = "unit", progress: bool = True,
                 verbal_max_new_tokens: int = VERBAL_MAX_NEW_TOKENS,
                 shard_size: int = 32) -> ProtocolResult:
    """Run the protocol grid on ``examples`` and write ``protocol.json`` and ``protocol.md``.

    1. **Answers, through a store.** The greedy answer to each example under the task prompt is
       a collection (:func:`acute.collect.collect`) into ``store`` (default ``out_dir/store``):
       an existing store of the same model, task and generation settings is reused and only the
       missing examples are generated; a store whose model or settings differ is refused, naming
       the key (``IncompatibleStoreError``). ``generation``
       (:class:`~acute.store.generation.GenerationSettings`) says how: its ``max_new_tokens``
       and ``stop_strings`` default to the task's (32 tokens for a task without a length), its
       ``batch_size`` (default 8) is every pass's.
    2. **Verbalizations and teacher-forced log-probs**, ``shard_size`` examples at a time,
       committed per chunk to ``out_dir/records`` (:class:`RecordShards`): a killed run resumes
       with the examples no shard holds; a rerun with other settings is refused, naming the key.
       Each example's generated, gold, plausible-wrong and wrong-type answers are verbalized
       (greedy, ``verbal_max_new_tokens`` tokens, template ``variant``: ``"unit"`` or
       ``"percent"``, see :mod:`acute.protocol.verbalize`), and each answer is teacher-forced under the
       bare query and under its verbalization prefix. One forward pass over a verbalization
       prompt gives both its continuation and the answer's log-probs under that prefix, and the
       four prompts of an example share their prefix
       (:func:`acute.extraction.span_generate.generate_with_span_scores`); answers under the
       query share the query's cache and prompts share their demonstrations
       (:func:`acute.extraction.continuation_logprobs`).
    3. **Analysis** (:func:`analyze_records`: cells, shifts, provenance, checklist, with
       ``n_bootstrap`` paired resamples and ``seed``), a pure function of the records, written
       atomically to ``out_dir``; :func:`analyze_protocol` reruns it alone.

    ``generation.chat=None`` uses the chat template when the tokenizer has one (instruct models), plain
    prompts otherwise (base models). Bad input is counted, reported and excluded, never filled
    in: a query beyond the context window (the example is skipped), an empty generated answer, a
    verbalization without a parseable number, a verbalization prompt or scored pair beyond the
    context window. Raises ``ValueError`` for bad arguments (no examples, unknown variant,
    non-positive sizes).
    """
    start = time.perf_counter()
    examples = list(examples)
    if not isinstance(generation, GenerationSettings):
        raise InputError(f"generation must be an acute.store.generation.GenerationSettings, got "
                         f"{type(generation).__name__}")
    batch_size = generation.batch_size
    _check_arguments(examples, variant, n_bootstrap, verbal_max_new_tokens, shard_size)
    use_chat = resolve_chat(tokenizer, generation.chat)
    generation = dataclasses.replace(generation.for_task(task), chat=use_chat)
    generation = dataclasses.replace(generation, max_new_tokens=generation.max_new_tokens or 32)
    gen_tokens = generation.max_new_tokens
    template = TEMPLATES[variant]
    out = Path(out_dir)
    store_dir = Path(store) if store is not None else out / "store"
    name = model_name(model)

    collect(model, tokenizer, task, examples, store_dir, generation, progress=progress)
    answers = open_store(store_dir)
    stored = {r["id"]: (r, lp) for r, lp in zip(answers.records, answers.token_logprobs)}
    settings = {
        "chat": use_chat, "variant": variant, "scale": template.scale, "batch_size": batch_size,
        "max_new_tokens": gen_tokens, "verbal_max_new_tokens": verbal_max_new_tokens,
        "decoding": "greedy", "alpha": ALPHA, "scored": list(SCORED), "readouts": list(READOUTS),
        "contexts": list(CONTEXTS), "estimators": list(ESTIMATORS), "robustness": list(ROBUSTNESS),
    }
    task_settings = answers.manifest.get("task_settings")  # as the collection recorded them
    shards = RecordShards(out / "records", {
        KEY: protocol_key(identity=ModelIdentity.from_manifest(answers.manifest),
                          store_key=collection_key(answers.manifest), task=task.name,
                          task_settings=task_settings, settings=settings),
        "model": name, "model_fingerprint": answers.manifest.get("model_fingerprint"),
        "task": str(task.name), "task_settings": task_settings, "settings": settings,
        "templates": {"used": template.as_dict(), "all": {k: t.as_dict() for k, t in TEMPLATES.items()}},
    })
    todo = [ex for ex in examples if str(ex.id) not in shards.done]
    with progress_bar(len(todo), "verbalize + score", progress, unit="ex") as bar:
        for k in range(0, len(todo), shard_size):
            part = todo[k: k + shard_size]
            records = [_base_record(task, tokenizer, ex, stored.get(str(ex.id)), use_chat) for ex in part]
            _elicit(model, tokenizer, task, part, records, variant, use_chat, template,
                    verbal_max_new_tokens, batch_size)
            shards.commit(records)
            bar.update(len(part))
    records = [shards.done[str(ex.id)] for ex in examples]
    n_too_long = sum(r["status"] == "too_long" for r in records)
    if n_too_long:
        warnings.warn(f"{n_too_long} of {len(records)} prompts exceed the context window and were "
                      "skipped (counted in the report)", UserWarning, stacklevel=2)
    return _write_results(out, shards.manifest, records, n_bootstrap=n_bootstrap, seed=seed,
                          progress=progress, wall=time.perf_counter() - start, store_dir=store_dir)


def analyze_protocol(out_dir, *, n_bootstrap: int = DEFAULT_N_BOOTSTRAP, seed: int = 0,
                     progress: bool = True) -> ProtocolResult:
    """Rerun the analysis of the protocol run in ``out_dir`` from its committed records alone
    (``out_dir/records``, every record in commit order), e.g. with another ``n_bootstrap`` or
    ``seed``, and rewrite ``protocol.json`` and ``protocol.md``. No model is loaded.
    Raises ``FileNotFoundError`` when ``out_dir`` holds no protocol records."""
    start = time.perf_counter()
    out = Path(out_dir)
    shards = RecordShards(out / "records")
    if not shards.records:
        raise InputError(f"{out / 'records'} holds no committed records yet")
    return _write_results(out, shards.manifest, shards.records, n_bootstrap=n_bootstrap, seed=seed,
                          progress=progress, wall=time.perf_counter() - start, store_dir=None)


def _write_results(out: Path, manifest: dict, records: list[dict], *, n_bootstrap: int, seed: int,
                   progress: bool, wall: float, store_dir: Path | None) -> ProtocolResult:
    """Counts and analysis of ``records``; ``protocol.json`` and ``protocol.md`` written atomically."""
    n_bootstrap = check_count(n_bootstrap, "n_bootstrap", minimum=1)
    ok_records = [r for r in records if r["status"] == "ok"]
    compared = [r.get("context_identical") for r in ok_records if r.get("context_identical") is not None]
    counts = {
        "n_examples": len(records),
        "n_query_too_long": sum(r["status"] == "too_long" for r in records),
        "n_empty_generated": sum(r["verbal"]["generated"]["status"] == "empty_answer" for r in ok_records),
        "n_context_compared": len(compared),
        "n_context_identical": sum(bool(c) for c in compared),
        "verbal": {p: _count(r["verbal"][p]["status"] for r in ok_records) for p in PROVENANCES},
        "token": {p: {c: _count(r["token"][p][c]["status"] for r in ok_records) for c in CONTEXTS}
                  for p in PROVENANCES},
    }
    settings = {**manifest["settings"], "n_examples": len(records), "n_bootstrap": n_bootstrap, "seed": seed}
    analysis = analyze_records(records, template=settings["variant"], n_bootstrap=n_bootstrap, seed=seed,
                               progress=progress)
    doc = json_ready({
        "format": FORMAT,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "model": manifest["model"],
        "model_fingerprint": manifest.get("model_fingerprint"),
        "task": manifest["task"],
        "task_settings": manifest.get("task_settings"),
        "settings": settings,
        "templates": manifest["templates"],
        "wall_time_s": wall,
        "counts": counts,
        **analysis,
        "records": records,
    }, nonfinite="clip")
    json_path, md_path = out / "protocol.json", out / "protocol.md"
    write_text_atomic(json_path, json.dumps(doc, indent=1, ensure_ascii=False))
    write_text_atomic(md_path, render_report(doc))
    logger.info("protocol study: wrote %s and %s", json_path, md_path)
    return ProtocolResult(out_dir=out, json_path=json_path, md_path=md_path,
                          cells=doc["cells"], shifts=doc["shifts"], provenance=doc["provenance"],
                          checklist=doc["checklist"], counts=counts, records=doc["records"],
                          wall_time_s=wall, store_dir=store_dir)


def _check_arguments(examples, variant, n_bootstrap, verbal_max_new_tokens, shard_size) -> None:
    if not examples:
        raise InputError("examples is empty: nothing to run the protocol on")
    if variant not in TEMPLATES:
        raise InputError(f"variant must be one of {sorted(TEMPLATES)}, got {variant!r}")
    for name, value in (("n_bootstrap", n_bootstrap),
                        ("verbal_max_new_tokens", verbal_max_new_tokens), ("shard_size", shard_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f"{name} must be a positive integer, got {value!r}")


def _empty_record(ex, query: str, status: str) -> dict[str, Any]:
    return {
        "id": str(ex.id), "question": ex.question, "gold": list(ex.answers),
        "query_prompt": query, "status": status,
        "generation": None, "extracted": None, "correct": None, "finish_reason": None,
        "gen_logprobs": None, "answers": {p: None for p in PROVENANCES},
        "labels": {p: None for p in PROVENANCES}, "context_identical": None,
        "verbal": {p: {"status": "unavailable", "raw": None, "c_verb": None, "prompt": None}
                   for p in PROVENANCES},
        "token": {p: {c: {"status": "unavailable", "logprobs": None} for c in CONTEXTS}
                  for p in PROVENANCES},
    }


def _base_record(task, tokenizer, ex, stored, use_chat) -> dict[str, Any]:
    """An example's record with its answer from the store (``stored``: ``(store record,
    token log-probs)``, None when the collection skipped the prompt as too long) and the provided
    answers; verbalizations and token log-probs still unavailable."""
    query = task.prompt(tokenizer, ex, chat=use_chat)
    rec = _empty_record(ex, query, "ok" if stored is not None else "too_long")
    if stored is None:
        return rec
    answer, logprobs = stored
    if answer["prompt"] != query:
        raise IncompatibleStoreError(
            f"store record {answer['id']!r} was prompted with other text than this run's query "
            "(another task option or chat setting?); use another --store")
    text = answer["generation"]
    rec.update(generation=text, extracted=task.extract(ex, text), correct=bool(answer["correct"]),
               finish_reason=answer["finish_reason"],
               gen_logprobs=[float(x) for x in np.asarray(logprobs)])
    rec["answers"]["generated"] = text.strip()
    rec["labels"]["generated"] = rec["correct"]
    for prov, ans in _provided_answers(task, ex).items():
        rec["answers"][prov] = ans
        rec["labels"][prov] = PROVIDED_LABELS[prov] if ans is not None else None
    return rec


def _elicit(model, tokenizer, task, examples, records, variant, use_chat, template, verbal_max_new_tokens,
            batch_size) -> None:
    """Passes 2 and 3 for a chunk of records (filled in place): verbalizations, and every
    answer's teacher-forced log-probs under the query and under its verbalization prefix."""
    vjobs, vprompts, sjobs = _plan_jobs(tokenizer, task, examples, records, variant, use_chat)
    sjobs = _verbalize_pass(model, tokenizer, records, vjobs, vprompts, sjobs, template,
                            verbal_max_new_tokens, batch_size)
    _score_pass(model, tokenizer, records, sjobs, batch_size)


def _plan_jobs(tokenizer, task, examples, records, variant, use_chat):
    """The verbalization prompts of every answer and the (prefix, continuation) pairs to score
    under each context; sets each record's ``context_identical``. Returns ``(vjobs, vprompts,
    sjobs)``: ``vjobs[k] = (record, provenance)`` of ``vprompts[k]``, ``sjobs`` tuples
    ``(record, provenance, context, prefix, continuation)``."""
    vjobs: list[tuple[int, str]] = []
    vprompts: list[str] = []
    sjobs: list[tuple[int, str, str, str, str]] = []
    n_empty = 0
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
                rec["context_identical"] = (qprefix + qcont) == (vp.prefix + vp.continuation)
    if n_empty:
        warnings.warn(f"{n_empty} generated answers are empty (the answer span has no tokens); "
                      "excluded and counted", UserWarning, stacklevel=3)
    return vjobs, vprompts, sjobs


def _verbalize_pass(model, tokenizer, records, vjobs, vprompts, sjobs, template, max_new_tokens,
                    batch_size) -> list:
    """Pass 2: greedy verbalizations, parsed into ``c_verb`` (never filled in when unparseable).

    Where the model allows it, each verbalization prompt runs once for both its continuation and
    the log-probs of its answer under the verbalization prefix (when the prefix and the answer,
    tokenized separately as :func:`continuation_logprobs` does, are the start of the prompt's own
    tokens); those scoring jobs are done here and left out of the returned ``sjobs``."""
    from ..extraction import context_window, generate_with  # heavy: torch
    from ..extraction.batching import padding_id, resolve_eos, tokenize  # heavy: torch
    from ..extraction.span_generate import generate_with_span_scores, supports_span_generation  # heavy: torch

    if not vprompts:
        return sjobs
    limit = context_window(model)
    ids = tokenize(tokenizer, vprompts)
    fits = [limit is None or len(p) + max_new_tokens <= limit for p in ids]
    if not supports_span_generation(model, max(len(p) for p in ids) + max_new_tokens):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            gens = generate_with(model, tokenizer, vprompts,
                                 GenerationSettings(max_new_tokens=max_new_tokens, batch_size=batch_size))
        for (i, prov), g in zip(vjobs, gens):
            _set_verbal(records[i]["verbal"][prov], None if g is None else g.text, template)
        return sjobs
    where = {(i, prov): k for k, (i, prov, ctx, _, _) in enumerate(sjobs) if ctx == "verbal"}
    jobs = [sjobs[where[v]] for v in vjobs]
    heads = tokenize(tokenizer, [job[3] for job in jobs])
    bodies = tokenize(tokenizer, [job[4] for job in jobs])
    spans: list[tuple[int, int] | None] = []
    for p, head, body in zip(ids, heads, bodies):
        aligned = head and body and p[: len(head) + len(body)] == head + body
        spans.append((len(head), len(head) + len(body)) if aligned else None)
    run = [k for k in range(len(vjobs)) if fits[k]]
    eos = resolve_eos(model, tokenizer)
    results = generate_with_span_scores(
        model, [ids[k] for k in run], [spans[k] for k in run], [vjobs[k][0] for k in run],
        max_new_tokens=max_new_tokens, eos_token_ids=eos, pad_id=padding_id(tokenizer, eos),
        batch_size=batch_size)
    scored = set()
    for k, res in zip(run, results):
        i, prov = vjobs[k]
        _set_verbal(records[i]["verbal"][prov],
                    tokenizer.decode(res.token_ids.tolist(), skip_special_tokens=True), template)
        if res.span_logprobs is not None:
            records[i]["token"][prov]["verbal"].update(
                status="ok", logprobs=[float(x) for x in res.span_logprobs.astype(np.float64)])
            scored.add(where[(i, prov)])
    for k in range(len(vjobs)):
        if not fits[k]:
            _set_verbal(records[vjobs[k][0]]["verbal"][vjobs[k][1]], None, template)
    return [job for k, job in enumerate(sjobs) if k not in scored]


def _set_verbal(slot: dict, text: str | None, template) -> None:
    """A verbalization's slot: ``too_long`` (no text: the prompt did not fit), or the raw text
    and its parsed value (``parse_failure`` when none)."""
    if text is None:
        slot["status"] = "too_long"
        return
    value = parse_confidence(text, template.scale)
    slot.update(raw=text, c_verb=value, status="ok" if value is not None else "parse_failure")


def _score_pass(model, tokenizer, records, sjobs, batch_size) -> None:
    """Pass 3: teacher-forced log-probs of every remaining answer span under its context."""
    from ..extraction import context_window, token_continuation_logprobs  # heavy: torch
    from ..extraction.batching import padding_id, resolve_eos, tokenize  # heavy: torch

    limit = context_window(model)
    runnable: list[int] = []
    if sjobs:
        p_ids = tokenize(tokenizer, [j[3] for j in sjobs])
        c_ids = tokenize(tokenizer, [j[4] for j in sjobs])
        for k, (i, prov, ctx, _, _) in enumerate(sjobs):
            slot = records[i]["token"][prov][ctx]
            if not c_ids[k]:
                slot["status"] = "empty_span"
            elif not p_ids[k] or (limit is not None and len(p_ids[k]) + len(c_ids[k]) > limit):
                slot["status"] = "too_long" if p_ids[k] else "empty_context"
            else:
                runnable.append(k)
    if runnable:
        scores = token_continuation_logprobs(model, [p_ids[k] for k in runnable], [c_ids[k] for k in runnable],
                                           pad_id=padding_id(tokenizer, resolve_eos(model, tokenizer)),
                                           batch_size=batch_size)
        for k, lp in zip(runnable, scores):
            i, prov, ctx, _, _ = sjobs[k]
            records[i]["token"][prov][ctx].update(
                status="ok", logprobs=[float(x) for x in np.asarray(lp, dtype=np.float64)])
    n_span_empty = sum(records[i]["token"][prov][ctx]["status"] == "empty_span" for i, prov, ctx, _, _ in sjobs)
    if n_span_empty:
        warnings.warn(f"{n_span_empty} answer spans tokenize to nothing; excluded and counted",
                      UserWarning, stacklevel=3)
