"""The package's shape: module sizes and import cycles, read from the source with ``ast``.

* No module is over :data:`MAX_LINES` lines unless its docstring says why, with the
  words "Over 600 lines because" and a reason.
* The import graph among the package's modules has no cycle: the arrows go one way,
  facade (``facade.py``) → surfaces (``graph``, ``middleware``, ``tools``, ``history``)
  → engine → strategies → summarizers, store, tokens (``tag_counts`` below ``tokens``,
  ``metadata`` above it). ``cli`` is an entry point on top of the facade.

Every ``import`` statement counts, at module level and inside functions and methods
(the lazy imports that break a cycle at import time are still a cycle of the
design), except those under ``if TYPE_CHECKING:``: they exist for annotations only
and never run. Imports through ``importlib`` are not seen.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest

PACKAGE = "langchain_autocontext"
ROOT = Path(__file__).resolve().parents[1] / PACKAGE

#: A module may be longer than this only if its docstring says why.
MAX_LINES = 600
REASON = "Over 600 lines because"


# --- reading the source ---------------------------------------------------------------------
def module_name(path: Path) -> str:
    """``engine`` for ``engine.py``, ``summarizers`` for ``summarizers/__init__.py``,
    ``summarizers.base`` for ``summarizers/base.py``; ``""`` for the package itself."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _local(dotted: str) -> str | None:
    """The package-relative name of a dotted module name, or None outside the package."""
    if dotted == PACKAGE:
        return ""
    if dotted.startswith(PACKAGE + "."):
        return dotted[len(PACKAGE) + 1 :]
    return None


def _join(*parts: str) -> str:
    return ".".join(p for p in parts if p)


def imports_of(source: str, name: str, *, is_package: bool, modules: set[str]) -> set[str]:
    """The package's modules that ``source`` (module ``name``) imports anywhere but
    under ``if TYPE_CHECKING:``. ``from pkg import x`` is an import of the module
    ``pkg.x`` when there is one, else of ``pkg``."""
    here = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                local = _local(alias.name)
                if local is not None and local in modules:
                    found.add(local)
        elif isinstance(node, ast.ImportFrom):
            target: str | None
            if node.level:  # relative: from . import x, from ..y import z
                base = here.split(".") if here else []
                up = node.level - 1
                outside = up > len(base)
                target = None if outside else _join(*base[: len(base) - up], node.module or "")
            else:
                target = _local(node.module or "")
            if target is not None:
                for alias in node.names:
                    sub = _join(target, alias.name)
                    if sub in modules:
                        found.add(sub)
                    elif target in modules:
                        found.add(target)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(source))
    found.discard(name)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = package_modules()
    names = set(modules)
    return {
        name: imports_of(
            path.read_text(encoding="utf-8"),
            name,
            is_package=path.name == "__init__.py",
            modules=names,
        )
        for name, path in modules.items()
    }


