"""The stack file format: a fitted stack (``acute-all``, ``visible-all``,
:class:`acute.estimators.stacks.StackEstimator`) as a probe folder ``acute score`` and ``acute
serve`` load like any probe (:func:`load_exported`).

Folder layout (``probe.json`` ``format`` ``acute-probe``, ``format_version`` 4, ``kind``
``stack``, so releases that read probes up to version 3 refuse it with a clear message)::

    probe.json     manifest: model, input shape, training summary, selection, validity domain,
                   ``scoring`` (the setting it was fitted for, its task's parser, the sources it
                   reads: :func:`acute.estimators.scoring_setting.setting_record`), ``stack``
                   (the stack's name and its first-level estimators used), ``certificates``
                   (certified trust thresholds, as a probe's), the sha256 of the file
    stack.skops    the fitted stack, written by ``skops.io.dump``
    precheck/      optional: the question-only probe (a probe folder), as a probe's
    stop-early/    optional: the checkpoint model early stopping reads, as a probe's

**Loading never unpickles.** ``stack.skops`` is read by ``skops.io.load`` with the explicit list
:data:`TRUSTED_TYPES` (acute's estimators and the scikit-learn internals they hold); a file
holding any other type is refused with a :class:`~acute.errors.ProbeFormatError` naming it,
before anything in it is built. The file must match the sha256 ``probe.json`` records. skops is
the optional extra ``acute[stacks]`` (``pip install 'acute[stacks]'``).

A stack carries certificates, a question-only probe and a checkpoint model as a probe does
(``acute export --estimator acute-all --max-error 0.1 --with-precheck --with-stop-early``): the
certificate is certified on the stack's own out-of-fold predictions; the nested folders are
written and checked by the probe format's code (:func:`acute.estimators.exported_probe.write_companions`,
:func:`acute.estimators.probe_file.load_probe`). ``acute recertify`` refuses a stack folder
(export it again on a store of the new setting).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError, ModelMismatchError, ProbeFormatError
from ..fileio import default_mode, file_sha256, json_ready, staged_dir, write_json_durable
from ..metrics.drift import check_reference
from ..store.identity import FINGERPRINT_FIELDS, ModelIdentity
from ..store.pooling import DEFAULT_POOLING
from .certificates import check_certificates
from .exported_probe import write_companions
from .inputs import GROUPS, check_inputs
from .probe_format import STACK_FILE, check_replaceable
from .scoring_setting import Parser, setting_record
from .stacks import StackEstimator

__all__ = ["STACK_FORMAT_VERSION", "TRUSTED_TYPES", "ExportedStack", "export_stack", "is_stack_folder",
           "load_stack", "refuse_recertify"]

logger = logging.getLogger(__name__)

#: probe.json's format and file name (those of :mod:`acute.estimators.probe_file`)
FORMAT = "acute-probe"
MANIFEST_FILE = "probe.json"
STACK_FORMAT_VERSION = 4
KIND = "stack"
#: The types a stack file may hold besides those skops trusts by default (numpy, builtins):
#: acute's estimators and the scikit-learn internals of their fits. Nothing else is loaded.
TRUSTED_TYPES: tuple[str, ...] = (
    "acute.estimators.baselines.ConfidenceEstimator",
    "acute.estimators.calibration.PlattScaling",
    "acute.estimators.calibration.RawConfidence",
    "acute.estimators.calibration.StackedCalibration",
    "acute.estimators.controls.MetadataPlatt",
    "acute.estimators.controls.TextPlatt",
    "acute.estimators.features.LayerPCA",
    "acute.estimators.probes.ActivationProbe",
    "acute.estimators.stacks.StackEstimator",
    "acute.estimators.visible.SurfacePlatt",
    "acute.estimators.visible.TextComponents",
    "acute.estimators.visible.VisibleControl",
    "acute.estimators.visible._as_float",
    "sklearn.ensemble._hist_gradient_boosting.predictor.TreePredictor",
    "sklearn.tree._tree.Tree",
)


def _skops():
    try:
        import skops.io as sio  # optional: the acute[stacks] extra
    except ImportError:
        raise InputError("a stack (acute-all, visible-all) is saved and loaded with skops, which is not "
                         "installed: pip install 'acute[stacks]'") from None
    return sio


class ExportedStack:
    """A fitted stack loaded from (or about to be written to) a stack folder, scored like an
    :class:`~acute.estimators.probe_file.ExportedProbe`.

    Attributes: ``manifest`` (as in ``probe.json``), ``estimator`` (the fitted
    :class:`~acute.estimators.stacks.StackEstimator`), ``name`` (``acute-all``, ``visible-all``),
    ``sources`` (what it reads at scoring time: its used first level's sources), ``scoring``
    (the setting it was fitted for), ``parser`` (:class:`~acute.estimators.scoring_setting.Parser`),
    ``pooling`` (the answer states it reads, or the default), ``n_layer_outputs``, ``hidden_size``,
    ``model_name``, ``model_fingerprint``, ``training_summary``, ``metrics``, ``selection``,
    ``domain``, ``confidence_reference``, ``certificates`` (as a probe's; empty: none),
    ``precheck`` (the question-only probe in ``precheck/``, an
    :class:`~acute.estimators.exported_probe.ExportedProbe`, or None) and ``stop_early`` (the
    checkpoint model in ``stop-early/``, or None). ``calibration`` is None: a stack's
    probabilities are its stacker's."""

    calibration = None

    def __init__(self, manifest: dict, estimator: StackEstimator, source: str = STACK_FILE):
        if not isinstance(estimator, StackEstimator) or not hasattr(estimator, "estimators_"):
            raise ProbeFormatError(f"{source}: does not hold a fitted stack (got {type(estimator).__name__})")
        self.manifest = manifest
        self.estimator = estimator
        try:
            self.name = manifest["stack"]["name"]
            self.n_layer_outputs = int(manifest["input"]["n_layer_outputs"])
            self.hidden_size = int(manifest["input"]["hidden_size"])
            self.model_name = manifest["model"].get("name")
            self.model_fingerprint = manifest["model"].get("fingerprint")
            scoring = manifest["scoring"]
            self.scoring = scoring["setting"]
        except (KeyError, TypeError, AttributeError) as e:
            raise ProbeFormatError(f"{Path(source).with_name(MANIFEST_FILE)}: malformed stack manifest ({e!r})") from None
        self.parser = Parser.from_json(scoring.get("parser"))
        self.pooling = manifest["input"].get("pooling", DEFAULT_POOLING)
        self.view = self.name
        self.training_summary = manifest.get("training_summary") or {}
        self.metrics = manifest.get("metrics") or {}
        self.selection = manifest.get("selection")
        self.certificates: list = check_certificates(manifest.get("certificates"),
                                                     str(Path(source).with_name(MANIFEST_FILE)))
        self.certificates_refused: str | None = None
        self.precheck: Any = None
        self.stop_early: Any = None
        self.confidence_reference = check_reference(manifest.get("confidence_reference"),
                                                    str(Path(source).with_name(MANIFEST_FILE)))
        self.domain = manifest.get("domain")
        self.sources = tuple(dict.fromkeys(s for est in estimator.estimators_ for s in est.sources if s != GROUPS))
        recorded = tuple(scoring.get("sources") or ())
        if recorded and set(recorded) != set(self.sources):
            raise ProbeFormatError(f"{Path(source).with_name(MANIFEST_FILE)}: records the sources {list(recorded)} "
                                   f"but {source} reads {list(self.sources)}")

    @property
    def estimator_name(self) -> str:
        """The stack's name (``acute-all``, ``visible-all``), what the service reports."""
        return self.name

    def __repr__(self) -> str:
        return (f"ExportedStack(name={self.name!r}, used={self.estimator.estimators_used_}, "
                f"scoring={self.scoring!r}, model={self.model_name!r})")

    def predict_proba(self, X: Any) -> np.ndarray:
        """``[n, 2]`` probabilities of the records of the inputs ``X`` (:attr:`sources`)."""
        return self.estimator.predict_proba(check_inputs(X, self))

    def predict(self, X: Any) -> np.ndarray:
        return (self.predict_proba(X)[:, 1] > 0.5).astype(np.int64)

    def check_model(self, identity: ModelIdentity, allow_other_weights: bool = False) -> None:
        """Raise :class:`~acute.errors.ModelMismatchError` unless ``identity`` (the model's) is the
        training model's: a probe's rule (:meth:`acute.estimators.probe_file.ExportedProbe.check_model`),
        the fingerprint and weights recorded in ``probe.json``, else the input shape."""
        if not isinstance(identity, ModelIdentity):
            raise InputError(f"identity must be an acute.store.identity.ModelIdentity, got {type(identity).__name__}")
        shape = ModelIdentity(num_layers=self.n_layer_outputs - 1, hidden_size=self.hidden_size)
        if self.model_fingerprint is None:
            fp = identity.model_fingerprint or {}
            found = shape.diff(ModelIdentity(num_layers=fp.get("num_layers"), hidden_size=fp.get("hidden_size")),
                               ("the stack's input", "the model"), fields=("num_layers", "hidden_size"),
                               optional=("num_layers", "hidden_size"))
        else:
            unrecorded = [f"model_fingerprint.{key}" for key in FINGERPRINT_FIELDS
                          if key not in ("architecture", "num_layers", "hidden_size")
                          or self.model_fingerprint.get(key) is None]
            found = ModelIdentity.from_probe(self).diff(
                identity, ("probe", "model"), fields=("model_fingerprint", "model_weights"),
                optional=unrecorded + ["model_weights"], allow_other_weights=allow_other_weights, across_dtypes=True)
        if found:
            name = f" ({self.model_name})" if self.model_name else ""
            raise ModelMismatchError(f"this stack was trained on a different model{name}: {found}")

    def with_domain(self, domain: dict | None) -> ExportedStack:
        """This stack recording ``domain`` as its validity domain; returns it."""
        self.manifest = {k: v for k, v in self.manifest.items() if k != "domain"}
        if domain is not None:
            self.manifest["domain"] = json_ready(domain, where="domain")
        self.domain = self.manifest.get("domain")
        return self

    def outside_domain(self, reason: str) -> ExportedStack:
        """This stack as scored outside its validity domain: its certificates are refused with
        ``reason`` by every decision made with it (as a probe's)."""
        self.certificates_refused = str(reason)
        return self

    def with_certificates(self, certificates: list, confidence_reference: dict | None) -> ExportedStack:
        """This stack recording ``certificates`` (``probe.json`` entries,
        :func:`acute.evaluation.certification.certify_probe`) and the drift signal's
        ``confidence_reference`` (None: kept as it is); returns it."""
        self.manifest = {**self.manifest, "certificates": json_ready(list(certificates), where="certificates")}
        if confidence_reference is not None:
            self.manifest["confidence_reference"] = json_ready(dict(confidence_reference), where="confidence_reference")
        where = f"the {self.name} stack's manifest"
        self.certificates = check_certificates(self.manifest["certificates"], where)
        self.confidence_reference = check_reference(self.manifest.get("confidence_reference"), where)
        return self

    def save(self, path: str | os.PathLike) -> Path:
        """Write ``probe.json`` and ``stack.skops`` (and the question-only probe in ``precheck/``,
        the checkpoint model in ``stop-early/``, when it holds them) into ``path`` atomically (a
        temporary sibling renamed into place); an existing stack folder is replaced, any other
        non-empty directory refused. Returns ``path``."""
        sio = _skops()
        path = Path(path)
        check_replaceable(path)
        with staged_dir(path) as tmp:
            blob = tmp / STACK_FILE
            sio.dump(self.estimator, blob)
            manifest = {k: v for k, v in self.manifest.items() if k not in ("precheck", "stop_early")}
            manifest.update(write_companions(tmp, self.precheck, self.stop_early))
            manifest["files"] = {STACK_FILE: {"sha256": file_sha256(blob), "bytes": blob.stat().st_size}}
            write_json_durable(tmp / MANIFEST_FILE, manifest)
            with open(blob, "rb") as fh:
                os.fsync(fh.fileno())
            for p in (tmp, blob, tmp / MANIFEST_FILE):
                default_mode(p)
        self.manifest = manifest
        return path


def export_stack(name: str, estimator: StackEstimator, *, model: dict, n_layer_outputs: int,
                 hidden_size: int, setting: str, parser: Parser, training_summary: dict | None = None,
                 metrics: dict | None = None, selection: dict | None = None,
                 confidence_reference: dict | None = None, pooling: str = DEFAULT_POOLING) -> ExportedStack:
    """The :class:`ExportedStack` of the fitted stack ``estimator`` named ``name``, fitted for the
    scoring ``setting`` with the task's ``parser``; ``model`` is ``probe.json``'s model block
    (:func:`acute.estimators.probe_file.model_block`), ``n_layer_outputs`` and ``hidden_size`` the
    model's shape (its training store's)."""
    from acute import __version__

    if not hasattr(estimator, "estimators_"):
        raise InputError(f"{name}: the stack is not fitted")
    sources = [s for est in estimator.estimators_ for s in est.sources if s != GROUPS]
    manifest = {
        "format": FORMAT, "format_version": STACK_FORMAT_VERSION, "kind": KIND, "acute_version": __version__,
        "model": dict(model),
        "input": {"n_layer_outputs": int(n_layer_outputs), "hidden_size": int(hidden_size), "pooling": pooling},
        "stack": {"name": name, "estimators_used": list(estimator.estimators_used_),
                  "n_splits": int(estimator.n_splits), "C": float(estimator.C), "clip": float(estimator.clip),
                  "weights": np.asarray(estimator.final_estimator_.coef_[0], dtype=float).tolist(),
                  "intercept": float(estimator.final_estimator_.intercept_[0])},
        "scoring": setting_record(setting, parser, sources),
        "training_summary": dict(training_summary or {}),
        "metrics": metrics or {},
    }
    if selection is not None:
        manifest["selection"] = selection
    if confidence_reference is not None:
        manifest["confidence_reference"] = dict(confidence_reference)
    return ExportedStack(json_ready(manifest, where="manifest"), estimator)


def _manifest(path: Path) -> dict | None:
    try:
        data = json.loads((path / MANIFEST_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def is_stack_folder(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a folder whose ``probe.json`` says it holds a stack."""
    data = _manifest(Path(path))
    return data is not None and data.get("format") == FORMAT and data.get("kind") == KIND


def load_stack(path: str | os.PathLike) -> ExportedStack:
    """Load a stack folder (module doc): the sha256 checked, then ``stack.skops`` read with the
    trusted types only. :class:`ProbeFormatError` naming the file for a bad manifest, a changed
    file or a type outside :data:`TRUSTED_TYPES` (named)."""
    sio = _skops()
    path = Path(path)
    man, blob = path / MANIFEST_FILE, path / STACK_FILE
    if not path.is_dir():
        raise FileNotFoundError(f"probe directory {path} does not exist")
    for p in (man, blob):
        if not p.is_file():
            raise FileNotFoundError(f"stack directory {path} is missing {p.name} ({p})")
    manifest = _manifest(path)
    if manifest is None or manifest.get("kind") != KIND:
        raise ProbeFormatError(f"{man}: not an acute stack manifest")
    version = manifest.get("format_version")
    if not isinstance(version, int) or version > STACK_FORMAT_VERSION:
        raise ProbeFormatError(f"{man}: format_version {version!r} is not supported (this acute reads <= "
                               f"{STACK_FORMAT_VERSION})")
    expected = ((manifest.get("files") or {}).get(STACK_FILE) or {}).get("sha256")
    if file_sha256(blob) != expected:
        raise ProbeFormatError(f"{blob}: sha256 does not match the one {man} records; the file is truncated, "
                               "corrupted or was modified")
    try:
        untrusted = [t for t in sio.get_untrusted_types(file=blob) if t not in TRUSTED_TYPES]
    except Exception as e:  # noqa: BLE001 - skops reports a malformed file in several exception types
        raise ProbeFormatError(f"{blob}: not a readable skops file ({type(e).__name__}: {e})") from None
    if untrusted:
        raise ProbeFormatError(f"{blob} holds types acute does not trust, so it is not loaded: "
                               f"{', '.join(sorted(untrusted))}")
    estimator = sio.load(blob, trusted=list(TRUSTED_TYPES))
    return ExportedStack(manifest, estimator, source=str(blob))


def refuse_recertify(probe: Any, where: str) -> None:
    """:class:`InputError` naming ``where`` when ``probe`` is a stack: ``acute recertify`` refits a
    probe's calibration map, which a stack does not have (its probabilities are its stacker's)."""
    if isinstance(probe, ExportedStack):
        raise InputError(f"{where} holds a stack ({probe.name}); acute recertify refits a probe's "
                         "calibration map, which a stack does not have: export the stack again from a store "
                         f"of the new setting (acute export --estimator {probe.name} --store STORE --max-error "
                         "ALPHA), or recertify a probe (e.g. acute-pca10-stacked)")
