"""Running acute's command line inside a test: :func:`run`."""

from __future__ import annotations

from acute.cli import main


def run(argv, capsys):
    """``(exit status, stdout, stderr)`` of ``acute ARGV`` run in this process (arguments turned
    into strings; argparse's refusal of an argument returns its exit status)."""
    try:
        rc = main([str(a) for a in argv])
    except SystemExit as e:
        rc = e.code
    out, err = capsys.readouterr()
    return rc, out, err
