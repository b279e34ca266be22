"""The probe folder on disk: its layout, the rules a manifest and its arrays obey, and reading and
writing one folder's two files (never unpickling).

Probe directory layout (format version 1; 2 for stacked probes; 3 for other poolings)::

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
question-only probe copied in from another export is refused.

A probe folder may also hold a **checkpoint model** in ``stop-early/``
(:mod:`acute.estimators.stop_early_folder`: one prefix probe folder per checkpoint, ``k4/``,
``k8/``, ..., and ``calibration.safetensors``), what ``Scorer.generate(..., stop_early=EPS)``
stops generations with (``acute export --with-stop-early``). The answer probe's ``probe.json``
names it (``stop_early``: folder, checkpoints, estimator, each probe's ``probe.json`` sha256 and
the calibration file's).

``domain`` in ``probe.json`` is the probe's **validity domain**: the engine and its version, the
model dtype and quantisation, the pooling and the prompt format of the states it was fitted and
certified on (:func:`acute.store.identity.domain_record`, from its training store's manifest;
after ``acute recertify``, the recertification store's, with ``recertified_from``).

:func:`acute.estimators.probe_file.load_probe` reads a whole folder into an
:class:`~acute.estimators.exported_probe.ExportedProbe`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import load_file, save_file

from ..errors import InputError, ProbeFormatError
from ..fileio import default_mode, file_sha256, write_json_durable
from ..store.pooling import DEFAULT_POOLING, pooling_blocks
from .calibration import CALIBRATION_ARRAYS, CALIBRATIONS
from .features import NAMED_LAYERS, VIEWS
from .stop_early import STOP_CALIBRATION_FILE, STOP_EARLY_DIR

__all__ = [
    "ARRAYS_FILE",
    "FORMAT",
    "FORMAT_VERSION",
    "MANIFEST_FILE",
    "PRECHECK_DIR",
    "PRECHECK_POOLING",
    "STACK_FILE",
    "check_precheck_probe",
    "check_replaceable",
    "is_probe_dir",
    "read_probe_folder",
    "validate_probe",
    "view_kind",
    "write_probe_folder",
]

FORMAT = "acute-probe"
FORMAT_VERSION = 3  # the newest version this release reads and writes (2: stacked probes, 3: pooling)
MANIFEST_FILE = "probe.json"
ARRAYS_FILE = "probe.safetensors"
#: a stack folder's data file in place of the arrays (:mod:`acute.estimators.stack_file`)
STACK_FILE = "stack.skops"
#: the folder of the question-only probe inside a probe folder
PRECHECK_DIR = "precheck"
#: the states a question-only probe reads (the only ones that exist before the answer)
PRECHECK_POOLING = "last-prompt"

#: the forest's node arrays and their dtypes (one entry per node)
_NODE_ARRAYS = (("trees.children_left", np.int64), ("trees.children_right", np.int64),
                ("trees.feature", np.int64), ("trees.threshold", np.float64), ("trees.value", np.float64))


def view_kind(view: str) -> str:
    """``"mean"``, ``"cosine"`` or ``"pca"``: how the view ``view`` turns states into features."""
    if view in ("mean",) + NAMED_LAYERS:
        return "mean"
    if view == "cosine":
        return "cosine"
    if view in ("pca10", "pca20"):
        return "pca"
    raise InputError(f"unknown view {view!r}; choose one of {VIEWS}")


# --------------------------------------------------------------------------- the rules


def _fail(source: str, msg: str) -> ProbeFormatError:
    return ProbeFormatError(f"{source}: {msg}")


def _array(arrays: dict[str, np.ndarray], name: str, dtype: type, ndim: int, source: str) -> np.ndarray:
    """``arrays[name]``, refused (naming ``source``) unless it has ``dtype`` and ``ndim`` dims."""
    a = arrays[name]
    if a.dtype != dtype or a.ndim != ndim:
        raise _fail(source, f"array {name!r} must be {np.dtype(dtype)} with {ndim} dims; "
                            f"got {a.dtype} shape {list(a.shape)}")
    return a


class _Layout(NamedTuple):
    """What the manifest says the arrays must hold."""

    kind: str  # the view's kind (view_kind)
    method: str | None  # the calibration method (None: uncalibrated)
    n_out: int  # layer outputs of the input (num_layers + 1)
    blocks: int  # pooled states concatenated (pooling_blocks)
    width: int  # the width of the states it reads: hidden_size * blocks
    n_features: int  # the forest's input features (len(feature_names))


def validate_probe(manifest: dict, arrays: dict[str, np.ndarray], source: str) -> None:
    """Check the manifest fields and every array's dtype, shape and node structure, in the order
    of the format above, so a tampered or truncated file is refused (:class:`ProbeFormatError`)
    with a message naming the broken rule and ``source`` (the arrays' file; the manifest is its
    sibling ``probe.json``). A manifest missing a key of its ``input`` block raises ``KeyError``."""
    man = str(Path(source).with_name(MANIFEST_FILE))
    layout = _check_fields(manifest, man)
    _check_array_names(manifest, arrays, layout, source, man)
    _check_view(manifest, arrays, layout, source, man)
    _check_trees(arrays, layout.n_features, source)
    _check_calibration(arrays, layout.method, source)


def _check_fields(manifest: dict, man: str) -> _Layout:
    """The manifest's required fields, read into the layout the arrays must have."""
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
    width = int(manifest["input"]["hidden_size"]) * blocks
    n_features = len(manifest["feature_names"])
    cal = manifest.get("calibration")
    method = None if cal is None else cal.get("method")
    if method not in CALIBRATIONS:
        raise _fail(man, f"unknown calibration {method!r}")
    return _Layout(kind, method, n_out, blocks, width, n_features)


