"""README's Python example runs as written, on a tiny random model.

The block is taken from README.md and executed unchanged in a temporary folder; only what
would need the network or hours is swapped underneath it: ``acute.load_model`` returns the tiny
Llama, the built-in task loads its first 80 questions and labels each by a hash of its id (a
random model answers every question wrong; the folds need both classes), the probes grow
20 trees and the logistic controls search a smaller grid (tests/smaller.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import acute
from acute.testing import hash_label
from smaller import small_searches  # tests/smaller.py

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.DOTALL)


def test_readme_has_one_python_example():
    blocks = readme_python_blocks()
    assert len(blocks) == 1 and "acute.load_model" in blocks[0] and "Scorer" in blocks[0]


def test_readme_python_example_runs(tmp_path, monkeypatch, long_context_dir, capsys):
    from acute.estimators.probes import ActivationProbe
    from acute.tasks.qa import DefaultTask

    tiny = acute.load_model(str(long_context_dir))
    monkeypatch.setattr(acute, "load_model", lambda *a, **k: tiny)
    full_load = DefaultTask.load
    monkeypatch.setattr(DefaultTask, "load", lambda self, *a, **k: full_load(self, *a, **k)[:80])
    full_label = DefaultTask.label_details

    def hashed_label(self, ex, generation):
        return dict(full_label(self, ex, generation), correct=hash_label(ex.id))

    monkeypatch.setattr(DefaultTask, "label_details", hashed_label)
    fewer = {"n_estimators": 20, "search_n_estimators": 10}  # the constructor's defaults, smaller
    code = ActivationProbe.__init__.__code__
    names = code.co_varnames[1:code.co_argcount]
    defaults = ActivationProbe.__init__.__defaults__
    first = len(names) - len(defaults)
    monkeypatch.setattr(ActivationProbe.__init__, "__defaults__",
                        tuple(fewer.get(n, d) for n, d in zip(names[first:], defaults)))
    monkeypatch.chdir(tmp_path)
    (block,) = readme_python_blocks()
    with small_searches():
        exec(compile(block, str(README), "exec"), {"__name__": "readme"})
    out = capsys.readouterr().out
    assert "| raw" in out or "raw" in out  # the results table was printed
    last = out.strip().splitlines()[-1].split()
    assert last[-1] in ("trust", "abstain") and 0.0 <= float(last[-2]) <= 1.0
    assert (tmp_path / "runs" / "probe" / "probe.json").is_file()
    assert (tmp_path / "runs" / "demo" / "evaluation" / "results.md").is_file()


def test_ci_runs_the_readme_test_command():
    """.ci/run runs exactly the README's second set-up command (the whole suite, in parallel)."""
    setup = re.search(r"```bash\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.DOTALL).group(1)
    second = setup.strip().splitlines()[1]
    ci = (README.parent / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()[-1]
    assert ci == second and second.startswith("pip install -e '.[test]' && python -m pytest")


def test_readme_stays_short():
    """The per-pair detail lives in docs/results; README keeps the table and the reading."""
    n = len(README.read_text(encoding="utf-8").splitlines())
    assert n < 250, f"README.md has {n} lines: move detail to docs/ (at most 249)"
