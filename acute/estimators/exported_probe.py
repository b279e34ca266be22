"""A probe scored with numpy only: :class:`ExportedProbe`, built from a probe folder's manifest and
arrays (:mod:`acute.estimators.probe_format`), and the flattened forest it walks.

:class:`ExportedProbe` matches the fitted forest to <= 1e-12. A probe scored under another
setting than its validity domain (``domain`` in ``probe.json``) is a change of domain
(:class:`acute.scoring.Scorer` warns and refuses the certificates,
:meth:`ExportedProbe.outside_domain`).
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError, ModelMismatchError
from ..fileio import file_sha256, json_ready, staged_dir
from ..metrics.drift import check_reference
from ..store.identity import FINGERPRINT_FIELDS, ModelIdentity
from ..store.pooling import DEFAULT_POOLING, pooling_blocks
from .calibration import calibration_scores, calibrator_from_arrays
from .certificates import check_certificates
from .features import append_confidence, cosine_to_last, pca_project
from .inputs import CONFIDENCE, check_inputs, states_source
from .probe_format import (ARRAYS_FILE, MANIFEST_FILE, PRECHECK_DIR, check_precheck_probe, check_replaceable,
                           validate_probe, view_kind, write_probe_folder)
from .stop_early import STOP_EARLY_DIR, StopEarlyModel
from .stop_early_folder import write_stop_early

__all__ = ["ExportedProbe", "forest_arrays", "forest_proba", "model_block", "write_companions"]

#: the fingerprint fields a probe's input shape fixes (checked whatever else it records)
FINGERPRINT_KEYS = ("architecture", "num_layers", "hidden_size")


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
        validate_probe(manifest, arrays, source)
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
        check_replaceable(path)
        with staged_dir(path) as tmp:
            manifest = write_probe_folder(tmp, self.manifest, self.arrays,
                                          write_companions(tmp, self.precheck, self.stop_early))
        self.manifest = manifest
        return path


def write_companions(folder: Path, precheck: ExportedProbe | None, stop_early: StopEarlyModel | None) -> dict:
    """Write the checkpoint model and the question-only probe (those given) into the gate folder
    ``folder`` (a probe's or a stack's); returns their entries of the gate's ``probe.json``."""
    extra = {}
    if stop_early is not None:
        extra["stop_early"] = write_stop_early(stop_early, folder / STOP_EARLY_DIR)
    if precheck is not None:
        check_precheck_probe(precheck, "the question-only probe to save")
        sub = folder / PRECHECK_DIR
        sub.mkdir()
        write_probe_folder(sub, precheck.manifest, precheck.arrays)
        extra["precheck"] = {"path": PRECHECK_DIR, "pooling": precheck.pooling,
                             "estimator": (precheck.manifest.get("training_summary") or {}).get(
                                 "estimator", "question-only"),
                             "manifest_sha256": file_sha256(sub / MANIFEST_FILE)}
    return extra