def _check_array_names(manifest: dict, arrays: dict[str, np.ndarray], layout: _Layout, source: str,
                       man: str) -> None:
    """The arrays are exactly those the view and calibration need, as the manifest lists them."""
    required = {"trees.offsets", "layers"} | {name for name, _ in _NODE_ARRAYS}
    if layout.kind == "pca":
        required |= {"pca.means", "pca.components"}
    required |= set(CALIBRATION_ARRAYS.get(layout.method, {}))
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


def _check_view(manifest: dict, arrays: dict[str, np.ndarray], layout: _Layout, source: str, man: str) -> None:
    """The layers and the view's arrays fit the input shape, and the feature names the features
    the view gives."""
    kind, n_out, blocks, d = layout.kind, layout.n_out, layout.blocks, layout.width
    layers = _array(arrays, "layers", np.int64, 1, source)
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
        means = _array(arrays, "pca.means", np.float64, 2, source)
        comps = _array(arrays, "pca.components", np.float64, 3, source)
        if means.shape != (n_out, d) or comps.shape[0] != n_out or comps.shape[2] != d:
            raise _fail(source, f"pca arrays have shapes {list(means.shape)} and {list(comps.shape)}; "
                                f"expected [{n_out}, {d}] and [{n_out}, m, {d}]")
        if not (np.all(np.isfinite(means)) and np.all(np.isfinite(comps))):
            raise _fail(source, "pca arrays hold NaN/inf")
        expected = n_out * comps.shape[1] + conf
    if layout.n_features != expected:
        raise _fail(man, f"{layout.n_features} feature names but the view gives {expected} features")


def _check_trees(arrays: dict[str, np.ndarray], n_features: int, source: str) -> None:
    """The node arrays describe trees whose traversal always ends at a leaf probability."""
    offsets = _array(arrays, "trees.offsets", np.int64, 1, source)
    if offsets.size < 2 or offsets[0] != 0 or np.any(np.diff(offsets) < 1):
        raise _fail(source, "trees.offsets must start at 0 and increase strictly")
    n_nodes = int(offsets[-1])
    nodes = {}
    for name, dtype in _NODE_ARRAYS:
        a = _array(arrays, name, dtype, 1, source)
        if a.shape[0] != n_nodes:
            raise _fail(source, f"array {name!r} has {a.shape[0]} nodes; trees.offsets says {n_nodes}")
        nodes[name] = a
    left, right = nodes["trees.children_left"], nodes["trees.children_right"]
    feature, threshold = nodes["trees.feature"], nodes["trees.threshold"]
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
    value = nodes["trees.value"]
    if not np.all((value >= 0.0) & (value <= 1.0)):
        raise _fail(source, "trees.value must hold probabilities in [0, 1]")


def _check_calibration(arrays: dict[str, np.ndarray], method: str | None, source: str) -> None:
    """The calibration map's arrays hold finite numbers of its shape."""
    if method == "platt":
        p = _array(arrays, "calibration.platt", np.float64, 1, source)
        if p.shape != (2,) or not np.all(np.isfinite(p)):
            raise _fail(source, "calibration.platt must hold two finite numbers a, b")
    elif method == "isotonic":
        x = _array(arrays, "calibration.isotonic_x", np.float64, 1, source)
        y = _array(arrays, "calibration.isotonic_y", np.float64, 1, source)
        if x.shape != y.shape or x.size == 0 or np.any(np.diff(x) < 0) or not np.all(np.isfinite(x) & np.isfinite(y)):
            raise _fail(source, "calibration.isotonic_x/_y must be equal-length finite arrays, x sorted")
    elif method == "stacked":
        p = _array(arrays, "calibration.stacked", np.float64, 1, source)
        if p.shape != (3,) or not np.all(np.isfinite(p)):
            raise _fail(source, "calibration.stacked must hold three finite numbers w, v, b")


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


