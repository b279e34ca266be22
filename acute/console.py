"""What acute's command lines share (``acute`` and ``acute run``): the log handler that shows the
library's progress on stderr, and the model placement options of every command that loads a
model."""

from __future__ import annotations

import argparse
import logging
import sys

__all__ = ["load_options_from_args", "model_options_parser", "show_logs"]


def show_logs(level: int = 20) -> None:
    """Show acute's log records (progress of slow steps, where outputs went) on stderr as
    ``[acute] message``; library code logs, only the command line decides to show it."""
    class Stderr(logging.StreamHandler):
        """Writes to ``sys.stderr`` as it is when a record comes, not as it was when the
        handler was made (a later redirection or capture, e.g. pytest's, is followed)."""

        @property
        def stream(self):
            return sys.stderr

        @stream.setter
        def stream(self, value):
            pass

    logger = logging.getLogger("acute")
    if not any(getattr(h, "_acute_cli", False) for h in logger.handlers):
        handler = Stderr()
        handler.setFormatter(logging.Formatter("[acute] %(message)s"))
        handler._acute_cli = True
        logger.addHandler(handler)
    logger.setLevel(level)


def load_options_from_args(args, device: str | None = None) -> dict:
    """``load_model`` keywords from the model options every model-loading command shares."""
    return {"dtype": args.model_dtype, "device": device or args.device, "device_map": args.device_map}


def model_options_parser() -> argparse.ArgumentParser:
    """The parent parser of every command that loads a model: where and in which dtype."""
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("model placement")
    g.add_argument("--model-dtype", default="float32",
                   help="weights dtype: float32, bfloat16 or float16 (layer sums stay float32)")
    g.add_argument("--device", default="cpu",
                   help="cpu, cuda or cuda:N (under accelerate launch: each process's own GPU)")
    g.add_argument("--device-map", default=None,
                   help="spread one model over the available devices (e.g. auto); one process only")
    return p
