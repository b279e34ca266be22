"""The public API is written down and has one home per name.

docs/api.md lists, per package (and per top-level module with an ``__all__``), the names of its
``__all__``. These tests hold the two together and keep the rules the page states: every name of
every ``__all__`` resolves; no object is public in two places (but for ``acute``'s documented
shortcuts, each the object of its package); a module's ``__all__`` lists only what the module
defines; and acute's own code imports a name from a package only when the package makes it
public or defines it (everything else from its defining module).
"""

from __future__ import annotations

import ast
import importlib
import re
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "acute"
API_DOC = ROOT / "docs" / "api.md"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py")) if p.name != "__main__.py"}
PACKAGES = sorted(m for m, p in MODULES.items() if p.name == "__init__.py")


def _static_all(path: Path) -> list[str] | None:
    """A module's ``__all__`` as written (a literal list or tuple, or ``sorted(...)`` of names
    bound in the module, as ``acute``'s own), without importing it; None when it has none."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            try:
                return list(ast.literal_eval(node.value))
            except ValueError:
                return list(_import(_module_name(path)).__all__)
    return None


def _import(name: str):
    return importlib.import_module(name)


#: the packages and the top-level modules that have a public API (an ``__all__``)
HOMES = PACKAGES + sorted(m for m, p in MODULES.items()
                          if m.count(".") == 1 and p.name != "__init__.py" and _static_all(p) is not None)


def _documented() -> dict[str, list[str]]:
    """docs/api.md: ``## `module` `` headings, each followed by ``- `name`: ...`` lines."""
    sections: dict[str, list[str]] = {}
    current = None
    for line in API_DOC.read_text(encoding="utf-8").splitlines():
        heading = re.match(r"## `(acute[\w.]*)`\s*$", line)
        if heading:
            current = heading.group(1)
            assert current not in sections, f"docs/api.md has two sections for {current}"
            sections[current] = []
        elif current is not None and (item := re.match(r"- `(\w+)`", line)):
            sections[current].append(item.group(1))
    return sections


def test_every_public_home_has_a_section_and_every_section_a_home():
    documented = _documented()
    assert sorted(documented) == sorted(HOMES), (
        "docs/api.md's sections differ from acute's packages and top-level modules with an __all__: "
        f"missing {sorted(set(HOMES) - set(documented))}, not a public home {sorted(set(documented) - set(HOMES))}")


@pytest.mark.parametrize("home", HOMES)
def test_all_matches_the_api_doc(home):
    """A package's ``__all__`` and its section of docs/api.md name the same names, each once."""
    listed = _static_all(MODULES[home])
    assert listed is not None, f"{home} has no __all__ (its public API)"
    documented = _documented().get(home, [])
    assert len(set(listed)) == len(listed), f"{home}.__all__ names a name twice"
    assert len(set(documented)) == len(documented), f"docs/api.md's {home} section names a name twice"
    assert set(listed) == set(documented), (
        f"{home}.__all__ and docs/api.md differ: only in __all__ {sorted(set(listed) - set(documented))}, "
        f"only in docs/api.md {sorted(set(documented) - set(listed))}")


@pytest.mark.parametrize("home", HOMES)
def test_every_public_name_resolves(home):
    module = _import(home)
    missing = [n for n in module.__all__ if not hasattr(module, n)]
    assert not missing, f"{home}.__all__ names what {home} does not have: {missing}"


def _is_value(obj) -> bool:
    """A plain value (a number, a string, a tuple of them ...), which Python may share between
    unrelated modules (interned strings, small ints), unlike a function, class or module."""
    return not isinstance(obj, (type, types.FunctionType, types.ModuleType)) and not callable(obj)


def test_no_object_has_two_public_homes():
    """Each public object (function, class, module, or a value under its name) is listed by one
    package or top-level module only; ``acute``'s shortcuts are each their package's object."""
    seen: dict[tuple, str] = {}
    twice = []
    for home in HOMES:
        if home == "acute":
            continue
        module = _import(home)
        for name in module.__all__:
            obj = getattr(module, name)
            key = ("value", name, repr(obj)) if _is_value(obj) else ("object", id(obj))
            if key in seen:
                twice.append(f"{home}.{name} is {seen[key]}")
            else:
                seen[key] = f"{home}.{name}"
    assert not twice, "public in two places (keep it in one, import it from there):\n" + "\n".join(twice)


def test_the_top_level_shortcuts_are_their_packages_public_objects():
    import acute

    for name in acute.__all__:
        obj = getattr(acute, name)
        if isinstance(obj, types.ModuleType):
            assert obj.__name__ == f"acute.{name}" and f"acute.{name}" in PACKAGES, name
            continue
        homes = [h for h in HOMES if h != "acute" and name in _import(h).__all__
                 and getattr(_import(h), name) is obj]
        assert len(homes) == 1, f"acute.{name} is public in {homes} (expected one package)"


def _defined(path: Path) -> set[str]:
    """Names a module binds itself at module level (defs, classes, assignments), not imports."""
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        for sub in ast.walk(node) if isinstance(node, (ast.If, ast.Try)) else [node]:
            if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(sub.name)
            elif isinstance(sub, (ast.Assign, ast.AnnAssign)):
                for target in sub.targets if isinstance(sub, ast.Assign) else [sub.target]:
                    names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
    return names


def test_a_modules_all_lists_only_what_it_defines():
    """Below the packages, ``__all__`` never re-exports: ``make_calibrator`` is public in
    ``acute.estimators.calibration`` alone, not also in the probe modules that use it."""
    reexports = {}
    for name, path in MODULES.items():
        listed = _static_all(path) if path.name != "__init__.py" else None
        if listed:
            extra = sorted(set(listed) - _defined(path))
            if extra:
                reexports[name] = extra
    assert not reexports, f"modules whose __all__ lists names they only import: {reexports}"


def _imports_of(name: str, path: Path):
    """``(source module, imported name, line)`` of every ``from acute... import name`` in ``path``."""
    is_pkg = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            base = name.split(".") if is_pkg else name.split(".")[:-1]
            source = ".".join(base[: len(base) - (node.level - 1)] + ([node.module] if node.module else []))
        else:
            source = node.module or ""
        if source in MODULES:
            for alias in node.names:
                if f"{source}.{alias.name}" not in MODULES and not alias.name.startswith("__"):
                    yield source, alias.name, node.lineno


def test_acute_imports_each_name_from_its_home():
    """acute's modules import a name from a package only when the package lists it in
    ``__all__`` or defines it itself, and from a module only when the module defines it: no
    internal reaches a second place through another module's imports."""
    public = {p: set(_static_all(MODULES[p]) or ()) for p in PACKAGES}
    bad = []
    for name, path in MODULES.items():
        for source, imported, line in _imports_of(name, path):
            if source == "acute":  # __version__ and the lazy shortcuts
                continue
            home_ok = imported in _defined(MODULES[source]) or imported in public.get(source, set())
            if not home_ok:
                bad.append(f"{name} (line {line}) imports {imported} from {source}, which does not define "
                           "it" + (" or make it public" if source in public else ""))
    assert not bad, "import these from their defining module:\n" + "\n".join(bad)
