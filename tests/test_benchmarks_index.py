"""benchmarks/README.md indexes every benchmark: one row per script of benchmarks/, every report
beside them named somewhere, and every file a row links to present."""

from __future__ import annotations

import re
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
INDEX = BENCHMARKS / "README.md"


def _rows() -> dict[str, str]:
    """The index's table rows by their first cell's script name (``name.py``)."""
    rows = {}
    for line in INDEX.read_text(encoding="utf-8").splitlines():
        m = re.match(r"\|\s*`([^`/]+\.py)`\s*\|", line)
        if m:
            assert m.group(1) not in rows, f"benchmarks/README.md indexes {m.group(1)} twice"
            rows[m.group(1)] = line
    return rows


def test_every_script_has_a_row_with_a_command_and_a_status():
    rows = _rows()
    scripts = sorted(p.name for p in BENCHMARKS.glob("*.py") if not p.name.startswith("_"))  # _x.py: shared helpers
    missing = [s for s in scripts if s not in rows]
    assert not missing, f"benchmarks/README.md has no row for {missing}: add one (what it measures, its command, result, status)"
    gone = sorted(set(rows) - set(scripts))
    assert not gone, f"benchmarks/README.md indexes scripts that are not in benchmarks/: {gone}"
    for name, line in rows.items():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        assert len(cells) == 5, f"the row of {name} must have 5 cells (script, measures, command, result, status)"
        assert f"benchmarks/{name}" in cells[2], f"the command of {name} must run benchmarks/{name}"
        assert re.search(r"standing|current|superseded", cells[4]), f"the status of {name} must say standing, current or superseded"


def test_every_report_is_named_and_every_link_exists():
    text = INDEX.read_text(encoding="utf-8")
    reports = sorted(p.name for p in BENCHMARKS.glob("*.md") if p.name != "README.md")
    unnamed = [r for r in reports if f"]({r})" not in text]
    assert not unnamed, f"benchmarks/README.md links no row to {unnamed}"
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
        if "://" not in target:
            assert (BENCHMARKS / target).exists(), f"benchmarks/README.md links to {target}, which does not exist"
