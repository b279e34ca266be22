"""``acute train``, ``export``, ``evaluate``, ``learning-curve`` and ``plot``: probes and their evaluation."""

from __future__ import annotations

import csv
import logging
import sys
from pathlib import Path

import numpy as np

from ..errors import InputError
from ..estimators.controls import CONTROLS
from ..estimators.probe_names import QUESTION_ONLY_ESTIMATORS
from ..evaluation.crossval import DEFAULT_TEST_FRACTION, inputs_for, cv_folds
from ..evaluation.grouping import RECORD_IDS, store_groups
from ..evaluation.settings import DEFAULT_FOLDS, DEFAULT_REPEATS, EvaluationSettings
from ..evaluation.choice import AUTO_FOLDS, AUTO_REPEATS
from ..evaluation.trained import PRECHECK_ESTIMATOR
from ..evaluation.training import check_precheck_store, train_probe
from ..estimators.scoring_setting import DEFAULT_SCORING_SETTING, SCORING_SETTINGS
from ..estimators.stack_file import refuse_recertify
from ..metrics import DEFAULT_N_BOOTSTRAP
from ..metrics.certify import DEFAULT_BACKEND, DEFAULT_DELTA, DEFAULT_FWER, FWER_METHODS, check_delta, check_max_error
from .common import add_store_arguments, estimator_list, level_arg, open_labelled_store
from ..evaluation.label_free import train_label_free
from ..estimators.probe_file import load_probe
from ..evaluation.recertify import recertify
from ..evaluation import evaluate_store, write_evaluation
from ..evaluation.learning_curve import learning_curve, write_learning_curve
from ..estimators.baselines import BASELINES
from ..estimators.prefix_controls import PREFIX_CONTROLS
from ..evaluation.prefix import evaluate_prefixes, write_prefix_evaluation

__all__ = ['add_evaluate', 'add_learning_curve', 'add_plot', 'add_prefix', 'add_recertify', 'add_train_export', 'cmd_evaluate', 'cmd_export', 'cmd_learning_curve', 'cmd_plot', 'cmd_prefix', 'cmd_recertify', 'cmd_train']

logger = logging.getLogger(__name__)


def _train(args, test_fraction: float):
    """Fit and describe the probe ``train``/``export`` asked for, printing how ``auto`` chose."""
    if args.max_error is None and (args.delta is not None or args.calibration_store is not None):
        raise InputError("--delta and --calibration-store go with --max-error ALPHA (the error "
                         "rate to certify among trusted answers)")
    with_precheck = args.with_precheck
    if args.target != "gold":
        return _train_label_free(args, test_fraction, with_precheck)
    if args.calibration_labels is not None:
        raise InputError("--calibration-labels goes with --target consistency or semantic-entropy (a probe "
                         "trained on gold labels calibrates on all of them)")
    store = open_labelled_store(args.store, args.allow_partial)
    if with_precheck:  # a store without last-prompt states fails before anything is fitted
        check_precheck_store(store, "--with-precheck")
    if args.with_stop_early:  # a store without prefix checkpoints fails before anything is fitted
        store.checkpoint_tokens
    calibration = (open_labelled_store(args.calibration_store, args.allow_partial)
                   if args.calibration_store else None)
    trained = train_probe(store, args.estimator, view=args.view, layer=args.layer, test_fraction=test_fraction,
                          seed=args.seed, n_jobs=args.n_jobs, n_estimators=args.n_estimators,
                          store_path=args.store, max_error=args.max_error,
                          delta=DEFAULT_DELTA if args.delta is None else args.delta, calibration_store=calibration,
                          calibration_path=args.calibration_store, certify_backend=args.certify_backend,
                          certify_fwer=args.certify_procedure,
                          precheck_estimator=with_precheck, group_by=args.group_by,
                          stop_early=args.with_stop_early, scoring_setting=args.scoring_setting,
                          auto_folds=args.auto_folds, auto_repeats=args.auto_repeats)
    if trained.choice_line:  # auto by the committed rule (acute.evaluation.choice): one line
        print(f"auto: {trained.choice_line}")
    est = trained.auto
    if est is not None:
        how = "chosen by" if est.refit == "best" else "the default; best probe in"
        print(f"{est.chosen_}: {how} {est.cv}-fold cross-validation on the {trained.n_train} training records "
              f"(auc-euro {est.scores_[est.chosen_]['auc_euro_all']:.4f}; best probe {est.best_} "
              f"{est.scores_[est.best_]['auc_euro_all']:.4f}; best baseline {est.best_baseline_} "
              f"{est.scores_[est.best_baseline_]['auc_euro_all']:.4f})")
        if est.warning_:
            print(f"acute: warning: {est.warning_}", file=sys.stderr)
    trained.save(args.out)
    return store, trained