# --------------------------------------------------------------------------- one folder


def is_probe_dir(path: Path, entries: set[str], nested: bool = True) -> bool:
    """Whether the folder ``path`` (holding ``entries``) is a gate folder, a probe's or a stack's
    (so either may replace the other): only a manifest of this format, its data file (a probe's
    arrays, a stack's ``stack.skops``) and (``nested``) a ``precheck/`` probe and a ``stop-early/``
    model."""
    allowed = {MANIFEST_FILE, ARRAYS_FILE, STACK_FILE} | ({PRECHECK_DIR, STOP_EARLY_DIR} if nested else set())
    if not entries <= allowed or MANIFEST_FILE not in entries:
        return False
    if STOP_EARLY_DIR in entries:
        sub = path / STOP_EARLY_DIR
        if not sub.is_dir() or not all(
                p.name == STOP_CALIBRATION_FILE or (p.is_dir() and is_probe_dir(p, {q.name for q in p.iterdir()}, False))
                for p in sub.iterdir()):
            return False
    if PRECHECK_DIR in entries:
        sub = path / PRECHECK_DIR
        if not sub.is_dir() or not is_probe_dir(sub, {p.name for p in sub.iterdir()}, nested=False):
            return False
    try:
        manifest = json.loads((path / MANIFEST_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(manifest, dict) and manifest.get("format") == FORMAT


def check_replaceable(path: Path) -> None:
    """:class:`InputError` unless ``path`` is absent, an empty folder or a gate folder
    (:func:`is_probe_dir`: a probe's or a stack's), the folders a save may replace."""
    if not path.exists():
        return
    if not path.is_dir():
        raise InputError(f"{path} exists and is not a directory; refusing to overwrite it")
    entries = {p.name for p in path.iterdir()}
    if entries and not is_probe_dir(path, entries):
        raise InputError(f"{path} is a non-empty directory that is not an acute probe directory (a probe's or "
                         f"a stack's: only {MANIFEST_FILE}, {ARRAYS_FILE} or {STACK_FILE}, a {PRECHECK_DIR}/ probe "
                         f"and a {STOP_EARLY_DIR}/ model); refusing to overwrite it")


def read_probe_folder(path: Path) -> tuple[dict, dict[str, np.ndarray], Path]:
    """``(manifest, arrays, arrays file)`` of the probe folder ``path``, not validated yet.

    ``FileNotFoundError`` naming a missing folder or file; :class:`ProbeFormatError` naming the
    file for a manifest that is not JSON of this format and version, and for arrays whose sha256
    differs from the one the manifest records (truncated or tampered) or that cannot be read."""
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
    actual = file_sha256(arr_path)
    if actual != expected:
        raise ProbeFormatError(
            f"{arr_path}: sha256 {actual[:16]}... does not match {MANIFEST_FILE} ({str(expected)[:16]}...); "
            "the file is truncated, corrupted or was modified"
        )
    try:
        arrays = load_file(str(arr_path))
    except (SafetensorError, OSError, ValueError) as exc:
        raise ProbeFormatError(f"{arr_path}: cannot read safetensors ({exc})") from None
    return manifest, arrays, arr_path


def write_probe_folder(folder: Path, manifest: dict, arrays: dict[str, np.ndarray], extra: dict | None = None) -> dict:
    """Write a probe's two files into the existing ``folder`` (fsync'ed, default modes): ``arrays``
    and ``manifest`` with its ``arrays`` and ``files`` entries filled in; ``extra`` entries are
    added to it (``precheck`` and ``stop_early`` entries are replaced or dropped). Returns the
    manifest written."""
    arrays_path = folder / ARRAYS_FILE
    save_file({k: np.ascontiguousarray(v) for k, v in arrays.items()}, str(arrays_path),
              metadata={"format": FORMAT, "format_version": str(manifest.get("format_version", FORMAT_VERSION))})
    default_mode(arrays_path)  # safetensors writes 0600 files
    manifest = {k: v for k, v in manifest.items() if k not in ("precheck", "stop_early")}
    manifest.update(extra or {})
    manifest["arrays"] = {k: {"dtype": str(v.dtype), "shape": list(v.shape)} for k, v in arrays.items()}
    manifest["files"] = {ARRAYS_FILE: {"sha256": file_sha256(arrays_path), "bytes": arrays_path.stat().st_size}}
    write_json_durable(folder / MANIFEST_FILE, manifest)
    with open(arrays_path, "rb") as fh:
        os.fsync(fh.fileno())
    for p in (folder, arrays_path, folder / MANIFEST_FILE):
        default_mode(p)
    return manifest