def cycles(graph: dict[str, set[str]]) -> set[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: set[frozenset[str]] = set()

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.add(frozenset(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


# --- the reader itself --------------------------------------------------------------------
def test_imports_are_read_everywhere_but_type_checking() -> None:
    source = """
from __future__ import annotations
import json
from typing import TYPE_CHECKING
import langchain_autocontext.store as st
from langchain_autocontext import tokens, __version__
from . import messages
from .strategies import base

if TYPE_CHECKING:
    from langchain_autocontext.engine import AutoContext
else:
    from langchain_autocontext import view

def lazy():
    from langchain_autocontext.summarizers import Summarizer

class K:
    def method(self):
        from ..replay import replay  # beyond the package: ignored
"""
    modules = {"", "store", "tokens", "messages", "strategies", "strategies.base", "engine"}
    modules |= {"view", "summarizers", "replay", "cli"}
    got = imports_of(source, "cli", is_package=False, modules=modules)
    assert got == {
        "store",
        "tokens",
        "",  # __version__: the package's __init__
        "messages",
        "strategies.base",
        "view",
        "summarizers",
    }
    inner = imports_of(
        "from . import base\nfrom ..messages import x\n",
        "strategies.fifo",
        is_package=False,
        modules=modules,
    )
    assert inner == {"strategies.base", "messages"}


def test_cycles_are_strongly_connected_components() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}, "f": {"d"}}
    assert cycles(graph) == {frozenset({"a", "b", "c"})}


# --- the package ----------------------------------------------------------------------------
def test_the_graph_sees_lazy_imports() -> None:
    graph = import_graph()
    assert "summarizers" in graph["cli"]  # imported inside _setup() only
    assert "engine" not in graph["replay"]  # only under TYPE_CHECKING


def test_the_layers_point_one_way() -> None:
    graph = import_graph()
    assert {"graph", "middleware", "tools", "history", "engine"} <= graph["facade"]
    for surface in ("graph", "middleware", "tools", "history"):
        assert "engine" in graph[surface], surface
        assert "facade" not in graph[surface], surface
    assert not {"facade", "graph", "middleware", "tools", "history", "cli"} & graph["engine"]
    assert "metadata" not in graph["tokens"] and "tokens" not in graph["tag_counts"]


def test_no_import_cycles() -> None:
    found = cycles(import_graph())
    assert not found, (
        f"import cycle(s) among the package's modules: {sorted(sorted(c) for c in found)}; "
        "break them: move the shared code down a layer, or let the upper module hand the "
        "lower one what it needs (as AutoContext sets the engine's tool_factory)"
    )


def test_a_reintroduced_cycle_is_found() -> None:
    """The check is live: an engine that imported the facade back (even lazily, inside
    a method) would close a cycle through every surface."""
    graph = import_graph()
    lazy = "def tools(self):\n    from langchain_autocontext.facade import AutoContext\n"
    graph["engine"] |= imports_of(lazy, "engine", is_package=False, modules=set(graph))
    assert any({"engine", "facade"} <= c for c in cycles(graph))


@pytest.mark.parametrize("name", sorted(package_modules()), ids=lambda n: n or "__init__")
def test_module_has_a_docstring_and_a_reason_when_long(name: str) -> None:
    path = package_modules()[name]
    source = path.read_text(encoding="utf-8")
    doc = ast.get_docstring(ast.parse(source)) or ""
    assert doc.strip(), f"{path.relative_to(ROOT.parent)} has no module docstring"
    lines = len(source.splitlines())
    if lines > MAX_LINES:
        assert REASON in doc, (
            f"{path.relative_to(ROOT.parent)} has {lines} lines (over {MAX_LINES}): split "
            f'it, or say why in its docstring ("{REASON} …")'
        )
    if REASON in doc:
        reason = doc.split(REASON, 1)[1]
        assert len(reason.split()) >= 8, f"{name}: the reason is too short to be one"


# --- dependencies -----------------------------------------------------------------------------
def module_level_imports(source: str) -> set[str]:
    """Top-level names of the modules ``source`` imports when it is imported: at module
    level (not inside a function, not under ``if TYPE_CHECKING:``), relative imports
    left out."""
    found: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import):
                found.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                found.add(node.module.split(".")[0])
            elif isinstance(node, ast.If) and not _is_type_checking(node):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)

    visit(ast.parse(source).body)
    return found


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_every_module_level_import_is_a_declared_dependency() -> None:
    """What importing the package needs is in ``[project] dependencies`` itself, not
    only pulled in by another dependency (a lazy import of an extra's package may stay
    undeclared there: it says which extra to install when it is missing)."""
    import sys
    import tomllib
    from importlib.metadata import packages_distributions

    pyproject = tomllib.loads((ROOT.parent / "pyproject.toml").read_text(encoding="utf-8"))
    declared = {
        _canonical(re.split(r"[<>=!~;\[ ]", req, maxsplit=1)[0])
        for req in pyproject["project"]["dependencies"]
    }
    distributions = packages_distributions()
    # pydantic pins its own pydantic-core exactly: a pydantic floor is a pydantic-core floor
    declared |= {"pydantic-core"} if "pydantic" in declared else set()
    undeclared: dict[str, str] = {}
    for name, path in package_modules().items():
        for top in module_level_imports(path.read_text(encoding="utf-8")):
            if top in sys.stdlib_module_names or top in ("__future__", PACKAGE):
                continue
            dists = {_canonical(d) for d in distributions.get(top, [top])}
            if not dists & declared:
                undeclared[f"{name or PACKAGE}: {top}"] = ", ".join(sorted(dists))
    assert not undeclared, f"imported at module level but not declared: {undeclared}"


def _extra_requirements(pyproject: dict[str, Any], extra: str) -> set[str]:
    """The distributions ``pip install ".[extra]"`` asks for by name: the package's
    dependencies, the extra's own and, through ``langchain-autocontext[a,b]``, those of
    the extras it names (recursively)."""
    project = pyproject["project"]
    names: set[str] = set()
    requirements = list(project["dependencies"])
    pending, seen = [extra], set()
    while pending:
        current = pending.pop()
        if current not in seen:
            seen.add(current)
            requirements += project["optional-dependencies"][current]
        while requirements:
            req = requirements.pop()
            name = _canonical(re.split(r"[<>=!~;\[ ]", req, maxsplit=1)[0])
            if name != "langchain-autocontext":
                names.add(name)
            elif inner := re.search(r"\[([^\]]*)\]", req):
                pending += [e.strip() for e in inner.group(1).split(",")]
    return names


def test_the_bench_extra_installs_what_every_benchmark_script_imports() -> None:
    """``pip install ".[bench]"`` (benchmarks/README.md) is enough to run every script
    in benchmarks/: each import of theirs, lazy ones included, and of the test modules
    they borrow (``adversarial.py`` runs ``tests/test_agent_fuzz.py``'s machine), comes
    from the standard library, the repository, or a distribution the extra installs."""
    import sys
    import tomllib
    from importlib.metadata import packages_distributions

    checkout = ROOT.parent
    pyproject = tomllib.loads((checkout / "pyproject.toml").read_text(encoding="utf-8"))
    installed = _extra_requirements(pyproject, "bench")
    local = {p.stem: p for d in ("benchmarks", "tests") for p in (checkout / d).glob("*.py")}
    distributions = packages_distributions()
    missing: dict[str, str] = {}
    todo = sorted((checkout / "benchmarks").glob("*.py"))
    done: set[Path] = set()
    while todo:
        path = todo.pop()
        if path in done:
            continue
        done.add(path)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                tops = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                tops = [node.module.split(".")[0]]
            else:
                continue
            for top in tops:
                if top in sys.stdlib_module_names or top in ("__future__", PACKAGE):
                    continue
                if top in local:
                    todo.append(local[top])
                    continue
                dists = {_canonical(d) for d in distributions.get(top, [top])}
                if not dists & installed:
                    missing[f"{path.relative_to(checkout)}: {top}"] = ", ".join(sorted(dists))
    assert not missing, f'imported but not installed by ".[bench]": {missing}'
