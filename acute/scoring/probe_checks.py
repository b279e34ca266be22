"""What a scorer reads from and checks about its probe before scoring: the training task and
generation settings the probe records, whether it was fitted on this model, and whether the
setting it is scored under is its validity domain."""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from ..engines import engine_record
from ..errors import InputError, ModelMismatchError
from ..store.generation import GenerationSettings
from ..store.identity import ModelIdentity, domain_change
from ..store.pooling import DEFAULT_POOLING
from ..tasks import OpenQATask, get_task

__all__ = ["check_domain", "check_probe_model", "probe_generation", "probe_summary", "probe_task",
           "scoring_setting", "task_from_settings"]

logger = logging.getLogger(__name__)

#: ``Task.settings()`` keys that are not constructor options
_NOT_OPTIONS = ("name", "max_new_tokens", "stop_strings", "path")


def task_from_settings(settings: dict):
    """Rebuild a task from the ``task_settings`` a store manifest records (``Task.settings()``):
    ``get_task(settings["name"], **options)``. Raises ``ValueError`` (unknown task or option)
    or ``FileNotFoundError`` (a JSONL task whose file is gone)."""
    if not isinstance(settings, dict) or not settings.get("name"):
        raise InputError(f"task settings must be a dict with a 'name', got {settings!r}")
    options = {k: v for k, v in settings.items() if k not in _NOT_OPTIONS}
    return get_task(settings["name"], **options)


def probe_task(probe):
    """The open-QA or function-calling task a probe was trained on, rebuilt from its recorded
    ``task_settings``; ``None`` when it records none, when the task cannot be rebuilt here (e.g.
    its JSONL file is gone) or when it is neither (multiple choice and the others need more than
    a question). An open-QA task prompts a question and parses a reply; a function-calling task
    only parses a reply's calls (:attr:`acute.tasks.Task.calls_parser`): its prompts are chats
    offered tools (:class:`acute.models.ToolChat`)."""
    summary = probe_summary(probe)
    settings = summary.get("task_settings")
    if not settings:
        return None
    try:
        task = task_from_settings(settings)
    except (ValueError, FileNotFoundError):
        return None
    return task if isinstance(task, OpenQATask) or task.calls_parser is not None else None


def probe_summary(probe) -> dict:
    """The training summary a probe records: an exported probe's ``training_summary``, a fitted
    one's ``training_summary_``; ``{}`` when it has none."""
    summary = getattr(probe, "training_summary", None)
    if summary is None:
        summary = getattr(probe, "training_summary_", None)
    return summary if isinstance(summary, dict) else {}


def probe_generation(probe) -> GenerationSettings:
    """The generation settings recorded with a probe (its training store's ``generation`` block;
    the defaults when it records none); :class:`InputError` naming the block when it is malformed."""
    gen = probe_summary(probe).get("generation")
    try:
        return GenerationSettings.from_json(gen if isinstance(gen, dict) else None)
    except InputError as e:
        raise InputError(f"the probe's recorded generation settings (probe.json's training_summary.generation) "
                         f"are malformed: {e}") from None


def check_probe_model(probe, identity: ModelIdentity, allow_other_weights: bool = False) -> None:
    """Raise ``ModelMismatchError`` when ``probe`` was not trained on a model like the one of
    ``identity``: its own ``check_model`` (an exported probe), else the shape a fitted probe read
    against the model's (:meth:`ModelIdentity.diff`)."""
    check = getattr(probe, "check_model", None)
    if check is not None:
        check(identity, allow_other_weights=allow_other_weights)
        return
    if getattr(probe, "n_layer_outputs_", None) is None or getattr(probe, "hidden_size_", None) is None:
        raise InputError(f"probe of type {type(probe).__name__} is not fitted (or not a probe)")
    fitted = ModelIdentity.from_probe(probe)
    found = fitted.diff(identity, ("probe", "model"), fields=("num_layers", "hidden_size"))
    if found:
        raise ModelMismatchError(f"this probe was fitted on {fitted.num_layers + 1} layer outputs of width "
                                 f"{fitted.hidden_size}, another shape than this model's: {found}")


def scoring_setting(identity: ModelIdentity, engine: Any, probe: Any, generation: GenerationSettings) -> ModelIdentity:
    """The setting ``probe`` is scored under: the model's ``identity`` run by ``engine`` (None:
    acute's transformers recorder) with the probe's pooling and ``generation``'s positions and
    chat flag."""
    return replace(
        identity, **engine_record(engine),
        pooling={"states": getattr(probe, "pooling", DEFAULT_POOLING), "positions": generation.pool},
        prompt_format={"chat": generation.chat, "prompts": None})


def check_domain(probe: Any, precheck_probe: Any, here: ModelIdentity) -> tuple[Any, Any]:
    """``(probe, found)``: what differs between ``probe``'s validity domain and the setting
    ``here`` it is scored under (:func:`acute.store.identity.domain_change`; empty when nothing
    does or the domain is unknown) and the probe to score with. When anything differs, one
    warning names both and the probe returned refuses its certificates
    (:meth:`~acute.estimators.exported_probe.ExportedProbe.outside_domain`). A question-only
    ``precheck_probe`` fitted elsewhere gets a warning only: its threshold is the caller's."""
    if precheck_probe is not None:  # no certificates to refuse: its threshold is the caller's
        pre_here = replace(here, pooling={
            "states": getattr(precheck_probe, "pooling", "last-prompt"), "positions": here.pooling["positions"]})
        pre = domain_change(ModelIdentity.from_probe(precheck_probe), pre_here,
                            ("the precheck probe's domain", "this scorer"))
        if pre:
            logger.warning("the precheck probe was fitted under another setting than it is scored under: %s; "
                           "its P(correct) may not be calibrated here: export it again from a store of this "
                           "setting (acute export --with-precheck)", pre)
    found = domain_change(ModelIdentity.from_probe(probe), here, ("the probe's domain", "this scorer"))
    if found:
        reason = (f"this probe was fitted and certified under another setting than it is scored under: "
                  f"{found}; its calibration may not hold here and its certificates are refused: decide "
                  f"by a risk level, or re-certify it on labelled records of this setting (acute "
                  f"recertify --probe PROBE --store STORE --out NEW_PROBE)")
        logger.warning("%s", reason)
        if callable(getattr(probe, "outside_domain", None)):
            probe = probe.outside_domain(reason)
    return probe, found
