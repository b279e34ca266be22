"""Collecting generated answers: :func:`collect` runs a model over a task's examples, records
the activations (and prefix checkpoints, and optionally sampled answers), labels each answer and
writes a store, resumably."""

from __future__ import annotations

import dataclasses
import time
import warnings
from pathlib import Path

from ..engines import can_sample, check_engine, engine_record, open_engine
from ..errors import InputError
from ..fileio import progress_bar
from ..store import POOLINGS, StoreWriter, finalize_store, prepare_store
from ..store.checkpoints import DEFAULT_CHECKPOINTS
from ..store.generation import GenerationSettings
from ..validation import check_count
from .loop import _chunk_size, _fill, _summarize, length_windows
from .records import CollectSummary, _task_label, build_manifest, example_record

__all__ = ["collect"]


def collect(model, tokenizer, task, examples, out_dir: str | Path, generation: GenerationSettings | None = None, *,
            on_too_long: str = "skip", shard_size: int = 256, progress: bool = True, state=None,
            allow_other_weights: bool = False, engine_options: dict | None = None) -> CollectSummary:
    """Generate an answer for every example, label it with ``task`` and write a store.

    ``generation`` (:class:`~acute.store.generation.GenerationSettings`, default: the defaults)
    says how: ``examples`` come from ``task.load(...)``; each is prompted with ``task.prompt``
    (chat template when ``chat`` is None and the tokenizer has one), generated greedily with the
    hidden-state recorder in batches of ``batch_size`` (``max_new_tokens`` and ``stop_strings``
    default to the task's), pooled over the ``pool`` positions, labelled with
    ``task.label_details`` and written to the store ``out_dir`` in shards of ``shard_size``
    records (``dtype`` is the storage dtype of ``layer_means``); the manifest's ``generation``
    block is the settings' JSON. The manifest
    records the model's identity (:meth:`acute.store.identity.ModelIdentity.from_model`), its
    name the one :func:`acute.models.load_model` gave it (:func:`acute.models.name_model`).

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

    ``generation.engine="vllm"`` generates with vLLM instead (:mod:`acute.engines.vllm`: greedy,
    ``pool="decoding"``, the same records up to float rounding); ``model`` is then what the
    manifest's identity and the context window are read from, and the folder vLLM loads;
    ``engine_options`` go to :class:`acute.engines.vllm.VllmEngine`.

    ``generation.samples`` (:class:`acute.store.sampling.SamplingSettings`) also draws answers
    beside the greedy one (:func:`acute.extraction.sampling.sample_answers`, or on vLLM
    :func:`acute.engines.vllm_sampling.sample_answers`; the settings record the engine), labelled
    and stored in each record's ``samples``; ``generation["samples"]`` records the settings (a
    resume with others is refused). A record's ``cost``: ``greedy_seconds``, ``sample_seconds``
    (its share of its chunk's time), ``sample_tokens``.
    """
    examples = list(examples)
    generation = _checked_settings(task, examples, generation, on_too_long)
    rank, world = (0, 1) if state is None else (int(state.process_index), int(state.num_processes))
    parallel = world > 1
    out_dir = Path(out_dir)
    # every setting is checked before anything is written (a bad one must not leave a manifest
    # that then refuses the corrected command)
    check_count(generation.max_new_tokens, "max_new_tokens")
    shard_size = check_count(shard_size, "shard_size")
    task.prompt(tokenizer, examples[0], chat=generation.chat)  # task options and templates fail here, not mid-run
    generation = _sampling_engine(generation, generation.engine)
    manifest = build_manifest(model, tokenizer, task, generation)
    manifest["checkpoints"] = DEFAULT_CHECKPOINTS  # the recorder and acute's vLLM connector both keep them
    if parallel:
        if rank == 0:
            _prepare_parts(out_dir, manifest, generation.dtype, shard_size, allow_other_weights)
        state.wait_for_everyone()  # the manifest exists before any part writer opens
    summary = CollectSummary(out_dir=str(out_dir))
    if parallel:
        summary.extra.update(process=rank, num_processes=world)
    start = time.perf_counter()
    # engine="vllm": vLLM generates in a worker process for the collection's length (acute.engines)
    # the manifest names the engine that ran and its version (vLLM's is known once it started)
    with open_engine(generation.engine, model, tokenizer, engine_options) as generate, \
            StoreWriter(out_dir, {**manifest, **generate.record}, dtype=generation.dtype, shard_size=shard_size,
                        part=rank if parallel else None, allow_other_weights=allow_other_weights) as writer:
        done = writer.done_ids
        if parallel:
            state.wait_for_everyone()  # every process has read the same done set before writing
        mine = _my_examples(examples, done, rank, world, tokenizer, task, generation, shard_size, summary)
        name, whose = Path(task.name).name, f" [{rank + 1}/{world}]" if parallel else ""
        sampled = generation.samples is not None  # its own bar: a chunk's samples take longer than its greedy pass
        bar = progress_bar(len(mine), f"collect {name}{whose}", progress, position=rank * (1 + sampled))
        sample_bar = (progress_bar(len(mine), f"sample {name} ({generation.samples.k} each){whose}", progress,
                                   position=2 * rank + 1) if sampled else None)
        run_chunk = _chunk_recorder(model, tokenizer, task, generation, generate, on_too_long, (bar, sample_bar),
                                    summary, {} if writer.checkpoints is None else {"checkpoints": writer.checkpoints})
        _fill(writer, mine, run_chunk, batch_size=generation.batch_size, summary=summary)
        for b in (bar, sample_bar):
            if b is not None:
                b.close()
    if parallel:
        state.wait_for_everyone()  # every part committed
        if rank == 0:
            finalize_store(out_dir)
        state.wait_for_everyone()  # the manifest is final before anyone reads the store
    return _summarize(summary, out_dir, time.perf_counter() - start)