def _train_label_free(args, test_fraction: float, with_precheck):
    """``--target consistency|semantic-entropy``: a probe fitted on the samples' agreement,
    calibrated on ``--calibration-labels`` gold labels."""
    given = [flag for flag, value in (("--estimator", args.estimator), ("--view", args.view),
                                      ("--max-error", args.max_error), ("--with-precheck", with_precheck),
                                      ("--with-stop-early", args.with_stop_early or None)) if value]
    if given:
        raise InputError(f"--target {args.target} trains the label-free probe only; drop {', '.join(given)}")
    if args.calibration_labels is None:
        raise InputError(f"--target {args.target} needs --calibration-labels N: the gold labels its "
                         "probabilities are calibrated on (0: a ranking only, not probabilities)")
    store = open_labelled_store(args.store, args.allow_partial)
    trained = train_label_free(store, args.target, args.calibration_labels, test_fraction=test_fraction,
                               seed=args.seed, n_jobs=args.n_jobs, n_estimators=args.n_estimators,
                               store_path=args.store)
    if not args.calibration_labels:
        print("acute: warning: --calibration-labels 0: the probe ranks answers but its scores are "
              "P(samples agree), not calibrated P(correct)", file=sys.stderr)
    trained.save(args.out)
    return store, trained


def _print_certificates(entries) -> None:
    """Say what each certificate certifies, or loudly that it certifies nothing and why."""
    for e in entries:
        at = f"max_error {e['alpha']:g}, delta {e['delta']:g}"
        source = ("out-of-fold predictions of the training records" if e["source"] == "out-of-fold"
                  else f"the calibration store {e.get('calibration_store')}")
        if e["valid"]:
            print(f"certificate at {at}: trust iff confidence >= {e['threshold']:g} ({e['n_calibration']} "
                  f"calibration records, {source}: {e['calibration_coverage']:.3f} of them reach it, "
                  f"precision {e['calibration_precision']:.3f}; {e['backend']}, {e['fwer']}); decide by it "
                  f"with `acute score --max-error {e['alpha']:g}` or a request's max_error")
            continue
        print(f"acute: warning: NO certificate at {at} from the {e['n_calibration']} calibration records "
              f"({source}): {e['reason']}. probe.json records it as invalid, and scoring with "
              f"--max-error {e['alpha']:g} is refused",
              file=sys.stderr)


def _print_precheck(trained, out, records: str) -> None:
    """Say where the question-only probe went and how to gate with it."""
    if trained.precheck is None:
        return
    print(f"precheck ({trained.precheck.view} view of the question-only probe: last-prompt states, no raw "
          f"confidence) fitted on {records} records, "
          f"written to {Path(out) / 'precheck'}; skip generating with `acute score --precheck U0` "
          "or a request's precheck")


def _print_stop_early(trained, out) -> None:
    """Say where the checkpoint model went and how to stop generations with it."""
    model = trained.stop_early
    if model is None:
        return
    print(f"stop-early: prefix probes at {', '.join(map(str, model.checkpoints))} tokens and the out-of-fold "
          f"scores of {model.scores.shape[0]} records written to {Path(out) / 'stop-early'}; stop generations "
          "the gate will not trust with `acute score --stop-early EPS` or `acute serve --stop-early EPS`")


