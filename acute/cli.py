"""The ``acute`` command line: demo, collect, tasks, models, train, evaluate, export, score,
plot, protocol and protocol-report. Heavy imports happen inside each command."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

DEFAULT_MODEL = "smollm2-135m-instruct"
DEFAULT_RUNS = Path("runs")


def _err(msg: str) -> None:
    print(f"acute: error: {msg}", file=sys.stderr)


def _load_task(name: str, data: str | None, split: str | None, limit: int | None, **options):
    from .tasks import get_task

    task = get_task(name, **options)
    examples = task.load(data, split=split, limit=limit)
    if not examples:
        raise ValueError(f"task {task.name!r}: no examples in {data or 'the default data'}")
    return task, examples


# ---------------------------------------------------------------- collect / tasks / models
def cmd_collect(args) -> int:
    from .collect import collect
    from .models import load_model

    task, examples = _load_task(args.task, args.data, args.split, args.limit)
    out = Path(args.out or DEFAULT_RUNS / f"{Path(args.model).stem}-{task.name}")
    model, tok = load_model(args.model, dtype=args.model_dtype)
    summary = collect(model, tok, task, examples, out, model_name=args.model,
                      batch_size=args.batch_size, max_new_tokens=args.max_new_tokens,
                      dtype=args.dtype, pool=args.pool,
                      on_too_long="error" if args.fail_on_too_long else "skip",
                      chat=_chat_flag(args))
    print("\n".join(summary.lines()))
    return 0


def _chat_flag(args):
    return {"auto": None, "chat": True, "plain": False}[getattr(args, "prompt_format", "auto")]


def cmd_tasks(args) -> int:
    from .tasks import list_tasks

    for t in list_tasks():
        print(f"{t.name:<16} {t.description}")
        print(f"{'':<16} data: {t.data_hint}")
    return 0


def cmd_models(args) -> int:
    from .models import list_cards

    for c in list_cards():
        print(f"{c.name:<30} {c.architecture} / {c.num_layers} layers / hidden {c.hidden_size}"
              f"{' / instruct' if c.instruct else ' / base'}")
    return 0


# ---------------------------------------------------------------- train / export / evaluate
def _fit_probe(store, args, train_mask):
    from .probes import ActivationProbe

    layer = args.layer
    if layer is not None and layer.lstrip("-").isdigit():
        layer = int(layer)
    probe = ActivationProbe(view=args.view, layer=layer, n_estimators=args.n_estimators,
                            n_jobs=args.n_jobs, random_state=args.seed)
    probe.fit(store.layer_means[train_mask], store.correct[train_mask],
              confidence=store.raw_confidence[train_mask])
    return probe


def _save_probe(probe, store, out, train_mask, test_mask, args) -> dict:
    import numpy as np

    from . import metrics

    held_out = None
    if test_mask is not None and test_mask.any():
        conf = probe.predict_proba(store.layer_means[test_mask],
                                   confidence=store.raw_confidence[test_mask])[:, 1]
        y = store.correct[test_mask]
        held_out = {"n": int(test_mask.sum()), "accuracy": float(np.mean(y)),
                    "smece": metrics.smece(conf, y), "auc_euro": metrics.auc_euro(conf, y),
                    "brier": metrics.brier(conf, y)}
    m = store.manifest
    summary = {"store": str(Path(args.store).resolve()), "task": m.get("task"),
               "n_train": int(train_mask.sum()), "accuracy_train": float(np.mean(store.correct[train_mask])),
               "split": {"test_fraction": args.test_fraction, "seed": args.seed},
               "generation": m.get("generation")}
    probe.save(out, model_name=m.get("model"), model_fingerprint=m.get("model_fingerprint"),
               training_summary=summary, metrics=held_out)
    return held_out or {}


def cmd_train(args) -> int:
    from .evaluate import split_ids
    from .store import open_store

    store = open_store(args.store)
    train, test = split_ids(store.ids, test_fraction=args.test_fraction, seed=args.seed)
    probe = _fit_probe(store, args, train)
    held = _save_probe(probe, store, args.out, train, test, args)
    print(f"probe ({args.view}{'' if args.layer is None else ' ' + str(args.layer)}) written to {args.out}")
    for k, v in held.items():
        print(f"  held-out {k}: {v:.4f}" if isinstance(v, float) else f"  held-out {k}: {v}")
    return 0


def cmd_export(args) -> int:
    """Fit on every record of the store (after evaluating with train/evaluate) and export."""
    import numpy as np

    from .store import open_store

    store = open_store(args.store)
    everything = np.ones(len(store), dtype=bool)
    args.test_fraction = 0.0
    probe = _fit_probe(store, args, everything)
    _save_probe(probe, store, args.out, everything, None, args)
    print(f"probe ({args.view}) fitted on all {len(store)} records, exported to {args.out}")
    return 0


def cmd_evaluate(args) -> int:
    from .evaluate import evaluate_store
    from .store import open_store

    store = open_store(args.store)
    test_store = open_store(args.test_store) if args.test_store else None
    out = Path(args.out or Path(args.store) / "evaluation")
    res = evaluate_store(store, test_store=test_store, out_dir=out,
                         test_fraction=args.test_fraction, seed=args.seed,
                         n_bootstrap=args.n_bootstrap, n_jobs=args.n_jobs,
                         probe_params={"n_estimators": args.n_estimators})
    print((out / "results.md").read_text())
    print(f"evaluation written to {out}")
    return 0


def cmd_plot(args) -> int:
    import csv

    import numpy as np

    from .plots import euro_curves, reliability_diagram

    with open(args.predictions, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        raise ValueError(f"{args.predictions}: no rows")
    correct = np.array([float(r["correct"]) for r in rows])
    names = [k for k in rows[0] if k not in ("id", "correct")]
    confs = {n: np.array([float(r[n]) for r in rows]) for n in names}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    paths = [euro_curves(confs, correct, out / "euro_curves.png")]
    for n in names:
        paths.append(reliability_diagram(confs[n], correct, out / f"reliability_{n}.png", title=n))
    print("\n".join(str(p) for p in paths))
    return 0


# ---------------------------------------------------------------- score
def _default_probe_dir() -> Path:
    from .models import get_card

    return get_card(DEFAULT_MODEL).path.parent / "probe"


def cmd_score(args) -> int:
    from .models import load_model
    from .probes import load_probe
    from .scoring import Scorer

    probe_dir = Path(args.probe) if args.probe else _default_probe_dir()
    probe = load_probe(probe_dir)
    model_name = args.model or probe.manifest.get("model") or DEFAULT_MODEL
    model, tok = load_model(model_name)
    scorer = Scorer(model, tok, probe, max_new_tokens=args.max_new_tokens, batch_size=args.batch_size)
    if args.jsonl:
        src = sys.stdin if args.jsonl == "-" else open(args.jsonl)
        prompts, ids = [], []
        for lineno, line in enumerate(src, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{args.jsonl}:{lineno}: not valid JSON ({e.msg})") from None
            text = obj.get("prompt") or obj.get("question") if isinstance(obj, dict) else obj
            if not isinstance(text, str) or not text.strip():
                raise ValueError(f"{args.jsonl}:{lineno}: needs a 'prompt' or 'question' string")
            prompts.append(text)
            ids.append(obj.get("id", lineno) if isinstance(obj, dict) else lineno)
        for i, s in zip(ids, scorer.generate(prompts, risk=args.risk)):
            print(json.dumps({"id": i, **s.to_dict()}))
        return 0
    if not args.question:
        raise ValueError("give a question, or --jsonl FILE (or - for stdin)")
    s = scorer.generate(args.question, risk=args.risk)
    print(f"answer:         {s.answer}")
    print(f"raw confidence: {s.raw_confidence:.3f}")
    print(f"confidence:     {s.confidence:.3f}")
    print(f"decision:       {s.decision} (risk level {s.risk})")
    return 0


# ---------------------------------------------------------------- protocol
def cmd_protocol(args) -> int:
    from .models import load_model
    from .protocol import run_protocol

    task, examples = _load_task(args.task, args.data, args.split, args.limit)
    out = Path(args.out or DEFAULT_RUNS / f"protocol-{Path(args.model).stem}-{task.name}")
    model, tok = load_model(args.model)
    run_protocol(model, tok, task, examples, out, batch_size=args.batch_size,
                 n_bootstrap=args.n_bootstrap, seed=args.seed, variant=args.variant,
                 model_name=args.model)
    print(f"protocol study written to {out}")
    return 0


def cmd_protocol_report(args) -> int:
    from .protocol import write_protocol_report

    out = write_protocol_report(args.runs, args.out)
    print(f"combined protocol report written to {out}")
    return 0


# ---------------------------------------------------------------- demo
def cmd_demo(args) -> int:
    from .demo import run_demo

    run_demo(out=Path(args.out), limit=args.limit, model_name=args.model)
    return 0


# ---------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="acute", description=__doc__)
    from . import __version__

    p.add_argument("--version", action="version", version=f"acute {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    d = sub.add_parser("demo", help="the whole pipeline on the default model and built-in questions")
    d.add_argument("--out", default=str(DEFAULT_RUNS / "demo"))
    d.add_argument("--limit", type=int, default=None, help="questions to collect (default: all built-in)")
    d.add_argument("--model", default=DEFAULT_MODEL)
    d.set_defaults(func=cmd_demo)

    c = sub.add_parser("collect", help="generate, record activations, label, write a store")
    c.add_argument("--model", default=DEFAULT_MODEL, help="card name, hub id, folder or .gguf")
    c.add_argument("--task", default="default", help="task name (see `acute tasks`) or a JSONL of {id, question, answers}")
    c.add_argument("--data", default=None, help="benchmark file or folder")
    c.add_argument("--split", default=None)
    c.add_argument("--limit", type=int, default=None)
    c.add_argument("--batch-size", type=int, default=8)
    c.add_argument("--max-new-tokens", type=int, default=None)
    c.add_argument("--dtype", choices=["float16", "float32"], default="float16", help="storage dtype of layer means")
    c.add_argument("--model-dtype", default="float32")
    c.add_argument("--pool", choices=["decoding", "generated"], default="decoding")
    c.add_argument("--prompt-format", choices=["auto", "chat", "plain"], default="auto")
    c.add_argument("--fail-on-too-long", action="store_true", help="fail instead of skipping prompts beyond the context window")
    c.add_argument("--out", default=None)
    c.set_defaults(func=cmd_collect)

    sub.add_parser("tasks", help="list tasks and their data").set_defaults(func=cmd_tasks)
    sub.add_parser("models", help="list model cards").set_defaults(func=cmd_models)

    for name, fn, hlp in (("train", cmd_train, "fit a probe on a store's training split and export it"),
                          ("export", cmd_export, "fit a probe on all records of a store and export it")):
        t = sub.add_parser(name, help=hlp)
        t.add_argument("--store", required=True)
        t.add_argument("--view", choices=["mean", "early", "mid", "late", "cosine", "pca10", "pca20"], default="pca10")
        t.add_argument("--layer", default=None, help="for --view mean: early, mid, late or a layer index")
        t.add_argument("--out", required=True)
        t.add_argument("--n-estimators", type=int, default=None)
        t.add_argument("--n-jobs", type=int, default=None)
        t.add_argument("--seed", type=int, default=0)
        t.add_argument("--test-fraction", type=float, default=0.3)
        t.set_defaults(func=fn)

    e = sub.add_parser("evaluate", help="every baseline and ACUTE variant in one table")
    e.add_argument("--store", required=True)
    e.add_argument("--test-store", default=None, help="a second store as the test set")
    e.add_argument("--out", default=None)
    e.add_argument("--test-fraction", type=float, default=0.3)
    e.add_argument("--seed", type=int, default=0)
    e.add_argument("--n-bootstrap", type=int, default=1000)
    e.add_argument("--n-jobs", type=int, default=None)
    e.add_argument("--n-estimators", type=int, default=None)
    e.set_defaults(func=cmd_evaluate)

    pl = sub.add_parser("plot", help="euro curves and reliability diagrams from predictions.csv")
    pl.add_argument("--predictions", required=True)
    pl.add_argument("--out", required=True)
    pl.set_defaults(func=cmd_plot)

    s = sub.add_parser("score", help="generate and decide trust / abstain with a probe")
    s.add_argument("question", nargs="?")
    s.add_argument("--probe", default=None, help="probe directory (default: the shipped SmolLM2 probe)")
    s.add_argument("--model", default=None, help="default: the model named in the probe")
    s.add_argument("--risk", type=float, default=0.5)
    s.add_argument("--jsonl", default=None, help="file of prompts (JSON lines with 'prompt' or 'question'), or - for stdin")
    s.add_argument("--max-new-tokens", type=int, default=None)
    s.add_argument("--batch-size", type=int, default=8)
    s.set_defaults(func=cmd_score)

    pr = sub.add_parser("protocol", help="verbalized vs token confidence under each protocol")
    pr.add_argument("--model", default=DEFAULT_MODEL)
    pr.add_argument("--task", required=True)
    pr.add_argument("--data", default=None)
    pr.add_argument("--split", default=None)
    pr.add_argument("--limit", type=int, default=None)
    pr.add_argument("--batch-size", type=int, default=8)
    pr.add_argument("--n-bootstrap", type=int, default=1000)
    pr.add_argument("--seed", type=int, default=0)
    pr.add_argument("--variant", choices=["unit", "percent"], default="unit")
    pr.add_argument("--out", default=None)
    pr.set_defaults(func=cmd_protocol)

    rp = sub.add_parser("protocol-report", help="combine protocol runs into one shift table")
    rp.add_argument("runs", nargs="+")
    rp.add_argument("--out", required=True)
    rp.set_defaults(func=cmd_protocol_report)
    return p


def main(argv=None) -> int:
    from .errors import AcuteError

    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (AcuteError, ValueError, FileNotFoundError) as e:
        _err(str(e))
        return 2
    except KeyboardInterrupt:
        _err("interrupted; committed shards are kept and a rerun resumes")
        return 130


if __name__ == "__main__":
    sys.exit(main())
