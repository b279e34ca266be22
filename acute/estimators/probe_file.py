"""The probe file format: a probe folder written by :meth:`acute.estimators.probes.ActivationProbe.save`
and read, validated and scored in pure numpy by :func:`load_probe` / :class:`ExportedProbe`.

Loading never unpickles; :class:`ExportedProbe` matches the fitted forest to <= 1e-12.

Probe directory layout (format version 1; 2 for stacked probes)::

    probe.json          manifest (see ExportedProbe.manifest)
    probe.safetensors   trees.offsets        int64  [T+1]  node offset of each tree
                        trees.children_left  int64  [N]    tree-local child index, -1 at leaves
                        trees.children_right int64  [N]
                        trees.feature        int64  [N]    feature index, -2 at leaves
                        trees.threshold      float64[N]    go left when x <= threshold
                        trees.value          float64[N]    P(correct) of the node (normalised)
                        layers               int64  [k]    layer outputs the view reads
                        pca.means            float64[L+1, w]      (pca views)
                        pca.components       float64[L+1, m, w]   (pca views)
                        calibration.platt    float64[2]  a, b: p' = 1 / (1 + exp(-(a p + b)))
                        calibration.isotonic_x / calibration.isotonic_y  float64[K] (isotonic)
                        calibration.stacked  float64[3]  w, v, b (stacked, format version 2):
                                     P = 1 / (1 + exp(-(w logit(p) + v logit(c) + b)))

Stacked probes (``calibration="stacked"``) are written as format version 2, so releases that
read only version 1 refuse them with a clear message; every other probe stays version 1.
A probe that reads other pooled states than the mean (``input.pooling`` in ``probe.json``,
:mod:`acute.store.pooling`) is format version 3: its input is ``[n, L+1, w]`` with ``w = k * d``
for ``k`` concatenated states (``input.hidden_size`` stays the model's ``d``); a manifest
without ``input.pooling`` reads the mean.

A probe folder may also hold a **question-only probe** in ``precheck/`` (its own ``probe.json``
and ``probe.safetensors``, the same format): it reads the ``last-prompt`` states, takes no raw
confidence, and decides before anything is generated (``acute export --with-precheck``,
:meth:`acute.scoring.Scorer.precheck`). The answer probe's ``probe.json`` names it
(``precheck``: its folder, estimator, pooling and the sha256 of its ``probe.json``), so a
question-only probe copied in from another export is refused; :func:`load_probe` loads it as
``ExportedProbe.precheck``.

A probe folder may also hold a **checkpoint model** in ``stop-early/``
(:mod:`acute.estimators.stop_early`: one prefix probe folder per checkpoint, ``k4/``, ``k8/``,
..., and ``calibration.safetensors``), what ``Scorer.generate(..., stop_early=EPS)`` stops
generations with (``acute export --with-stop-early``). The answer probe's ``probe.json`` names
it (``stop_early``: folder, checkpoints, estimator, each probe's ``probe.json`` sha256 and the
calibration file's); :func:`load_probe` loads it as ``ExportedProbe.stop_early``.

``domain`` in ``probe.json`` is the probe's **validity domain**: the engine and its version, the
model dtype and quantisation, the pooling and the prompt format of the states it was fitted and
certified on (:func:`acute.store.identity.domain_record`, from its training store's manifest;
after ``acute recertify``, the recertification store's, with ``recertified_from``). Scoring
under another setting is a change of domain (:class:`acute.scoring.Scorer` warns and refuses
the certificates, :meth:`ExportedProbe.outside_domain`); a probe written before the field loads
with a warning that its domain is unknown.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import os
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from ..fileio import default_mode, json_ready
from ..errors import InputError, ModelMismatchError, ProbeFormatError
from ..metrics.drift import check_reference
from ..store.identity import FINGERPRINT_FIELDS, ModelIdentity
from ..store.pooling import DEFAULT_POOLING, pooling_blocks
from .certificates import check_certificates
from .inputs import CONFIDENCE, check_inputs, states_source
from .stop_early import STOP_CALIBRATION_FILE, STOP_EARLY_DIR, StopEarlyModel, checkpoint_dir
from .calibration import CALIBRATION_ARRAYS, CALIBRATIONS, calibration_scores, calibrator_from_arrays
from .features import (
    NAMED_LAYERS,
    VIEWS,
    append_confidence,
    cosine_to_last,
    pca_project,
)

__all__ = [
    "ARRAYS_FILE",
    "FORMAT",
    "FORMAT_VERSION",
    "MANIFEST_FILE",
    "PRECHECK_DIR",
    "PRECHECK_POOLING",
    "ExportedProbe",
    "check_precheck_probe",
    "forest_arrays",
    "forest_proba",
    "load_probe",
]

FORMAT = "acute-probe"
FORMAT_VERSION = 3  # the newest version this release reads and writes (2: stacked probes, 3: pooling)
MANIFEST_FILE = "probe.json"
ARRAYS_FILE = "probe.safetensors"
#: the folder of the question-only probe inside a probe folder
PRECHECK_DIR = "precheck"
#: the states a question-only probe reads (the only ones that exist before the answer)
PRECHECK_POOLING = "last-prompt"
FINGERPRINT_KEYS = ("architecture", "num_layers", "hidden_size")

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------- forests


def forest_arrays(forest: Any) -> dict[str, np.ndarray]:
    """Flatten a fitted binary ``RandomForestClassifier`` into node arrays (see module doc).

    ``trees.value`` holds each node's class-1 probability computed exactly as
    ``DecisionTreeClassifier.predict_proba`` does: ``tree_.value`` (class fractions in recent
    scikit-learn, weighted counts in older ones) divided by its row sum.
    """
    classes = list(forest.classes_)
    if len(classes) != 2 or forest.n_outputs_ != 1:
        raise InputError("forest_arrays needs a single-output binary forest")
    pos = classes.index(1)
    offsets = [0]
    parts: dict[str, list[np.ndarray]] = {k: [] for k in ("left", "right", "feature", "threshold", "value")}
    for est in forest.estimators_:
        tree = est.tree_
        value = np.array(tree.value[:, 0, :], dtype=np.float64)
        norm = value.sum(axis=1)
        norm[norm == 0.0] = 1.0
        parts["left"].append(np.asarray(tree.children_left, dtype=np.int64))
        parts["right"].append(np.asarray(tree.children_right, dtype=np.int64))
        parts["feature"].append(np.asarray(tree.feature, dtype=np.int64))
        parts["threshold"].append(np.asarray(tree.threshold, dtype=np.float64))
        parts["value"].append(value[:, pos] / norm)
        offsets.append(offsets[-1] + tree.node_count)
    return {
        "trees.offsets": np.asarray(offsets, dtype=np.int64),
        "trees.children_left": np.concatenate(parts["left"]),
        "trees.children_right": np.concatenate(parts["right"]),
        "trees.feature": np.concatenate(parts["feature"]),
        "trees.threshold": np.concatenate(parts["threshold"]),
        "trees.value": np.concatenate(parts["value"]),
    }


def forest_proba(features: np.ndarray, arrays: dict[str, np.ndarray], chunk: int = 2048) -> np.ndarray:
    """P(class 1) of the flattened forest ``arrays`` for ``features`` ``[n, F]`` (numpy only).

    Features are cast to float32 first (as scikit-learn trees do) and compared with the
    float64 thresholds. All trees are walked at once with an ``[n, T]`` node-index matrix,
    one depth level per step; leaf values are then summed tree by tree in order and divided by
    ``T``, which reproduces ``RandomForestClassifier.predict_proba`` (sequential) bit for bit.
    """
    x = np.asarray(features, dtype=np.float32)
    offsets = arrays["trees.offsets"]
    roots = offsets[:-1]
    n_trees = roots.shape[0]
    # tree-local child indices -> global node indices (leaves stay -1)
    tree_of_node = np.repeat(np.arange(n_trees), np.diff(offsets))
    left = arrays["trees.children_left"]
    right = arrays["trees.children_right"]
    left = np.where(left >= 0, left + offsets[tree_of_node], -1)
    right = np.where(right >= 0, right + offsets[tree_of_node], -1)
    feature = np.maximum(arrays["trees.feature"], 0)
    threshold = arrays["trees.threshold"]
    value = arrays["trees.value"]
    out = np.empty(x.shape[0], dtype=np.float64)
    for start in range(0, x.shape[0], chunk):
        xb = x[start : start + chunk]
        rows = np.arange(xb.shape[0])[:, None]
        node = np.broadcast_to(roots, (xb.shape[0], n_trees)).copy()
        while True:
            nxt_left = left[node]
            internal = nxt_left >= 0
            if not internal.any():
                break
            go_left = xb[rows, feature[node]] <= threshold[node]
            node = np.where(internal, np.where(go_left, nxt_left, right[node]), node)
        leaf_values = value[node]
        acc = np.zeros(xb.shape[0], dtype=np.float64)
        for t in range(n_trees):
            acc += leaf_values[:, t]
        out[start : start + chunk] = acc / n_trees
    return out

# --------------------------------------------------------------------------- helpers



def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def view_kind(view: str) -> str:
    if view in ("mean",) + NAMED_LAYERS:
        return "mean"
    if view == "cosine":
        return "cosine"
    if view in ("pca10", "pca20"):
        return "pca"
    raise InputError(f"unknown view {view!r}; choose one of {VIEWS}")


def _view_features(kind: str, states: np.ndarray, arrays: dict[str, np.ndarray], blocks: int = 1) -> np.ndarray:
    """Features of a view from exported arrays (the same functions the featurizers call)."""
    if kind == "mean":
        return np.asarray(states[:, int(arrays["layers"][0])], dtype=np.float64)
    if kind == "cosine":
        return cosine_to_last(states, blocks)
    return pca_project(states, arrays["pca.means"], arrays["pca.components"])


def model_block(identity: ModelIdentity | None, n_layer_outputs: int, hidden_size: int) -> dict:
    """``probe.json``'s ``model`` block for ``identity`` (:meth:`ModelIdentity.to_probe_json`;
    ``{"name": None, "fingerprint": None}`` for None), after checking that its fingerprint fits
    the probe's input shape (``num_layers + 1`` layer outputs of width ``hidden_size``) where it
    gives them (:class:`ModelMismatchError` naming both)."""
    if identity is None:
        return {"name": None, "fingerprint": None}
    if not isinstance(identity, ModelIdentity):
        raise InputError(f"identity must be an acute.store.identity.ModelIdentity (ModelIdentity.from_model(model)), "
                         f"got {type(identity).__name__}")
    block = identity.to_probe_json()
    _check_shape(block["fingerprint"] or {}, n_layer_outputs, hidden_size, "model_fingerprint")
    return json_ready(block, where="model")


def _check_shape(fp: dict, n_layer_outputs: int, hidden_size: int, name: str) -> None:
    """:class:`ModelMismatchError` unless the flat fingerprint ``fp`` (named ``name``) gives the
    shape of ``n_layer_outputs`` layer outputs of width ``hidden_size`` where it gives one."""
    shape = ModelIdentity(num_layers=int(n_layer_outputs) - 1, hidden_size=int(hidden_size))
    found = shape.diff(ModelIdentity(num_layers=fp.get("num_layers"), hidden_size=fp.get("hidden_size")),
                       ("the probe's input", name), fields=("num_layers", "hidden_size"),
                       optional=("num_layers", "hidden_size"))
    if found:
        raise ModelMismatchError(f"{name} does not fit the states the probe was fitted on "
                                 f"({n_layer_outputs} layer outputs = num_layers + 1, width {hidden_size}): {found}")

# -------------------------------------------------------------------------- exported


class ExportedProbe:
    """A probe scored with numpy only, built from a manifest and its arrays.

    Attributes: ``manifest`` (dict, as in ``probe.json``), ``arrays`` (dict of numpy arrays,
    as in ``probe.safetensors``), ``view``, ``layers``, ``feature_names``,
    ``append_confidence``, ``calibration`` (None/"platt"/"isotonic"/"stacked"), ``model_name``,
    ``model_fingerprint``, ``training_summary``, ``metrics``, ``selection`` (how ``auto`` chose
    the probe, or None), ``certificates`` (the certified thresholds it carries, a list of
    ``probe.json`` entries, :mod:`acute.estimators.certificates`; empty for a probe exported
    without one), ``confidence_reference`` (percentiles of its calibration records' confidences,
    :mod:`acute.metrics.drift`; None for a probe written before acute kept them),
    ``n_layer_outputs``, ``hidden_size``, ``precheck`` (the question-only probe saved beside it
    in ``precheck/``, an :class:`ExportedProbe`, or None), ``stop_early`` (the checkpoint model
    saved beside it in ``stop-early/``, a :class:`~acute.estimators.stop_early.StopEarlyModel`
    of :class:`ExportedProbe` s, or None). The constructor validates every array
    and certificate (:class:`ProbeFormatError`).
    """

    def __init__(self, manifest: dict, arrays: dict[str, np.ndarray], source: str = ARRAYS_FILE):
        self.manifest = manifest
        self.arrays = arrays
        _validate(manifest, arrays, source)
        self.view = manifest["view"]
        self.layers = [int(v) for v in manifest["layers"]]
        self.feature_names = list(manifest["feature_names"])
        self.append_confidence = bool(manifest["append_confidence"])
        cal = manifest.get("calibration")
        self.calibration = None if cal is None else cal["method"]
        self.model_name = manifest["model"].get("name")
        self.model_fingerprint = manifest["model"].get("fingerprint")
        self.training_summary = manifest.get("training_summary", {})
        self.metrics = manifest.get("metrics", {})
        self.selection = manifest.get("selection")
        self.certificates = check_certificates(manifest.get("certificates"),
                                               str(Path(source).with_name(MANIFEST_FILE)))
        self.confidence_reference = check_reference(manifest.get("confidence_reference"),
                                                    str(Path(source).with_name(MANIFEST_FILE)))
        self.n_layer_outputs = int(manifest["input"]["n_layer_outputs"])
        self.hidden_size = int(manifest["input"]["hidden_size"])
        self.pooling = manifest["input"].get("pooling", DEFAULT_POOLING)
        self._blocks = pooling_blocks(self.pooling)
        self._kind = view_kind(self.view)
        self._calibrator = calibrator_from_arrays(self.calibration, arrays)
        self.precheck: ExportedProbe | None = None
        self.stop_early: StopEarlyModel | None = None
        self.domain = manifest.get("domain")
        self.certificates_refused: str | None = None

    def with_domain(self, domain: dict | None) -> "ExportedProbe":
        """This probe recording ``domain`` (:func:`acute.store.identity.domain_record`) as its
        validity domain (``probe.json``'s ``domain``; None leaves it unknown); returns it."""
        if domain is not None and not isinstance(domain, dict):
            raise InputError(f"domain must be a dict (acute.store.identity.domain_record), got {type(domain).__name__}")
        self.manifest = {k: v for k, v in self.manifest.items() if k != "domain"}
        if domain is not None:
            self.manifest["domain"] = json_ready(domain, where="domain")
        self.domain = self.manifest.get("domain")
        return self

    def outside_domain(self, reason: str) -> "ExportedProbe":
        """This probe as scored outside its validity domain (:attr:`domain`): a shallow copy
        whose certificates are refused, with ``reason`` (both settings, what to do), by every
        gate that asks for one (:func:`acute.scoring.gate.certificate_rule`) until it is
        re-certified (``acute recertify``). The risk rule is unaffected."""
        out = copy.copy(self)
        out.certificates_refused = str(reason)
        return out

    def __repr__(self) -> str:
        return (f"ExportedProbe(view={self.view!r}, layers={self.layers if self._kind == 'mean' else 'all'}, "
                f"n_features={len(self.feature_names)}, calibration={self.calibration!r}, "
                f"model={self.model_name!r})")

    @property
    def sources(self) -> tuple[str, ...]:
        """The sources this probe reads (:mod:`acute.estimators.inputs`): its pooling's states
        and, when it appends or stacks it, the raw ``confidence``."""
        states = states_source(self.pooling)
        return (states, CONFIDENCE) if self.append_confidence or self.calibration == "stacked" else (states,)

    def features(self, X: Any) -> np.ndarray:
        """The forest's input features ``[n, len(feature_names)]`` (float64) of the inputs ``X``."""
        X = check_inputs(X, self)
        states = X[states_source(self.pooling)]
        width = self.hidden_size * self._blocks
        if states.shape[1:] != (self.n_layer_outputs, width):
            raise InputError(
                f"states has shape [n, {states.shape[1]}, {states.shape[2]}] but the probe expects "
                f"[n, {self.n_layer_outputs}, {width}] (pooling {self.pooling!r})"
            )
        f = _view_features(self._kind, states, self.arrays, self._blocks)
        if self.append_confidence:
            f = append_confidence(f, X[CONFIDENCE])
        return f

    def predict_proba(self, X: Any) -> np.ndarray:
        """``[n, 2]`` probabilities of the records of the inputs ``X`` (:attr:`sources`); column 1
        is P(correct). Pure numpy."""
        X = check_inputs(X, self)
        p = forest_proba(self.features(X), self.arrays)
        if self._calibrator is not None:
            p = self._calibrator.predict_proba(calibration_scores(self.calibration, p, X.get(CONFIDENCE)))[:, 1]
        return np.column_stack([1.0 - p, p])

    def predict(self, X: Any) -> np.ndarray:
        """1 where P(correct) > 0.5, else 0."""
        return (self.predict_proba(X)[:, 1] > 0.5).astype(np.int64)

    def check_model(self, identity: ModelIdentity, allow_other_weights: bool = False) -> None:
        """Raise :class:`ModelMismatchError` unless ``identity`` (the model's:
        :meth:`ModelIdentity.from_model`) is the training model's.

        The probe's identity (:meth:`ModelIdentity.from_probe`) and the model's are compared by
        :meth:`ModelIdentity.diff`: ``architecture``, ``num_layers`` and ``hidden_size`` as the
        probe recorded them (the model's fingerprint must have them), ``model_type`` and
        ``vocab_size`` when both fingerprints have them, and the weights when both record them,
        unless ``allow_other_weights``; when the model runs in another dtype (``model_dtype``)
        than the probe's domain, by their bfloat16 digest. The engine and the dtype are the
        probe's validity domain, not the model (:attr:`domain`). A probe saved without a
        fingerprint is checked against its input shape (``num_layers + 1`` layer outputs,
        ``hidden_size``) only.
        """
        if not isinstance(identity, ModelIdentity):
            raise InputError(f"identity must be an acute.store.identity.ModelIdentity, got {type(identity).__name__}")
        if self.model_fingerprint is None:
            _check_shape(identity.model_fingerprint or {}, self.n_layer_outputs, self.hidden_size, "the model")
            return
        # what the probe recorded decides; vocab_size and model_type only where both know them
        unrecorded = [f"model_fingerprint.{key}" for key in FINGERPRINT_FIELDS
                      if key not in FINGERPRINT_KEYS or self.model_fingerprint.get(key) is None]
        found = ModelIdentity.from_probe(self).diff(
            identity, ("probe", "model"), fields=("model_fingerprint", "model_weights"),
            optional=unrecorded + ["model_weights"], allow_other_weights=allow_other_weights, across_dtypes=True)
        if found:
            name = f" ({self.model_name})" if self.model_name else ""
            hint = ("; another checkpoint of the same architecture, or another dtype? pass "
                    "allow_other_weights=True (--allow-other-weights) to score with it anyway"
                    if "model_weights" in found else "")
            raise ModelMismatchError(f"this probe was trained on a different model{name}: {found}{hint}")

    def save(self, path: str | os.PathLike) -> Path:
        """Write ``probe.safetensors`` and ``probe.json`` (and, with :attr:`precheck`, the
        question-only probe in ``precheck/``; with :attr:`stop_early`, the checkpoint model in
        ``stop-early/``) into directory ``path`` atomically.

        The files are written into a temporary sibling directory that is renamed into place,
        so a crash never leaves a half-written probe. An existing probe directory (holding only
        ``probe.json``/``probe.safetensors``, a ``precheck/`` probe and a ``stop-early/`` model) is
        replaced, its question-only probe and checkpoint model too; an existing file or any other non-empty directory raises
        ``ValueError``. Returns ``path``.
        """
        path = Path(path)
        if path.exists():
            if not path.is_dir():
                raise InputError(f"{path} exists and is not a directory; refusing to overwrite it")
            entries = {p.name for p in path.iterdir()}
            if entries and not _is_probe_dir(path, entries):
                raise InputError(
                    f"{path} is a non-empty directory that is not an acute probe directory "
                    f"(holding only {MANIFEST_FILE}, {ARRAYS_FILE}, a {PRECHECK_DIR}/ probe and a "
                    f"{STOP_EARLY_DIR}/ model); "
                    "refusing to overwrite it"
                )
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
        try:
            extra = {}
            if self.stop_early is not None:
                extra["stop_early"] = _write_stop_early(self.stop_early, tmp / STOP_EARLY_DIR)
            if self.precheck is not None:
                check_precheck_probe(self.precheck, "the question-only probe to save")
                sub = tmp / PRECHECK_DIR
                sub.mkdir()
                self.precheck._write(sub)
                extra["precheck"] = {"path": PRECHECK_DIR, "pooling": self.precheck.pooling,
                                      "estimator": (self.precheck.manifest.get("training_summary") or {}).get(
                                          "estimator", "question-only"),
                                      "manifest_sha256": _sha256(sub / MANIFEST_FILE)}
            manifest = self._write(tmp, extra)
            if path.exists():
                old = path.parent / f".{path.name}.old-{uuid.uuid4().hex[:8]}"
                os.replace(path, old)
                os.replace(tmp, path)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.replace(tmp, path)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        self.manifest = manifest
        return path

    def _write(self, folder: Path, extra: dict | None = None) -> dict:
        """Write this probe's two files into the existing ``folder`` (fsync'ed, default modes);
        ``extra`` entries are added to the manifest (``precheck`` and ``stop_early`` entries
        are replaced or dropped). Returns the manifest written."""
        from safetensors.numpy import save_file

        arrays_path = folder / ARRAYS_FILE
        save_file({k: np.ascontiguousarray(v) for k, v in self.arrays.items()}, str(arrays_path),
                  metadata={"format": FORMAT,
                            "format_version": str(self.manifest.get("format_version", FORMAT_VERSION))})
        default_mode(arrays_path)  # safetensors writes 0600 files
        manifest = {k: v for k, v in self.manifest.items() if k not in ("precheck", "stop_early")}
        manifest.update(extra or {})
        manifest["arrays"] = {k: {"dtype": str(v.dtype), "shape": list(v.shape)} for k, v in self.arrays.items()}
        manifest["files"] = {ARRAYS_FILE: {"sha256": _sha256(arrays_path), "bytes": arrays_path.stat().st_size}}
        with open(folder / MANIFEST_FILE, "w", encoding="utf-8") as fh:
            json.dump(manifest, fh, indent=2, allow_nan=False)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        with open(arrays_path, "rb") as fh:
            os.fsync(fh.fileno())
        for p in (folder, arrays_path, folder / MANIFEST_FILE):
            default_mode(p)
        return manifest


def check_precheck_probe(probe: Any, where: str) -> None:
    """Raise :class:`ProbeFormatError` naming ``where`` unless ``probe`` can decide before an
    answer exists: it reads the ``last-prompt`` states only and needs no raw confidence."""
    pooling = getattr(probe, "pooling", DEFAULT_POOLING)
    if pooling != PRECHECK_POOLING:
        raise ProbeFormatError(f"{where} reads the {pooling!r} states; a question-only probe reads "
                               f"{PRECHECK_POOLING!r} (the prompt's last token), the only states that "
                               "exist before the answer")
    if getattr(probe, "append_confidence", False) or getattr(probe, "calibration", None) == "stacked":
        raise ProbeFormatError(f"{where} needs the raw confidence, which does not exist before the "
                               "answer; a question-only probe uses none")


def _write_stop_early(model: StopEarlyModel, folder: Path) -> dict:
    """Write the checkpoint model into ``folder`` (created): a probe folder per checkpoint and the
    calibration arrays; returns the ``stop_early`` entry of the answer probe's ``probe.json``."""
    from safetensors.numpy import save_file

    folder.mkdir()
    probes = {}
    for k in model.checkpoints:
        sub = folder / checkpoint_dir(k)
        sub.mkdir()
        model.probes[k]._write(sub)
        probes[str(k)] = {"path": checkpoint_dir(k), "manifest_sha256": _sha256(sub / MANIFEST_FILE)}
    cal = folder / STOP_CALIBRATION_FILE
    save_file(model.arrays(), str(cal), metadata={"format": "acute-stop-early"})
    with open(cal, "rb") as fh:
        os.fsync(fh.fileno())
    for p in (folder, cal):
        default_mode(p)
    return {"path": STOP_EARLY_DIR, "checkpoints": list(model.checkpoints), **json_ready(model.details),
            "probes": probes, "calibration": {"path": STOP_CALIBRATION_FILE, "sha256": _sha256(cal),
                                              "n": int(model.scores.shape[0])}}


def _load_stop_early(path: Path, entry: Any) -> StopEarlyModel:
    """The checkpoint model the manifest entry ``entry`` names in probe folder ``path``: each
    checkpoint's probe and the calibration arrays, checked against the sha256 recorded."""
    from safetensors.numpy import load_file

    man = path / MANIFEST_FILE
    folder = path / STOP_EARLY_DIR
    if not isinstance(entry, dict) or entry.get("path") != STOP_EARLY_DIR or not isinstance(entry.get("probes"), dict) \
            or not isinstance(entry.get("calibration"), dict):
        raise ProbeFormatError(f"{man}: 'stop_early' must name the folder {STOP_EARLY_DIR!r} with its probes "
                               f"and calibration, got {entry!r}")
    again = "export the probe again (acute export --with-stop-early)"
    probes = {}
    for k, item in entry["probes"].items():
        sub = folder / checkpoint_dir(int(k)) if str(k).isdigit() else None
        if sub is None or not isinstance(item, dict) or item.get("path") != sub.name:
            raise ProbeFormatError(f"{man}: stop_early probe {k!r} must name the folder k{k}, got {item!r}")
        if not (sub / MANIFEST_FILE).is_file():
            raise ProbeFormatError(f"{man} names a prefix probe in {sub}, but {sub / MANIFEST_FILE} is missing; {again}")
        if _sha256(sub / MANIFEST_FILE) != item.get("manifest_sha256"):
            raise ProbeFormatError(f"{sub / MANIFEST_FILE}: sha256 does not match the one {man} records; this "
                                   "prefix probe was not exported with this answer probe")
        probes[int(k)] = _load_one(sub)
    cal = folder / STOP_CALIBRATION_FILE
    if not cal.is_file() or _sha256(cal) != entry["calibration"].get("sha256"):
        raise ProbeFormatError(f"{cal}: missing, or its sha256 does not match the one {man} records; {again}")
    details = {k: v for k, v in entry.items() if k not in ("path", "checkpoints", "probes", "calibration")}
    try:
        return StopEarlyModel.from_arrays(probes, load_file(str(cal)), str(cal), details)
    except InputError as e:
        raise ProbeFormatError(str(e)) from None


def _is_probe_dir(path: Path, entries: set[str], nested: bool = True) -> bool:
    allowed = {MANIFEST_FILE, ARRAYS_FILE} | ({PRECHECK_DIR, STOP_EARLY_DIR} if nested else set())
    if not entries <= allowed or MANIFEST_FILE not in entries:
        return False
    if STOP_EARLY_DIR in entries:
        sub = path / STOP_EARLY_DIR
        if not sub.is_dir() or not all(
                p.name == STOP_CALIBRATION_FILE or (p.is_dir() and _is_probe_dir(p, {q.name for q in p.iterdir()}, False))
                for p in sub.iterdir()):
            return False
    if PRECHECK_DIR in entries:
        sub = path / PRECHECK_DIR
        if not sub.is_dir() or not _is_probe_dir(sub, {p.name for p in sub.iterdir()}, nested=False):
            return False
    try:
        manifest = json.loads((path / MANIFEST_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(manifest, dict) and manifest.get("format") == FORMAT


def _fail(source: str, msg: str) -> ProbeFormatError:
    return ProbeFormatError(f"{source}: {msg}")


# Long but flat: the probe format's rules, one check each, in the order of the format doc, so a
# tampered or truncated file is refused with a message that names the broken rule.
def _validate(manifest: dict, arrays: dict[str, np.ndarray], source: str) -> None:
    """Check the manifest fields and every array's dtype, shape and node structure."""
    man = str(Path(source).with_name(MANIFEST_FILE))
    for key in ("view", "layers", "feature_names", "append_confidence", "input", "model"):
        if key not in manifest:
            raise _fail(man, f"missing field {key!r}")
    if manifest.get("domain") is not None and not isinstance(manifest["domain"], dict):
        raise _fail(man, f"'domain' must be an object (engine, engine_version, model_dtype, quantization, "
                         f"pooling, prompt_format), got {type(manifest['domain']).__name__}")
    try:
        kind = view_kind(manifest["view"])
    except ValueError as exc:
        raise _fail(man, str(exc)) from None
    n_out = int(manifest["input"]["n_layer_outputs"])
    try:
        blocks = pooling_blocks(manifest["input"].get("pooling", DEFAULT_POOLING))
    except ValueError as exc:
        raise _fail(man, str(exc)) from None
    d = int(manifest["input"]["hidden_size"]) * blocks  # the width of the states it reads
    n_features = len(manifest["feature_names"])
    cal = manifest.get("calibration")
    method = None if cal is None else cal.get("method")
    if method not in CALIBRATIONS:
        raise _fail(man, f"unknown calibration {method!r}")

    required = {"trees.offsets", "trees.children_left", "trees.children_right", "trees.feature",
                "trees.threshold", "trees.value", "layers"}
    if kind == "pca":
        required |= {"pca.means", "pca.components"}
    required |= set(CALIBRATION_ARRAYS.get(method, {}))
    missing = required - set(arrays)
    if missing:
        raise _fail(source, f"missing arrays {sorted(missing)}")
    extra = set(arrays) - required
    if extra:
        raise _fail(source, f"unexpected arrays {sorted(extra)}")
    listed = manifest.get("arrays")
    if listed is not None:
        for k, v in arrays.items():
            spec = listed.get(k)
            if spec is None or list(v.shape) != list(spec["shape"]) or str(v.dtype) != spec["dtype"]:
                raise _fail(source, f"array {k!r} has dtype {v.dtype} shape {list(v.shape)}, "
                                    f"but {man} lists {spec}")

    def arr(name: str, dtype: type, ndim: int) -> np.ndarray:
        a = arrays[name]
        if a.dtype != dtype or a.ndim != ndim:
            raise _fail(source, f"array {name!r} must be {np.dtype(dtype)} with {ndim} dims; "
                                f"got {a.dtype} shape {list(a.shape)}")
        return a

    layers = arr("layers", np.int64, 1)
    if list(layers) != [int(v) for v in manifest["layers"]]:
        raise _fail(source, f"layers {layers.tolist()} differ from {man} layers {manifest['layers']}")
    if layers.size == 0 or np.any((layers < 0) | (layers >= n_out)):
        raise _fail(source, f"layers must lie in 0..{n_out - 1}")
    conf = 1 if manifest["append_confidence"] else 0
    if kind == "mean":
        expected = d + conf
        if layers.size != 1:
            raise _fail(source, "a mean view reads exactly one layer")
    elif kind == "cosine":
        expected = blocks * (n_out - 1) + conf
    else:
        means = arr("pca.means", np.float64, 2)
        comps = arr("pca.components", np.float64, 3)
        if means.shape != (n_out, d) or comps.shape[0] != n_out or comps.shape[2] != d:
            raise _fail(source, f"pca arrays have shapes {list(means.shape)} and {list(comps.shape)}; "
                                f"expected [{n_out}, {d}] and [{n_out}, m, {d}]")
        if not (np.all(np.isfinite(means)) and np.all(np.isfinite(comps))):
            raise _fail(source, "pca arrays hold NaN/inf")
        expected = n_out * comps.shape[1] + conf
    if n_features != expected:
        raise _fail(man, f"{n_features} feature names but the view gives {expected} features")

    offsets = arr("trees.offsets", np.int64, 1)
    if offsets.size < 2 or offsets[0] != 0 or np.any(np.diff(offsets) < 1):
        raise _fail(source, "trees.offsets must start at 0 and increase strictly")
    n_nodes = int(offsets[-1])
    node_arrays = {}
    for name, dtype in (("trees.children_left", np.int64), ("trees.children_right", np.int64),
                        ("trees.feature", np.int64), ("trees.threshold", np.float64),
                        ("trees.value", np.float64)):
        a = arr(name, dtype, 1)
        if a.shape[0] != n_nodes:
            raise _fail(source, f"array {name!r} has {a.shape[0]} nodes; trees.offsets says {n_nodes}")
        node_arrays[name] = a
    left, right = node_arrays["trees.children_left"], node_arrays["trees.children_right"]
    feature, threshold = node_arrays["trees.feature"], node_arrays["trees.threshold"]
    leaf = left == -1
    if np.any(leaf != (right == -1)):
        raise _fail(source, "a node has exactly one child")
    local = np.arange(n_nodes) - np.repeat(offsets[:-1], np.diff(offsets))
    size = np.repeat(np.diff(offsets), np.diff(offsets))
    internal = ~leaf
    # children come after their parent inside the same tree: traversal always ends
    if np.any((left[internal] <= local[internal]) | (left[internal] >= size[internal])
              | (right[internal] <= local[internal]) | (right[internal] >= size[internal])):
        raise _fail(source, "a tree has a child index out of range")
    if np.any((feature[internal] < 0) | (feature[internal] >= n_features)):
        raise _fail(source, f"a split uses a feature outside 0..{n_features - 1}")
    if not np.all(np.isfinite(threshold[internal])):
        raise _fail(source, "a split threshold is not finite")
    value = node_arrays["trees.value"]
    if not np.all((value >= 0.0) & (value <= 1.0)):
        raise _fail(source, "trees.value must hold probabilities in [0, 1]")

    if method == "platt":
        p = arr("calibration.platt", np.float64, 1)
        if p.shape != (2,) or not np.all(np.isfinite(p)):
            raise _fail(source, "calibration.platt must hold two finite numbers a, b")
    elif method == "isotonic":
        x = arr("calibration.isotonic_x", np.float64, 1)
        y = arr("calibration.isotonic_y", np.float64, 1)
        if x.shape != y.shape or x.size == 0 or np.any(np.diff(x) < 0) or not np.all(np.isfinite(x) & np.isfinite(y)):
            raise _fail(source, "calibration.isotonic_x/_y must be equal-length finite arrays, x sorted")
    elif method == "stacked":
        p = arr("calibration.stacked", np.float64, 1)
        if p.shape != (3,) or not np.all(np.isfinite(p)):
            raise _fail(source, "calibration.stacked must hold three finite numbers w, v, b")


def load_probe(path: str | os.PathLike) -> ExportedProbe:
    """Load a probe directory written by :meth:`ActivationProbe.save` (no unpickling).

    Raises ``FileNotFoundError`` naming a missing directory/file, and :class:`ProbeFormatError`
    (a ``ValueError``) naming the file when ``probe.json`` is not a valid manifest, when
    ``probe.safetensors`` does not match its recorded sha256 (truncated or tampered), or when
    an array has the wrong dtype/shape/structure. A question-only probe the manifest names
    (``precheck``) is loaded too, as ``.precheck``: missing, another export's (its
    ``probe.json`` sha256 differs) or one that needs more than the last-prompt states is a
    :class:`ProbeFormatError`. So is the checkpoint model it names (``stop_early``), loaded as
    ``.stop_early``. A probe without a validity domain (``domain``, written before
    acute recorded one) loads with one warning saying its domain is unknown.
    """
    probe = _load_one(Path(path))
    entry = probe.manifest.get("precheck")
    if entry is not None:
        probe.precheck = _load_precheck(Path(path), entry)
    entry = probe.manifest.get("stop_early")
    if entry is not None:
        probe.stop_early = _load_stop_early(Path(path), entry)
    if probe.domain is None:
        logger.warning("%s records no validity domain (written before acute recorded one): the engine, "
                       "dtype, quantisation, pooling and prompt format it was fitted and certified under are "
                       "unknown, so scoring under another setting cannot be told; it is used as it is. Export "
                       "it again, or `acute recertify` it on a store of the setting you serve, to record one",
                       Path(path) / MANIFEST_FILE)
    return probe


def _load_precheck(path: Path, entry: Any) -> ExportedProbe:
    """The question-only probe the manifest entry ``entry`` names in probe folder ``path``."""
    man = path / MANIFEST_FILE
    if not isinstance(entry, dict) or entry.get("path") != PRECHECK_DIR:  # never another path
        raise ProbeFormatError(f"{man}: 'precheck' must name the folder {PRECHECK_DIR!r}, got {entry!r}")
    sub = path / PRECHECK_DIR
    if not (sub / MANIFEST_FILE).is_file():
        raise ProbeFormatError(f"{man} names a question-only probe in {sub}, but {sub / MANIFEST_FILE} "
                               "is missing; export the probe again (acute export --with-precheck)")
    if _sha256(sub / MANIFEST_FILE) != entry.get("manifest_sha256"):
        raise ProbeFormatError(f"{sub / MANIFEST_FILE}: sha256 does not match the one {man} records; "
                               "this question-only probe was not exported with this answer probe")
    probe = _load_one(sub)
    if probe.manifest.get("precheck") is not None:
        raise ProbeFormatError(f"{sub / MANIFEST_FILE}: a question-only probe holds no precheck of its own")
    check_precheck_probe(probe, str(sub))
    return probe


def _load_one(path: Path) -> ExportedProbe:
    """One probe folder's own files (see :func:`load_probe`)."""
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    if not path.is_dir():
        raise FileNotFoundError(f"probe directory {path} does not exist")
    man_path, arr_path = path / MANIFEST_FILE, path / ARRAYS_FILE
    for p in (man_path, arr_path):
        if not p.is_file():
            raise FileNotFoundError(f"probe directory {path} is missing {p.name} ({p})")
    try:
        manifest = json.loads(man_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ProbeFormatError(f"{man_path}: not valid JSON ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ProbeFormatError(f"{man_path}: not an acute probe manifest (format != {FORMAT!r})")
    version = manifest.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise ProbeFormatError(f"{man_path}: format_version {version!r} is not supported "
                               f"(this acute reads <= {FORMAT_VERSION})")
    try:
        expected = manifest["files"][ARRAYS_FILE]["sha256"]
    except (KeyError, TypeError):
        raise ProbeFormatError(f"{man_path}: no sha256 recorded for {ARRAYS_FILE}") from None
    actual = _sha256(arr_path)
    if actual != expected:
        raise ProbeFormatError(
            f"{arr_path}: sha256 {actual[:16]}... does not match {MANIFEST_FILE} ({str(expected)[:16]}...); "
            "the file is truncated, corrupted or was modified"
        )
    try:
        arrays = load_file(str(arr_path))
    except (SafetensorError, OSError, ValueError) as exc:
        raise ProbeFormatError(f"{arr_path}: cannot read safetensors ({exc})") from None
    try:
        return ExportedProbe(manifest, arrays, source=str(arr_path))
    except ProbeFormatError:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise ProbeFormatError(f"{man_path}: malformed manifest ({exc!r})") from None