def cmd_train(args) -> int:
    _, trained = _train(args, args.test_fraction)
    print(f"probe ({trained.label}) fitted on {trained.n_train} records, written to {args.out}")
    _print_precheck(trained, args.out, str(trained.n_train))
    _print_stop_early(trained, args.out)
    held = trained.held_out
    if held:
        print(f"held-out records: {held['n']} (accuracy {held['accuracy']:.3f}); "
              "for intervals use `acute evaluate` (cross-validated)")
        pre = trained.precheck_held_out
        print(f"{'':<10} {'probe':>8} {'raw':>8} {'platt':>8}" + (f" {'precheck':>8}" if pre else ""))
        for k in ("smece", "auc_euro", "brier"):
            print(f"{k:<10} {held[k]:>8.4f} {held['raw_' + k]:>8.4f} {held['platt_' + k]:>8.4f}"
                  + (f" {pre[k]:>8.4f}" if pre else ""))
    _print_certificates(trained.certificates)
    return 0


def cmd_export(args) -> int:
    """Fit on every record of the store (after evaluating with train/evaluate) and export."""
    store, trained = _train(args, 0.0)
    print(f"probe ({trained.label}) fitted on all {len(store)} records, exported to {args.out}")
    _print_precheck(trained, args.out, f"all {len(store)}")
    _print_stop_early(trained, args.out)
    _print_certificates(trained.certificates)
    return 0


def cmd_recertify(args) -> int:
    """Re-certify an exported probe on a store collected under another setting; write a new probe."""
    if Path(args.out).resolve() == Path(args.probe).resolve():
        raise InputError(f"--out {args.out} is the probe being re-certified; write the new probe to another "
                         "folder (the original stays as it is)")
    probe = load_probe(args.probe)
    refuse_recertify(probe, args.probe)  # a stack has no calibration map to refit
    store = open_labelled_store(args.store, args.allow_partial)
    done = recertify(probe, store, max_error=args.max_error, delta=args.delta, restack=args.restack,
                     backend=args.certify_backend, seed=args.seed, store_path=args.store)
    done.save(args.out)
    s, old = done.summary, probe.domain or {}
    new = done.probe.domain
    changed = [f"{k} {old.get(k)!r} -> {new.get(k)!r}" for k in ("engine", "engine_version", "model_dtype",
                                                                 "quantization", "pooling", "prompt_format")
               if old.get(k) != new.get(k)]
    print(f"re-certified on {s['n']} records of {args.store} (accuracy {s['accuracy']:.3f}); domain "
          + ("; ".join(changed) if changed else "unchanged" if probe.domain else f"now {new}"))
    b = s["before"]
    print(f"the probe as it was, on these records: smECE {b['smece']:.4f}, auc-euro {b['auc_euro']:.4f}")
    if s["restacked"]:
        a = s["after_out_of_fold"]
        print(f"{probe.calibration} map refitted: smECE {a['smece']:.4f}, auc-euro {a['auc_euro']:.4f} "
              f"(out of fold)")
    _print_certificates(done.certificates)
    print(f"new probe written to {args.out}; {args.probe} is unchanged")
    return 0


def cmd_evaluate(args) -> int:
    store = open_labelled_store(args.store, args.allow_partial)
    test_store = open_labelled_store(args.test_store, args.allow_partial) if args.test_store else None
    out = Path(args.out) if args.out else Path(args.store) / "evaluation"
    settings = EvaluationSettings(estimators=estimator_list(args.estimators), cv=args.cv, repeats=args.repeats,
                                  test_fraction=args.test_fraction, seed=args.seed, n_bootstrap=args.n_bootstrap,
                                  n_jobs=args.n_jobs,
                                  probe_params={"n_estimators": args.n_estimators,
                                                "search_n_estimators": args.search_n_estimators},
                                  reliability=args.reliability, allow_overlap=args.allow_overlap,
                                  controls=not args.no_controls, group_by=args.group_by,
                                  metadata_fields=estimator_list(args.meta_fields))
    result = evaluate_store(store, test_store=test_store, settings=settings, progress=not args.quiet)
    write_evaluation(result, out)
    print(result.markdown())
    print(f"evaluation written to {out.resolve()}")
    return 0


