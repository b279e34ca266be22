"""Live scoring: generate an answer, read the probe's confidence, decide trust or abstain.

``Scorer(model, tokenizer, probe).generate(prompt, risk=u)`` returns the answer, the model's
raw confidence, the probe's calibrated confidence and the decision: trust iff the
confidence exceeds the risk level ``u`` (the cost of trusting a wrong answer relative to the
cost of abstaining on a right one, as in euro). ``generate(prompt, max_error=alpha)`` decides by
the threshold the probe certified at that alpha instead (trust iff confidence >= it; the probe
must carry that certificate, ``acute export --max-error``). What decides is a
:class:`~acute.scoring.gate.Gate` (rule and optional precheck), parsed once from those
arguments, or passed ready-made as ``gate=`` (as the service does): :mod:`acute.scoring.gate`.
Each answer names its rule and threshold.

``Scorer.score_response(prompt, response, risk=u)`` (and ``score_responses`` for a batch) does
the same for an answer produced elsewhere, without generating: the response is recorded by
teacher forcing (:func:`acute.extraction.record_responses`), which gives the states and raw
confidence the recorder would have recorded had the model generated it.

``Scorer.precheck(prompt, threshold=u0)`` decides before generating, with the question-only probe
exported beside the answer probe (``acute export --precheck``): one forward pass over the
prompt, P(correct) and trust iff it exceeds u0. ``generate(prompt, precheck=u0)`` is the
two-stage gate: it generates only for the prompts whose precheck passes (:mod:`acute.scoring.precheck`).

``generate(prompt, stop_early=EPS)`` stops, at a checkpoint, a generation the gate will not
trust, by the threshold the probe's checkpoint model certifies at ``EPS`` (``acute export
--with-stop-early``): the answer is the prefix, decided ``abstain`` (:mod:`acute.scoring.stop_early`).
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any, Sequence

import numpy as np

from ..errors import InputError
from ..engines.live import stop_early_refusal
from ..estimators.inputs import Inputs
from ..estimators.probe_format import check_precheck_probe
from ..models import ToolChat, format_prompt
from ..models.loading import holds_no_weights
from ..store.generation import GenerationSettings
from ..store.identity import ModelIdentity
from ..tasks import Example, OpenQATask
from .gate import Gate, check_certified, check_gates, parse_gates, per_prompt
from .precheck import PrecheckResult, check_precheck, require_precheck
from .probe_checks import (check_domain, check_probe_model, probe_generation, probe_summary, probe_task,
                           scoring_setting as setting_identity, task_from_settings)  # noqa: F401 (task_from_settings: importable here)
from .results import ScoredGeneration, question_of
from .risk import DEFAULT_RISK
from .sources import check_live, check_tools_shown, live_inputs, live_parser
from .stop_early import StopDecisions, mark_stop, recorder_stop_settings, stop_decisions

__all__ = ["Scorer"]


def _precheck_results(items, texts, lengths, conf, thresholds) -> list[PrecheckResult]:
    """One :class:`PrecheckResult` per prompt: trust iff its question-only P(correct) > its u0."""
    return [PrecheckResult(question=question_of(item), prompt=t, confidence=float(c), threshold=float(u),
                           trust=bool(c > u), prompt_tokens=int(n))
            for item, t, n, c, u in zip(items, texts, lengths, conf, thresholds)]


def _is_single(prompts: Any) -> bool:
    """Whether ``prompts`` is one prompt (a string, one chat, a chat offered tools) rather than a
    list of them."""
    return isinstance(prompts, (str, ToolChat)) or (
        isinstance(prompts, (list, tuple)) and len(prompts) > 0 and isinstance(prompts[0], dict))


class Scorer:
    """Generate with the hidden-state recorder attached and score with a probe.

    ``probe`` is an :class:`acute.estimators.exported_probe.ExportedProbe` (``acute.load_probe(dir)``) or a fitted
    :class:`acute.estimators.probes.ActivationProbe`. The model is checked against the probe on
    construction (``ModelMismatchError``, a ``ValueError``): against the fingerprint and weights
    digest saved with an exported probe (``allow_other_weights=True`` skips the weights), or
    against the input shape a fitted probe was trained on, so a probe is never applied to the
    wrong model.

    ``generation`` (:class:`~acute.store.generation.GenerationSettings`) sets the answer length,
    stop strings, chat formatting and batch size; what it leaves unset (None) is what the probe's
    training store was collected with, when the probe records it (``training_summary
    ["generation"]``, written by ``acute train/export`` and the demo; else 64 new tokens and the
    task's stop strings), and the pooling is always the probe's. :attr:`generation` is the result.
    ``task`` wraps a plain-string question in a task's prompt (instruction, demonstrations),
    as during collection, so the probe sees answers like those it was trained on: ``"auto"``
    (default) rebuilds the probe's training task from ``training_summary["task_settings"]``
    when that is an open-QA task; an :class:`acute.tasks.Task` is used as given; ``None`` (or
    no usable recorded task) sends a question as is (one user message when the tokenizer has
    a chat template). Chat message lists are never wrapped. A function-calling task (BFCL,
    APIGen; rebuilt by ``"auto"`` too) wraps nothing: its replies are parsed into calls, which
    are counted against the tools a prompt offers (an :class:`acute.models.ToolChat`, shown by
    the chat template), as its store's records were.

    ``precheck_probe`` is the question-only probe :meth:`precheck` and ``generate(...,
    precheck=u0)`` decide with (default: the one exported beside ``probe``, its ``precheck``
    attribute, or None); it is checked against the model like ``probe`` and must read the
    last-prompt states only, without the raw confidence.

    ``engine`` generates instead of acute's transformers recorder: a started
    :class:`acute.engines.pooled.PooledEngine` (vLLM with acute's pooling connector:
    :class:`~acute.engines.vllm.VllmEngine`, :class:`~acute.engines.upstream.UpstreamEngine`),
    which gives the recorder's records (``engine.generate``) and last-prompt states
    (``engine.prompt_states``) for the same formatted prompts. Everything else stays here:
    formatting, the checks, the probe and the decision. ``model`` is still the transformers
    model (its identity is checked against the probe, its context window bounds prompts) and
    records given responses (:meth:`score_responses`, by teacher forcing). With an engine it may
    be a model without weights (``load_model(..., weights=False)``: its identity read from its
    files); then :meth:`score_responses` is refused, and without an engine the scorer is.

    The setting it scores under (the engine and its version, the model's dtype and
    quantisation, the probe's pooling, ``chat``) is compared with the validity domain the probe
    records (``probe.json``'s ``domain``, :func:`acute.store.identity.domain_change`). When they
    differ the scorer logs one warning naming both and :attr:`probe` refuses its certificates
    (a ``max_error`` is an :class:`InputError` giving the reason; the risk rule still decides)
    until the probe is re-certified for this setting (``acute recertify``);
    :attr:`domain_change` is what differs (empty when nothing does or the probe's domain is
    unknown).

    ``scoring_setting`` (``"score"``, ``"serve"`` or ``"store"``, :mod:`acute.estimators.scoring_setting`)
    is where it scores: a probe reading a source that setting cannot provide (a stack fitted on
    the store's metadata, a reply's parse status without a parser) is refused here, naming the
    source (:func:`acute.scoring.sources.check_live`); the sources are computed from each answer as
    a store's are (:func:`acute.scoring.sources.live_inputs`).
    """

    def __init__(self, model, tokenizer, probe, generation: GenerationSettings | None = None, *, task="auto",
                 allow_other_weights: bool = False, precheck_probe=None, engine=None, scoring_setting: str = "score"):
        if engine is not None and not (callable(getattr(engine, "generate", None))
                                       and callable(getattr(engine, "prompt_states", None))):
            raise InputError(f"engine must be a started vLLM engine (acute.engines), got {type(engine).__name__}")
        if engine is None and holds_no_weights(model):
            raise InputError("the model was loaded without its weights (weights=False): it can score only "
                             "through an engine that holds them (engine=, e.g. vLLM)")
        self.model = model
        self.tokenizer = tokenizer
        self.probe = probe
        self.engine = engine
        identity = ModelIdentity.from_model(model)
        check_probe_model(probe, identity, allow_other_weights)
        if precheck_probe is None:
            precheck_probe = getattr(probe, "precheck", None)
        if precheck_probe is not None:
            check_precheck_probe(precheck_probe, "precheck_probe")
            check_probe_model(precheck_probe, identity, allow_other_weights)
        self.precheck_probe = precheck_probe
        if isinstance(task, str):
            if task != "auto":
                raise InputError(f"task must be 'auto', None or a Task, got {task!r}")
            task = probe_task(probe)
        self.task = task
        check_live(probe, scoring_setting, live_parser(probe, task))  # a source it cannot compute: refused here
        self.scoring_setting = scoring_setting
        if generation is not None and not isinstance(generation, GenerationSettings):
            raise InputError(f"generation must be an acute.store.generation.GenerationSettings, got "
                             f"{type(generation).__name__}")
        trained = probe_generation(probe)
        settings = (generation or GenerationSettings()).over(trained)
        self.generation = replace(
            settings, max_new_tokens=settings.max_new_tokens or 64, samples=None,
            stop_strings=settings.stop_strings if settings.stop_strings is not None
            else tuple(getattr(task, "stop_strings", ()) or ()))
        check_tools_shown(probe, tokenizer, self.generation.chat, task)  # before any request would be refused
        self._trained_chat = trained.chat
        responses = probe_summary(probe).get("responses")
        self._trained_responses = dict(responses) if isinstance(responses, dict) else None
        here = setting_identity(identity, engine, probe, self.generation)
        self.probe, self.domain_change = check_domain(probe, precheck_probe, here)

    def format(self, item) -> str:
        """The fully formatted prompt for one question (str), chat (list of messages) or chat
        offered tools (:class:`acute.models.ToolChat`: shown by the chat template)."""
        if isinstance(item, str) and isinstance(self.task, OpenQATask):
            ex = Example(id="live", question=item.strip(), answers=[])
            return self.task.prompt(self.tokenizer, ex, chat=self.generation.chat)
        return format_prompt(self.tokenizer, item, chat=self.generation.chat)

    def gates(self, n: int, risk=None, max_error=None, precheck=None, gate=None, stop_early=None) -> list[Gate]:
        """The gate of each of ``n`` prompts: ``gate`` as given (one :class:`Gate` or one per
        prompt, made by :func:`acute.scoring.gate.parse_gate`), else parsed once from ``risk``,
        ``max_error``, ``precheck`` and ``stop_early`` (:func:`acute.scoring.gate.parse_gates`: a
        risk level, default 0.5, or the certificate this probe carries at ``max_error``)."""
        if gate is None:
            return parse_gates(self.probe, n, risk, max_error, precheck, stop_early)
        if risk is not None or max_error is not None or precheck is not None or stop_early is not None:
            raise InputError("give gate= or risk= / max_error= / precheck= / stop_early=, not both")
        return check_certified(check_gates(gate, n), self.probe)

    def generate(self, prompts, risk: float | Sequence[float] | None = None, *,
                 max_error: float | Sequence[float] | None = None,
                 precheck: float | Sequence[float | None] | None = None,
                 stop_early: float | Sequence[float | None] | None = None,
                 gate: Gate | Sequence[Gate] | None = None):
        """Score one prompt (str or chat messages) or a list of them, deciding at one risk level
        or one per prompt (default 0.5), or by the threshold the probe certified at ``max_error``
        (one alpha, or one per prompt with ``None`` where a risk level applies); not both for
        one prompt. ``gate`` (one :class:`~acute.scoring.gate.Gate` or one per prompt) gives the
        rule and precheck ready-made instead.

        ``precheck`` (one threshold u0 in (0, 1), or one per prompt with ``None`` where there is
        none) makes it a two-stage gate: those prompts are first prechecked (:meth:`precheck`)
        and only those whose question-only P(correct) exceeds u0 are generated and decided as
        usual; the others are answered without generating (decision ``"abstain"``,
        ``generated`` False, see :class:`ScoredGeneration`). The generated answers equal those
        of a call without ``precheck``.

        ``stop_early`` (epsilon in (0, 1), or one per prompt with ``None`` where there is none)
        stops a generation at a checkpoint when the probe's checkpoint model gives its prefix a
        P(correct) below the threshold it certifies at epsilon (certified once per epsilon;
        :mod:`acute.scoring.stop_early`); a stopped answer is decided ``"abstain"`` with
        ``stopped_at`` and ``stop`` (see :class:`ScoredGeneration`). The others equal the
        answers of a call without it. With a vLLM engine the rule is read at the connector's live
        checkpoints and a stopped request is aborted (:mod:`acute.engines.live`).

        Returns a :class:`ScoredGeneration` for a single prompt, else a list of them in input
        order (an empty list for an empty list). Scoring in a batch gives the same answers and
        confidences as scoring one at a time (up to float rounding of padded batches). Raises
        :class:`InputError` naming the argument for a risk outside [0, 1], a ``max_error`` the
        probe carries no valid certificate for, a precheck threshold outside (0, 1) or without a
        question-only probe, a ``stop_early`` outside (0, 1) or without a checkpoint model, and
        a prompt longer than the context window.
        """
        single = _is_single(prompts)
        items = [prompts] if single else list(prompts)
        gates = self.gates(len(items), risk, max_error, precheck, gate, stop_early)
        if any(g.stop is not None for g in gates) and stop_early_refusal(self.engine):
            raise InputError(f"stop_early: {stop_early_refusal(self.engine)}")
        gated = [i for i, g in enumerate(gates) if g.precheck is not None]
        if gated:
            require_precheck(self.precheck_probe, "precheck")
        if not items:
            return []
        texts = [self.format(p) for p in items]
        checked: dict[int, PrecheckResult] = {}
        out: list[ScoredGeneration | None] = [None] * len(items)
        if gated:
            self._check_fits(texts)  # before the precheck, so that errors name the prompt as given
            if self.engine is None:  # the precheck's pass is the generation's prefill
                checked = self._prechecked_generation(items, texts, gates, gated, out)
            else:
                checked = dict(zip(gated, self._prechecked([items[i] for i in gated], [texts[i] for i in gated],
                                                           [gates[i].precheck for i in gated])))
        todo = [i for i in range(len(items)) if out[i] is None and (i not in checked or checked[i].trust)]
        for i, s in zip(todo, self._generated([items[i] for i in todo], [texts[i] for i in todo],
                                              [gates[i] for i in todo])):
            out[i] = s
        for i, c in checked.items():
            if out[i] is not None:
                out[i].precheck = c.fields()
            else:
                out[i] = _skipped(items[i], texts[i], c, gates[i])
        return out[0] if single else out

    def _prechecked_generation(self, items, texts, gates, gated: list[int],
                               out: list[ScoredGeneration | None]) -> dict[int, PrecheckResult]:
        """The prompts ``gated`` prechecked and, where the precheck lets them through, generated
        from the precheck's own forward pass (:func:`acute.extraction.generate_after_prompt_pass`:
        no second prompt pass); their scored answers go into ``out``. Returns the precheck results."""
        from ..extraction import generate_after_prompt_pass  # torch: loaded when scoring starts

        sub_items, sub_texts = [items[i] for i in gated], [texts[i] for i in gated]
        thresholds = np.array([gates[i].precheck for i in gated], dtype=np.float64)
        conf = np.full(len(gated), np.nan)

        def decide(states: np.ndarray, index: np.ndarray) -> np.ndarray:
            conf[index] = self.precheck_probe.predict_proba(Inputs.of(states, pooling=self.precheck_probe.pooling))[:, 1]
            return conf[index] > thresholds[index]

        start = time.perf_counter()
        stops = stop_decisions(self.probe, [gates[i].stop for i in gated])
        passes, gens = generate_after_prompt_pass(self.model, self.tokenizer, sub_texts, decide, self.generation,
                                                  on_too_long="error", **recorder_stop_settings(stops, self.generation.max_new_tokens))
        let = [k for k, g in enumerate(gens) if g is not None]
        scored = [] if not let else self._scored([sub_items[k] for k in let], [sub_texts[k] for k in let], [gens[k] for k in let],
                              [gens[k].text for k in let], [gates[gated[k]] for k in let], time.perf_counter() - start,
                              stops=stops, index=let)
        for k, s in zip(let, scored):
            out[gated[k]] = s
        results = _precheck_results(sub_items, sub_texts, [p.prompt_tokens for p in passes], conf, thresholds)
        return dict(zip(gated, results))

    def _generated(self, items, texts, gates) -> list[ScoredGeneration]:
        """Generate and score ``texts`` (formatted ``items``), decided by ``gates``."""
        from ..extraction import generate_with  # torch: loaded when scoring starts

        if not items:
            return []
        start = time.perf_counter()
        stops = stop_decisions(self.probe, [g.stop for g in gates])
        if self.engine is not None:
            gens = self.engine.generate(self.tokenizer, texts, self.generation, model=self.model, on_too_long="error",
                                        **recorder_stop_settings(stops, self.generation.max_new_tokens))
        else:
            gens = generate_with(self.model, self.tokenizer, texts, self.generation, on_too_long="error",
                                 **recorder_stop_settings(stops, self.generation.max_new_tokens))
        return self._scored(items, texts, gens, [g.text for g in gens], gates, time.perf_counter() - start,
                            stops=stops)

    def _check_fits(self, texts: Sequence[str]) -> None:
        """:class:`InputError` for the first prompt that does not fit the context window with
        ``max_new_tokens`` (as :func:`acute.extraction.generate_and_record` says it)."""
        from ..extraction.batching import tokenize, within_context_window  # torch: loaded when scoring starts

        lengths = [len(ids) for ids in tokenize(self.tokenizer, list(texts))]
        n_new = self.generation.max_new_tokens
        within_context_window(self.model, [n + n_new for n in lengths], "error",
                              lambda i, limit: (f"prompts[{i}] has {lengths[i]} tokens; with max_new_tokens="
                                                f"{n_new} it exceeds the context window of "
                                                f"{limit} positions"))

    def precheck(self, prompts, threshold: float | Sequence[float] | None = None):
        """Decide before generating: the question-only probe's P(correct) of the answer the
        model would give to one prompt (str or chat messages) or a list of them, and trust iff
        it exceeds ``threshold`` (one precheck threshold in (0, 1) or one per prompt; default
        :data:`~acute.scoring.risk.DEFAULT_RISK`).

        One forward pass over each prompt, formatted exactly as :meth:`generate` formats it
        (:meth:`format`), with the recorder's layer indexing
        (:func:`acute.extraction.record_prompt_states`); no token is decoded. Returns a
        :class:`~acute.scoring.precheck.PrecheckResult` for a single prompt, else a list of
        them in input order. Raises :class:`InputError` when the scorer has no question-only
        probe (``acute export --precheck`` makes one), for a threshold outside (0, 1) and for a
        prompt longer than the context window.
        """
        single = _is_single(prompts)
        items = [prompts] if single else list(prompts)
        thresholds = per_prompt(DEFAULT_RISK if threshold is None else threshold, len(items), check_precheck,
                                "threshold")
        require_precheck(self.precheck_probe, "Scorer.precheck")
        if not items:
            return []
        out = self._prechecked(items, [self.format(p) for p in items], thresholds)
        return out[0] if single else out

    def prompt_states(self, prompts) -> np.ndarray:
        """float32 ``[n, L+1, d]``: the states at the last token of each prompt (str or chat
        messages; a list of them), formatted as :meth:`generate` formats it, from one forward
        pass each: what the question-only probe reads, equal to the ``last-prompt`` states
        collection records for the same prompt up to float rounding."""
        items = [prompts] if _is_single(prompts) else list(prompts)
        return self._prompt_pass([self.format(p) for p in items])[0]

    def _prompt_pass(self, texts) -> tuple[np.ndarray, list[int]]:
        from ..extraction import record_prompt_states  # torch: loaded when scoring starts

        if self.engine is not None:
            return self.engine.prompt_states(self.tokenizer, texts, model=self.model)
        passes = record_prompt_states(self.model, self.tokenizer, texts, batch_size=self.generation.batch_size)
        if not passes:
            return np.zeros((0, 0, 0), dtype=np.float32), []
        return (np.stack([p.last_prompt for p in passes]).astype(np.float32, copy=False),
                [p.prompt_tokens for p in passes])

    def _prechecked(self, items, texts, thresholds) -> list[PrecheckResult]:
        states, lengths = self._prompt_pass(texts)
        conf = self.precheck_probe.predict_proba(Inputs.of(states, pooling=self.precheck_probe.pooling))[:, 1]
        return _precheck_results(items, texts, lengths, conf, thresholds)

    def score_response(self, prompt_or_messages, response: str, risk: float | None = None, *,
                       max_error: float | None = None, gate: Gate | None = None) -> ScoredGeneration:
        """Score one given ``response`` to a prompt (str or chat messages) without generating.

        See :meth:`score_responses`; returns one :class:`ScoredGeneration`."""
        if not isinstance(response, str):
            raise InputError(f"response must be a string, got {type(response).__name__}")
        return self.score_responses([prompt_or_messages], [response], risk=risk, max_error=max_error,
                                    gate=gate)[0]

    def score_responses(self, prompts: Sequence, responses: Sequence[str],
                        risk: float | Sequence[float] | None = None, *,
                        max_error: float | Sequence[float] | None = None,
                        gate: Gate | Sequence[Gate] | None = None) -> list[ScoredGeneration]:
        """Score given responses (answers from another engine, logs) to their prompts.

        Each response is recorded by teacher forcing (:func:`acute.extraction.record_responses`:
        the text tokenized after the prompt, the EOS the model finds most likely appended,
        pooled like the probe's training store) and scored by the probe; the fields are those
        of :meth:`generate` (``answer`` is the response, stripped; ``risk`` and ``max_error``, or
        ``gate``, choose the rule as there; a gate with a precheck is refused: the answer is
        already given). Prompts are built the way
        the probe's training store built them: for a store of generated answers, a string is
        a question (wrapped in the task's prompt, see :meth:`format`) and messages go through
        the chat template; for a store of given responses (``acute collect --responses``), a
        string is a fully formatted prompt sent as is and messages go through the chat
        template, and a prompt of the other kind than the store's is refused
        (:class:`InputError` naming both), as is a ``chat`` setting other than the store's.
        Raises :class:`InputError` for a risk outside [0, 1], an empty response, mismatched
        lengths or a prompt + response longer than the context window.
        """
        from ..extraction import record_responses  # torch: loaded when scoring starts

        items, responses = list(prompts), list(responses)
        if len(items) != len(responses):
            raise InputError(f"prompts ({len(items)}) and responses ({len(responses)}) differ in length")
        for i, r in enumerate(responses):
            if not isinstance(r, str) or not r.strip():
                raise InputError(f"responses[{i}] must be a non-empty string, got {r!r}")
        gates = self.gates(len(items), risk, max_error, gate=gate)
        if any(g.precheck is not None for g in gates):
            raise InputError("precheck: a precheck decides before generating, and these answers are given "
                             "(score_responses): leave out the precheck")
        if any(g.stop is not None for g in gates):
            raise InputError("stop_early: stopping early stops a generation while it is written, and these answers "
                             "are given (score_responses): leave out stop_early")
        if not items:
            return []
        if holds_no_weights(self.model):
            raise InputError("scoring a given response records it by teacher forcing, which needs the model's "
                             "weights; this scorer's model was loaded without them (weights=False; "
                             "acute serve: --load-weights)")
        texts = [self.response_prompt(item, f"prompts[{i}]") for i, item in enumerate(items)]
        start = time.perf_counter()
        gens = record_responses(self.model, self.tokenizer, texts, responses, pool=self.generation.pool,
                                batch_size=self.generation.batch_size, stop_strings=self.generation.stop_strings,
                                on_too_long="error")
        return self._scored(items, texts, gens, responses, gates, time.perf_counter() - start)

    def response_prompt(self, item, where: str = "prompt") -> str:
        """The formatted prompt a given response to ``item`` is scored after (see
        :meth:`score_responses`); :class:`InputError` naming ``where`` for a prompt of the other
        kind than the probe's training store (a string where it had messages, or the reverse) or
        a ``chat`` setting other than the store's."""
        trained = self._trained_responses
        if trained is None:
            source = f"its training store of generated answers (task {self._trained_task()!r})"
        else:
            kind = trained.get("prompt_format")
            source = f"{trained.get('labels', 'labelled')} rows of {trained.get('file')}"
            if kind == "prompt" and not isinstance(item, str):
                raise InputError(f"{where}: this probe was trained on formatted prompt strings "
                                 f"('prompt' {source}); got chat messages: pass the prompt string "
                                 "as it was sent")
            if kind == "messages" and isinstance(item, str):
                raise InputError(f"{where}: this probe was trained on chat messages ('messages' "
                                 f"{source}, formatted with the chat template); got a prompt "
                                 "string: pass the messages")
            if isinstance(item, str):
                return item  # a formatted prompt, sent as is (as in training)
        found = ModelIdentity.from_probe(self.probe).diff(
            ModelIdentity(prompt_format={"chat": self.generation.chat}), ("this probe", "this scorer"),
            fields=("prompt_format",), optional=("prompt_format",))
        if found:
            raise InputError(f"{where}: this probe's prompts were formatted otherwise ({source}): {found}; "
                             f"score with chat={self._trained_chat}")
        return self.format(item)

    def _trained_task(self):
        return probe_summary(self.probe).get("task")

    def _scored(self, items, texts, gens, answers, gates: list[Gate], generation_s: float = 0.0, *,
                stops: StopDecisions | None = None, index: Sequence[int] | None = None) -> list[ScoredGeneration]:
        """The scored answers of ``gens``; with ``stops``, each answer's stop fields (``index``:
        the position of each in the prompts ``stops`` was made for, default ``0..n-1``)."""
        out = self._decided(items, texts, gens, answers, gates, generation_s)
        if stops is not None:
            for j, (s, gate) in enumerate(zip(out, gates)):
                mark_stop(s, gate.stop, stops, j if index is None else index[j])
        return out

    def _decided(self, items, texts, gens, answers, gates: list[Gate],
                 generation_s: float = 0.0) -> list[ScoredGeneration]:
        start = time.perf_counter()
        # the sources the probe reads, computed as a store's are (acute.scoring.sources)
        X = live_inputs(self.probe, gens, texts, answers, items, task=self.task)
        raw = np.array([g.raw_confidence for g in gens], dtype=np.float64)
        conf = self.probe.predict_proba(X)[:, 1]
        out = []
        trusted = [bool(gate.decide(c)) for gate, c in zip(gates, conf)]
        seconds = {"generation": generation_s, "scoring": time.perf_counter() - start}
        for item, t, g, a, r, c, gate, ok in zip(items, texts, gens, answers, raw, conf, gates, trusted):
            f = gate.rule.fields()
            out.append(ScoredGeneration(
                question=question_of(item), prompt=t, answer=a.strip(), raw_confidence=float(r),
                confidence=float(c), risk=f["risk"], trust=ok,
                n_tokens=int(len(g.token_ids)), finish_reason=g.finish_reason, rule=f["rule"],
                threshold=f["threshold"], max_error=f.get("max_error"), certificate=f.get("certificate"),
                recorded=g, seconds=seconds))
        return out


def _skipped(item, text: str, checked: PrecheckResult, gate: Gate) -> ScoredGeneration:
    """The answer to a prompt its precheck refused: nothing generated, decision abstain."""
    f = gate.rule.fields()
    return ScoredGeneration(
        question=question_of(item), prompt=text, answer="", raw_confidence=None, confidence=None,
        risk=f["risk"], trust=False, n_tokens=0, finish_reason="precheck", rule=f["rule"],
        threshold=f["threshold"], max_error=f.get("max_error"), certificate=f.get("certificate"),
        generated=False, precheck=checked.fields())
