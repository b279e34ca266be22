"""The floor plan, checked from the code's own imports (parsed with ast, never imported):
acute's packages stack one way (docs/architecture.md gives the order and this file holds the
same list), no module imports in a cycle, none reaches into another package's underscore
names, no module grows past 600 lines nor a function past 100, few imports of acute sit inside
functions, every module lists what it exports (``__all__``), few modules sit directly in
acute/, and every package is named in docs/architecture.md and installed by pyproject.toml."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "acute"

#: acute's layers, lowest first: a module may import its own layer and the ones below it only.
#: Each entry is a top-level package or module of acute (``acute`` itself is the lazy facade,
#: which imports nothing at import time).
LAYERS: tuple[tuple[str, ...], ...] = (
    ("acute", "acute.errors", "acute.validation", "acute.fileio", "acute.console", "acute.testing"),
    ("acute.metrics",),
    ("acute.models",),
    ("acute.tasks",),
    ("acute.store",),
    ("acute.extraction", "acute.engines"),
    ("acute.collect",),
    ("acute.estimators",),
    ("acute.scoring",),
    ("acute.protocol",),
    ("acute.evaluation",),
    ("acute.report",),
    ("acute.serving",),
    ("acute.pipeline",),
    ("acute.cli", "acute.__main__"),
)
MAX_LINES = 600
MAX_FUNCTION_LINES = 100
MAX_FUNCTION_LEVEL_IMPORTS = 60
MAX_TOP_LEVEL_MODULES = 8


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _imports(name: str, path: Path) -> list[tuple[str, str | None, int]]:
    """``(module imported, name taken from it or None, line)`` for every import of an acute
    module in ``path``, at any depth (imports inside functions count)."""
    is_pkg = path.name == "__init__.py"
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(a.name, None, node.lineno) for a in node.names if a.name.split(".")[0] == "acute"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if source.split(".")[0] != "acute":
                continue
            for alias in node.names:
                full = f"{source}.{alias.name}"
                out.append((full, None, node.lineno) if full in MODULES else (source, alias.name, node.lineno))
    return out


IMPORTS = {name: _imports(name, path) for name, path in MODULES.items()}


def _unit(module: str) -> str:
    """The top-level package or module of acute that ``module`` belongs to."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else parts[0]


def _layer(module: str) -> int:
    unit = _unit(module)
    for i, names in enumerate(LAYERS):
        if unit in names:
            return i
    raise AssertionError(f"{unit} is in no layer of tests/test_architecture.py (and docs/architecture.md)")


def test_every_module_has_a_layer():
    for name in MODULES:
        _layer(name)


def test_no_import_cycle():
    graph = {m: sorted({t for t, _, _ in IMPORTS[m] if t in MODULES and t != m}) for m in MODULES}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for m in graph:
        if m not in index:
            visit(m)
    assert not cycles, f"import cycles among acute's modules: {cycles}"


def test_nothing_imports_upward():
    upward = [f"{m} (line {line}) imports {t}" for m in MODULES for t, _, line in IMPORTS[m]
              if _layer(t) > _layer(m)]
    assert not upward, "imports from a higher layer:\n" + "\n".join(upward)


def test_no_module_imports_another_packages_underscore_names():
    bad = [f"{m} (line {line}) imports {n} from {t}" for m in MODULES for t, n, line in IMPORTS[m]
           if n is not None and n.startswith("_") and not n.startswith("__") and _unit(t) != _unit(m)]
    bad += [f"{m} (line {line}) imports the module {t}" for m in MODULES for t, n, line in IMPORTS[m]
            if n is None and any(p.startswith("_") and not p.startswith("__") for p in t.split(".")[1:])
            and _unit(t) != _unit(m)]
    assert not bad, "imports of another package's private names:\n" + "\n".join(bad)