def cmd_learning_curve(args) -> int:
    from tqdm.auto import tqdm  # lazy: import time

    store = open_labelled_store(args.store, args.allow_partial)
    out = Path(args.out) if args.out else Path(args.store) / "learning-curve"
    estimators = estimator_list(args.estimators) or ["acute-pca10", "acute-pca10-stacked"]
    sizes = None
    if args.sizes:
        try:
            sizes = [int(v) for v in args.sizes.split(",") if v.strip()]
        except ValueError:
            raise InputError(f"--sizes must be comma-separated integers, got {args.sizes!r}") from None

    group_by, groups = store_groups(store, args.group_by)
    lc = learning_curve(inputs_for(store, list(BASELINES) + list(estimators)), store.correct,
                        store.ids, estimators=estimators, sizes=sizes,
                        n_splits=args.cv, repeats=args.repeats, seed=args.seed, n_jobs=args.n_jobs,
                        probe_params={"n_estimators": args.n_estimators},
                        progress=lambda it: tqdm(it, desc="folds", disable=args.quiet, file=sys.stderr),
                        groups=groups, group_by=group_by)
    files = write_learning_curve(lc, out, model=store.manifest.get("model"), task=store.manifest.get("task"),
                                 params={"store": str(Path(args.store).resolve()),
                                                  "estimators": estimators, "seed": args.seed,
                                                  "n_estimators": args.n_estimators, "group_by": group_by})
    print(lc.to_markdown())
    print(f"learning curve written to {out} ({', '.join(p.name for p in files.values())})")
    return 0


def cmd_prefix(args) -> int:
    store = open_labelled_store(args.store, args.allow_partial)
    out = Path(args.out) if args.out else Path(args.store) / "prefix"
    group_by, groups = store_groups(store, args.group_by)
    folds = cv_folds(store.ids, store.correct, args.cv, args.repeats, seed=args.seed, groups=groups,
                     group_name=group_by or "record ids")
    controls = PREFIX_CONTROLS if args.controls is None else tuple(
        c.strip() for c in args.controls.split(",") if c.strip() and c.strip() != "none")
    result = evaluate_prefixes(store, folds, controls=controls, tokenizer=args.tokenizer, groups=groups,
                               random_state=args.seed, n_jobs=args.n_jobs,
                               probe_params={"n_estimators": args.n_estimators},
                               progress=None if args.quiet else lambda what: print(f"fitting {what}", file=sys.stderr))
    files = write_prefix_evaluation(result, out, model=store.manifest.get("model"), task=store.manifest.get("task"),
                                    params={"store": str(Path(args.store).resolve()), "cv": args.cv,
                                            "repeats": args.repeats, "seed": args.seed, "group_by": group_by,
                                            "controls": list(controls), "tokenizer": args.tokenizer})
    print(result.to_markdown())
    print(f"prefix probes written to {out} ({', '.join(p.name for p in files.values())})")
    return 0


def cmd_plot(args) -> int:
    from ..evaluation.plots import euro_curves, reliability_diagram  # heavy: matplotlib

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


