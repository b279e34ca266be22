"""``acute demo``, ``protocol`` and ``protocol-report``: the whole pipeline and the protocol study."""

from __future__ import annotations

import logging
from pathlib import Path


from ..errors import InputError
from ..metrics import DEFAULT_N_BOOTSTRAP
from ..models.cards import DEFAULT_MODEL
from ..store.generation import GenerationSettings
from .common import DEFAULT_RUNS, add_store_arguments, load_task, task_options
from ..console import load_options_from_args
from ..models import load_model
from .demo import run_demo

__all__ = ['add_demo', 'add_protocol', 'add_protocol_report', 'cmd_demo', 'cmd_protocol', 'cmd_protocol_report']

logger = logging.getLogger(__name__)


def cmd_protocol(args) -> int:
    from ..protocol import analyze_protocol, run_protocol  # lazy: CLI start-up

    if args.analysis_only:
        if not args.out:
            raise InputError("--analysis-only needs --out: the folder of the protocol run to analyse")
        result = analyze_protocol(args.out, n_bootstrap=args.n_bootstrap, seed=args.seed,
                                  progress=not args.quiet)
        print(f"protocol analysis of {len(result.records)} records written to {result.json_path} "
              f"and {result.md_path}")
        return 0
    if not args.task:
        raise InputError("--task is required (unless --analysis-only)")
    task, examples = load_task(args.task, args.data, args.split, args.limit,
                                **task_options(args.task_option))
    out = Path(args.out) if args.out else (
        DEFAULT_RUNS / f"protocol-{Path(args.model).stem}-{Path(task.name).stem}")
    generation = GenerationSettings(batch_size=args.batch_size)  # checked before the model loads
    model, tok = load_model(args.model, **load_options_from_args(args))
    result = run_protocol(model, tok, task, examples, out, generation, store=args.store,
                          n_bootstrap=args.n_bootstrap, seed=args.seed, variant=args.variant,
                          shard_size=args.shard_size,
                          progress=not args.quiet)
    print(f"protocol study written to {result.json_path} and {result.md_path}; answers in the store "
          f"{result.store_dir}, per-record results in {out / 'records'}")
    return 0


def cmd_protocol_report(args) -> int:
    from ..protocol import write_protocol_report  # lazy: CLI start-up

    out = write_protocol_report(args.runs, args.out)
    print(f"combined protocol report written to {out}")
    return 0


def cmd_demo(args) -> int:
    run_demo(out=Path(args.out), limit=args.limit or None, model_name=args.model,
             n_bootstrap=args.n_bootstrap, load_options=load_options_from_args(args))
    return 0


def add_demo(sub, model_opts) -> None:
    """``acute demo``."""
    d = sub.add_parser("demo", help="the whole pipeline on the default model and built-in questions",
                       parents=[model_opts])
    d.add_argument("--out", default=str(DEFAULT_RUNS / "demo"), help="run folder (default %(default)s)")
    d.add_argument("--limit", type=int, default=300,
                   help="built-in questions to collect, sampled across categories (default 300; 0 = all)")
    d.add_argument("--model", default=DEFAULT_MODEL, help="card name (see `acute models`), hub id, folder or .gguf (default %(default)s)")
    d.add_argument("--n-bootstrap", type=int, default=200,
                   help="bootstrap resamples of the intervals (default %(default)s)")
    d.set_defaults(func=cmd_demo)


def add_protocol(sub, model_opts) -> None:
    """``acute protocol``."""
    pr = sub.add_parser("protocol", help="verbalized vs token confidence under each protocol",
                        parents=[model_opts])
    pr.add_argument("--model", default=DEFAULT_MODEL, help="card name (see `acute models`), hub id, folder or .gguf (default %(default)s)")
    pr.add_argument("--task", default=None, help="required unless --analysis-only")
    pr.add_argument("--task-option", "-O", action="append", metavar="KEY=VALUE",
                   help="task option, repeatable (e.g. shots=0, context=true); see the task classes")
    pr.add_argument("--data", default=None, help="benchmark file or folder")
    pr.add_argument("--split", default=None, help="the benchmark's split (default: the task's)")
    pr.add_argument("--limit", type=int, default=None, help="the first N examples only")
    pr.add_argument("--batch-size", type=int, default=8,
                    help="questions run together (their four rating prompts share a cache; default %(default)s)")
    pr.add_argument("--n-bootstrap", type=int, default=DEFAULT_N_BOOTSTRAP,
                    help="paired bootstrap resamples of the gaps' intervals (default %(default)s)")
    pr.add_argument("--seed", type=int, default=0, help="seed of the resamples (default %(default)s)")
    pr.add_argument("--variant", choices=["unit", "percent"], default="unit",
                    help="elicitation template: a probability from 0.0 to 1.0, or 0 to 100 (default %(default)s)")
    add_store_arguments(pr, store_required=False, allow_partial=False,
                        store_help="store of the answers: reused when its model and settings match (only "
                                   "missing examples are generated), refused otherwise (default OUT/store)",
                        out_help="run folder: protocol.json/.md, records/ (resumable) and store/ by default")
    pr.add_argument("--shard-size", type=int, default=32,
                    help="examples per committed shard of per-record results")
    pr.add_argument("--analysis-only", action="store_true",
                    help="rerun the analysis of the run in --out from its records (no model)")
    pr.add_argument("--quiet", action="store_true", help="no progress bars")
    pr.set_defaults(func=cmd_protocol)


def add_protocol_report(sub, model_opts) -> None:
    """``acute protocol-report``."""
    rp = sub.add_parser("protocol-report", help="combine protocol runs into one shift table")
    rp.add_argument("runs", nargs="+", help="protocol run folders (each with protocol.json)")
    rp.add_argument("--out", required=True, help="folder of the combined report")
    rp.set_defaults(func=cmd_protocol_report)
