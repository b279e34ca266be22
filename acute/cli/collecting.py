"""``acute collect``, ``rerecord``, ``verify``, ``tasks`` and ``models``: making and checking stores."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path


from ..errors import InputError
from ..store.generation import BATCH_SIZE
from ..store.format import DEFAULT_STORE_DTYPE, STORAGE_DTYPES
from ..store.generation import GenerationSettings
from ..store.sampling import SamplingSettings, parse_sampling
from ..models.cards import DEFAULT_MODEL
from .common import chat_flag, default_store_dir, load_task, task_options
from ..console import load_options_from_args
from ..collect import collect_responses, collect, rerecord_store
from ..models import load_model, list_cards
from ..tasks import get_task, list_tasks
from ..store import verify_store, open_store

__all__ = ['add_collect', 'add_listings', 'add_rerecord', 'cmd_collect', 'cmd_models', 'cmd_rerecord', 'cmd_tasks', 'cmd_verify']

logger = logging.getLogger(__name__)


def _launched_processes() -> int:
    """How many processes ``accelerate launch`` / ``torchrun`` started (1 when run directly)."""
    try:
        return max(1, int(os.environ.get("WORLD_SIZE", "1")))
    except ValueError:
        return 1


def _relaunch_with_accelerate(args, argv: list[str]) -> int:
    """``acute collect --num-processes N ...``: run the same command under
    ``accelerate launch --num_processes N -m acute collect ...`` and return its exit status."""
    rest, skip = [], False
    for a in argv:  # drop --num-processes N / --num-processes=N
        if skip:
            skip = False
        elif a == "--num-processes":
            skip = True
        elif not a.startswith("--num-processes="):
            rest.append(a)
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes",
           str(args.num_processes), "--num_machines", "1", "--mixed_precision", "no",
           "--dynamo_backend", "no", "--multi_gpu", "-m", "acute", *rest]
    print("running: " + " ".join(cmd), flush=True)
    return subprocess.call(cmd)


def _collect_responses(args, generation: GenerationSettings) -> int:
    """``acute collect --responses FILE``: record given responses by teacher forcing."""
    unused = [flag for flag, value in (("--data", args.data), ("--split", args.split),
                                       ("--limit", args.limit), ("--max-new-tokens", args.max_new_tokens))
              if value is not None]
    if args.num_processes != 1:
        unused.append("--num-processes")
    if unused:
        raise InputError(f"{', '.join(unused)} cannot be used with --responses (the file holds the "
                         "prompts and responses to record)")
    if not Path(args.responses).is_file():
        raise FileNotFoundError(f"responses file {args.responses} does not exist")
    task = get_task(args.task, **task_options(args.task_option)) if args.task else None
    out = Path(args.out) if args.out else default_store_dir(args.model, Path(args.responses).stem)
    model, tok = load_model(args.model, **load_options_from_args(args))
    summary = collect_responses(model, tok, args.responses, out, generation, task=task,
                                on_bad_response="error" if args.fail_on_too_long else "skip",
                                shard_size=args.shard_size, progress=not args.quiet,
                                allow_other_weights=args.allow_other_weights)
    print("\n".join(summary.lines()))
    return 0


def cmd_collect(args) -> int:
    if args.engine != "transformers" and (args.responses or args.num_processes > 1 or args.pool != "decoding"):
        raise InputError(f"--engine {args.engine} generates answers in one process with --pool decoding; "
                         "drop --responses, --num-processes and --pool generated, or use --engine transformers")
    generation = generation_from_args(args)
    if args.responses:
        if generation.samples is not None:
            raise InputError("--samples draws answers from the model; given responses (--responses) have none to draw")
        return _collect_responses(args, generation)
    if args.num_processes < 1:
        raise InputError(f"--num-processes must be >= 1, got {args.num_processes}")
    world = _launched_processes()
    if args.num_processes > 1 and world == 1:
        return _relaunch_with_accelerate(args, args.argv)
    if world > 1 and args.device_map:
        raise InputError("--device-map spreads one model over several devices and needs a single "
                         "process; drop it or launch one process")
    state = None
    device = args.device
    if world > 1:
        from accelerate import PartialState  # heavy: accelerate

        state = PartialState(cpu=device == "cpu")
        if device != "cpu":
            device = str(state.device)  # one accelerator per process
    task, examples = load_task(args.task or "default", args.data, args.split, args.limit,
                                **task_options(args.task_option))
    out = Path(args.out) if args.out else default_store_dir(args.model, task.name)
    model, tok = load_model(args.model, **load_options_from_args(args, device=device))
    summary = collect(model, tok, task, examples, out, generation,
                      on_too_long="error" if args.fail_on_too_long else "skip", shard_size=args.shard_size,
                      progress=not args.quiet, state=state, allow_other_weights=args.allow_other_weights)
    if state is None or state.is_main_process:
        print("\n".join(summary.lines()))
    return 0


def generation_from_args(args) -> GenerationSettings:
    """The collection's :class:`GenerationSettings` from its flags (``--max-new-tokens``,
    ``--pool``, ``--prompt-format``, ``--batch-size``, ``--dtype``, ``--engine`` and the
    sampling options, :func:`sampling_from_args`), checked before anything is loaded."""
    return GenerationSettings(max_new_tokens=args.max_new_tokens, pool=args.pool, chat=chat_flag(args),
                              batch_size=args.batch_size, dtype=args.dtype, engine=args.engine,
                              samples=sampling_from_args(args))


def sampling_from_args(args) -> SamplingSettings | None:
    """``--samples K [--temperature T --top-p P --sample-seed S]`` as settings (None without
    ``--samples``); InputError for a sampling option given without ``--samples``."""
    if args.samples is None:
        given = [flag for flag, value in (("--temperature", args.temperature), ("--top-p", args.top_p),
                                          ("--sample-seed", args.sample_seed)) if value is not None]
        if given:
            raise InputError(f"{', '.join(given)} set how --samples draws; add --samples K (K >= 2)")
        return None
    options = {"temperature": args.temperature, "top_p": args.top_p, "seed": args.sample_seed}
    return parse_sampling({"k": args.samples, **{k: v for k, v in options.items() if v is not None}}, "--samples")


def cmd_tasks(args) -> int:
    for t in list_tasks():
        print(f"{t.name:<16} {t.description}")
        print(f"{'':<16} data: {t.data_hint}")
    return 0


def cmd_models(args) -> int:
    for c in list_cards():
        print(f"{c.name:<30} {c.architecture} / {c.num_layers} layers / hidden {c.hidden_size}"
              f"{' / instruct' if c.instruct else ' / base'}")
    return 0


def cmd_verify(args) -> int:
    report = verify_store(args.store)  # corrupt or foreign shards raise: exit 2 with the message
    checked = sum(s["checksummed"] for s in report["shards"])
    print(f"store:    {Path(args.store).resolve()}")
    print(f"records:  {report['num_records']} in {report['num_shards']} shard(s); structure checked; "
          f"{checked} shard(s) with checksums, all matching")
    print(f"status:   {report['status']}")
    if report.get("checkpoints"):
        schedule = report["checkpoints"]
        print(f"prefix:   checkpoints at {', '.join(map(str, schedule['first']))}, then every {schedule['every']} "
              "tokens, and each answer's last")
    if report.get("samples"):
        print(f"samples:  {report['samples']['k']} per question (temperature {report['samples']['temperature']}, "
              f"top-p {report['samples']['top_p']})")
    if report.get("num_labels"):
        print(f"labels:   {report['num_labels']} added later (labels.jsonl), each naming a record of the store")
    for problem in report["problems"]:
        print(f"problem:  {problem}")
    if not report["problems"]:
        print("ok")
    return 1 if report["problems"] else 0


def cmd_rerecord(args) -> int:
    manifest = open_store(args.store, verify=False).manifest
    source = args.model or manifest.get("model")
    if not source:
        raise InputError(f"{args.store} does not name its model; pass --model")
    model, tok = load_model(source, **load_options_from_args(args))
    summary = rerecord_store(model, tok, args.store, args.out, pool=args.pool,
                             batch_size=args.batch_size, dtype=args.dtype,
                             shard_size=args.shard_size, progress=not args.quiet,
                             allow_other_weights=args.allow_other_weights)
    print("\n".join(summary.lines()))
    return 0


def add_collect(sub, model_opts) -> None:
    """``acute collect``."""
    c = sub.add_parser("collect", help="generate, record activations, label, write a store",
                       parents=[model_opts])
    c.add_argument("--model", default=DEFAULT_MODEL, help="card name, hub id, folder or .gguf")
    c.add_argument("--task", default=None, help="task name (see `acute tasks`) or a JSONL of {id, question, answers} "
                   "(default: default; with --responses: labels from the task instead of the 'label' field)")
    c.add_argument("--responses", default=None, metavar="FILE.jsonl",
                   help="record given responses by teacher forcing instead of generating: rows of id, "
                        "prompt (sent as is) or messages, response, and label (true/false) or answers (--task)")
    c.add_argument("--task-option", "-O", action="append", metavar="KEY=VALUE",
                   help="task option, repeatable (e.g. shots=0, context=true); see the task classes")
    c.add_argument("--data", default=None, help="benchmark file or folder")
    c.add_argument("--split", default=None, help="the benchmark's split (default: the task's)")
    c.add_argument("--limit", type=int, default=None, help="the first N examples only")
    c.add_argument("--batch-size", type=int, default=BATCH_SIZE, help="prompts run together (default %(default)s)")
    c.add_argument("--max-new-tokens", type=int, default=None, help="longest answer in tokens (default: the task's)")
    c.add_argument("--dtype", choices=list(STORAGE_DTYPES), default=DEFAULT_STORE_DTYPE,
                   help="storage dtype of the pooled states (default %(default)s)")
    c.add_argument("--num-processes", type=int, default=1,
                   help="data-parallel processes: relaunches this command with accelerate launch")
    c.add_argument("--pool", choices=["decoding", "generated"], default="decoding",
                   help="positions pooled per layer: those each answer token was decoded from (the last prompt "
                        "token onwards; default) or the generated tokens' own")
    c.add_argument("--engine", choices=["transformers", "vllm"], default="transformers",
                   help="what generates: transformers with acute's recorder (default) or vLLM with acute's "
                        "pooling connector (pip install 'acute[vllm]', or ACUTE_VLLM_PYTHON; docs/serving-with-vllm.md)")
    c.add_argument("--prompt-format", choices=["auto", "chat", "plain"], default="auto",
                   help="chat template or plain prompt (auto: the chat template when the tokenizer has one)")
    c.add_argument("--fail-on-too-long", action="store_true", help="fail instead of skipping prompts beyond the "
                   "context window (with --responses: also empty responses), naming the id")
    c.add_argument("--shard-size", type=int, default=256, help="records per committed shard")
    c.add_argument("--quiet", action="store_true", help="no progress bar")
    c.add_argument("--allow-other-weights", action="store_true",
                   help="resume a store collected from other weights of the same architecture (recorded in the manifest)")
    c.add_argument("--samples", type=int, default=None, metavar="K",
                   help="also sample K answers per question (K >= 2; no hidden states), stored with their texts, "
                        "parses and log-probs: what sampling consistency and label-free targets read")
    c.add_argument("--temperature", type=float, default=None, help="sampling temperature of --samples (default 1.0)")
    c.add_argument("--top-p", type=float, default=None, help="nucleus of --samples (default 1.0: none)")
    c.add_argument("--sample-seed", type=int, default=None, help="seed of --samples' random streams (default 0)")
    c.add_argument("--out", default=None, help="store folder (default: runs/<model>-<task>)")
    c.set_defaults(func=cmd_collect)


def add_listings(sub, model_opts) -> None:
    """``acute tasks``, ``verify`` and ``models``."""
    sub.add_parser("tasks", help="list tasks and their data").set_defaults(func=cmd_tasks)
    v = sub.add_parser("verify", help="check a store: every shard's structure and checksums, its status, orphans")
    v.add_argument("store", help="store folder")
    v.set_defaults(func=cmd_verify)
    sub.add_parser("models", help="list model cards").set_defaults(func=cmd_models)


def add_rerecord(sub, model_opts) -> None:
    """``acute rerecord``."""
    rr = sub.add_parser("rerecord", help="teacher-force a store's generations again (e.g. another pooling) "
                        "into a new store, without regenerating", parents=[model_opts])
    rr.add_argument("store", help="store folder whose generations are teacher-forced again")
    rr.add_argument("--out", required=True, help="new store folder")
    rr.add_argument("--pool", choices=["decoding", "generated"], default=None, help="default: the store's")
    rr.add_argument("--model", default=None, help="default: the model named in the store")
    rr.add_argument("--batch-size", type=int, default=BATCH_SIZE, help="records run together (default %(default)s)")
    rr.add_argument("--dtype", choices=list(STORAGE_DTYPES), default=None,
                    help="storage dtype of layer means (default: the store's)")
    rr.add_argument("--shard-size", type=int, default=256, help="records per committed shard")
    rr.add_argument("--quiet", action="store_true", help="no progress bar")
    rr.add_argument("--allow-other-weights", action="store_true",
                    help="re-record with weights other than the store's (same architecture)")
    rr.set_defaults(func=cmd_rerecord)