def add_train_export(sub, model_opts) -> None:
    """``acute train`` and ``acute export``."""
    for name, fn, hlp in (("train", cmd_train, "fit a probe on a store's training split and export it"),
                          ("export", cmd_export, "fit a probe on all records of a store and export it")):
        t = sub.add_parser(name, help=hlp)
        add_store_arguments(t, out_required=True, out_help="probe folder (probe.json + safetensors)")
        t.add_argument("--estimator", default=None,
                       help="a probe from `acute evaluate`'s table (e.g. acute-pca10-stacked), a stack (acute-all, "
                            "visible-all: exported as a stack folder) or auto (acute-all, visible-all or "
                            "acute-pca10-stacked, chosen by benchmarks/every_signal.md's rule in grouped "
                            "cross-validation on the training records); default: acute-pca10-stacked, with the "
                            "cross-validated comparison of the probes recorded in probe.json")
        t.add_argument("--for", dest="scoring_setting", choices=SCORING_SETTINGS, default=DEFAULT_SCORING_SETTING,
                       help="where the gate will score: serve (chat requests: no benchmark metadata, a reply "
                            "parser only for open-QA tasks), score (acute score with the task) or store (every "
                            "source the store has); a stack and auto read only what it provides "
                            "(default %(default)s)")
        t.add_argument("--auto-folds", type=int, default=AUTO_FOLDS, metavar="K",
                       help="with --estimator auto: folds of the grouped cross-validation (default %(default)s)")
        t.add_argument("--auto-repeats", type=int, default=AUTO_REPEATS, metavar="R",
                       help="with --estimator auto: repeats of it (default %(default)s)")
        t.add_argument("--view", choices=["mean", "early", "mid", "late", "cosine", "pca10", "pca20"], default=None,
                       help="a plain random-forest probe of this view (the paper's design)")
        t.add_argument("--layer", default=None, help="for --view mean: early, mid, late or a layer index")
        t.add_argument("--max-error", type=level_arg(check_max_error, "--max-error"), nargs="+", default=None,
                       metavar="ALPHA",
                       help="certify a trust threshold for each error rate ALPHA allowed among trusted "
                            "answers (Learn-then-Test), recorded in probe.json")
        t.add_argument("--delta", type=level_arg(check_delta, "--delta"), default=None,
                       help=f"with --max-error: the chance the certificate may fail (default {DEFAULT_DELTA})")
        t.add_argument("--calibration-store", default=None, metavar="STORE",
                       help="with --max-error: calibrate on this store's records (same model and prompt "
                            "format) instead of the out-of-fold predictions of the training records")
        t.add_argument("--certify-procedure", choices=FWER_METHODS, default=DEFAULT_FWER,
                       help="with --max-error: the Learn-then-Test procedure (default %(default)s: a "
                            "fixed sequence from the top over thresholds placed by the calibration "
                            "confidences alone; benchmarks/certify_labels.md compares them)")
        t.add_argument("--certify-backend", choices=["binomial", "mapie"], default=DEFAULT_BACKEND,
                       help="with --max-error: acute's own exact binomial test or MAPIE's controller "
                            "(the acute[risk] extra; it counts an error too many now and then, so "
                            "certifies less) (default %(default)s)")
        t.add_argument("--with-precheck", nargs="?", const=PRECHECK_ESTIMATOR, default=None,
                       choices=QUESTION_ONLY_ESTIMATORS, metavar="ESTIMATOR",
                       help="also fit a question-only probe (last-prompt states, no raw confidence) into "
                            "OUT/precheck: decides before generating (acute score --precheck U0); optionally "
                            f"its view: {PRECHECK_ESTIMATOR} (PCA-10, default), question-only-cosine, -pca20, "
                            "-early, -mid or -late")
        t.add_argument("--with-stop-early", action="store_true",
                       help="also fit a prefix probe per checkpoint (4, 8, 16, 32, 64 tokens) and keep their "
                            "out-of-fold scores into OUT/stop-early: stops generations the gate will not trust "
                            "(acute score --stop-early EPS); the store must keep prefix checkpoints")
        t.add_argument("--target", choices=["gold", "consistency", "semantic-entropy"], default="gold",
                       help="what the probe's forest learns: the gold labels (default), or without them the "
                            "agreement of the store's sampled answers (acute collect --samples K)")
        t.add_argument("--calibration-labels", type=int, default=None, metavar="N",
                       help="with --target consistency|semantic-entropy: the gold labels (N records drawn with "
                            "--seed) its probabilities are Platt-calibrated on; 0: a ranking only")
        t.add_argument("--n-estimators", type=int, default=None, help="trees of each forest (default: the estimator's)")
        t.add_argument("--n-jobs", type=int, default=None, help="parallel jobs fitting the forests (default: all cores; results are the same for any value)")
        t.add_argument("--seed", type=int, default=0, help="seed of the forests and folds (default %(default)s)")
        add_group_by(t, certification=True)
        if name == "train":
            t.add_argument("--test-fraction", type=float, default=DEFAULT_TEST_FRACTION,
                           help="share of records held out, by id, for the printed test metrics (default %(default)s)")
        t.set_defaults(func=fn)


