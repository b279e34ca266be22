"""``acute score`` and ``acute serve``: trust decisions with a probe, from the shell or over HTTP."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
from pathlib import Path

from .. import serving as serve
from ..engines.live import stop_early_refusal
from ..console import load_options_from_args
from ..engines.upstream import UpstreamEngine
from ..engines.vllm import find_vllm_python, model_folder
from ..engines.vllm_server import VllmServer, server_args, server_command
from ..errors import AcuteError, EngineError, InputError
from ..estimators import load_probe
from ..fileio import iter_jsonl
from ..metrics.certify import check_max_error
from ..models import acute_home, card_names, get_card, load_model, model_fingerprint
from ..models.cache import ensure_card_cached
from ..models.cards import DEFAULT_MODEL
from ..models.prompts import ToolChat, normalize_messages
from ..scoring.gate import resolve_gate
from ..scoring.precheck import check_precheck, require_precheck
from ..scoring.probe_checks import probe_task
from ..scoring.risk import DEFAULT_RISK, check_risk
from ..scoring.scorer import Scorer
from ..scoring.sources import check_live, live_parser
from ..scoring.stop_early import check_stop_early
from ..serving.settings import ServeSettings, check_bind, resolve_api_key
from ..store.generation import BATCH_SIZE, GenerationSettings
from ..tasks import get_task
from .common import default_probe_dir, level_arg

__all__ = ['add_score', 'add_serve', 'add_vllm_args', 'cmd_score', 'cmd_serve', 'cmd_vllm_args']

logger = logging.getLogger(__name__)

#: what the options that act before or while an answer is generated do (a given response has neither)
_ACTS = {"--precheck": "decides before generating", "--stop-early": "stops a generation while it is written"}
#: how errors name the levels of a gate on the command line
_OPTIONS = {"risk": "--risk", "max_error": "--max-error", "precheck": "--precheck", "stop_early": "--stop-early"}


def _score_task(name: str | None):
    """``--task``: None -> "auto" (the probe's open-QA task), "none" -> None, else that task."""
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
    or 'question' (a string) or 'messages' (chat messages, with optional 'tools': a chat offered
    function tools, :class:`acute.models.ToolChat`), and an optional 'response' (a non-empty
    string: scored as given; None: generated), or bare JSON strings; errors name the file and
    line."""
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
            if row.get("tools"):
                try:
                    text = ToolChat(normalize_messages(text, tool_turns=True, name="messages"), row["tools"])
                except InputError as e:
                    raise InputError(f"{name}:{lineno}: {e}") from None
        elif row.get("tools"):
            raise InputError(f"{name}:{lineno}: 'tools' are offered with 'messages' (a chat), not with a prompt")
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


def _score_all(scorer, prompts: list, responses: list, gate) -> list:
    """Generate and score the prompts without a response, score the given responses (one batch
    each), in input order, decided by ``gate`` (:class:`acute.scoring.gate.Gate`: with a
    precheck, a prompt is generated only when its precheck passes)."""
    given = [i for i, r in enumerate(responses) if r is not None]
    todo = [i for i, r in enumerate(responses) if r is None]
    out: list = [None] * len(prompts)
    if todo:
        for i, s in zip(todo, scorer.generate([prompts[i] for i in todo], gate=gate)):
            out[i] = s
    if given:
        scored = scorer.score_responses([prompts[i] for i in given], [responses[i] for i in given], gate=gate)
        for i, s in zip(given, scored):
            out[i] = s
    return out


def _print_scored(s, rule) -> None:
    """One scored answer for people: what was asked, answered and decided, and why."""
    print(f"question:       {s.question}")
    if s.precheck is not None:
        p = s.precheck
        how = (">" if p["decision"] == "trust" else "<=")
        then = "answered" if s.generated else "abstained without generating an answer"
        print(f"precheck:       {p['confidence']:.3f} {how} {p['threshold']:g} (question-only P(correct)): {then}")
    if not s.generated:
        print("answer:         (not generated)")
        print("decision:       abstain (refused by the precheck before generating: no answer, no tokens)")
        return
    print(f"answer:         {s.answer}")
    print(f"raw confidence: {s.raw_confidence:.3f}")
    if s.stopped_at is not None:
        print(f"decision:       abstain ({s.stop['reason']}; stopping threshold certified at --stop-early "
              f"{s.stop['epsilon']:g}, delta {s.stop['delta']:g})")
        return
    print(f"confidence:     {s.confidence:.3f}")
    print(f"decision:       {s.decision} ({rule.describe()})")


def cmd_score(args) -> int:
    if not args.jsonl and not args.question:
        raise InputError("give a question, or --jsonl FILE (or - for stdin)")
    if args.response is not None and (args.jsonl or not args.response.strip()):
        raise InputError("--response needs a question and a non-empty answer; in --jsonl rows give "
                         "each its 'response' field")
    generation = GenerationSettings(max_new_tokens=args.max_new_tokens, batch_size=args.batch_size)
    for option, given in (("--precheck", args.precheck), ("--stop-early", args.stop_early)):
        if given is not None and args.response is not None:
            raise InputError(f"{option} {_ACTS[option]}, and --response scores an answer given; leave out one of them")
    if args.probe:
        probe_dir = Path(args.probe)
    else:
        probe_dir = default_probe_dir()
        if not probe_dir.is_dir():
            raise FileNotFoundError(
                f"no probe is shipped for {DEFAULT_MODEL} ({probe_dir} is missing); make one with "
                "`acute demo` or `acute export` and pass it with --probe")
    probe = load_probe(probe_dir)
    # the levels were checked by argparse (level_arg); the gate is resolved once, before the model loads
    gate = resolve_gate(probe, args.risk, args.max_error, args.precheck, args.stop_early, name=_OPTIONS.get)
    if args.precheck is not None:
        require_precheck(probe.precheck, "--precheck", probe_dir)
    ids, prompts, responses = (_read_score_rows(args.jsonl) if args.jsonl
                               else (None, [args.question], [args.response]))
    for option, given in (("--precheck", args.precheck), ("--stop-early", args.stop_early)):
        if given is not None and any(r is not None for r in responses):
            line = next(i for i, r in zip(ids, responses) if r is not None)
            raise InputError(f"{option} {_ACTS[option]}, and {args.jsonl} row {line!r} gives a "
                             f"'response' to score as given; leave out {option} or the responses")
    model, tok = load_model(_model_source(args, probe), **load_options_from_args(args))
    scorer = Scorer(model, tok, probe, generation, task=_score_task(args.task),
                    allow_other_weights=args.allow_other_weights)
    scored = _score_all(scorer, prompts, responses, gate)
    if args.jsonl:
        for i, s in zip(ids, scored):
            print(json.dumps({"id": i, **s.to_dict()}, ensure_ascii=False))
        return 0
    _print_scored(scored[0], gate.rule)
    return 0


def _model_source(args, probe) -> str:
    """The model a probe scores with: ``--model``, else the one the probe names, else the default."""
    return args.model or probe.model_name or DEFAULT_MODEL


def cmd_serve(args) -> int:
    serve.require_serve_extra()
    api_key = resolve_api_key(args.api_key)
    check_bind(args.host, api_key, args.allow_remote)
    vllm = _check_engine_args(args)
    generation = GenerationSettings(max_new_tokens=args.max_new_tokens, batch_size=args.max_batch)

    probe_dir = Path(args.probe) if args.probe else default_probe_dir()
    probe = load_probe(probe_dir)
    check_live(probe, "serve", live_parser(probe, probe_task(probe)))  # before the model loads: names the source
    source = _model_source(args, probe)
    served = Path(source).name if Path(source).exists() else source  # the id clients see, not a path
    # the levels were checked by argparse (level_arg); the server's gate is resolved once, before the
    # model loads (a certificate or checkpoint model the probe lacks fails here)
    gate = resolve_gate(probe, args.risk, args.max_error, stop_early=args.stop_early, name=_OPTIONS.get)
    settings = serve.ServeSettings(  # bad flags fail before the model is loaded
        model_name=served, max_batch=args.max_batch, max_wait_ms=args.max_wait_ms, max_queue=args.max_queue,
        max_request_bytes=args.max_request_bytes, api_key=api_key, default_gate=gate,
        max_new_tokens_limit=args.max_new_tokens_limit, max_connections=args.max_connections,
        read_timeout_s=args.read_timeout, shutdown_timeout_s=args.shutdown_timeout,
        allowed_hosts=tuple(args.allowed_host or ()), allow_control_tokens=args.allow_control_tokens,
        drift_window=args.drift_window, drift_threshold=args.drift_threshold, record_to=args.record_to,
        record_shard_size=args.record_shard_size, record_flush_s=args.record_flush,
        concurrent_batches=args.concurrent_batches or (_ENGINE_BATCHES if vllm else 1))
    model, tok = load_model(source, **_gate_load_options(args, vllm))
    sock = serve.bind_socket(args.host, args.port)  # a taken port fails before vLLM starts
    with contextlib.closing(sock), _serving_engine(args, model, settings) as engine:
        if args.stop_early is not None and stop_early_refusal(engine):  # a connector without live checkpoints
            raise InputError(f"--stop-early: {stop_early_refusal(engine)}")
        try:  # with the engine: the setting the probe is checked against names it
            scorer = Scorer(model, tok, probe, generation, allow_other_weights=args.allow_other_weights, engine=engine,
                            scoring_setting="serve")
        except (TypeError, ValueError) as e:
            if isinstance(e, AcuteError):  # already says what is wrong (e.g. another model's probe)
                raise
            # a malformed probe.json (e.g. training settings of the wrong type): one line, not a traceback
            raise InputError(f"{probe_dir / 'probe.json'}: cannot serve with this probe's training "
                             f"settings: {e}") from None
        _serve(args, serve, scorer, settings, sock, served, probe_dir, api_key, engine)
    return 0


def _serve(args, serve, scorer, settings, sock, served, probe_dir, api_key, engine) -> None:
    """``acute serve`` once the model (and the engine) runs."""
    app = serve.create_app(scorer, settings)
    host, port = sock.getsockname()[:2]
    url = f"http://{'[' + host + ']' if ':' in host else host}:{port}"
    if engine is not None:  # before the line that says it serves: the last one a start prints
        print(f"generating with vLLM ({'its server at ' + args.upstream if args.upstream else 'started by acute'}; "
              f"{settings.concurrent_batches} batches at once)", flush=True)
        if not args.load_weights:
            print("the gate holds no copy of the weights (their identity read from the model's files); "
                  "/v1/score with a given response needs --load-weights", flush=True)
    print(f"serving {served} with probe {probe_dir} at {url}/v1 (API key "
          f"{'required' if api_key else 'not required'}); SIGTERM or Ctrl-C stops", flush=True)
    if settings.record_to is not None:
        print(f"recording every served answer (prompt, answer, confidence, pooled states) to the store "
              f"{settings.record_to}; POST /v1/feedback labels them", flush=True)
    if api_key is None and args.allow_remote and not args.allowed_host:
        print("note: without an API key only requests to a loopback Host name are served; name the "
              "others with --allowed-host NAME", flush=True)
    serve.run_server(app, sock)
    print("stopped", flush=True)


def _gate_load_options(args, vllm: bool) -> dict:
    """``load_model`` keywords of ``acute serve``: with vLLM (which holds the weights) the model
    without its weights unless ``--load-weights`` (given responses need them)."""
    if not vllm:
        if args.load_weights:
            raise InputError("--load-weights goes with vLLM (--engine vllm or --upstream URL); the transformers "
                             "service always loads the weights")
        return load_options_from_args(args)
    if args.load_weights:
        return load_options_from_args(args)
    if args.device != "cpu" or args.device_map is not None:
        raise InputError("with vLLM the gate holds no weights of its own, so --device and --device-map place "
                         "nothing; give --load-weights to keep a copy (for /v1/score with a given response)")
    return {"dtype": args.model_dtype, "weights": False}


#: batches an engine that batches continuously (vLLM) scores at once by default
_ENGINE_BATCHES = 8


def _check_engine_args(args) -> bool:
    """Whether vLLM generates (``--engine vllm`` or ``--upstream``); refuses options that do not go
    together, before anything is loaded."""
    if args.upstream is not None and args.engine is not None:
        raise InputError("--upstream URL generates with the vLLM server at URL; leave out --engine")
    vllm = args.upstream is not None or args.engine == "vllm"
    if not vllm and args.concurrent_batches not in (None, 1):
        raise InputError("--concurrent-batches needs vLLM (--engine vllm or --upstream URL), which batches "
                         "continuously; a transformers model runs one batch at a time")
    if not vllm and (args.pooled_dir is not None or args.upstream_api_key is not None):
        raise InputError("--pooled-dir and --upstream-api-key go with --upstream URL")
    if args.upstream is None and args.pooled_dir is not None:
        raise InputError("--pooled-dir names the pooled folder of a vLLM server given by --upstream URL")
    if args.upstream is not None and args.vllm_max_model_len is not None:
        raise InputError("--vllm-max-model-len sets the vLLM server acute starts (--engine vllm); the one at "
                         "--upstream was started with its own")
    return vllm


@contextlib.contextmanager
def _serving_engine(args, model, settings):
    """None (transformers); else a started :class:`~acute.engines.upstream.UpstreamEngine` on the
    vLLM server at ``--upstream``, or on one started here (``--engine vllm``, stopped on exit)."""
    if args.upstream is None and args.engine != "vllm":
        yield None
        return
    from ..extraction.layers import context_window  # heavy: torch

    with contextlib.ExitStack() as stack:
        if args.upstream is not None:
            url, key, pooled = args.upstream, args.upstream_api_key or os.environ.get("VLLM_API_KEY"), args.pooled_dir
        else:
            print("starting vLLM's server with acute's pooling connector (a minute or more) ...", flush=True)
            server = stack.enter_context(VllmServer(
                model_folder(model), dtype=str(model.dtype).replace("torch.", ""),
                max_model_len=args.vllm_max_model_len or context_window(model),
                max_num_seqs=max(settings.max_batch * settings.concurrent_batches, 1)))
            url, key, pooled = server.url, server.api_key, server.pooled_dir
        engine = stack.enter_context(UpstreamEngine(url, api_key=key, pooled_dir=pooled,
                                                    max_connections=settings.max_batch * settings.concurrent_batches))
        fingerprint = model_fingerprint(model)
        want = (fingerprint["num_layers"] + 1, fingerprint["hidden_size"])
        if engine.info["states_shape"] != want:
            raise EngineError(f"the vLLM server at {url} records states of shape {engine.info['states_shape']}, "
                              f"not {want} as the model {getattr(model, 'name_or_path', '')} has: it serves another "
                              "model")
        yield engine


def _model_folder(name: str) -> Path:
    """A saved model folder (config.json and weights) from a folder or a model card's name."""
    path = Path(name).expanduser()
    if path.is_dir():
        return path

    if name in card_names():
        return ensure_card_cached(get_card(name))
    raise InputError(f"--model {name!r} is neither a saved model folder nor a model card ({', '.join(card_names())}); "
                     "vLLM loads a folder (a card's converted folder, or save_pretrained's)")


def cmd_vllm_args(args) -> int:
    folder = _model_folder(args.model or DEFAULT_MODEL)
    pooled = Path(args.pooled_dir) if args.pooled_dir else acute_home() / "vllm-pooled"
    try:
        python = find_vllm_python()
    except EngineError as e:  # the command is printed all the same, for the Python that will have vLLM
        print(f"# {e}")
        python = "python"
    line = server_command(python, server_args(folder, pooled.resolve(), host=args.host, port=args.port,
                                              dtype=args.dtype, served_model_name=args.served_model_name,
                                              max_model_len=args.max_model_len))
    print(f"# vLLM's OpenAI server for {folder.name} with acute's pooling connector (pooled states in {pooled}):")
    print(f"mkdir -p {pooled} && {line}")
    print("# then acute's gate in front of it (on this machine: it reads the pooled folder):")
    host = f"[{args.host}]" if ":" in args.host else args.host
    print(f"acute serve --upstream http://{host}:{args.port} --model {args.model or DEFAULT_MODEL} --probe PROBE "
          "--port 8001")
    return 0


def add_score(sub, model_opts) -> None:
    """``acute score``."""
    s = sub.add_parser("score", help="generate and decide trust / abstain with a probe", parents=[model_opts])
    s.add_argument("question", nargs="?", help="the question to answer and score (or --jsonl)")
    s.add_argument("--probe", default=None, help="probe directory (default: the shipped SmolLM2 probe)")
    s.add_argument("--model", default=None, help="default: the model named in the probe")
    s.add_argument("--risk", type=level_arg(check_risk, "--risk"), default=None,
                   help=f"risk level u in [0, 1]: trust iff confidence > u (default {DEFAULT_RISK})")
    s.add_argument("--max-error", type=level_arg(check_max_error, "--max-error"), default=None, metavar="ALPHA",
                   help="decide by the threshold the probe certified at this error rate instead "
                        "(acute export --max-error): trust iff confidence >= it")
    s.add_argument("--precheck", type=level_arg(check_precheck, "--precheck"), default=None, metavar="U0",
                   help="two-stage gate: generate only when the question-only probe (acute export --with-precheck) "
                        "gives P(correct) > U0 in (0, 1); otherwise abstain without generating")
    s.add_argument("--stop-early", type=level_arg(check_stop_early, "--stop-early"), default=None, metavar="EPS",
                   help="stop a generation at a checkpoint when the probe's prefix probes (acute export "
                        "--with-stop-early) say the gate will not trust it, by a threshold certified to stop at "
                        "most EPS in (0, 1) of the right answers it would trust; the answer abstains")
    s.add_argument("--jsonl", default=None, help="file of prompts (JSON lines with 'prompt', 'question' or 'messages' "
                   "(with optional 'tools': function tools the chat offers), and optionally 'response': scored as "
                   "given instead of generated), or - for stdin")
    s.add_argument("--response", default=None, metavar="TEXT",
                   help="score this answer (from another engine) to the question instead of generating one")
    s.add_argument("--max-new-tokens", type=int, default=None, help="longest answer (default: the probe's training setting)")
    s.add_argument("--batch-size", type=int, default=BATCH_SIZE, help="prompts run together (default %(default)s)")
    s.add_argument("--allow-other-weights", action="store_true",
                   help="score with a probe trained on other weights of the same architecture")
    s.add_argument("--task", default=None,
                   help="wrap questions in this task's prompt (default: the probe's open-QA task; 'none': ask as is)")
    s.set_defaults(func=cmd_score)


def add_vllm_args(sub, model_opts) -> None:
    """``acute vllm-args``."""
    v = sub.add_parser("vllm-args", help="print the command that starts vLLM's OpenAI server with acute's pooling "
                       "connector, and the gate in front of it")
    v.add_argument("--model", default=None, help=f"a model card or saved folder (default {DEFAULT_MODEL})")
    v.add_argument("--pooled-dir", default=None, metavar="DIR",
                   help="where the connector writes each request's pooled states (default $ACUTE_HOME/vllm-pooled)")
    v.add_argument("--host", default="127.0.0.1", help="vLLM's address (default loopback)")
    v.add_argument("--port", type=int, default=8000, help="vLLM's port (default %(default)s)")
    v.add_argument("--dtype", default="float32", help="vLLM's dtype (default %(default)s, as acute's recorder)")
    v.add_argument("--max-model-len", type=int, default=None, help="vLLM's context (default: the model's)")
    v.add_argument("--served-model-name", default=None, help="the model id vLLM serves (default: the folder)")
    v.set_defaults(func=cmd_vllm_args)


def add_serve(sub, model_opts) -> None:
    """``acute serve``; its service settings default to :class:`acute.serving.settings.ServeSettings`'s."""
    default = ServeSettings()
    sv = sub.add_parser("serve", help="the trust-gate HTTP service: /v1/score and OpenAI-compatible "
                        "/v1/chat/completions with dynamic batching", parents=[model_opts])
    sv.add_argument("--model", default=None, help="default: the model named in the probe")
    sv.add_argument("--probe", default=None, help="probe directory (default: the shipped SmolLM2 probe)")
    sv.add_argument("--host", default="127.0.0.1",
                    help="address to bind (default loopback; others need an API key or --allow-remote)")
    sv.add_argument("--port", type=int, default=8000, help="TCP port (0: a free one, printed)")
    sv.add_argument("--max-batch", type=int, default=default.max_batch,
                    help="most requests generated together (default %(default)s)")
    sv.add_argument("--max-wait-ms", type=float, default=default.max_wait_ms,
                    help="longest a batch waits for more requests after its first (default %(default)s)")
    sv.add_argument("--max-queue", type=int, default=default.max_queue,
                    help="most waiting requests; more get 503 (default %(default)s)")
    sv.add_argument("--max-request-bytes", type=int, default=default.max_request_bytes,
                    help="largest request body; more get 413 (default %(default)s)")
    sv.add_argument("--max-new-tokens", type=int, default=None, help="default: the probe's training setting")
    sv.add_argument("--max-new-tokens-limit", type=int, default=None,
                    help="most new tokens a request may ask for; more get 400 (default: 4x --max-new-tokens)")
    sv.add_argument("--max-connections", type=int, default=default.max_connections,
                    help="open connections or running requests before new requests get 503 (default %(default)s)")
    sv.add_argument("--read-timeout", type=float, default=default.read_timeout_s,
                    help="seconds a request's head, then its body, may take to arrive; slower gets 408 "
                         "(default %(default)s)")
    sv.add_argument("--shutdown-timeout", type=float, default=default.shutdown_timeout_s,
                    help="seconds in-flight requests get to finish on SIGTERM; the rest get 503 (default %(default)s)")
    sv.add_argument("--risk", type=level_arg(check_risk, "--risk"), default=None,
                    help=f"risk level of chat requests that give neither risk nor max_error (default {DEFAULT_RISK})")
    sv.add_argument("--max-error", type=level_arg(check_max_error, "--max-error"), default=None, metavar="ALPHA",
                    help="decide chat requests that give neither risk nor max_error by the threshold the "
                         "probe certified at this error rate instead")
    sv.add_argument("--stop-early", type=level_arg(check_stop_early, "--stop-early"), default=None, metavar="EPS",
                    help="stop every generation the gate will not trust at a checkpoint, by the threshold the "
                         "probe's prefix probes (acute export --with-stop-early) certify at EPS in (0, 1); the "
                         "answer abstains with stopped_at (transformers only)")
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
    sv.add_argument("--engine", choices=["transformers", "vllm"], default=None,
                    help="what generates: acute's transformers recorder (default) or vLLM with acute's pooling "
                         "connector, started here (docs/serving-with-vllm.md)")
    sv.add_argument("--upstream", default=None, metavar="URL",
                    help="generate with the vLLM server at URL, started with acute's connector (`acute vllm-args`)")
    sv.add_argument("--upstream-api-key", default=None, metavar="KEY",
                    help="with --upstream: the key that server requires (default $VLLM_API_KEY)")
    sv.add_argument("--pooled-dir", default=None, metavar="DIR",
                    help="with --upstream: that server's pooled folder, checked (default: learned from it)")
    sv.add_argument("--load-weights", action="store_true",
                    help="with vLLM: also load the model's weights in the gate, for /v1/score with a given "
                         "response (teacher forcing); by default the gate reads only the model's configuration, "
                         "tokenizer and the identity of its weight files")
    sv.add_argument("--vllm-max-model-len", type=int, default=None, metavar="N",
                    help="with --engine vllm: vLLM's context (default: the model's)")
    sv.add_argument("--concurrent-batches", type=int, default=None, metavar="N",
                    help=f"batches scored at once (default 1; with vLLM {_ENGINE_BATCHES}: it batches them "
                         "continuously)")
    sv.add_argument("--drift-window", type=int, default=default.drift_window, metavar="N",
                    help="/metrics' drift signal compares the last N confidences with the probe's calibration "
                         "confidences (default %(default)s)")
    sv.add_argument("--drift-threshold", type=float, default=default.drift_threshold, metavar="D",
                    help="log a warning when that KS distance rises above D (default %(default)s)")
    sv.add_argument("--record-to", default=None, metavar="STORE",
                    help="write every served answer (prompt, answer, confidence, pooled states) to this acute "
                         "store on this machine, to label with POST /v1/feedback and retrain with "
                         "`acute export --store STORE` (default: nothing recorded)")
    sv.add_argument("--record-shard-size", type=int, default=default.record_shard_size, metavar="N",
                    help="with --record-to: answers per committed shard (default %(default)s)")
    sv.add_argument("--record-flush", type=float, default=default.record_flush_s, metavar="SECONDS",
                    help="with --record-to: commit answers once the oldest uncommitted one is this old "
                         "(default %(default)s; all are committed on SIGTERM)")
    sv.set_defaults(func=cmd_serve)
