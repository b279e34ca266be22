"""A vLLM OpenAI-compatible server as acute's engine: :class:`UpstreamEngine`.

The server runs acute's pooling connector (:func:`acute.engines.vllm_server.server_args` gives its
command line; ``acute vllm-args`` prints it): ``acute serve --engine vllm`` starts one
(:class:`acute.engines.vllm_server.VllmServer`), ``acute serve --upstream URL`` uses one its user
runs. Each prompt is one ``POST /v1/completions`` with the formatted prompt's token ids (the
tokens acute's transformers recorder would feed), greedy, the sampled tokens' log-probs and
``kv_transfer_params={"acute_pooled_name": NAME}``: the connector writes that request's pooled
states to ``<its pooled folder>/NAME.safetensors``, which is read here and removed. The name is
chosen before the request is sent, so no answer needs to carry the path (vLLM's answer carries
none for a request a stop string aborted, nor for a streamed one).

Requests go out concurrently (vLLM batches them continuously with everyone else's) from one
event loop in a thread of their own; :meth:`UpstreamEngine.generate_ids` is thread-safe. A
request whose caller gives up (:meth:`UpstreamEngine.stopping`) is cancelled: its connection
closes and vLLM aborts it. The gate reads the pooled files, so it runs where vLLM's pooled folder
is (the same machine, or a shared folder): :meth:`UpstreamEngine.__enter__` checks that with one
short request and learns the folder from it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from ..errors import EngineError, InputError
from ..store.generation import GenerationSettings
from ..store.checkpoints import parse_schedule
from .live import LIVE_CHECKPOINTS_KEY, live_checkpoint_path, stream_live
from .pooled import POOLED_WAIT_S, PooledEngine, read_pooled

logger = logging.getLogger(__name__)

__all__ = ["RefusedByEngine", "UpstreamEngine"]

#: vLLM's kv_transfer_params keys of acute's connector (acute.engines.vllm_connector, which
#: imports vLLM and so is not imported here)
NAME_KEY, PATH_KEY = "acute_pooled_name", "acute_pooled_path"
CHECKPOINTS_KEY = "acute_checkpoints"  # acute.engines.vllm_connector.CHECKPOINTS_KEY
#: sampling parameters that make vLLM's server decode as acute's recorder does (greedy, none of
#: the model's generation_config defaults that change a greedy answer)
GREEDY = {"temperature": 0.0, "top_p": 1.0, "top_k": -1, "min_p": 0.0, "repetition_penalty": 1.0,
          "presence_penalty": 0.0, "frequency_penalty": 0.0, "n": 1}
#: how often a waiting caller looks at its stop check
_POLL_S = 0.05


class UpstreamEngine(PooledEngine):
    """A vLLM OpenAI server with acute's pooling connector (see the module docstring).

    ``url`` is the server's base (``http://127.0.0.1:8000``, with or without ``/v1``),
    ``api_key`` the key it was started with (``--api-key`` / ``VLLM_API_KEY``), ``model`` the
    served model name to ask for (default: the only one it serves), ``pooled_dir`` its
    connector's ``shared_storage_path`` (default: learned from the first answer),
    ``timeout_s`` the longest one request may take and ``max_connections`` the most requests in
    flight. Use as a context manager: entering checks the server (its models, acute's connector,
    that its pooled files can be read here).
    """

    def __init__(self, url: str, *, api_key: str | None = None, model: str | None = None,
                 pooled_dir: str | Path | None = None, timeout_s: float = 600.0,
                 max_connections: int = 256):
        base = url.rstrip("/")
        if not base.startswith(("http://", "https://")):
            raise InputError(f"the vLLM server's URL must start with http:// or https://, got {url!r}")
        self.base = base[:-3] if base.endswith("/v1") else base
        self.api_key = api_key
        self.model = model
        self.pooled_dir = None if pooled_dir is None else str(Path(pooled_dir).resolve())
        self.timeout_s = float(timeout_s)
        self.max_connections = int(max_connections)
        self.info: dict = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._client = None
        self._local = threading.local()
        self._orphans: dict[str, float] = {}
        self._orphans_lock = threading.Lock()

    # -- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> UpstreamEngine:
        import httpx  # optional: httpx

        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="acute-upstream", daemon=True)
        self._thread.start()
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        limits = httpx.Limits(max_connections=self.max_connections,
                              max_keepalive_connections=self.max_connections, keepalive_expiry=2.0)

        async def make():
            return httpx.AsyncClient(base_url=self.base, headers=headers, limits=limits,
                                     timeout=httpx.Timeout(self.timeout_s, connect=10.0))

        self._client = self._run(make()).result()
        try:
            self._check_server()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._loop is None:
            return
        if self._client is not None:
            with contextlib.suppress(Exception):
                self._run(self._client.aclose()).result(10)
            self._client = None
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()
        self._loop = self._thread = None
        self._sweep(final=True)

    def _run(self, coroutine) -> concurrent.futures.Future:
        if self._loop is None:
            raise EngineError("the vLLM upstream engine is not started (use it as a context manager)")
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop)

    def _check_server(self) -> None:
        """The served model, acute's connector and the pooled folder, from ``/v1/models`` and one
        one-token request; :class:`EngineError` saying what is missing."""
        listed = self._run(self._get("/v1/models")).result(self.timeout_s)
        served = [m.get("id") for m in listed.get("data", []) if isinstance(m, dict)]
        if self.model is None:
            if len(served) != 1:
                raise EngineError(f"the vLLM server at {self.base} serves {served}; name the one to use")
            self.model = served[0]
        elif self.model not in served:
            raise EngineError(f"the vLLM server at {self.base} serves {served}, not {self.model!r}")
        entry = next(m for m in listed["data"] if m.get("id") == self.model)
        try:
            version = self._run(self._get("/version")).result(self.timeout_s).get("version")
        except EngineError:
            version = None
        name = _new_name()
        body = {**self._body([0], GenerationSettings(max_new_tokens=1), ()), "kv_transfer_params": {NAME_KEY: name}}
        answer = self._run(self._post(body, "checking the server")).result(self.timeout_s)
        path = (answer.get("kv_transfer_params") or {}).get(PATH_KEY)
        if not path:
            raise EngineError(f"the vLLM server at {self.base} does not run acute's pooling connector (its "
                              "answer names no pooled file); start it with the command `acute vllm-args` prints")
        folder = str(Path(path).parent.resolve())
        if self.pooled_dir is not None and folder != self.pooled_dir:
            raise EngineError(f"the vLLM server at {self.base} writes its pooled states to {folder}, not to "
                              f"{self.pooled_dir} (--pooled-dir)")
        self.pooled_dir = folder
        try:
            mean = read_pooled(path, "checking the server", 1)["layer_means"]
        except EngineError:
            raise EngineError(f"the vLLM server at {self.base} wrote its pooled states to {path}, which does "
                              "not appear here: run acute where it can read vLLM's pooled folder") from None
        self.max_model_len = entry.get("max_model_len") if isinstance(entry.get("max_model_len"), int) else None
        self.live_checkpoints = self._check_live()
        self.info = {"vllm_version": version, "model": self.model, "root": entry.get("root"),
                     "max_model_len": self.max_model_len,
                     "pooled_dir": folder, "states_shape": tuple(mean.shape)}
        logger.info("vLLM at %s serves %s; pooled states [%d, %d] in %s", self.base, self.model,
                    *mean.shape, folder)

    # -- requests ----------------------------------------------------------------------------

    async def _get(self, route: str) -> dict:
        import httpx  # optional: httpx

        try:
            answer = await self._client.get(route)
        except httpx.HTTPError as e:
            raise EngineError(f"cannot reach the vLLM server at {self.base}: {type(e).__name__}: {e}") from None
        return _json(answer, f"GET {route}")

    async def _post(self, body: dict, where: str) -> dict:
        import httpx  # optional: httpx

        try:
            answer = await self._client.post("/v1/completions", json=body)
        except httpx.HTTPError as e:  # the URL stays in the log (clients see this message)
            logger.warning("%s: cannot reach the vLLM server at %s: %s: %s", where, self.base, type(e).__name__, e)
            raise EngineError(f"{where}: cannot reach the vLLM server ({type(e).__name__})") from None
        return _json(answer, where)

    def _body(self, ids: Sequence[int], settings: GenerationSettings, eos_token_ids: Sequence[int]) -> dict:
        return {"model": self.model, "prompt": [int(t) for t in ids], "max_tokens": int(settings.max_new_tokens or 64),
                **GREEDY, "logprobs": 0, "stop": list(settings.stop_strings or ()) or None,
                "stop_token_ids": [int(t) for t in eos_token_ids], "include_stop_str_in_output": True,
                "skip_special_tokens": True, "return_token_ids": True}

    async def _one(self, body: dict, path: str, where: str) -> dict:
        answer = await self._post(body, where)
        choices = answer.get("choices") or []
        if len(choices) != 1 or not isinstance(choices[0].get("token_ids"), list):
            raise EngineError(f"{where}: vLLM's answer has no token ids (is it vLLM >= 0.10?)")
        choice = choices[0]
        logprobs = (choice.get("logprobs") or {}).get("token_logprobs")
        if not isinstance(logprobs, list) or len(logprobs) != len(choice["token_ids"]):
            raise EngineError(f"{where}: vLLM's answer has no log-prob per generated token")
        named = (answer.get("kv_transfer_params") or {}).get(PATH_KEY)
        if named is not None and os.path.realpath(named) != os.path.realpath(path):
            raise EngineError(f"{where}: vLLM wrote the pooled states elsewhere than asked")
        return {"token_ids": choice["token_ids"], "logprobs": [float(x) for x in logprobs],
                "finish_reason": choice.get("finish_reason"), "stop_reason": choice.get("stop_reason"),
                "path": path}

    def generate_ids(self, prompt_ids: Sequence[Sequence[int]], settings: GenerationSettings, *,
                     eos_token_ids: Sequence[int] = (), checkpoints: dict | None = None,
                     live: dict | None = None, on_live: Callable | None = None) -> list[dict]:
        """One concurrent request per prompt (greedy, as ``settings`` say); the results in order, or
        :class:`EngineError` naming the first prompt that failed (the files of the others are
        removed). The caller's stop check (:meth:`stopping`) cancels them all. ``checkpoints``:
        a schedule's JSON, asked of the connector. ``live`` and ``on_live``: stop rows early
        (:class:`acute.engines.live.LiveStops`): each request is streamed and closed at its stop."""
        self._sweep()
        names = [_new_name() for _ in prompt_ids]
        paths = [os.path.join(self.pooled_dir, n + ".safetensors") for n in names]
        ask = {} if checkpoints is None else {CHECKPOINTS_KEY: checkpoints}
        if live is not None:
            ask[LIVE_CHECKPOINTS_KEY] = live
        futures = [self._run(self._request({**self._body(ids, settings, eos_token_ids),
                                            "kv_transfer_params": {NAME_KEY: name, **ask}}, path, f"prompts[{i}]",
                                           None if live is None else (i, live, on_live)))
                   for i, (ids, name, path) in enumerate(zip(prompt_ids, names, paths))]
        try:
            self._wait(futures)
            return [f.result() for f in futures]
        except BaseException:
            for f in futures:
                f.cancel()
            self.discard(paths)
            raise

    async def _request(self, body: dict, path: str, where: str, live: tuple | None) -> dict:
        """:meth:`_one`, or with ``live`` (``(row, schedule JSON, on_live)``) the request streamed
        and asked at its live checkpoints (:func:`acute.engines.live.stream_live`)."""
        if live is None:
            return await self._one(body, path, where)
        row, schedule, on_live = live

        def ask(k: int, logprobs: list) -> bool:
            return bool(on_live(k, [row], [live_checkpoint_path(path, k)], [logprobs]))

        import httpx  # optional: acute's serve extra

        try:
            return await stream_live(self._client, body, path, where, ask, parse_schedule(schedule), _json)
        except httpx.HTTPError as e:
            logger.warning("%s: cannot reach the vLLM server at %s: %s: %s", where, self.base, type(e).__name__, e)
            raise EngineError(f"{where}: cannot reach the vLLM server ({type(e).__name__})") from None

    def _check_live(self) -> bool:
        """Whether the server's connector writes live checkpoints: one two-token request asking
        for one at the first token (its file, written with the request's, is removed)."""
        name = _new_name()
        body = {**self._body([0], GenerationSettings(max_new_tokens=2), ()), "ignore_eos": True,
                "kv_transfer_params": {NAME_KEY: name, LIVE_CHECKPOINTS_KEY: {"first": [1], "every": 1 << 20}}}
        answer = self._run(self._post(body, "checking the server's live checkpoints")).result(self.timeout_s)
        path = os.path.join(self.pooled_dir, name + ".safetensors")
        n = len(((answer.get("choices") or [{}])[0]).get("token_ids") or [])
        with contextlib.suppress(EngineError):
            read_pooled(path, "checking the server's live checkpoints", n)
        found = os.path.exists(live_checkpoint_path(path, 1))
        with contextlib.suppress(OSError):
            os.remove(live_checkpoint_path(path, 1))
        return found and n == 2

    def _wait(self, futures: list[concurrent.futures.Future]) -> None:
        """Wait for ``futures``, calling this thread's stop check between waits; the first
        failure is raised."""
        check = getattr(self._local, "check", None)
        pending = set(futures)
        while pending:
            if check is not None:
                check()
            done, pending = concurrent.futures.wait(pending, timeout=_POLL_S if check else None,
                                                    return_when=concurrent.futures.FIRST_EXCEPTION)
            failed = next((f for f in done if not f.cancelled() and f.exception() is not None), None)
            if failed is not None:
                raise failed.exception()

    @contextlib.contextmanager
    def stopping(self, check: Callable[[], Any]) -> Iterator[None]:
        """While the context lasts, this thread's requests call ``check()`` every 50 ms; what it
        raises cancels them (vLLM aborts a request whose connection closes) and is raised."""
        before = getattr(self._local, "check", None)
        self._local.check = check
        try:
            yield
        finally:
            self._local.check = before

    # -- files of requests nobody reads ------------------------------------------------------

    def discard(self, paths: Sequence[str]) -> None:
        """Remove the pooled files of requests whose records will not be read: now when they are
        there, else once they appear (a cancelled request's file is written when vLLM aborts it),
        for up to :data:`~acute.engines.pooled.POOLED_WAIT_S` seconds."""
        deadline = time.monotonic() + POOLED_WAIT_S
        with self._orphans_lock:
            for path in paths:
                self._orphans[path] = deadline
        self._sweep()

    def _sweep(self, final: bool = False) -> None:
        now = time.monotonic()
        with self._orphans_lock:
            for path, deadline in list(self._orphans.items()):
                if os.path.exists(path):
                    with contextlib.suppress(OSError):
                        os.remove(path)
                    del self._orphans[path]
                elif final or now > deadline:
                    del self._orphans[path]


def _new_name() -> str:
    return f"acute-{uuid.uuid4().hex}"


class RefusedByEngine(EngineError, ValueError):
    """vLLM refused a request as invalid (its 400): the request's own fault, a 400 for the client."""


def _json(answer, where: str) -> dict:
    """The JSON object of a vLLM answer; :class:`EngineError` with vLLM's message for an error
    (:class:`RefusedByEngine` for its 400)."""
    try:
        body = answer.json()
    except ValueError:
        body = None
    if answer.status_code != 200 or not isinstance(body, dict):
        message = ""
        if isinstance(body, dict):
            error = body.get("error", body)
            message = error.get("message", "") if isinstance(error, dict) else str(error)
        kind = RefusedByEngine if answer.status_code == 400 else EngineError
        raise kind(f"{where}: the vLLM server answered {answer.status_code}"
                   + (f": {str(message)[:300]}" if message else ""))
    return body