def add_recertify(sub, model_opts) -> None:
    """``acute recertify``."""
    r = sub.add_parser("recertify", help="re-certify a probe's threshold (and optionally its calibration) on "
                                          "labelled records of another setting (dtype, engine, version)")
    r.add_argument("--probe", required=True, help="the exported probe folder (left unchanged)")
    r.add_argument("--store", required=True,
                   help="labelled records of the probe's model collected under the new setting, none of "
                        "them a training record of the probe")
    r.add_argument("--out", required=True, help="folder of the new probe (its domain: the store's setting)")
    r.add_argument("--max-error", type=level_arg(check_max_error, "--max-error"), nargs="+", default=None,
                   metavar="ALPHA", help="error rates to certify (default: those the probe carries)")
    r.add_argument("--delta", type=level_arg(check_delta, "--delta"), default=None,
                   help=f"the chance the certificate may fail (default: the probe's, else {DEFAULT_DELTA})")
    r.add_argument("--restack", action="store_true",
                   help="also refit the probe's calibration map (stacked, Platt or isotonic) on these records; "
                        "the certificate is then calibrated on its out-of-fold predictions")
    r.add_argument("--certify-backend", choices=["binomial", "mapie"], default=DEFAULT_BACKEND,
                   help="acute's own exact binomial test or MAPIE's controller (the acute[risk] extra) "
                        "(default %(default)s); the procedure is acute.metrics.certify's default")
    r.add_argument("--seed", type=int, default=0, help="seed of the --restack folds (default %(default)s)")
    r.add_argument("--allow-partial", action="store_true",
                   help="use the committed records of a store whose collection did not finish")
    r.set_defaults(func=cmd_recertify)


def add_evaluate(sub, model_opts) -> None:
    """``acute evaluate``."""
    e = sub.add_parser("evaluate", help="every baseline and ACUTE variant in one table")
    add_store_arguments(e, out_help="results folder (default: STORE/evaluation)")
    e.add_argument("--test-store", default=None, help="a second store as the test set")
    e.add_argument("--allow-overlap", action="store_true",
                   help="allow record ids that occur in both --store and --test-store")
    e.add_argument("--cv", type=int, default=DEFAULT_FOLDS,
                   help="stratified folds of the cross-validation (default %(default)s; 0 = one split by id)")
    e.add_argument("--repeats", type=int, default=DEFAULT_REPEATS,
                   help="repeats of the cross-validation (default %(default)s)")
    e.add_argument("--test-fraction", type=float, default=None,
                   help="evaluate on one split by id with this test share instead of cross-validation")
    e.add_argument("--seed", type=int, default=0, help="seed of the folds, forests and resamples (default %(default)s)")
    e.add_argument("--n-bootstrap", type=int, default=DEFAULT_N_BOOTSTRAP,
                   help="bootstrap resamples of the intervals (default %(default)s; 0: none)")
    e.add_argument("--n-jobs", type=int, default=None, help="parallel jobs fitting the forests (default: all cores; results are the same for any value)")
    e.add_argument("--n-estimators", type=int, default=None, help="trees of each probe's forest")
    e.add_argument("--search-n-estimators", type=int, default=None,
                   help="trees of the forests that pick the early/mid/late layer")
    e.add_argument("--estimators", default=None,
                   help="comma-separated estimators, e.g. raw,platt,acute-mid,acute-pca20-stacked, or 'all' "
                        "(default: the baselines, acute-pca10 and acute-cosine plain and stacked, auto)")
    e.add_argument("--reliability", choices=["all", "best"], default="all",
                   help="reliability diagrams for every estimator, or raw + the best baseline and ACUTE variant")
    add_group_by(e)
    e.add_argument("--meta-fields", default=None,
                   help="comma-separated metadata fields the platt+meta control one-hots and the "
                        "within-group AUROC groups by (default: the store's task's, e.g. subject for MMLU)")
    e.add_argument("--no-controls", action="store_true",
                   help=f"leave out the control rows ({', '.join(CONTROLS)})")
    e.add_argument("--quiet", action="store_true", help="no progress bar")
    e.set_defaults(func=cmd_evaluate)


