"""Collection: run a model over a task's examples, record activations, label, and write a store.

This is the glue between the model (``acute.models``), the recorder (``acute.extraction``),
the task layer (``acute.tasks``) and the store (``acute.store``). It is resumable: records
already committed to ``out_dir`` are skipped, so an interrupted collection (Ctrl-C, a crash)
is continued by running the same command again.

Three ways to fill a store share the commit loop: :func:`collect` generates answers to a task's
examples; :func:`collect_responses` records responses produced elsewhere, given with their
prompts and labels in a JSONL file, by teacher forcing (:func:`acute.extraction.record_responses`);
:func:`rerecord_store` teacher-forces the generations of an existing store again (e.g. with
another pooling) without regenerating.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from . import __version__
from .extraction.batching import BATCH_SIZE
from .fileio import progress_bar
from .errors import InputError, ModelMismatchError
from .store.checkpoints import DEFAULT_CHECKPOINTS
from .store.format import DEFAULT_STORE_DTYPE
from .store.sampling import SamplingSettings, parse_sampling
from .store.identity import DEFAULT_ENGINE, diff, model_record, of_model, of_store
from .validation import check_count

__all__ = ["CollectSummary", "ResponseRow", "collect", "collect_responses", "collection_settings", "read_responses",
           "rerecord_store"]

logger = logging.getLogger(__name__)

@dataclass
class CollectSummary:
    """What :func:`collect` did: counts, accuracy and speed.

    ``records`` counts every record in the store after the run (old and new); ``accuracy`` and
    ``mean_raw_confidence`` are over all of them (NaN for an empty store); ``seconds_per_record``
    is this run's wall time divided by the records it generated (NaN when it generated none).
    """

    out_dir: str
    records: int = 0  #: records in the store after this run (old + new)
    new_records: int = 0  #: records generated in this run
    resumed: int = 0  #: examples found already committed and skipped
    skipped_too_long: int = 0  #: prompts longer than the context window (skipped)
    skipped_empty: int = 0  #: empty responses (collect_responses; skipped)
    retokenized: int = 0  #: rerecord_store: records whose text re-tokenized to other tokens
    unparseable: int = 0  #: new generations the task could not parse (labelled wrong)
    accuracy: float = math.nan  #: over all records in the store
    mean_raw_confidence: float = math.nan  #: over all records in the store
    seconds_per_record: float = math.nan  #: wall time of this run / new records
    extra: dict[str, Any] = field(default_factory=dict)

    def lines(self) -> list[str]:
        """Human-readable summary lines (what ``acute collect`` prints)."""
        return [
            f"records:             {self.records} ({self.new_records} new, {self.resumed} resumed)",
            f"accuracy:            {self.accuracy:.3f}",
            f"mean raw confidence: {self.mean_raw_confidence:.3f}",
            f"seconds per record:  {self.seconds_per_record:.2f}",
            f"skipped (too long):  {self.skipped_too_long}",
            f"unparseable answers: {self.unparseable}",
            f"store:               {self.out_dir}",
        ] + [f"{name + ':':<21}{value}" for name, value in (
            ("skipped (empty)", self.skipped_empty), ("re-tokenized", self.retokenized)) if value]


def build_manifest(model, tokenizer, task, *, model_name: str, max_new_tokens: int | None,
                   stop_strings: Sequence[str], pool: str, chat: bool | None,
                   engine: str = DEFAULT_ENGINE, engine_version: str | None = None) -> dict:
    """The store manifest: model (fingerprint and weights digest), tokenizer, the engine that ran
    the model and its version (default for transformers: :func:`acute.engines.transformers_version`),
    the model's dtype and quantisation (:func:`acute.models.model_setting`; with the engine, the
    pooling and the prompt format the validity domain of a probe trained on the store,
    :mod:`acute.store.identity`), task and generation settings, acute version.

    ``chat`` is resolved (``None`` -> whether the tokenizer has a chat template) so that the
    manifest says how the prompts were actually built; a scorer reads it back from the probe.
    ``task`` is None (``task`` and ``task_settings`` None) for responses labelled by their
    ``label`` field, and ``max_new_tokens`` None for responses that were not generated here.
    """
    from .engines import transformers_version
    from .models import model_fingerprint, model_setting, weights_digest
    from .tasks.base import use_chat

    fp = model_fingerprint(model)
    if engine_version is None and engine == "transformers":
        engine_version = transformers_version()
    return {
        "model": str(model_name),
        "model_fingerprint": fp,
        "model_weights": weights_digest(model),
        **model_setting(model),
        "tokenizer": getattr(tokenizer, "name_or_path", None),
        "engine": engine,
        "engine_version": engine_version,
        "num_layers": fp["num_layers"],
        "hidden_size": fp["hidden_size"],
        "task": None if task is None else task.name,
        "task_settings": None if task is None else task.settings(),
        "generation": {
            "do_sample": False,
            "max_new_tokens": None if max_new_tokens is None else int(max_new_tokens),
            "stop_strings": list(stop_strings),
            "pool": pool,
            "chat": use_chat(tokenizer, chat),
        },
        "acute_version": __version__,
    }


def store_identity(manifest: dict) -> dict | None:
    """The model identity a probe trained on a store records: the manifest's fingerprint plus its
    weights digest (``weights_sha256``, ``gguf_sha256``) when the store has one
    (:func:`acute.store.identity.model_record` of the store's identity)."""
    return model_record(of_store(manifest))


def collection_settings(manifest: dict) -> dict:
    """``{"task", "task_settings", "generation", "engine"}`` (and ``"responses"`` for a store of
    given responses) of a store manifest: what a probe trained on the store should carry in its
    ``training_summary`` so that :class:`acute.scoring.scorer.Scorer` generates live answers, or
    formats the prompts of given responses, the same way (prompt, max new tokens, stop strings,
    pooling), and its identity (:func:`acute.store.identity.of_probe`) names the engine."""
    keys = ("task", "task_settings", "generation") + (("responses",) if "responses" in manifest else ())
    return {**{key: manifest.get(key) for key in keys}, "engine": of_store(manifest)["engine"]}


def example_record(task, ex, prompt: str, generation) -> dict:
    """The store record of one example and its :class:`~acute.extraction.Generation`.

    Keys: ``id, task, prompt, generation, answer, gold, correct, parse_error, n_tokens,
    raw_confidence, finish_reason, token_ids, meta``; ``meta`` is the example's meta plus any
    task-specific labelling details (e.g. ROUGE scores); ``token_ids`` are the generated tokens
    (what :func:`rerecord_store` feeds back).
    """
    return _record(ex.id, task.name, prompt, generation, **_task_label(task, ex, generation.text))


def _task_label(task, ex, text: str) -> dict:
    """``answer, gold, correct, parse_error, meta`` of ``text`` as ``task`` labels ``ex``."""
    details = dict(task.label_details(ex, text))
    answer = details.pop("answer", None)
    correct = bool(details.pop("correct"))
    parse_error = bool(details.pop("parse_error", answer is None))
    return {"answer": answer, "gold": list(ex.answers), "correct": correct,
            "parse_error": parse_error, "meta": {**(ex.meta or {}), **details}}


def _record(record_id, task_name: str | None, prompt: str, generation, *, answer, gold: list,
            correct: bool, parse_error: bool, meta: dict, text: str | None = None) -> dict:
    """One store record (see :func:`example_record`); ``text`` replaces ``generation.text``
    (a given response is stored as given)."""
    return {
        "id": record_id,
        "task": task_name,
        "prompt": prompt,
        "generation": generation.text if text is None else text,
        "answer": answer,
        "gold": gold,
        "correct": bool(correct),
        "parse_error": bool(parse_error),
        "n_tokens": int(len(generation.token_ids)),
        "raw_confidence": float(generation.raw_confidence),
        "finish_reason": generation.finish_reason,
        "token_ids": [int(t) for t in generation.token_ids],
        "meta": meta,
    }


# --------------------------------------------------------------------------------------------
# the commit loop every collection shares
# --------------------------------------------------------------------------------------------


def _chunk_size(batch_size: int) -> int:
    """Records the recorder gets at once: enough to group shared prefixes and sort by length."""
    return max(batch_size * 32, 64)


def length_windows(lengths: Sequence[int], window: int) -> list[int]:
    """An order of the indices of ``lengths``: consecutive windows of ``window`` indices, each
    sorted longest first (ties keep input order).

    A collection generates in this order, so that every batch of its recorder holds prompts of
    similar length (little padding) even when shards are smaller than the recorder's chunk.
    Windows keep the input order between them, so the records of any whole windows committed
    are the same set as those of an unsorted run that got as far.
    """
    window = check_count(window, "window")
    order: list[int] = []
    for start in range(0, len(lengths), window):
        order += sorted(range(start, min(start + window, len(lengths))), key=lambda i: -lengths[i])
    return order


def _fill(writer, todo: Sequence, run_chunk, *, batch_size: int, summary: CollectSummary) -> None:
    """Commit the records of ``todo`` chunk by chunk: ``run_chunk(part)`` returns
    ``(records, generations)`` for a chunk (lists; skipped items left out).

    Every pooling is kept (:mod:`acute.store.pooling`), except when resuming a store an older acute
    began with the mean only: it stays mean-only (``acute rerecord`` adds the others later).
    Prefix checkpoints are written when the store keeps them (``writer.checkpoints``).

    Chunks bound memory (~L*d*4 bytes per record) and let a progress bar move; inside a chunk
    the recorder groups prompts that share a prefix (large chunks give it more to group) and
    sorts them by length. A chunk never runs past the shard being filled, so every shard is
    committed as soon as its records exist and a kill loses at most the records of one
    uncommitted shard.
    """
    chunk = _chunk_size(batch_size)
    i = 0
    while i < len(todo):
        n = min(chunk, writer.shard_size - writer.num_buffered)
        part = todo[i:i + n]
        i += n
        records, gens = run_chunk(part)
        if records:
            extra = {}
            if writer.poolings != ("mean",):
                extra = {"last_prompt": np.stack([g.last_prompt for g in gens]),
                         "last_answer": np.stack([g.last_answer for g in gens])}
            if writer.checkpoints is not None:
                extra["checkpoints"] = ([g.checkpoint_tokens for g in gens], [g.checkpoint_means for g in gens])
            writer.add(records, np.stack([g.layer_means for g in gens]), [g.token_logprobs for g in gens],
                       **extra)
        summary.new_records += len(records)


def _summarize(summary: CollectSummary, out_dir: Path, elapsed: float) -> CollectSummary:
    """Fill the store-wide counts of ``summary`` from the store on disk."""
    from .store import open_store

    store = open_store(out_dir)
    summary.records = len(store)
    if len(store):
        summary.accuracy = float(np.mean(store.correct))
        summary.mean_raw_confidence = float(np.mean(store.raw_confidence))
    if summary.new_records:
        summary.seconds_per_record = elapsed / summary.new_records
    return summary


# Long because most of it is the docstring and the resume/commit bookkeeping of one loop; the
# work itself is generate_and_record and StoreWriter.
def collect(model, tokenizer, task, examples, out_dir: str | Path, *, model_name: str,
            batch_size: int = BATCH_SIZE, max_new_tokens: int | None = None, dtype: str = DEFAULT_STORE_DTYPE,
            pool: str = "decoding", chat: bool | None = None, on_too_long: str = "skip",
            shard_size: int = 256, progress: bool = True, state=None,
            allow_other_weights: bool = False, engine: str = "transformers",
            engine_options: dict | None = None, samples: SamplingSettings | None = None) -> CollectSummary:
    """Generate an answer for every example, label it with ``task`` and write a store.

    ``examples`` come from ``task.load(...)``; each is prompted with ``task.prompt`` (chat
    template when ``chat`` is None and the tokenizer has one), generated greedily with the
    hidden-state recorder (``max_new_tokens`` and stop strings default to the task's), labelled
    with ``task.label_details`` and written to the store ``out_dir`` in shards of
    ``shard_size`` records (``dtype`` is the storage dtype of ``layer_means``).

    Resumes an existing store in ``out_dir``: committed records are skipped, so an interrupted
    collection loses or duplicates nothing (records not yet committed to a shard are generated
    again). Prompts longer than the context window are skipped and counted
    (``on_too_long="skip"``) or raise ``ValueError`` before anything is generated for their chunk
    (``"error"``). Raises ``ValueError`` for an empty ``examples``, and when ``out_dir`` holds a
    store of another model (architecture, or weights: :func:`acute.models.weights_digest`, unless
    ``allow_other_weights``), task or generation settings. Returns a :class:`CollectSummary`.

    Data parallel: ``state`` is an ``accelerate.PartialState`` (anything with ``process_index``,
    ``num_processes``, ``is_main_process`` and ``wait_for_everyone()``); every process calls
    ``collect`` with the same arguments (``accelerate launch -m acute collect ...``). The main
    process prepares the store, each process then takes every ``num_processes``-th of the
    examples not yet committed and commits its
    own part shards (:class:`acute.store.StoreWriter` with ``part``), and the main process
    finalises the manifest once all are done. The store reads as one, in a deterministic order;
    a rerun, with any number of processes, generates only the missing records. The summary's
    ``new_records`` and speed are this process's; ``records`` and accuracy the whole store's.

    ``engine="vllm"`` generates with vLLM instead (:mod:`acute.engines.vllm`: greedy, ``pool=
    "decoding"``, the same records up to float rounding); ``model`` is then what the manifest's
    identity and the context window are read from, and the folder vLLM loads;
    ``engine_options`` go to :class:`acute.engines.vllm.VllmEngine`.

    ``samples`` (:class:`acute.store.sampling.SamplingSettings`, transformers only) also draws
    answers beside the greedy one (:func:`acute.extraction.sampling.sample_answers`), labelled
    and stored in each record's ``samples``; ``generation["samples"]`` records the settings (a
    resume with others is refused). A record's ``cost``: ``greedy_seconds``, ``sample_seconds``
    (its share of its chunk's time), ``sample_tokens``.
    """
    import warnings

    from .engines import check_engine, open_engine
    from .store import POOLINGS, StoreWriter, finalize_store, prepare_store

    examples = list(examples)
    if not examples:
        raise InputError(f"task {task.name!r}: the dataset is empty (no examples to collect)")
    if on_too_long not in ("skip", "error"):
        raise InputError(f"on_too_long must be 'skip' or 'error', got {on_too_long!r}")
    check_engine(engine)
    rank, world = (0, 1) if state is None else (int(state.process_index), int(state.num_processes))
    parallel = world > 1
    out_dir = Path(out_dir)
    # every setting is checked before anything is written (a bad one must not leave a manifest
    # that then refuses the corrected command)
    max_new_tokens = check_count(max_new_tokens, "max_new_tokens", default=task.max_new_tokens)
    batch_size = check_count(batch_size, "batch_size")
    shard_size = check_count(shard_size, "shard_size")
    task.prompt(tokenizer, examples[0], chat=chat)  # task options and templates fail here, not mid-run
    stop_strings = tuple(getattr(task, "stop_strings", ()) or ())
    manifest = build_manifest(model, tokenizer, task, model_name=model_name,
                              max_new_tokens=max_new_tokens, stop_strings=stop_strings,
                              pool=pool, chat=chat)
    manifest["checkpoints"] = DEFAULT_CHECKPOINTS  # the recorder and acute's vLLM connector both keep them
    if samples is not None:
        samples = parse_sampling(samples, "samples")
        if engine != "transformers":
            raise InputError(f"samples are drawn by the transformers engine only, not {engine!r}")
        manifest["generation"]["samples"] = samples.to_json()
    if parallel:
        if rank == 0:
            # part writers cannot agree on the poolings among themselves: a new store keeps them
            # all, a store an older acute began keeps the mean only
            fresh = not any(out_dir.glob("shard-*.safetensors"))
            prepare_store(out_dir, {**manifest, **({"poolings": list(POOLINGS)} if fresh else {})},
                          dtype=dtype, shard_size=shard_size, allow_other_weights=allow_other_weights)
        state.wait_for_everyone()  # the manifest exists before any part writer opens
    summary = CollectSummary(out_dir=str(out_dir))
    if parallel:
        summary.extra.update(process=rank, num_processes=world)
    start = time.perf_counter()
    # engine="vllm": vLLM generates in a worker process for the collection's length (acute.engines)
    # the manifest names the engine that ran and its version (vLLM's is known once it started)
    with open_engine(engine, model, tokenizer, engine_options) as generate, \
            StoreWriter(out_dir, {**manifest, **generate.record}, dtype=dtype, shard_size=shard_size,
                        part=rank if parallel else None, allow_other_weights=allow_other_weights) as writer:
        done = writer.done_ids
        if parallel:
            state.wait_for_everyone()  # every process has read the same done set before writing
        todo = [ex for ex in examples if ex.id not in done]
        summary.resumed = len(examples) - len(todo)
        mine = todo[rank::world]
        if len(mine) > shard_size:  # shards cut the recorder's chunks: sort across them
            lengths = [len(tokenizer(task.prompt(tokenizer, ex, chat=chat), add_special_tokens=False)["input_ids"])
                       for ex in mine]
            mine = [mine[i] for i in length_windows(lengths, _chunk_size(batch_size))]
        bar = progress_bar(len(mine), f"collect {Path(task.name).name}"
                           + (f" [{rank + 1}/{world}]" if parallel else ""), progress, position=rank)

        recorded = {} if writer.checkpoints is None else {"checkpoints": writer.checkpoints}

        def run_chunk(part):
            prompts = [task.prompt(tokenizer, ex, chat=chat) for ex in part]
            began = time.perf_counter()
            with warnings.catch_warnings():
                # skipped prompts are counted in the summary instead of one warning each
                warnings.filterwarnings("ignore", message=r"prompts\[\d+\] has \d+ tokens")
                gens = generate(
                    prompts, max_new_tokens=max_new_tokens,
                    batch_size=batch_size, stop_strings=stop_strings, pool=pool,
                    on_too_long=on_too_long, on_batch=bar.update, **recorded,
                )
            bar.update(sum(g is None for g in gens))  # skipped prompts were in no batch
            greedy_seconds = (time.perf_counter() - began) / max(1, sum(g is not None for g in gens))
            drawn = [None] * len(part) if samples is None else _draw_samples(
                model, tokenizer, task, part, prompts, gens, samples, max_new_tokens=max_new_tokens,
                stop_strings=stop_strings, batch_size=batch_size)
            records, kept = [], []
            for ex, prompt, gen, extra in zip(part, prompts, gens, drawn):
                if gen is None:
                    summary.skipped_too_long += 1
                    continue
                rec = example_record(task, ex, prompt, gen)
                rec["cost"] = {"greedy_seconds": round(greedy_seconds, 4)}
                if extra is not None:
                    rec["samples"], rec["cost"] = extra[0], {**rec["cost"], **extra[1]}
                summary.unparseable += rec["parse_error"]
                records.append(rec)
                kept.append(gen)
            return records, kept

        _fill(writer, mine, run_chunk, batch_size=batch_size, summary=summary)
        bar.close()
    if parallel:
        state.wait_for_everyone()  # every part committed
        if rank == 0:
            finalize_store(out_dir)
        state.wait_for_everyone()  # the manifest is final before anyone reads the store
    return _summarize(summary, out_dir, time.perf_counter() - start)


def _draw_samples(model, tokenizer, task, part, prompts, gens, settings: SamplingSettings, *,
                  max_new_tokens: int, stop_strings, batch_size: int) -> list:
    """Per example of ``part`` (None where the greedy pass skipped it): its labelled samples and cost."""
    from .extraction.sampling import sample_answers

    todo = [i for i, g in enumerate(gens) if g is not None]
    began = time.perf_counter()
    drawn = sample_answers(model, tokenizer, [prompts[i] for i in todo], [part[i].id for i in todo], settings,
                           max_new_tokens=max_new_tokens, stop_strings=stop_strings,
                           batch_size=max(1, batch_size // 2))
    seconds = round((time.perf_counter() - began) / max(1, len(todo)), 4)
    out: list = [None] * len(part)
    for i, samples in zip(todo, drawn):
        rows = [s.to_record(_task_label(task, part[i], s.text)) for s in samples]
        out[i] = (rows, {"sample_seconds": seconds, "sample_tokens": sum(len(s.token_ids) for s in samples)})
    return out


# --------------------------------------------------------------------------------------------
# responses produced elsewhere
# --------------------------------------------------------------------------------------------


@dataclass
class ResponseRow:
    """One row of a responses file (see :func:`read_responses`).

    ``prompt`` is a fully formatted prompt string (sent as is) or a list of chat messages (the
    model's chat template is applied); ``label`` the row's ``label`` field (None when absent);
    ``answers``/``choices``/``incorrect`` what a task's correctness check reads; ``line`` the
    row's line in the file.
    """

    id: str | int
    line: int
    prompt: str | list
    response: str
    label: bool | None = None
    answers: list[str] | None = None
    choices: list[str] | None = None
    incorrect: list[str] = field(default_factory=list)
    meta: dict = field(default_factory=dict)

    @property
    def question(self) -> str:
        """The prompt string, or the last user message."""
        if isinstance(self.prompt, str):
            return self.prompt
        users = [m["content"] for m in self.prompt if m.get("role") == "user"]
        return users[-1] if users else ""


def _string_list(value, where: str, what: str) -> list[str]:
    from .errors import TaskDataError

    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise TaskDataError(f"{where}: {what!r} must be a string or a non-empty list of strings, "
                            f"got {value!r}")
    return value


# Long because it is one rule per field, each with its own message; the rules are flat.
def _response_row(obj: dict, where: str, lineno: int, task) -> ResponseRow:
    """Validate one JSON object of a responses file (``where`` = "file:line")."""
    from .errors import TaskDataError
    from .models.prompts import normalize_messages

    rid = obj.get("id")
    if isinstance(rid, bool) or not isinstance(rid, (str, int)) or rid == "":
        raise TaskDataError(f"{where}: needs an 'id' (a string or an integer), got {rid!r}")
    if ("prompt" in obj) == ("messages" in obj):
        raise TaskDataError(f"{where}: id {rid!r} needs exactly one of 'prompt' (a formatted prompt "
                            "string) and 'messages' (a chat message list)")
    if "prompt" in obj:
        prompt = obj["prompt"]
        if not isinstance(prompt, str) or not prompt.strip():
            raise TaskDataError(f"{where}: id {rid!r}: 'prompt' must be a non-empty string")
    else:
        try:
            prompt = normalize_messages(obj["messages"])
        except InputError as e:
            raise TaskDataError(f"{where}: id {rid!r}: 'messages': "
                                f"{str(e).replace('messages_or_text', 'messages')}") from None
        if isinstance(obj["messages"], str):
            raise TaskDataError(f"{where}: id {rid!r}: 'messages' must be a list of messages "
                                "(use 'prompt' for a formatted string)")
    response = obj.get("response")
    if not isinstance(response, str):
        raise TaskDataError(f"{where}: id {rid!r} needs a 'response' string, got {response!r}")
    label = obj.get("label")
    if label is not None and not isinstance(label, bool):
        raise TaskDataError(f"{where}: id {rid!r}: 'label' must be true or false, got {label!r}")
    answers = None if obj.get("answers") is None else _string_list(obj["answers"], where, "answers")
    choices = None if obj.get("choices") is None else _string_list(obj["choices"], where, "choices")
    incorrect = [] if obj.get("incorrect") is None else _string_list(obj["incorrect"], where, "incorrect")
    if choices is not None and (answers is None or answers[0] not in choices):
        raise TaskDataError(f"{where}: id {rid!r}: the first of 'answers' must be one of 'choices'")
    if task is None and label is None:
        raise TaskDataError(f"{where}: id {rid!r} has no 'label' (true/false), and no task was given "
                            "to label it from 'answers' (--task)")
    if task is not None and answers is None:
        raise TaskDataError(f"{where}: id {rid!r} has no 'answers' for task {task.name!r}'s "
                            "correctness check (with --task the task labels every row; without "
                            "it the 'label' field does)")
    meta = obj.get("meta") if isinstance(obj.get("meta"), dict) else {}
    return ResponseRow(id=rid, line=lineno, prompt=prompt, response=response, label=label,
                       answers=answers, choices=choices, incorrect=incorrect, meta=meta)


def read_responses(path: str | Path, task=None) -> list[ResponseRow]:
    """The rows of a responses JSONL file, validated.

    Each row: ``id`` (string or integer, unique), ``prompt`` (a fully formatted prompt string)
    or ``messages`` (chat messages), ``response`` (a string), and ``label`` (true/false) or,
    when ``task`` is given, ``answers`` (with optional ``choices`` for a multiple-choice task
    and ``incorrect``) for the task's correctness check; optional ``meta`` (an object).
    Raises ``FileNotFoundError`` for a missing file and :class:`acute.errors.TaskDataError`
    naming the file and line for invalid JSON, a missing or duplicate id, a label that is not a
    boolean, a row with no label source, or an empty file.
    """
    from .fileio import iter_jsonl
    from .errors import TaskDataError

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"responses file {path} does not exist")
    rows: list[ResponseRow] = []
    first_line: dict = {}
    for lineno, obj in iter_jsonl(path, error=TaskDataError):
        where = f"{path}:{lineno}"
        row = _response_row(obj, where, lineno, task)
        if row.id in first_line:
            raise TaskDataError(f"{where}: duplicate id {row.id!r} (first on line {first_line[row.id]})")
        first_line[row.id] = lineno
        rows.append(row)
    if not rows:
        raise TaskDataError(f"{path}: no rows")
    return rows


def _row_prompt(tokenizer, row: ResponseRow, chat: bool | None) -> str:
    """A row's prompt as sent: the string as is, messages through :func:`format_prompt`."""
    from .models import format_prompt

    return row.prompt if isinstance(row.prompt, str) else format_prompt(tokenizer, row.prompt, chat=chat)


def _row_label(task, row: ResponseRow, where: str) -> dict:
    """``answer, gold, correct, parse_error, meta`` of a row: from its ``label`` field, or from
    ``task``'s correctness check of the response against the row's answers."""
    from .errors import TaskDataError
    from .tasks import Example

    if task is None:
        return {"answer": None, "gold": list(row.answers or []), "correct": bool(row.label),
                "parse_error": False, "meta": dict(row.meta)}
    gold = None if row.choices is None else row.choices.index(row.answers[0])
    ex = Example(id=str(row.id), question=row.question, answers=list(row.answers),
                 choices=row.choices, label=gold, incorrect=list(row.incorrect), meta=dict(row.meta))
    try:
        labelled = _task_label(task, ex, row.response)
    except (KeyError, IndexError, TypeError, AttributeError) as e:
        raise TaskDataError(f"{where}: id {row.id!r}: task {task.name!r} cannot label this row from "
                            f"its 'answers' ({type(e).__name__}: {e})") from None
    if row.label is not None:
        labelled["meta"]["label_field"] = row.label
    return labelled


def _prompt_format(rows: Sequence[ResponseRow]) -> str:
    kinds = {"prompt" if isinstance(r.prompt, str) else "messages" for r in rows}
    return kinds.pop() if len(kinds) == 1 else "mixed"


def _bad_responses(model, tokenizer, rows: Sequence[ResponseRow], prompts: Sequence[str],
                   path: Path) -> dict[int, tuple[str, str]]:
    """``{index: (kind, message)}`` of the rows that cannot be recorded: an empty response
    (``"empty"``) or prompt + response + EOS longer than the context window (``"too_long"``)."""
    from .extraction import context_window
    from .extraction.batching import tokenize

    limit = context_window(model)
    p_len = [len(ids) for ids in tokenize(tokenizer, list(prompts))]
    r_len = [len(ids) for ids in tokenize(tokenizer, [r.response for r in rows])]
    bad: dict[int, tuple[str, str]] = {}
    for i, row in enumerate(rows):
        where = f"{path}:{row.line}: id {row.id!r}"
        if not row.response.strip():
            bad[i] = ("empty", f"{where}: the response is empty")
        elif limit is not None and p_len[i] + r_len[i] + 1 > limit:
            bad[i] = ("too_long", f"{where}: prompt + response have {p_len[i] + r_len[i] + 1} tokens "
                                  f"(EOS included), more than the context window of {limit}")
    return bad


# Long because of its docstring; reading, checking and labelling are the helpers above and the
# commit loop is _fill, shared with collect.
def collect_responses(model, tokenizer, path: str | Path, out_dir: str | Path, *, model_name: str,
                      task=None, batch_size: int = BATCH_SIZE, dtype: str = DEFAULT_STORE_DTYPE, pool: str = "decoding",
                      chat: bool | None = None, on_bad_response: str = "skip", shard_size: int = 256,
                      progress: bool = True, allow_other_weights: bool = False) -> CollectSummary:
    """Record the responses of a JSONL file (:func:`read_responses`) by teacher forcing and
    write an ordinary store.

    Each row's prompt is its ``prompt`` string as is, or its ``messages`` formatted like
    :func:`acute.models.format_prompt` (``chat``); its response is recorded with
    :func:`acute.extraction.record_responses` (the text tokenized after the prompt, the EOS the
    model finds most likely appended; the records keep the response text as given and the token
    ids recorded). Labels come from the ``label`` field, or, with ``task``, from the task's
    correctness check of the response against the row's ``answers``. The manifest is
    :func:`build_manifest`'s (``generation.teacher_forced`` true, ``max_new_tokens`` None) plus
    ``"responses": {"file", "labels": "label field" | "task <name>", "prompt_format":
    "prompt" | "messages" | "mixed"}``.

    Every row is read, checked and labelled before anything is written. An empty response or
    one longer than the context window allows is skipped and counted
    (``on_bad_response="skip"``) or an :class:`InputError` naming the file, line and id
    (``"error"``). Resumable like :func:`collect`: rows whose ids the store holds are skipped.
    Returns a :class:`CollectSummary`.
    """
    from .extraction import record_responses
    from .store import StoreWriter

    path = Path(path)
    batch_size = check_count(batch_size, "batch_size")
    shard_size = check_count(shard_size, "shard_size")
    if on_bad_response not in ("skip", "error"):
        raise InputError(f"on_bad_response must be 'skip' or 'error', got {on_bad_response!r}")
    rows = read_responses(path, task=task)
    prompts = [_row_prompt(tokenizer, row, chat) for row in rows]
    bad = _bad_responses(model, tokenizer, rows, prompts, path)
    if bad and on_bad_response == "error":
        raise InputError(next(iter(bad.values()))[1])
    labels = [_row_label(task, row, f"{path}:{row.line}") for row in rows]
    manifest = build_manifest(model, tokenizer, task, model_name=model_name, max_new_tokens=None,
                              stop_strings=(), pool=pool, chat=chat)
    manifest["generation"]["teacher_forced"] = True
    manifest["responses"] = {"file": str(path.resolve()),
                             "labels": "label field" if task is None else f"task {task.name}",
                             "prompt_format": _prompt_format(rows)}
    summary = CollectSummary(out_dir=str(out_dir))
    summary.skipped_empty = sum(kind == "empty" for kind, _ in bad.values())
    summary.skipped_too_long = sum(kind == "too_long" for kind, _ in bad.values())
    start = time.perf_counter()
    with StoreWriter(out_dir, manifest, dtype=dtype, shard_size=shard_size,
                     allow_other_weights=allow_other_weights) as writer:
        done = writer.done_ids
        todo = [i for i, row in enumerate(rows) if row.id not in done and i not in bad]
        summary.resumed = sum(row.id in done for row in rows)
        bar = progress_bar(len(todo), f"record {path.name}", progress)

        def run_chunk(part):
            gens = record_responses(model, tokenizer, [prompts[i] for i in part],
                                    [rows[i].response for i in part], pool=pool,
                                    batch_size=batch_size, on_too_long="error", on_batch=bar.update)
            records = [_record(rows[i].id, None if task is None else task.name, prompts[i], gen,
                               text=rows[i].response, **labels[i]) for i, gen in zip(part, gens)]
            summary.unparseable += sum(r["parse_error"] for r in records)
            return records, gens

        _fill(writer, todo, run_chunk, batch_size=batch_size, summary=summary)
        bar.close()
    return _summarize(summary, Path(out_dir), time.perf_counter() - start)


# --------------------------------------------------------------------------------------------
# re-recording a store
# --------------------------------------------------------------------------------------------

#: manifest fields a store sets itself (not carried into a re-recorded store)
_STORE_OWN_FIELDS = ("format", "format_version", "dtype", "created", "updated", "shard_size",
                     "status", "num_records", "num_shards", "summary", "model_weights_also")


def _check_same_model(manifest: dict, model, store_dir: Path, allow_other_weights: bool) -> dict:
    """The model's fingerprint and weights digest, after checking them against ``manifest``'s
    (:class:`ModelMismatchError` naming both)."""
    from .models import model_fingerprint, model_identity, weights_digest

    fp, weights = model_fingerprint(model), weights_digest(model)
    stored = of_store(manifest)
    # a store without a fingerprint is checked on the weights only, as before it recorded one
    fields = ("model_fingerprint", "model_weights") if stored["model_fingerprint"] else ("model_weights",)
    found = diff(stored, of_model(model_identity(model)), (str(store_dir), "this model"),
                 fields=fields, optional=("model_weights",), allow_other_weights=allow_other_weights)
    if found:
        hint = (", or allow_other_weights=True (--allow-other-weights)"
                if "model_weights" in found and "model_fingerprint" not in found else "")
        raise ModelMismatchError(f"{store_dir} was collected with another model: {found}; load the "
                                 f"store's model ({manifest.get('model')!r}){hint}")
    return {"model_fingerprint": fp, "model_weights": weights}


def _rerecord_input(record: dict, stop_strings: Sequence[str]) -> tuple[Any, bool]:
    """``(response, append_eos)`` that re-creates a stored generation: its ``token_ids`` when the
    record has them; else its text (plus the first stop string when it stopped at one), with
    the most likely EOS appended when it ended with EOS."""
    ids = record.get("token_ids")
    if ids is not None:
        return np.asarray(ids, dtype=np.int64), False
    text = record.get("generation") or ""
    reason = record.get("finish_reason")
    if reason == "stop" and stop_strings:
        return text + stop_strings[0], False
    return text, reason == "eos"


def _retokenized(record: dict, logprobs: np.ndarray, stored: np.ndarray) -> bool:
    """Whether a record without token ids came back as other tokens than it was generated as
    (another count, or log-probs that differ beyond float rounding)."""
    if record.get("token_ids") is not None:
        return False
    return len(logprobs) != len(stored) or not np.allclose(logprobs, stored, atol=1e-3)


# Long because of its docstring; the pass is record_responses and the loop _fill, shared with
# collect.
def rerecord_store(model, tokenizer, store_dir: str | Path, out_dir: str | Path, *,
                   pool: str | None = None, batch_size: int = BATCH_SIZE, dtype: str | None = None,
                   shard_size: int = 256, progress: bool = True,
                   allow_other_weights: bool = False) -> CollectSummary:
    """Teacher-force the generations of the store ``store_dir`` again and write a new store.

    Every record's prompt (as sent) and generated tokens run through
    :func:`acute.extraction.record_responses` with ``pool`` (default: the store's), so the new
    store holds the same ids, generations and labels with the layer means of that pooling (and
    log-probs and raw confidence recomputed: equal up to float rounding). Records carry their
    ``token_ids`` (stores written by acute >= this release); for older records the text is
    re-tokenized (the first stop string re-appended when the generation stopped at one, the most
    likely EOS when it ended with EOS) and records whose tokens came back different are counted
    in ``summary.retokenized`` (with a warning). The manifest is the source's with
    ``generation.pool`` set, ``"rerecorded_from": {"store", "pool"}`` and every pooling kept
    (``"poolings"``: an older store gains its last-prompt and last-answer states). The model must be the
    store's (fingerprint, and weights unless ``allow_other_weights``): else
    :class:`ModelMismatchError` naming both. Resumable like :func:`collect`.
    """
    from .engines import transformers_version
    from .extraction import record_responses
    from .models import model_setting
    from .store import POOLINGS, StoreWriter, open_store

    store_dir, out_dir = Path(store_dir), Path(out_dir)
    batch_size = check_count(batch_size, "batch_size")
    shard_size = check_count(shard_size, "shard_size")
    if out_dir.resolve() == store_dir.resolve():
        raise InputError(f"--out {out_dir} is the store being re-recorded; choose another folder")
    source = open_store(store_dir)
    old = dict(source.manifest)
    generation = dict(old.get("generation") or {})
    old_pool = generation.get("pool") or "decoding"
    pool = pool or old_pool
    if pool not in ("decoding", "generated"):
        raise InputError(f"pool must be 'decoding' or 'generated', got {pool!r}")
    manifest = {k: v for k, v in old.items() if k not in _STORE_OWN_FIELDS}
    manifest.update(_check_same_model(old, model, store_dir, allow_other_weights))
    # the states are this model's under transformers now, whatever ran the source
    manifest.update(engine="transformers", engine_version=transformers_version(), **model_setting(model))
    manifest["generation"] = {**generation, "pool": pool}
    manifest["rerecorded_from"] = {"store": str(store_dir.resolve()), "pool": old_pool}
    manifest["poolings"] = list(POOLINGS)  # re-recording adds what an older store lacks
    manifest.pop("checkpoints", None)  # teacher forcing keeps no prefix checkpoints
    stop_strings = tuple(generation.get("stop_strings") or ())
    records = source.records
    stored_lp = source.token_logprobs
    summary = CollectSummary(out_dir=str(out_dir))
    start = time.perf_counter()
    with StoreWriter(out_dir, manifest, dtype=dtype or old.get("dtype") or DEFAULT_STORE_DTYPE,
                     shard_size=shard_size, allow_other_weights=allow_other_weights) as writer:
        done = writer.done_ids
        todo = [i for i, rec in enumerate(records) if rec["id"] not in done]
        summary.resumed = len(records) - len(todo)
        bar = progress_bar(len(todo), f"rerecord {store_dir.name}", progress)

        def run_chunk(part):
            inputs = [_rerecord_input(records[i], stop_strings) for i in part]
            gens = record_responses(model, tokenizer, [records[i]["prompt"] for i in part],
                                    [r for r, _ in inputs], append_eos=[a for _, a in inputs],
                                    pool=pool, batch_size=batch_size, stop_strings=stop_strings,
                                    on_batch=bar.update)
            out, kept = [], []
            for i, gen in zip(part, gens):
                if gen is None:
                    summary.skipped_too_long += 1
                    continue
                summary.retokenized += _retokenized(records[i], gen.token_logprobs, stored_lp[i])
                out.append({**records[i], "n_tokens": int(len(gen.token_ids)),
                            "raw_confidence": float(gen.raw_confidence),
                            "token_ids": [int(t) for t in gen.token_ids]})
                kept.append(gen)
            return out, kept

        _fill(writer, todo, run_chunk, batch_size=batch_size, summary=summary)
        bar.close()
    if summary.retokenized:
        logger.warning("%d of %d records of %s have no token ids and their text re-tokenized to other "
                       "tokens: their layer means and raw confidence are those of the re-tokenized "
                       "text", summary.retokenized, summary.new_records, store_dir)
    return _summarize(summary, out_dir, time.perf_counter() - start)
