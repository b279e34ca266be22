"""The ``acute`` command line: demo, collect, tasks, models, verify, train, evaluate,
learning-curve, export, score, serve, vllm-args, rerecord, plot, protocol, protocol-report and run. Each
command's parser and function live in the module of its group (collecting, training, scoring,
studies); heavy imports happen inside each command."""

from __future__ import annotations

import argparse
import errno
import signal
import sys
import threading

from ..console import model_options_parser, show_logs
from ..errors import AcuteError
from .. import __version__
from . import collecting, scoring, studies, training

__all__ = ["build_parser", "main"]


def _err(msg: str) -> None:
    print(f"acute: error: {msg}", file=sys.stderr)


def build_parser() -> argparse.ArgumentParser:
    """The parser of every command (``acute run`` parses its own arguments)."""
    p = argparse.ArgumentParser(prog="acute", description=__doc__.split("\n\n")[0].replace("\n", " "))
    p.add_argument("--version", action="version", version=f"acute {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    model_opts = model_options_parser()
    studies.add_demo(sub, model_opts)
    collecting.add_collect(sub, model_opts)
    collecting.add_listings(sub, model_opts)
    training.add_train_export(sub, model_opts)
    training.add_recertify(sub, model_opts)
    training.add_evaluate(sub, model_opts)
    training.add_learning_curve(sub, model_opts)
    training.add_prefix(sub, model_opts)
    training.add_plot(sub, model_opts)
    scoring.add_score(sub, model_opts)
    scoring.add_serve(sub, model_opts)
    scoring.add_vllm_args(sub, model_opts)
    collecting.add_rerecord(sub, model_opts)
    studies.add_protocol(sub, model_opts)
    sub.add_parser("run", help="the reproduction pipeline: models x tasks -> stores, evaluations, "
                   "protocol studies, docs/results (see `acute run --help`)", add_help=False)
    studies.add_protocol_report(sub, model_opts)
    return p


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread so that it unwinds like Ctrl-C (stores are marked
    "interrupted", temporaries removed)."""


def _on_sigterm(signum, frame):
    raise Terminated()


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    show_logs()
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if main_thread else None
    try:
        if argv[:1] == ["run"]:  # the pipeline parses its own arguments (`acute run --help`)
            from ..pipeline.driver import main as run_main  # lazy: CLI start-up

            return _guarded(run_main, argv[1:])
        args = build_parser().parse_args(argv)
        args.argv = argv
        return _guarded(args.func, args)
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)  # main() may be called from a larger program


def _guarded(func, arg) -> int:
    """Run a command; domain errors become one line and exit status 2, anything else is a bug
    and shows its traceback."""
    try:
        return func(arg)
    except (AcuteError, FileNotFoundError) as e:
        _err(str(e))
        return 2
    except OSError as e:  # no permission, a full disk, a file where a folder should be
        where = f": {e.filename}" if e.filename else ""
        hint = "; committed shards are kept and a rerun resumes" if e.errno == errno.ENOSPC else ""
        _err(f"{e.strerror or e}{where}{hint}")
        return 2
    except KeyboardInterrupt as e:
        _err(("terminated" if isinstance(e, Terminated) else "interrupted")
             + "; committed shards are kept and a rerun resumes")
        return 143 if isinstance(e, Terminated) else 130


if __name__ == "__main__":
    sys.exit(main())