def test_no_module_is_longer_than_600_lines():
    long = {name: n for name, path in MODULES.items()
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (split them by concept): {long}"


def _functions(path: Path):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def test_no_function_is_longer_than_100_lines():
    long = [f"{path.relative_to(ROOT)}:{fn.lineno} {fn.name} ({fn.end_lineno - fn.lineno + 1} lines)"
            for path in MODULES.values() for fn in _functions(path) if fn.end_lineno - fn.lineno + 1 > MAX_FUNCTION_LINES]
    assert not long, f"split these into named steps: {long}"


def _function_level_imports(path: Path) -> list[int]:
    """Lines of imports of acute modules inside function bodies (nested functions counted once)."""
    lines = set()
    for fn in _functions(path):
        for node in ast.walk(fn):
            if isinstance(node, ast.ImportFrom) and (node.level > 0 or (node.module or "").split(".")[0] == "acute"):
                lines.add(node.lineno)
            elif isinstance(node, ast.Import) and any(a.name.split(".")[0] == "acute" for a in node.names):
                lines.add(node.lineno)
    return sorted(lines)


def test_few_imports_of_acute_sit_inside_functions():
    found = {str(path.relative_to(ROOT)): lines for path in MODULES.values() if (lines := _function_level_imports(path))}
    total = sum(len(v) for v in found.values())
    assert total < MAX_FUNCTION_LEVEL_IMPORTS, (
        f"{total} imports of acute modules inside functions (at most {MAX_FUNCTION_LEVEL_IMPORTS - 1}): move them to "
        f"the module's top unless a cycle or an optional dependency needs them there: {found}")


def test_every_module_says_what_it_exports():
    missing = [str(path.relative_to(ROOT)) for name, path in MODULES.items()
               if path.name not in ("__init__.py", "__main__.py")
               and not any(isinstance(n, (ast.Assign, ast.AnnAssign)) and any(
                   getattr(t, "id", None) == "__all__" for t in (n.targets if isinstance(n, ast.Assign) else [n.target]))
                   for n in ast.parse(path.read_text(encoding="utf-8")).body)]
    assert not missing, f"these modules have no __all__: {missing}"


def test_few_modules_sit_directly_in_acute():
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL_MODULES, top


def _packages() -> list[str]:
    return sorted(m for m, p in MODULES.items() if p.name == "__init__.py")


def test_every_package_is_named_in_the_architecture_doc():
    doc = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    missing = [p for p in _packages() if p != "acute" and f"`{p}`" not in doc
               and f"`{p.replace('.', '/')}/`" not in doc]
    assert not missing, f"packages missing from docs/architecture.md: {missing}"


def test_the_layer_list_matches_the_architecture_doc():
    """docs/architecture.md lists the layers in this order (its "Layers" table)."""
    doc = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    table = doc[doc.index("## Layers"):].split("\n## ")[0]
    rows = [r for r in table.splitlines() if re.match(r"\|\s*\d+\s*\|", r)]
    units = [tuple(re.findall(r"`(acute[\w.]*)`", r.split("|")[2])) for r in rows]
    assert units == [tuple(n for n in layer if n != "acute.__main__") for layer in LAYERS]


def test_pyproject_installs_every_package():
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    listed = set(re.findall(r'"(acute[\w.]*)"', text[text.index("packages = ["):].split("]")[0]))
    missing = [p for p in _packages() if p not in listed]
    assert not missing, f"packages missing from pyproject.toml [tool.setuptools] packages: {missing}"


@pytest.mark.parametrize("module", ["acute.store", "acute.estimators.probe_file", "acute.estimators.probe_format", "acute.metrics"])
def test_numpy_layers_do_not_import_torch_at_module_level(module):
    """Reading a store, loading a probe and computing metrics stay numpy-only."""
    seen, todo = set(), [module]
    while todo:
        m = todo.pop()
        if m in seen or m not in MODULES:
            continue
        seen.add(m)
        tree = ast.parse(MODULES[m].read_text(encoding="utf-8"))
        for node in tree.body:  # module level only
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            assert not any(n.split(".")[0] in ("torch", "transformers") for n in names), (m, names)
        todo += [t for t, _, _ in IMPORTS[m]]