def _checked_settings(task, examples: list, generation: GenerationSettings | None,
                      on_too_long: str) -> GenerationSettings:
    """``generation`` (default: the defaults) filled from ``task``, once the examples, the
    ``on_too_long`` policy and the engine are known to be valid."""
    if not examples:
        raise InputError(f"task {task.name!r}: the dataset is empty (no examples to collect)")
    if on_too_long not in ("skip", "error"):
        raise InputError(f"on_too_long must be 'skip' or 'error', got {on_too_long!r}")
    if generation is not None and not isinstance(generation, GenerationSettings):
        raise InputError(f"generation must be an acute.store.generation.GenerationSettings, got "
                         f"{type(generation).__name__}")
    generation = (generation or GenerationSettings()).for_task(task)
    check_engine(generation.engine)
    return generation


def _prepare_parts(out_dir: Path, manifest: dict, dtype: str, shard_size: int, allow_other_weights: bool) -> None:
    """The main process's manifest of a data-parallel collection, before any part writer opens."""
    # part writers cannot agree on the poolings among themselves: a new store keeps them
    # all, a store an older acute began keeps the mean only
    fresh = not any(out_dir.glob("shard-*.safetensors"))
    prepare_store(out_dir, {**manifest, **({"poolings": list(POOLINGS)} if fresh else {})},
                  dtype=dtype, shard_size=shard_size, allow_other_weights=allow_other_weights)


def _my_examples(examples: list, done, rank: int, world: int, tokenizer, task, generation: GenerationSettings,
                 shard_size: int, summary: CollectSummary) -> list:
    """This process's share of the examples not yet committed (every ``world``-th), sorted by
    prompt length in windows when they fill more than one shard; counts the resumed ones."""
    todo = [ex for ex in examples if ex.id not in done]
    summary.resumed = len(examples) - len(todo)
    mine = todo[rank::world]
    if len(mine) > shard_size:  # shards cut the recorder's chunks: sort across them
        lengths = [len(tokenizer(task.prompt(tokenizer, ex, chat=generation.chat),
                                 add_special_tokens=False)["input_ids"]) for ex in mine]
        mine = [mine[i] for i in length_windows(lengths, _chunk_size(generation.batch_size))]
    return mine


def _chunk_recorder(model, tokenizer, task, generation: GenerationSettings, generate, on_too_long: str, bars,
                    summary: CollectSummary, recorded: dict):
    """``run_chunk(part) -> (records, generations)`` for :func:`acute.collect.loop._fill`: a chunk of
    examples generated (and sampled), labelled and costed; skipped and unparseable answers counted
    in ``summary``. ``bars``: the greedy pass's progress bar and the samples' (None without)."""
    chat = generation.chat
    bar, sample_bar = bars

    def run_chunk(part):
        prompts = [task.prompt(tokenizer, ex, chat=chat) for ex in part]
        began = time.perf_counter()
        with warnings.catch_warnings():
            # skipped prompts are counted in the summary instead of one warning each
            warnings.filterwarnings("ignore", message=r"prompts\[\d+\] has \d+ tokens")
            gens = generate(prompts, generation, on_too_long=on_too_long, on_batch=bar.update, **recorded)
        bar.update(sum(g is None for g in gens))  # skipped prompts were in no batch
        greedy_seconds = (time.perf_counter() - began) / max(1, sum(g is not None for g in gens))
        drawn = [None] * len(part) if generation.samples is None else _draw_samples(
            model, tokenizer, task, part, prompts, gens, generation, sample=generate.sample, bar=sample_bar)
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

    return run_chunk


def _sampling_engine(generation: GenerationSettings, engine) -> GenerationSettings:
    """``generation`` with its samples' ``engine`` set to what draws them (the manifest records it);
    InputError for an engine that cannot draw samples (a vLLM server)."""
    if generation.samples is None:
        return generation
    if not can_sample(engine):
        raise InputError(f"samples are drawn by the transformers engine or a VllmEngine, not {engine!r}")
    name = engine_record(engine)["engine"]
    return dataclasses.replace(generation, samples=dataclasses.replace(generation.samples, engine=name))


def _draw_samples(model, tokenizer, task, part, prompts, gens, generation: GenerationSettings, *, sample,
                  bar) -> list:
    """Per example of ``part`` (None where the greedy pass skipped it): its labelled samples
    (``generation.samples``, in batches of half the greedy pass's: each row decodes k samples)
    and cost, drawn by ``sample`` (the engine's, :attr:`acute.engines.Generator.sample`), each
    batch counted on the progress ``bar``."""
    todo = [i for i, g in enumerate(gens) if g is not None]
    bar.update(len(part) - len(todo))  # skipped by the greedy pass: nothing to sample
    began = time.perf_counter()
    drawn = sample([prompts[i] for i in todo], [part[i].id for i in todo],
                   dataclasses.replace(generation, batch_size=max(1, generation.batch_size // 2)), on_batch=bar.update)
    seconds = round((time.perf_counter() - began) / max(1, len(todo)), 4)
    out: list = [None] * len(part)
    for i, samples in zip(todo, drawn):
        rows = [s.to_record(_task_label(task, part[i], s.text)) for s in samples]
        out[i] = (rows, {"sample_seconds": seconds, "sample_tokens": sum(len(s.token_ids) for s in samples)})
    return out
