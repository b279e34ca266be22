"""The ``acute`` command line: demo, collect, tasks, models, train, evaluate, learning-curve,
export, score, serve, rerecord, plot, protocol, protocol-report and run. Heavy imports happen inside each command."""

from __future__ import annotations

import argparse
import errno
import json
import logging
import os
import signal
import sys
import threading
from pathlib import Path

import numpy as np

from ._util import BATCH_SIZE
from .errors import InputError

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "smollm2-135m-instruct"
DEFAULT_RUNS = Path("runs")


def _err(msg: str) -> None:
    print(f"acute: error: {msg}", file=sys.stderr)


def _task_options(pairs: list[str] | None) -> dict:
    """``["shots=0", "context=true"]`` -> ``{"shots": 0, "context": True}`` (values read as JSON
    when they parse, else kept as strings)."""
    options = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise InputError(f"--task-option must look like KEY=VALUE, got {pair!r}")
        try:
            options[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            options[key.strip()] = value
    return options


def _load_task(name: str, data: str | None, split: str | None, limit: int | None, **options):
    from .tasks import get_task

    task = get_task(name, **options)
    examples = task.load(data, split=split, limit=limit)
    if not examples:
        source = data or getattr(task, "path", None) or "the default data"
        raise InputError(f"task {task.name!r}: no examples in {source}")
    return task, examples


# ---------------------------------------------------------------- collect / tasks / models
def _default_store_dir(model: str, task_name: str) -> Path:
    """``runs/<model>-<task>`` with path-like names reduced to their file stem."""
    return DEFAULT_RUNS / f"{Path(model).stem}-{Path(task_name).stem}"


def _model_name(model: str) -> str:
    """How a model is recorded in stores and probes: an existing path made absolute (so a probe
    finds its model from any directory), else the card name or hub id as given."""
    path = Path(model).expanduser()
    return str(path.resolve()) if path.exists() else model


def _launched_processes() -> int:
    """How many processes ``accelerate launch`` / ``torchrun`` started (1 when run directly)."""
    try:
        return max(1, int(os.environ.get("WORLD_SIZE", "1")))
    except ValueError:
        return 1


def _relaunch_with_accelerate(args, argv: list[str]) -> int:
    """``acute collect --num-processes N ...``: run the same command under
    ``accelerate launch --num_processes N -m acute collect ...`` and return its exit status."""
    import subprocess

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


def _collect_responses(args) -> int:
    """``acute collect --responses FILE``: record given responses by teacher forcing."""
    from .collect import collect_responses
    from .models import load_model
    from .tasks import get_task

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
    task = get_task(args.task, **_task_options(args.task_option)) if args.task else None
    out = Path(args.out) if args.out else _default_store_dir(args.model, Path(args.responses).stem)
    model, tok = load_model(args.model, **load_options_from_args(args))
    summary = collect_responses(model, tok, args.responses, out, model_name=_model_name(args.model),
                                task=task, batch_size=args.batch_size, dtype=args.dtype,
                                pool=args.pool, chat=_chat_flag(args),
                                on_bad_response="error" if args.fail_on_too_long else "skip",
                                shard_size=args.shard_size, progress=not args.quiet,
                                allow_other_weights=args.allow_other_weights)
    print("\n".join(summary.lines()))
    return 0


def cmd_collect(args) -> int:
    from .collect import collect
    from .models import load_model

    if args.responses:
        return _collect_responses(args)
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
        from accelerate import PartialState

        state = PartialState(cpu=device == "cpu")
        if device != "cpu":
            device = str(state.device)  # one accelerator per process
    task, examples = _load_task(args.task or "default", args.data, args.split, args.limit,
                                **_task_options(args.task_option))
    out = Path(args.out) if args.out else _default_store_dir(args.model, task.name)
    model, tok = load_model(args.model, **load_options_from_args(args, device=device))
    summary = collect(model, tok, task, examples, out, model_name=_model_name(args.model),
                      batch_size=args.batch_size, max_new_tokens=args.max_new_tokens,
                      dtype=args.dtype, pool=args.pool,
                      on_too_long="error" if args.fail_on_too_long else "skip",
                      chat=_chat_flag(args), shard_size=args.shard_size,
                      progress=not args.quiet, state=state, allow_other_weights=args.allow_other_weights)
    if state is None or state.is_main_process:
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
def _parse_layer(layer: str | None) -> int | str | None:
    if layer is not None and layer.lstrip("-").isdigit():
        return int(layer)
    return layer


def _probe_estimator(args):
    """The unfitted estimator ``train``/``export`` fit: ``--view`` (a plain probe, as in the
    paper), ``--estimator`` (a probe name, or ``auto``: chosen by cross-validation), else
    :data:`DEFAULT_ESTIMATOR`, fitted by ``auto``'s comparison with ``refit`` set to it (so the
    cross-validated scores of the candidates and baselines are recorded beside it)."""
    from .estimators import AUTO, DEFAULT_ESTIMATOR, PROBE_ESTIMATORS, AutoEstimator, make_estimator, split_pooling
    from .probes import ActivationProbe

    common = {"random_state": args.seed}
    if args.n_jobs is not None:
        common["n_jobs"] = args.n_jobs
    if args.view is not None:
        if args.estimator is not None:
            raise InputError("give --view (a plain probe) or --estimator, not both")
        params = {"view": args.view, "layer": _parse_layer(args.layer), **common}
        if args.n_estimators is not None:
            params["n_estimators"] = args.n_estimators
        return ActivationProbe(**params), f"view {_view_label(args)}"
    if args.layer is not None:
        raise InputError("--layer goes with --view mean")
    probe_params = {"n_estimators": args.n_estimators}
    if args.estimator is None:
        est = AutoEstimator(refit=DEFAULT_ESTIMATOR, probe_params=probe_params, **common)
        return est, DEFAULT_ESTIMATOR
    if split_pooling(args.estimator)[0] not in PROBE_ESTIMATORS + (AUTO,):
        raise InputError(f"--estimator must be a probe or {AUTO!r} (a baseline cannot be exported as a "
                         f"probe); choose from {', '.join(PROBE_ESTIMATORS + (AUTO,))} (a probe may end "
                         "in @POOLING, e.g. acute-cosine-stacked@last-answer)")
    return make_estimator(args.estimator, probe_params=probe_params, **common), args.estimator


def _states_rows(store, pooling: str, idx: np.ndarray) -> np.ndarray:
    """float32 rows ``idx`` of the store's ``pooling`` states (:mod:`acute.pooling`)."""
    from .pooling import store_states

    return np.asarray(store_states(store, pooling)[idx], dtype=np.float32)


def _fit_probe(store, args, train_mask):
    """Fit on the records of ``train_mask``; returns ``(probe, label, selection)``, where
    ``selection`` is how ``auto`` chose (None for a named probe)."""
    from .estimators import AutoEstimator

    est, label = _probe_estimator(args)
    idx = np.flatnonzero(train_mask)
    est.fit(_states_rows(store, getattr(est, "pooling", "mean"), idx), store.correct[idx],
            confidence=store.raw_confidence[idx])
    if isinstance(est, AutoEstimator):
        sel = est.selection()
        how = "chosen by" if est.refit == "best" else "the default; best probe in"
        print(f"{est.chosen_}: {how} {est.cv}-fold cross-validation on the {idx.size} training records "
              f"(auc-euro {est.scores_[est.chosen_]['auc_euro_all']:.4f}; best probe {est.best_} "
              f"{est.scores_[est.best_]['auc_euro_all']:.4f}; best baseline {est.best_baseline_} "
              f"{est.scores_[est.best_baseline_]['auc_euro_all']:.4f})")
        if est.warning_:
            print(f"acute: warning: {est.warning_}", file=sys.stderr)
        label = est.chosen_ if est.refit != "best" else f"auto -> {est.chosen_}"
        return est.estimator_, label, sel
    return est, label, None


def _held_out_metrics(probe, store, train_mask, test_mask) -> dict:
    """Held-out smECE, auc-euro (all) and Brier of the probe, of the raw confidence and of Platt
    scaling of the raw confidence fitted on the same training records (the metric rows of
    :func:`acute.evaluate.evaluate_predictions`)."""
    from .baselines import make_baseline
    from .evaluate import evaluate_predictions

    idx = np.flatnonzero(test_mask)
    raw = store.raw_confidence[idx]
    conf = probe.predict_proba(_states_rows(store, probe.pooling, idx), confidence=raw)[:, 1]
    tr = np.flatnonzero(train_mask)
    platt = make_baseline("platt").fit(store.raw_confidence[tr], store.correct[tr]).predict_proba(raw)[:, 1]
    rows = evaluate_predictions({"probe": conf, "raw": raw, "platt": platt}, store.correct[idx],
                                n_bootstrap=0, reference="platt")
    out = {"n": int(idx.size), "accuracy": rows[0]["accuracy"]}
    for row, prefix in zip(rows, ("", "raw_", "platt_")):
        for key, name in (("smece", "smece"), ("auc_euro_all", "auc_euro"), ("brier", "brier")):
            out[prefix + name] = row[key]
    return out


def _save_probe(probe, store, out, train_mask, held_out, args, selection) -> None:
    from .collect import collection_settings, store_identity

    m = store.manifest
    summary = {"store": str(Path(args.store).resolve()), "n_train": int(train_mask.sum()),
               "accuracy_train": float(np.mean(store.correct[train_mask])),
               "split": {"test_fraction": args.test_fraction, "seed": args.seed},
               **collection_settings(m)}
    probe.save(out, model_name=m.get("model"), model_fingerprint=store_identity(m),
               training_summary=summary, metrics=held_out, selection=selection)


def _open_labelled_store(path: str, allow_partial: bool = False):
    """The store at ``path``; one whose collection did not finish (status other than
    "complete") or whose manifest disagrees with its shards is refused unless ``allow_partial``."""
    from .store import open_store

    store = open_store(path)
    if len(store) == 0:
        raise InputError(f"store {path} has no records")
    store.check_finite()
    m = store.manifest
    status, counted = m.get("status"), m.get("num_records")
    problem = (f"its collection did not finish (status {status!r})" if status != "complete"
               else f"its manifest counts {counted} records but its shards hold {len(store)}"
               if counted is not None and counted != len(store) else None)
    if problem and not allow_partial:
        raise InputError(f"store {path}: {problem}; resume it with the same `acute collect` command, "
                         f"or pass --allow-partial to use the {len(store)} committed records")
    if problem:
        logger.warning("store %s: %s; using its %d committed records", path, problem, len(store))
    return store


def _view_label(args) -> str:
    return args.view if args.layer is None else f"{args.view} {args.layer}"


def cmd_verify(args) -> int:
    from .store import verify_store

    report = verify_store(args.store)  # corrupt or foreign shards raise: exit 2 with the message
    checked = sum(s["checksummed"] for s in report["shards"])
    print(f"store:    {Path(args.store).resolve()}")
    print(f"records:  {report['num_records']} in {report['num_shards']} shard(s); structure checked; "
          f"{checked} shard(s) with checksums, all matching")
    print(f"status:   {report['status']}")
    for problem in report["problems"]:
        print(f"problem:  {problem}")
    if not report["problems"]:
        print("ok")
    return 1 if report["problems"] else 0


def cmd_train(args) -> int:
    from .evaluate import split_ids

    store = _open_labelled_store(args.store, args.allow_partial)
    train, test = split_ids(store.ids, test_fraction=args.test_fraction, seed=args.seed)
    probe, label, selection = _fit_probe(store, args, train)
    held = _held_out_metrics(probe, store, train, test) if test.any() else None
    _save_probe(probe, store, args.out, train, held, args, selection)
    print(f"probe ({label}) fitted on {int(train.sum())} records, written to {args.out}")
    if held:
        print(f"held-out records: {held['n']} (accuracy {held['accuracy']:.3f}); "
              "for intervals use `acute evaluate` (cross-validated)")
        print(f"{'':<10} {'probe':>8} {'raw':>8} {'platt':>8}")
        for k in ("smece", "auc_euro", "brier"):
            print(f"{k:<10} {held[k]:>8.4f} {held['raw_' + k]:>8.4f} {held['platt_' + k]:>8.4f}")
    return 0


def cmd_export(args) -> int:
    """Fit on every record of the store (after evaluating with train/evaluate) and export."""
    store = _open_labelled_store(args.store, args.allow_partial)
    everything = np.ones(len(store), dtype=bool)
    args.test_fraction = 0.0
    probe, label, selection = _fit_probe(store, args, everything)
    _save_probe(probe, store, args.out, everything, None, args, selection)
    print(f"probe ({label}) fitted on all {len(store)} records, exported to {args.out}")
    return 0


def _estimator_list(text: str | None) -> list[str] | None:
    if text is None:
        return None
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise InputError("--estimators needs a comma-separated list of estimator names")
    return names


def cmd_evaluate(args) -> int:
    from .evaluate import evaluate_store

    store = _open_labelled_store(args.store, args.allow_partial)
    test_store = _open_labelled_store(args.test_store, args.allow_partial) if args.test_store else None
    out = Path(args.out) if args.out else Path(args.store) / "evaluation"
    evaluate_store(store, test_store=test_store, out_dir=out, cv=args.cv, repeats=args.repeats,
                   test_fraction=args.test_fraction, seed=args.seed,
                   n_bootstrap=args.n_bootstrap, n_jobs=args.n_jobs,
                   probe_params={"n_estimators": args.n_estimators,
                                 "search_n_estimators": args.search_n_estimators},
                   progress=not args.quiet,
                   estimators=_estimator_list(args.estimators), reliability=args.reliability,
                   allow_overlap=args.allow_overlap,
                   controls=False if args.no_controls else True, group_by=args.group_by,
                   metadata_fields=_estimator_list(args.meta_fields))
    print((out / "results.md").read_text(encoding="utf-8"))
    print(f"evaluation written to {out.resolve()}")
    return 0


def cmd_learning_curve(args) -> int:
    from tqdm.auto import tqdm

    from .learning_curve import learning_curve, write_learning_curve

    store = _open_labelled_store(args.store, args.allow_partial)
    out = Path(args.out) if args.out else Path(args.store) / "learning-curve"
    estimators = _estimator_list(args.estimators) or ["acute-pca10", "acute-pca10-stacked"]
    sizes = None
    if args.sizes:
        try:
            sizes = [int(v) for v in args.sizes.split(",") if v.strip()]
        except ValueError:
            raise InputError(f"--sizes must be comma-separated integers, got {args.sizes!r}") from None
    from .crossval import states_for

    lc = learning_curve(states_for(store, estimators), store.correct,
                        store.raw_confidence, store.ids, estimators=estimators, sizes=sizes,
                        n_splits=args.cv, repeats=args.repeats, seed=args.seed, n_jobs=args.n_jobs,
                        probe_params={"n_estimators": args.n_estimators},
                        progress=lambda it: tqdm(it, desc="folds", disable=args.quiet, file=sys.stderr))
    files = write_learning_curve(lc, out, model=store.manifest.get("model"), task=store.manifest.get("task"),
                                 params={"store": str(Path(args.store).resolve()),
                                                  "estimators": estimators, "seed": args.seed,
                                                  "n_estimators": args.n_estimators})
    print(lc.to_markdown())
    print(f"learning curve written to {out} ({', '.join(p.name for p in files.values())})")
    return 0


def cmd_plot(args) -> int:
    import csv

    from .plots import euro_curves, reliability_diagram

    path = Path(args.predictions)
    if not path.is_file():
        raise FileNotFoundError(f"predictions file {path} does not exist (evaluate writes "
                                "<out>/predictions.csv)")
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    if not rows or "correct" not in rows[0]:
        raise InputError(f"{path}: expected a header 'id,correct,<estimator>...' and rows")
    names = [k for k in rows[0] if k not in ("id", "correct")]
    if not names:
        raise InputError(f"{path}: no estimator columns besides id and correct")
    try:
        correct = np.array([float(r["correct"]) for r in rows])
        confs = {n: np.array([float(r[n]) for r in rows]) for n in names}
    except (TypeError, ValueError) as e:
        raise InputError(f"{path}: a value is not a number ({e})") from None
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


def _score_task(name: str | None):
    """``--task``: None -> "auto" (the probe's open-QA task), "none" -> None, else that task."""
    from .tasks import get_task

    if name is None:
        return "auto"
    return None if name == "none" else get_task(name)


def _read_prompts(source: str):
    """``(ids, prompts)`` from a JSONL file or ``-`` (stdin): objects with 'prompt' or 'question'
    (or bare JSON strings); errors name the file and line."""
    ids, prompts, _ = _read_score_rows(source)
    return ids, prompts


def _read_score_rows(source: str):
    """``(ids, prompts, responses)`` from a JSONL file or ``-`` (stdin): objects with 'prompt'
    or 'question' (a string) or 'messages' (chat messages), and an optional 'response' (a
    non-empty string: scored as given; None: generated), or bare JSON strings; errors name the
    file and line."""
    from ._util import iter_jsonl

    name = "<stdin>" if source == "-" else source
    if source != "-" and not Path(source).is_file():
        raise FileNotFoundError(f"prompts file {source} does not exist")
    ids, prompts, responses = [], [], []
    for lineno, obj in iter_jsonl(sys.stdin if source == "-" else source, name, error=InputError, objects=False):
        row = obj if isinstance(obj, dict) else {}
        text = (row.get("prompt") or row.get("question")) if row else obj
        if row.get("messages") is not None and text is None:
            text = row["messages"]
            if not isinstance(text, list) or not text:
                raise InputError(f"{name}:{lineno}: 'messages' must be a non-empty list of messages")
        elif not isinstance(text, str) or not text.strip():
            raise InputError(f"{name}:{lineno}: needs a non-empty 'prompt' or 'question' string")
        response = row.get("response")
        if response is not None and (not isinstance(response, str) or not response.strip()):
            raise InputError(f"{name}:{lineno}: 'response' must be a non-empty string, got {response!r}")
        prompts.append(text)
        responses.append(response)
        ids.append(row.get("id", lineno) if row else lineno)
    if not prompts:
        raise InputError(f"{name}: no prompts")
    return ids, prompts, responses


def _score_all(scorer, prompts: list, responses: list, risk: float) -> list:
    """Generate and score the prompts without a response, score the given responses (one batch
    each), in input order."""
    given = [i for i, r in enumerate(responses) if r is not None]
    todo = [i for i, r in enumerate(responses) if r is None]
    out: list = [None] * len(prompts)
    if todo:
        for i, s in zip(todo, scorer.generate([prompts[i] for i in todo], risk=risk)):
            out[i] = s
    if given:
        scored = scorer.score_responses([prompts[i] for i in given], [responses[i] for i in given],
                                        risk=risk)
        for i, s in zip(given, scored):
            out[i] = s
    return out


def cmd_score(args) -> int:
    from .models import load_model
    from .probes import load_probe
    from .scoring import Scorer, decide

    if not args.jsonl and not args.question:
        raise InputError("give a question, or --jsonl FILE (or - for stdin)")
    if args.response is not None and (args.jsonl or not args.response.strip()):
        raise InputError("--response needs a question and a non-empty answer; in --jsonl rows give "
                         "each its 'response' field")
    decide([], args.risk)  # a bad risk level fails before the model is loaded
    if args.probe:
        probe_dir = Path(args.probe)
    else:
        probe_dir = _default_probe_dir()
        if not probe_dir.is_dir():
            raise FileNotFoundError(
                f"no probe is shipped for {DEFAULT_MODEL} ({probe_dir} is missing); make one with "
                "`acute demo` or `acute export` and pass it with --probe")
    probe = load_probe(probe_dir)
    ids, prompts, responses = (_read_score_rows(args.jsonl) if args.jsonl
                               else (None, [args.question], [args.response]))
    model_name = args.model or probe.model_name or DEFAULT_MODEL
    model, tok = load_model(model_name, **load_options_from_args(args))
    scorer = Scorer(model, tok, probe, max_new_tokens=args.max_new_tokens,
                    batch_size=args.batch_size, task=_score_task(args.task),
                    allow_other_weights=args.allow_other_weights)
    scored = _score_all(scorer, prompts, responses, args.risk)
    if args.jsonl:
        for i, s in zip(ids, scored):
            print(json.dumps({"id": i, **s.to_dict()}, ensure_ascii=False))
        return 0
    s = scored[0]
    print(f"question:       {s.question}")
    print(f"answer:         {s.answer}")
    print(f"raw confidence: {s.raw_confidence:.3f}")
    print(f"confidence:     {s.confidence:.3f}")
    print(f"decision:       {s.decision} (risk level {s.risk})")
    return 0


# ---------------------------------------------------------------- serve
def cmd_serve(args) -> int:
    from . import serve

    serve.require_serve_extra()
    api_key = serve.resolve_api_key(args.api_key)
    serve.check_bind(args.host, api_key, args.allow_remote)
    settings = dict(max_batch=args.max_batch, max_wait_ms=args.max_wait_ms, max_queue=args.max_queue,
                    max_request_bytes=args.max_request_bytes, api_key=api_key, default_risk=args.risk,
                    max_new_tokens_limit=args.max_new_tokens_limit, max_connections=args.max_connections,
                    read_timeout_s=args.read_timeout, shutdown_timeout_s=args.shutdown_timeout,
                    allowed_hosts=tuple(args.allowed_host or ()),
                    allow_control_tokens=args.allow_control_tokens)
    serve.ServeSettings(**settings)  # bad flags fail before the model is loaded
    from .errors import AcuteError
    from .models import load_model
    from .probes import load_probe
    from .scoring import Scorer

    probe_dir = Path(args.probe) if args.probe else _default_probe_dir()
    probe = load_probe(probe_dir)
    model_name = args.model or probe.model_name or DEFAULT_MODEL
    model, tok = load_model(model_name, **load_options_from_args(args))
    try:
        scorer = Scorer(model, tok, probe, max_new_tokens=args.max_new_tokens, batch_size=args.max_batch,
                        allow_other_weights=args.allow_other_weights)
    except (TypeError, ValueError) as e:
        if isinstance(e, AcuteError):  # already says what is wrong (e.g. another model's probe)
            raise
        # a malformed probe.json (e.g. training settings of the wrong type): one line, not a traceback
        raise InputError(f"{probe_dir / 'probe.json'}: cannot serve with this probe's training "
                         f"settings: {e}") from None
    served = Path(model_name).name if Path(model_name).exists() else model_name
    app = serve.create_app(scorer, model_name=served, **settings)
    sock = serve.bind_socket(args.host, args.port)
    host, port = sock.getsockname()[:2]
    url = f"http://{'[' + host + ']' if ':' in host else host}:{port}"
    print(f"serving {served} with probe {probe_dir} at {url}/v1 (API key "
          f"{'required' if api_key else 'not required'}); SIGTERM or Ctrl-C stops", flush=True)
    if api_key is None and args.allow_remote and not args.allowed_host:
        print("note: without an API key only requests to a loopback Host name are served; name the "
              "others with --allowed-host NAME", flush=True)
    serve.run_server(app, sock)
    print("stopped", flush=True)
    return 0


# ---------------------------------------------------------------- rerecord
def cmd_rerecord(args) -> int:
    from .collect import rerecord_store
    from .models import load_model
    from .store import open_store

    manifest = open_store(args.store, verify=False).manifest
    model_name = args.model or manifest.get("model")
    if not model_name:
        raise InputError(f"{args.store} does not name its model; pass --model")
    model, tok = load_model(model_name, **load_options_from_args(args))
    summary = rerecord_store(model, tok, args.store, args.out, pool=args.pool,
                             batch_size=args.batch_size, dtype=args.dtype,
                             shard_size=args.shard_size, progress=not args.quiet,
                             allow_other_weights=args.allow_other_weights)
    print("\n".join(summary.lines()))
    return 0


# ---------------------------------------------------------------- protocol
def cmd_protocol(args) -> int:
    from .protocol import analyze_protocol, run_protocol

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
    from .models import load_model

    task, examples = _load_task(args.task, args.data, args.split, args.limit,
                                **_task_options(args.task_option))
    out = Path(args.out) if args.out else (
        DEFAULT_RUNS / f"protocol-{Path(args.model).stem}-{Path(task.name).stem}")
    model, tok = load_model(args.model, **load_options_from_args(args))
    result = run_protocol(model, tok, task, examples, out, store=args.store, batch_size=args.batch_size,
                          n_bootstrap=args.n_bootstrap, seed=args.seed, variant=args.variant,
                          model_name=_model_name(args.model), shard_size=args.shard_size,
                          progress=not args.quiet)
    print(f"protocol study written to {result.json_path} and {result.md_path}; answers in the store "
          f"{result.store_dir}, per-record results in {out / 'records'}")
    return 0


def cmd_protocol_report(args) -> int:
    from .protocol import write_protocol_report

    out = write_protocol_report(args.runs, args.out)
    print(f"combined protocol report written to {out}")
    return 0


# ---------------------------------------------------------------- demo
def cmd_demo(args) -> int:
    from .demo import run_demo

    run_demo(out=Path(args.out), limit=args.limit or None, model_name=args.model,
             n_bootstrap=args.n_bootstrap, load_options=load_options_from_args(args))
    return 0


# ---------------------------------------------------------------- parser
def load_options_from_args(args, device: str | None = None) -> dict:
    """``load_model`` keywords from the model options every model-loading command shares."""
    return {"dtype": args.model_dtype, "device": device or args.device, "device_map": args.device_map}


def model_options_parser() -> argparse.ArgumentParser:
    """The parent parser of every command that loads a model: where and in which dtype."""
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("model placement")
    g.add_argument("--model-dtype", default="float32",
                   help="weights dtype: float32, bfloat16 or float16 (layer sums stay float32)")
    g.add_argument("--device", default="cpu",
                   help="cpu, cuda or cuda:N (under accelerate launch: each process's own GPU)")
    g.add_argument("--device-map", default=None,
                   help="spread one model over the available devices (e.g. auto); one process only")
    return p


# Long but flat: one declarative block of arguments per command (argparse's own idiom).
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="acute", description=__doc__)
    from . import __version__

    p.add_argument("--version", action="version", version=f"acute {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    model_opts = model_options_parser()

    d = sub.add_parser("demo", help="the whole pipeline on the default model and built-in questions",
                       parents=[model_opts])
    d.add_argument("--out", default=str(DEFAULT_RUNS / "demo"), help="run folder (default %(default)s)")
    d.add_argument("--limit", type=int, default=300,
                   help="built-in questions to collect, sampled across categories (default 300; 0 = all)")
    d.add_argument("--model", default=DEFAULT_MODEL, help="card name (see `acute models`), hub id, folder or .gguf (default %(default)s)")
    d.add_argument("--n-bootstrap", type=int, default=200,
                   help="bootstrap resamples of the intervals (default %(default)s)")
    d.set_defaults(func=cmd_demo)

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
    c.add_argument("--dtype", choices=["float16", "float32"], default="float16", help="storage dtype of layer means")
    c.add_argument("--num-processes", type=int, default=1,
                   help="data-parallel processes: relaunches this command with accelerate launch")
    c.add_argument("--pool", choices=["decoding", "generated"], default="decoding",
                   help="positions pooled per layer: those each answer token was decoded from (the last prompt "
                        "token onwards; default) or the generated tokens' own")
    c.add_argument("--prompt-format", choices=["auto", "chat", "plain"], default="auto",
                   help="chat template or plain prompt (auto: the chat template when the tokenizer has one)")
    c.add_argument("--fail-on-too-long", action="store_true", help="fail instead of skipping prompts beyond the "
                   "context window (with --responses: also empty responses), naming the id")
    c.add_argument("--shard-size", type=int, default=256, help="records per committed shard")
    c.add_argument("--quiet", action="store_true", help="no progress bar")
    c.add_argument("--allow-other-weights", action="store_true",
                   help="resume a store collected from other weights of the same architecture (recorded in the manifest)")
    c.add_argument("--out", default=None, help="store folder (default: runs/<model>-<task>)")
    c.set_defaults(func=cmd_collect)

    sub.add_parser("tasks", help="list tasks and their data").set_defaults(func=cmd_tasks)
    v = sub.add_parser("verify", help="check a store: every shard's structure and checksums, its status, orphans")
    v.add_argument("store", help="store folder")
    v.set_defaults(func=cmd_verify)
    sub.add_parser("models", help="list model cards").set_defaults(func=cmd_models)

    for name, fn, hlp in (("train", cmd_train, "fit a probe on a store's training split and export it"),
                          ("export", cmd_export, "fit a probe on all records of a store and export it")):
        t = sub.add_parser(name, help=hlp)
        t.add_argument("--store", required=True, help="store folder of labelled records")
        t.add_argument("--allow-partial", action="store_true",
                       help="use the committed records of a store whose collection did not finish")
        t.add_argument("--estimator", default=None,
                       help="a probe from `acute evaluate`'s table (e.g. acute-pca10-stacked) or auto (chosen "
                            "by 5-fold cross-validation on the training records); default: "
                            "acute-pca10-stacked, with the cross-validated comparison recorded in probe.json")
        t.add_argument("--view", choices=["mean", "early", "mid", "late", "cosine", "pca10", "pca20"], default=None,
                       help="a plain random-forest probe of this view (the paper's design)")
        t.add_argument("--layer", default=None, help="for --view mean: early, mid, late or a layer index")
        t.add_argument("--out", required=True, help="probe folder (probe.json + safetensors)")
        t.add_argument("--n-estimators", type=int, default=None, help="trees of each forest (default: the estimator's)")
        t.add_argument("--n-jobs", type=int, default=None, help="parallel jobs fitting the forests (default: one)")
        t.add_argument("--seed", type=int, default=0, help="seed of the forests and folds (default %(default)s)")
        if name == "train":
            t.add_argument("--test-fraction", type=float, default=0.3,
                           help="share of records held out, by id, for the printed test metrics (default %(default)s)")
        t.set_defaults(func=fn)

    e = sub.add_parser("evaluate", help="every baseline and ACUTE variant in one table")
    e.add_argument("--store", required=True, help="store folder of labelled records")
    e.add_argument("--allow-partial", action="store_true",
                   help="use the committed records of a store whose collection did not finish")
    e.add_argument("--test-store", default=None, help="a second store as the test set")
    e.add_argument("--allow-overlap", action="store_true",
                   help="allow record ids that occur in both --store and --test-store")
    e.add_argument("--out", default=None, help="results folder (default: STORE/evaluation)")
    e.add_argument("--cv", type=int, default=5,
                   help="stratified folds of the cross-validation (default 5; 0 = one split by id)")
    e.add_argument("--repeats", type=int, default=2, help="repeats of the cross-validation (default 2)")
    e.add_argument("--test-fraction", type=float, default=None,
                   help="evaluate on one split by id with this test share instead of cross-validation")
    e.add_argument("--seed", type=int, default=0, help="seed of the folds, forests and resamples (default %(default)s)")
    e.add_argument("--n-bootstrap", type=int, default=1000,
                   help="bootstrap resamples of the intervals (default %(default)s; 0: none)")
    e.add_argument("--n-jobs", type=int, default=None, help="parallel jobs fitting the forests (default: one)")
    e.add_argument("--n-estimators", type=int, default=None, help="trees of each probe's forest")
    e.add_argument("--search-n-estimators", type=int, default=None,
                   help="trees of the forests that pick the early/mid/late layer")
    e.add_argument("--estimators", default=None,
                   help="comma-separated subset, e.g. raw,platt,acute-pca10,acute-pca10-stacked,auto "
                        "(default: all)")
    e.add_argument("--reliability", choices=["all", "best"], default="all",
                   help="reliability diagrams for every estimator, or raw + the best baseline and ACUTE variant")
    e.add_argument("--group-by", default=None, metavar="FIELD",
                   help="folds that keep each value of this record metadata field on one side "
                        "(leave-category-out, leave-subject-out); every record must have it")
    e.add_argument("--meta-fields", default=None,
                   help="comma-separated metadata fields the platt+meta control one-hots and the "
                        "within-group AUROC groups by (default: the store's task's, e.g. subject for MMLU)")
    e.add_argument("--no-controls", action="store_true",
                   help="leave out the control rows (constant, platt+meta, tfidf+platt, question-only)")
    e.add_argument("--quiet", action="store_true", help="no progress bar")
    e.set_defaults(func=cmd_evaluate)

    lc = sub.add_parser("learning-curve", help="auc-euro and smECE against the number of training records")
    lc.add_argument("--store", required=True, help="store folder of labelled records")
    lc.add_argument("--allow-partial", action="store_true",
                    help="use the committed records of a store whose collection did not finish")
    lc.add_argument("--out", default=None, help="default: STORE/learning-curve")
    lc.add_argument("--estimators", default=None,
                    help="probes to show next to the best baseline (default: acute-pca10,acute-pca10-stacked)")
    lc.add_argument("--sizes", default=None,
                    help="comma-separated training-set sizes (default: 50,100,200,... and all of a fold)")
    lc.add_argument("--cv", type=int, default=5, help="stratified folds (default %(default)s)")
    lc.add_argument("--repeats", type=int, default=5, help="repeats of the cross-validation (default %(default)s)")
    lc.add_argument("--seed", type=int, default=0, help="seed of the folds and forests (default %(default)s)")
    lc.add_argument("--n-estimators", type=int, default=None, help="trees of each probe's forest")
    lc.add_argument("--n-jobs", type=int, default=None, help="parallel jobs fitting the forests (default: one)")
    lc.add_argument("--quiet", action="store_true", help="no progress bar")
    lc.set_defaults(func=cmd_learning_curve)

    pl = sub.add_parser("plot", help="euro curves and reliability diagrams from predictions.csv")
    pl.add_argument("--predictions", required=True, help="predictions.csv written by `acute evaluate`")
    pl.add_argument("--out", required=True, help="folder for the PNG plots")
    pl.set_defaults(func=cmd_plot)

    s = sub.add_parser("score", help="generate and decide trust / abstain with a probe", parents=[model_opts])
    s.add_argument("question", nargs="?", help="the question to answer and score (or --jsonl)")
    s.add_argument("--probe", default=None, help="probe directory (default: the shipped SmolLM2 probe)")
    s.add_argument("--model", default=None, help="default: the model named in the probe")
    s.add_argument("--risk", type=float, default=0.5,
                   help="risk level u: trust iff confidence > u (default %(default)s)")
    s.add_argument("--jsonl", default=None, help="file of prompts (JSON lines with 'prompt', 'question' or 'messages', "
                   "and optionally 'response': scored as given instead of generated), or - for stdin")
    s.add_argument("--response", default=None, metavar="TEXT",
                   help="score this answer (from another engine) to the question instead of generating one")
    s.add_argument("--max-new-tokens", type=int, default=None, help="longest answer (default: the probe's training setting)")
    s.add_argument("--batch-size", type=int, default=BATCH_SIZE, help="prompts run together (default %(default)s)")
    s.add_argument("--allow-other-weights", action="store_true",
                   help="score with a probe trained on other weights of the same architecture")
    s.add_argument("--task", default=None,
                   help="wrap questions in this task's prompt (default: the probe's open-QA task; 'none': ask as is)")
    s.set_defaults(func=cmd_score)

    sv = sub.add_parser("serve", help="the trust-gate HTTP service: /v1/score and OpenAI-compatible "
                        "/v1/chat/completions with dynamic batching", parents=[model_opts])
    sv.add_argument("--model", default=None, help="default: the model named in the probe")
    sv.add_argument("--probe", default=None, help="probe directory (default: the shipped SmolLM2 probe)")
    sv.add_argument("--host", default="127.0.0.1",
                    help="address to bind (default loopback; others need an API key or --allow-remote)")
    sv.add_argument("--port", type=int, default=8000, help="TCP port (0: a free one, printed)")
    sv.add_argument("--max-batch", type=int, default=16, help="most requests generated together")
    sv.add_argument("--max-wait-ms", type=float, default=10.0,
                    help="longest a batch waits for more requests after its first")
    sv.add_argument("--max-queue", type=int, default=256, help="most waiting requests; more get 503")
    sv.add_argument("--max-request-bytes", type=int, default=1_000_000, help="largest request body; more get 413")
    sv.add_argument("--max-new-tokens", type=int, default=None, help="default: the probe's training setting")
    sv.add_argument("--max-new-tokens-limit", type=int, default=None,
                    help="most new tokens a request may ask for; more get 400 (default: 4x --max-new-tokens)")
    sv.add_argument("--max-connections", type=int, default=512,
                    help="open connections or running requests before new requests get 503")
    sv.add_argument("--read-timeout", type=float, default=10.0,
                    help="seconds a request's head, then its body, may take to arrive; slower gets 408")
    sv.add_argument("--shutdown-timeout", type=float, default=30.0,
                    help="seconds in-flight requests get to finish on SIGTERM; the rest get 503")
    sv.add_argument("--risk", type=float, default=0.5, help="risk level of chat requests that give none")
    sv.add_argument("--api-key", default=None,
                    help="require 'Authorization: Bearer KEY' (default: $ACUTE_API_KEY; none: no key)")
    sv.add_argument("--allow-remote", action="store_true",
                    help="allow a non-loopback --host without an API key")
    sv.add_argument("--allowed-host", action="append", metavar="NAME",
                    help="without an API key, also serve requests whose Host is NAME (repeatable; '*': any)")
    sv.add_argument("--allow-control-tokens", action="store_true",
                    help="let text in requests become the tokenizer's control tokens (default: kept as text)")
    sv.add_argument("--allow-other-weights", action="store_true",
                    help="serve a probe trained on other weights of the same architecture")
    sv.set_defaults(func=cmd_serve)

    rr = sub.add_parser("rerecord", help="teacher-force a store's generations again (e.g. another pooling) "
                        "into a new store, without regenerating", parents=[model_opts])
    rr.add_argument("store", help="store folder whose generations are teacher-forced again")
    rr.add_argument("--out", required=True, help="new store folder")
    rr.add_argument("--pool", choices=["decoding", "generated"], default=None, help="default: the store's")
    rr.add_argument("--model", default=None, help="default: the model named in the store")
    rr.add_argument("--batch-size", type=int, default=BATCH_SIZE, help="records run together (default %(default)s)")
    rr.add_argument("--dtype", choices=["float16", "float32"], default=None,
                    help="storage dtype of layer means (default: the store's)")
    rr.add_argument("--shard-size", type=int, default=256, help="records per committed shard")
    rr.add_argument("--quiet", action="store_true", help="no progress bar")
    rr.add_argument("--allow-other-weights", action="store_true",
                    help="re-record with weights other than the store's (same architecture)")
    rr.set_defaults(func=cmd_rerecord)

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
    pr.add_argument("--n-bootstrap", type=int, default=1000,
                    help="paired bootstrap resamples of the gaps' intervals (default %(default)s)")
    pr.add_argument("--seed", type=int, default=0, help="seed of the resamples (default %(default)s)")
    pr.add_argument("--variant", choices=["unit", "percent"], default="unit",
                    help="elicitation template: a probability from 0.0 to 1.0, or 0 to 100 (default %(default)s)")
    pr.add_argument("--out", default=None,
                    help="run folder: protocol.json/.md, records/ (resumable) and store/ by default")
    pr.add_argument("--store", default=None,
                    help="store of the answers: reused when its model and settings match (only "
                    "missing examples are generated), refused otherwise (default OUT/store)")
    pr.add_argument("--shard-size", type=int, default=32,
                    help="examples per committed shard of per-record results")
    pr.add_argument("--analysis-only", action="store_true",
                    help="rerun the analysis of the run in --out from its records (no model)")
    pr.add_argument("--quiet", action="store_true", help="no progress bars")
    pr.set_defaults(func=cmd_protocol)

    sub.add_parser("run", help="the reproduction pipeline: models x tasks -> stores, evaluations, "
                   "protocol studies, docs/results (see `acute run --help`)", add_help=False)

    rp = sub.add_parser("protocol-report", help="combine protocol runs into one shift table")
    rp.add_argument("runs", nargs="+", help="protocol run folders (each with protocol.json)")
    rp.add_argument("--out", required=True, help="folder of the combined report")
    rp.set_defaults(func=cmd_protocol_report)
    return p


def show_logs(level: int = 20) -> None:
    """Show acute's log records (progress of slow steps, where outputs went) on stderr as
    ``[acute] message``; library code logs, only the command line decides to show it."""
    import logging

    logger = logging.getLogger("acute")
    if not any(getattr(h, "_acute_cli", False) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("[acute] %(message)s"))
        handler._acute_cli = True
        logger.addHandler(handler)
    logger.setLevel(level)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread so that it unwinds like Ctrl-C (stores are marked
    "interrupted", temporaries removed)."""


def _on_sigterm(signum, frame):
    raise Terminated()


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    show_logs()
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if main_thread else None
    try:
        if argv[:1] == ["run"]:  # the pipeline parses its own arguments (`acute run --help`)
            from .pipeline import main as run_main

            return _guarded(run_main, argv[1:])
        args = build_parser().parse_args(argv)
        args.argv = argv
        return _guarded(args.func, args)
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)  # main() may be called from a larger program


def _guarded(func, arg) -> int:
    """Run a command; domain errors become one line and exit status 2, anything else is a bug
    and shows its traceback."""
    from .errors import AcuteError

    try:
        return func(arg)
    except (AcuteError, FileNotFoundError) as e:
        _err(str(e))
        return 2
    except OSError as e:  # no permission, a full disk, a file where a folder should be
        where = f": {e.filename}" if e.filename else ""
        hint = "; committed shards are kept and a rerun resumes" if e.errno == errno.ENOSPC else ""
        _err(f"{e.strerror or e}{where}{hint}")
        return 2
    except KeyboardInterrupt as e:
        _err(("terminated" if isinstance(e, Terminated) else "interrupted")
             + "; committed shards are kept and a rerun resumes")
        return 143 if isinstance(e, Terminated) else 130


if __name__ == "__main__":
    sys.exit(main())