def add_group_by(parser, certification: bool = False) -> None:
    """``--group-by``: the folds' and resamples' groups (evaluate, learning-curve), or what the
    held-out split, ``auto``'s comparison and a certificate's out-of-fold folds keep whole (train, export)."""
    what = ("keep each value of this record metadata field on one side of the held-out split (acute train), "
            "of auto's cross-validated comparison and of a certificate's out-of-fold folds" if certification else
            "folds that keep each value of this record metadata field on one side, and intervals that "
            "resample the values together")
    parser.add_argument("--group-by", default=None, metavar="FIELD",
                        help=f"{what} (leave-category-out, records sharing a tool set); every record must "
                             "have it. Default: the task's own (APIGen, BFCL: toolset; others: record ids); "
                             f"'{RECORD_IDS}' for record ids")


def add_learning_curve(sub, model_opts) -> None:
    """``acute learning-curve``."""
    lc = sub.add_parser("learning-curve", help="auc-euro and smECE against the number of training records")
    add_store_arguments(lc, out_help="default: STORE/learning-curve")
    lc.add_argument("--estimators", default=None,
                    help="probes to show next to the best baseline (default: acute-pca10,acute-pca10-stacked)")
    lc.add_argument("--sizes", default=None,
                    help="comma-separated training-set sizes (default: 50,100,200,... and all of a fold)")
    lc.add_argument("--cv", type=int, default=5, help="stratified folds (default %(default)s)")
    lc.add_argument("--repeats", type=int, default=5, help="repeats of the cross-validation (default %(default)s)")
    lc.add_argument("--seed", type=int, default=0, help="seed of the folds and forests (default %(default)s)")
    add_group_by(lc)
    lc.add_argument("--n-estimators", type=int, default=None, help="trees of each probe's forest")
    lc.add_argument("--n-jobs", type=int, default=None, help="parallel jobs fitting the forests (default: all cores; results are the same for any value)")
    lc.add_argument("--quiet", action="store_true", help="no progress bar")
    lc.set_defaults(func=cmd_learning_curve)


def add_prefix(sub, model_opts) -> None:
    """``acute prefix``."""
    pf = sub.add_parser("prefix", help="prefix probes: correctness predicted after k generated tokens, "
                                       "against the log-prob rule, the reply so far's surface and text, their "
                                       "stack and the question-only probe")
    add_store_arguments(pf, out_help="default: STORE/prefix")
    pf.add_argument("--cv", type=int, default=5, help="stratified folds (default %(default)s)")
    pf.add_argument("--repeats", type=int, default=1, help="repeats of the cross-validation (default %(default)s)")
    pf.add_argument("--seed", type=int, default=0, help="seed of the folds and forests (default %(default)s)")
    add_group_by(pf)
    pf.add_argument("--controls", default=None,
                    help="comma-separated controls fitted at each checkpoint beside the probe (default: all of "
                         "log-prob, surface-so-far, text-so-far, visible-so-far; 'none' for none); all but "
                         "log-prob decode the generated tokens with the store's tokenizer")
    pf.add_argument("--tokenizer", default=None,
                    help="the model folder or hub id whose tokenizer decodes the generated tokens "
                         "(default: the store manifest's tokenizer)")
    pf.add_argument("--n-estimators", type=int, default=None, help="trees of each probe's forest")
    pf.add_argument("--n-jobs", type=int, default=None, help="parallel jobs fitting the forests (default: all cores)")
    pf.add_argument("--quiet", action="store_true", help="no progress lines")
    pf.set_defaults(func=cmd_prefix)


def add_plot(sub, model_opts) -> None:
    """``acute plot``."""
    pl = sub.add_parser("plot", help="euro curves and reliability diagrams from predictions.csv")
    pl.add_argument("--predictions", required=True, help="predictions.csv written by `acute evaluate`")
    pl.add_argument("--out", required=True, help="folder for the PNG plots")
    pl.set_defaults(func=cmd_plot)
