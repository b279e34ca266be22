"""The identity of a model, a store and a probe (:class:`ModelIdentity`), and the one
:func:`diff` between two.

"Same model and settings?" is asked when a writer resumes a store, when ``acute run`` reuses a
store without loading its model, when a calibration store certifies a probe, when a probe is
applied to a model or to given responses, and when a store is re-recorded. Each asks it of two
:class:`ModelIdentity` values compared by :meth:`ModelIdentity.diff`, whose message names both
sides and every differing field with both values. What deliberately differs between the callers
(another checkpoint allowed, a field compared only when both sides know it) is an option of the
diff.

A :class:`ModelIdentity` has these fields (None: this side does not know it):

``model``           the model's name (:func:`acute.models.model_name`: a model card, a folder
                    made absolute, a hub id, or the name a run gave it)
``model_fingerprint`` ``{architecture, model_type, num_layers, hidden_size, vocab_size}``
                    (:func:`acute.models.model_fingerprint`)
``model_weights``   ``{sha256, bf16_sha256, gguf_sha256}`` (:func:`acute.models.weights_digest`)
``tokenizer``       the tokenizer's ``name_or_path``
``engine``          what ran the model: :data:`DEFAULT_ENGINE` (``"transformers"``) unless a
                    store or probe records another (a manifest that predates the field reads as it)
``engine_version``  its version (:func:`acute.engines.transformers_version`, vLLM's version)
``model_dtype``     the dtype the model ran in (``"float32"``, ``"bfloat16"``)
``quantization``    ``"none"`` or how its weights were quantised (:func:`acute.models.model_setting`)
``pooling``         ``{states, positions}``: the pooled states a probe reads (``"mean"``,
                    ``"last-answer"``, ...; None for a store, which keeps several) and the
                    positions pooled (``generation.pool``: ``"decoding"`` or ``"generated"``)
``task``, ``task_settings`` the task's name and :meth:`acute.tasks.Task.settings`
``generation``      a store manifest's ``generation`` (max new tokens, stop strings, pool, chat)
``prompt_format``   ``{chat, prompts}``: the chat flag and, for given responses, their kind
                    (``"prompt"`` or ``"messages"``; ``"generated answers"`` otherwise)
``dtype``           the store's storage dtype of the pooled states
``num_layers``, ``hidden_size`` the shape of the recorded states (L decoder layers, width d)

It is read from a loaded model (:meth:`~ModelIdentity.from_model`), from a model's files without
loading it (:meth:`~ModelIdentity.from_files`), from a store manifest
(:meth:`~ModelIdentity.from_manifest`) and from a probe (:meth:`~ModelIdentity.from_probe`).

**On disk.** A store manifest holds the model's fields at its top level under the same names
(``model``, ``model_fingerprint``, ``model_weights``, ``tokenizer``, ``engine``,
``engine_version``, ``model_dtype``, ``quantization``, ``num_layers``, ``hidden_size``: what
:meth:`~ModelIdentity.to_json` gives for a model), and ``pooling`` / ``prompt_format`` follow
from its ``generation`` and ``responses``. A probe file (``probe.json``) records the model as
``{"name", "fingerprint"}``, the fingerprint flat with the weights beside it (``weights_sha256``,
``gguf_sha256``, ``weights_bf16_sha256``: :meth:`~ModelIdentity.to_probe_json`), and its
validity domain as ``domain`` (:func:`domain_record`). Files written by earlier versions of
acute have the same layouts and read the same.

**Validity domain.** :data:`DOMAIN_FIELDS` (engine, its version, model dtype, quantisation,
pooling, prompt format) are the setting the states came from: the same model under another
setting gives states that differ by float rounding or more, and a probe's calibration and
certificate hold for the setting they were fitted and certified under. A probe file records it
(``probe.json``'s ``domain``, :func:`domain_record`), :func:`domain_change` compares it with the
setting a probe is scored under: a difference there is a change of domain (warn, refuse the
certificate until ``acute recertify``), not another model. For the same reason ``diff(...,
across_dtypes=True)`` compares the weights of two sides that ran in different dtypes by their
bfloat16 digest (``bf16_sha256``, :func:`acute.models.weights_digest`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import PurePath, Path
from typing import Any, Iterable, Mapping, Sequence

from ..errors import InputError
from .pooling import DEFAULT_POOLING, pooling_blocks
from ..models import model_fingerprint, model_name, model_setting, weights_digest, card_names, get_card
from ..models.identity import recorded_name

__all__ = ["DEFAULT_ENGINE", "DOMAIN_FIELDS", "FINGERPRINT_FIELDS", "FIELDS", "Difference", "ModelIdentity", "diff",
           "domain_change", "domain_record"]

#: The engine that ran the model unless a store or probe records another (a vLLM backend will).
DEFAULT_ENGINE = "transformers"
#: The fields of ``model_fingerprint`` (in the order :func:`acute.models.model_fingerprint` gives).
FINGERPRINT_FIELDS = ("architecture", "model_type", "num_layers", "hidden_size", "vocab_size")
#: The fields of an identity (see the module docstring).
FIELDS = ("model", "model_fingerprint", "model_weights", "tokenizer", "engine", "engine_version", "model_dtype",
          "quantization", "pooling", "task", "task_settings", "generation", "prompt_format", "dtype", "num_layers",
          "hidden_size")
#: The fields of the validity domain: the setting the states came from (see the module docstring).
DOMAIN_FIELDS = ("engine", "engine_version", "model_dtype", "quantization", "pooling", "prompt_format")
#: Prompts of a store of generated answers (no ``responses`` in its manifest).
GENERATED = "generated answers"
#: ``model_weights``' keys and the flat names a probe file records them under.
_WEIGHT_NAMES = (("sha256", "weights_sha256"), ("gguf_sha256", "gguf_sha256"), ("bf16_sha256", "weights_bf16_sha256"))


@dataclass(frozen=True)
class ModelIdentity:
    """What identifies the model behind a store, a probe or a running scorer, and the setting it
    ran in (the fields: see :mod:`acute.store.identity`; None where a side does not know one).
    Built by the ``from_*`` readers, compared by :meth:`diff`; :meth:`to_json` is the manifest's
    layout of it. Its dict-valued fields are plain dicts: treat them as read-only."""

    model: str | None = None
    model_fingerprint: dict | None = None
    model_weights: dict | None = None
    tokenizer: str | None = None
    engine: str | None = DEFAULT_ENGINE
    engine_version: str | None = None
    model_dtype: str | None = None
    quantization: str | None = None
    pooling: dict | None = None
    task: str | None = None
    task_settings: dict | None = None
    generation: dict | None = None
    prompt_format: dict | None = None
    dtype: str | None = None
    num_layers: int | None = None
    hidden_size: int | None = None

    def __post_init__(self):
        # the fingerprint and the weights keep one shape however the identity was built
        for name, shape in (("model_fingerprint", _fingerprint), ("model_weights", _weights)):
            value = getattr(self, name)
            if value is not None and not isinstance(value, Mapping):
                raise InputError(f"ModelIdentity: {name} must be a dict or None, got {type(value).__name__}")
            object.__setattr__(self, name, None if value is None else shape(value))

    # -------------------------------------------------------------------------- reading
    @classmethod
    def from_model(cls, model, tokenizer=None, *, engine: str | None = DEFAULT_ENGINE,
                   engine_version: str | None = None, pooling: Mapping | None = None,
                   prompt_format: Mapping | None = None) -> "ModelIdentity":
        """The identity of a loaded model (or one built without its weights, whose digest is
        read from its files: :func:`acute.models.load_model` ``weights=False``): its name
        (:func:`acute.models.model_name`), fingerprint, weights digest (hashed once per loaded
        model), dtype and quantisation, and ``tokenizer``'s name; run by ``engine`` at
        ``engine_version``, reading ``pooling`` with ``prompt_format`` (None: unknown)."""
        fp = model_fingerprint(model)
        return cls(model=model_name(model), model_fingerprint=fp, model_weights=weights_digest(model),
                   tokenizer=None if tokenizer is None else getattr(tokenizer, "name_or_path", None),
                   engine=engine or DEFAULT_ENGINE, engine_version=engine_version, **model_setting(model),
                   pooling=None if pooling is None else dict(pooling),
                   prompt_format=None if prompt_format is None else dict(prompt_format),
                   num_layers=fp["num_layers"], hidden_size=fp["hidden_size"])

    @classmethod
    def from_files(cls, source: str) -> "ModelIdentity":
        """What a model's files say about it without loading it (nor reading its weights):
        a model card its GGUF's sha256 (``model_weights.gguf_sha256``) and its shape
        (``model_fingerprint``'s ``num_layers``, ``hidden_size``), a model folder its fingerprint
        from ``config.json``; anything else only its name
        (:func:`acute.models.identity.recorded_name`). The fields it cannot know are None (the
        shape of recorded states, ``num_layers`` / ``hidden_size``, among them)."""
        if source in card_names():
            card = get_card(source)
            return cls(model=recorded_name(source), model_weights={"gguf_sha256": card.sha256},
                       model_fingerprint={"num_layers": card.num_layers, "hidden_size": card.hidden_size})
        if (Path(source) / "config.json").is_file():  # its config, not its weights
            from transformers import AutoConfig  # heavy: imported only for a model folder

            fp = model_fingerprint(AutoConfig.from_pretrained(source))
            return cls(model=recorded_name(source), model_fingerprint=fp)
        return cls(model=recorded_name(source))

    @classmethod
    def from_manifest(cls, manifest: Mapping) -> "ModelIdentity":
        """The identity of a store from its manifest. ``task_settings`` and ``generation`` are
        None when the manifest lacks them (a store from before they were recorded); a missing
        ``engine`` is :data:`DEFAULT_ENGINE`; a missing engine version, model dtype or
        quantisation is None (unknown); ``pooling`` names the positions only (a store keeps
        several pooled states)."""
        weights = manifest.get("model_weights")
        return cls(model=manifest.get("model"), model_fingerprint=_fingerprint(manifest.get("model_fingerprint")),
                   model_weights=_weights(weights if isinstance(weights, Mapping) else {}),
                   tokenizer=manifest.get("tokenizer"), engine=manifest.get("engine") or DEFAULT_ENGINE,
                   engine_version=manifest.get("engine_version"), model_dtype=manifest.get("model_dtype"),
                   quantization=manifest.get("quantization"), pooling=_pooling(None, manifest.get("generation")),
                   task=manifest.get("task"), task_settings=manifest.get("task_settings"),
                   generation=manifest.get("generation"),
                   prompt_format=prompt_format(manifest.get("generation"), manifest.get("responses")),
                   dtype=manifest.get("dtype"), num_layers=manifest.get("num_layers"),
                   hidden_size=manifest.get("hidden_size"))

    @classmethod
    def from_probe(cls, probe: Any) -> "ModelIdentity":
        """The identity of a probe: an :class:`acute.estimators.probe_file.ExportedProbe` (its
        recorded model and training store settings, and its validity domain, ``probe.json``'s
        ``domain``, when it records one) or a fitted
        :class:`acute.estimators.probes.ActivationProbe` (the shape it was fitted on, its
        ``training_summary_``). ``num_layers`` / ``hidden_size`` are the input shape it reads.
        Without a recorded domain, the engine is the training summary's and its version, model
        dtype and quantisation are None (unknown)."""
        manifest = getattr(probe, "manifest", None)
        domain: Mapping = {}
        if isinstance(manifest, Mapping):
            model = manifest.get("model") or {}
            summary = manifest.get("training_summary") or {}
            inp = manifest.get("input") or {}
            n_outputs, hidden = inp.get("n_layer_outputs"), inp.get("hidden_size")
            states = inp.get("pooling", DEFAULT_POOLING)
            domain = manifest.get("domain") if isinstance(manifest.get("domain"), Mapping) else {}
        else:
            states = getattr(probe, "pooling", DEFAULT_POOLING)
            model = {"name": None, "fingerprint": None}
            summary = getattr(probe, "training_summary_", None) or {}
            n_outputs = getattr(probe, "n_layer_outputs_", None)
            hidden = getattr(probe, "hidden_size_", None)
            if hidden is not None:
                hidden = int(hidden) // pooling_blocks(getattr(probe, "pooling", DEFAULT_POOLING))
        summary = summary if isinstance(summary, Mapping) else {}
        flat = model.get("fingerprint") if isinstance(model.get("fingerprint"), Mapping) else {}
        out = cls(model=model.get("name"), model_fingerprint=_fingerprint(model.get("fingerprint")),
                  model_weights=_weights({key: flat.get(name) for key, name in _WEIGHT_NAMES}),
                  engine=summary.get("engine") or DEFAULT_ENGINE,
                  pooling=_pooling(states, summary.get("generation")),
                  prompt_format=prompt_format(summary.get("generation"), summary.get("responses")),
                  task=summary.get("task"), task_settings=summary.get("task_settings"),
                  generation=summary.get("generation"),
                  num_layers=None if n_outputs is None else int(n_outputs) - 1,
                  hidden_size=None if hidden is None else int(hidden))
        return dataclasses.replace(out, **{key: domain[key] for key in DOMAIN_FIELDS if key in domain})

    # -------------------------------------------------------------------------- writing
    def to_json(self) -> dict:
        """The known fields (not None) as JSON holds them: for a model's identity
        (:meth:`from_model`), the model's fields of a store manifest, under their manifest
        names."""
        return {key: _plain(value) for key, value in self._fields().items() if value is not None}

    def to_probe_json(self) -> dict:
        """``probe.json``'s ``model`` block: ``{"name", "fingerprint"}``, the fingerprint's known
        fields flat with ``weights_sha256`` / ``gguf_sha256`` / ``weights_bf16_sha256`` beside
        them when known (None without a fingerprint), as probe files have always recorded it and
        :meth:`from_probe` reads it."""
        if self.model_fingerprint is None:
            return {"name": self.model, "fingerprint": None}
        weights = self.model_weights or {}
        flat = {**self.model_fingerprint, **{name: weights.get(key) for key, name in _WEIGHT_NAMES}}
        return {"name": self.model, "fingerprint": {k: _plain(v) for k, v in flat.items() if v is not None}}

    # -------------------------------------------------------------------------- comparing
    def diff(self, other: "ModelIdentity | Mapping | None", names: tuple[str, str] = ("store", "probe"),
             **options: Any) -> "Difference":
        """The fields on which this identity and ``other`` differ (:func:`diff`, whose keywords
        ``options`` are)."""
        return diff(self, other, names, **options)

    def _fields(self) -> dict:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


def _fingerprint(fp: Any) -> dict | None:
    """``model_fingerprint`` in :data:`FINGERPRINT_FIELDS` (None: unknown)."""
    if not isinstance(fp, Mapping):
        return None
    return {key: fp.get(key) for key in FINGERPRINT_FIELDS}


def _weights(digest: Mapping) -> dict | None:
    """``model_weights``: the known entries of a weights digest (None: none known)."""
    out = {key: digest.get(key) for key, _ in _WEIGHT_NAMES if digest.get(key)}
    return out or None


def _pooling(states: Any, generation: Any) -> dict:
    """``{states, positions}``: the pooled states read and the positions pooled
    (``generation.pool``; ``"decoding"`` when a ``generation`` does not say)."""
    gen = generation if isinstance(generation, Mapping) else {}
    return {"states": states, "positions": gen.get("pool") or ("decoding" if gen else None)}


def prompt_format(generation: Any, responses: Any) -> dict:
    """``{chat, prompts}`` of a store's (or a probe's training store's) ``generation`` and
    ``responses``: how its prompts were formatted."""
    gen = generation if isinstance(generation, Mapping) else {}
    resp = responses if isinstance(responses, Mapping) else {}
    return {"chat": gen.get("chat"), "prompts": resp.get("prompt_format", GENERATED)}


def domain_record(identity: ModelIdentity, states: str | None = None, **extra: Any) -> dict:
    """The validity domain ``probe.json`` records (``domain``): the :data:`DOMAIN_FIELDS` of
    ``identity`` (a store's, :meth:`ModelIdentity.from_manifest`), ``pooling["states"]`` set to
    ``states`` (the pooled states the probe reads), plus ``extra`` (where it came from:
    ``store``, ``recertified_from``)."""
    out = {key: _plain(getattr(identity, key)) for key in DOMAIN_FIELDS}
    if states is not None:
        out["pooling"] = {**(out["pooling"] or {}), "states": states}
    return {**out, **extra}


def domain_change(a: ModelIdentity | None, b: ModelIdentity | None,
                  names: tuple[str, str] = ("the probe's domain", "this setting")) -> "Difference":
    """How the settings of identities ``a`` and ``b`` differ on :data:`DOMAIN_FIELDS`, each field
    (and key of ``pooling`` / ``prompt_format``) compared where both sides know it: a change of
    domain, not another model (:func:`diff` with those fields optional)."""
    return diff(a, b, names, fields=DOMAIN_FIELDS, optional=DOMAIN_FIELDS)


# ------------------------------------------------------------------------------ comparing
class Difference:
    """What :func:`diff` found: ``fields`` (the top-level fields that differ, in order) and
    ``details`` (one ``'field': A a, B b`` per differing value, ``'field'['key']`` inside a
    dict-valued field). False when nothing differs; ``str()`` is the message."""

    def __init__(self, fields: Sequence[str], details: Sequence[str]):
        self.fields = tuple(fields)
        self.details = tuple(details)

    def __bool__(self) -> bool:
        return bool(self.fields)

    def __contains__(self, field: str) -> bool:
        return field in self.fields

    def __str__(self) -> str:
        if not self.fields:
            return "nothing differs"
        names = ", ".join(repr(f) for f in self.fields)
        verb = "differs" if len(self.fields) == 1 else "differ"
        return f"{names} {verb} ({'; '.join(self.details)})"

    def __repr__(self) -> str:
        return f"Difference({str(self)!r})"


def _plain(value: Any) -> Any:
    """``value`` as JSON would hold it (tuples as lists, numpy scalars as numbers, paths as
    strings), so an identity read from a file equals the one computed live."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, PurePath):
        return str(value)
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        try:
            return value.item()
        except (TypeError, ValueError):
            return value
    return value


def _as_mapping(identity: ModelIdentity | Mapping | None) -> Mapping:
    if isinstance(identity, ModelIdentity):
        return identity._fields()
    return identity or {}


def _across_dtypes(a: Mapping, b: Mapping) -> tuple[Mapping, Mapping]:
    """``a`` and ``b`` with their weights reduced to the bfloat16 digest (and the GGUF's) when
    they ran in different dtypes and both know that digest; else as they are."""
    wa, wb = a.get("model_weights") or {}, b.get("model_weights") or {}
    da, db = a.get("model_dtype"), b.get("model_dtype")
    if not (da and db and da != db and wa.get("bf16_sha256") and wb.get("bf16_sha256")):
        return a, b
    keep = ("bf16_sha256", "gguf_sha256")
    return ({**a, "model_weights": {k: wa.get(k) for k in keep}},
            {**b, "model_weights": {k: wb.get(k) for k in keep}})


def diff(a: ModelIdentity | Mapping | None, b: ModelIdentity | Mapping | None,
         names: tuple[str, str] = ("store", "probe"), *,
         fields: Iterable[str] | None = None, optional: Iterable[str] = (),
         allow_other_weights: bool = False, across_dtypes: bool = False) -> Difference:
    """The fields on which the identities ``a`` and ``b`` (named ``names`` in the message)
    differ, each with both values. Either may be a :class:`ModelIdentity` or a mapping of the
    same fields (a store manifest's keys, compared as they are).

    ``fields``: the fields compared (default: every field of either side, sorted). A field
    missing on one side is None there and differs from a value, except the ``optional`` ones:
    a field (or ``"field.key"`` inside a dict-valued one) named there is compared only when both
    sides know it (not None). Dict-valued fields are compared key by key (an optional field's
    keys are all optional). ``allow_other_weights`` leaves ``model_weights`` out: another
    checkpoint of the same architecture passes. ``across_dtypes``: two sides that ran in
    different dtypes (``model_dtype``) compare their weights by the bfloat16 digest
    (``bf16_sha256``) when both know it: the same checkpoint in float32 and in bfloat16 is one
    model under two settings (a change of domain, :func:`domain_change`).
    """
    a, b = _as_mapping(a), _as_mapping(b)
    if across_dtypes:
        a, b = _across_dtypes(a, b)
    keys = sorted(set(a) | set(b)) if fields is None else list(dict.fromkeys(fields))
    if allow_other_weights:
        keys = [k for k in keys if k != "model_weights"]
    optional = set(optional)
    name_a, name_b = names
    differ, details = [], []
    for key in keys:
        va, vb = _plain(a.get(key)), _plain(b.get(key))
        if key in optional and (va is None or vb is None):
            continue
        if isinstance(va, dict) and isinstance(vb, dict):
            found = [f"{key!r}[{sub!r}]: {name_a} {va.get(sub)!r}, {name_b} {vb.get(sub)!r}"
                     for sub in dict.fromkeys([*va, *vb])
                     if va.get(sub) != vb.get(sub)
                     and not ((key in optional or f"{key}.{sub}" in optional)
                              and (va.get(sub) is None or vb.get(sub) is None))]
            if found:
                differ.append(key)
                details += found
        elif va != vb:
            differ.append(key)
            details.append(f"{key!r}: {name_a} {va!r}, {name_b} {vb!r}")
    return Difference(differ, details)
