"""The layout's import rules, read from the source with ``ast``.

- Benchmarks and examples use the public API only: ``ailens`` itself, a framework adapter
  ``ailens.integrations.<name>``, or a package of ailens that lists the name in its
  ``__all__`` (``from ailens.predict import fit_platform``); never a module or a name that
  starts with ``_`` and never a module inside a package (``ailens.predict.nccl_fit``).
- Each layer of the core imports only the layers below it (docs/internals.md, "Layers"):
  the recorder no analysis or prediction, nothing in the core a tool or a command.
- docs/internals.md names every module of the core and the adapters.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CORE = REPO / "ailens"
ADAPTERS = REPO / "integrations"  # installed as ailens.integrations


def _literal_all(path: Path) -> set[str]:
    """A module's ``__all__`` as written in its source (adapters: read, not imported, so no
    framework is imported here)."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return set(ast.literal_eval(node.value))
    return set()


def _exports(module: str) -> set[str] | None:
    """The names ``module`` offers to benchmarks and examples; None when it is not public."""
    parts = module.split(".")
    if parts[0] != "ailens" or any(p.startswith("_") for p in parts):
        return None
    if parts[1:2] == ["integrations"]:
        if len(parts) == 2:
            adapters = {p.stem for p in ADAPTERS.glob("*.py") if not p.stem.startswith("_")}
            return _literal_all(ADAPTERS / "__init__.py") | adapters
        path = ADAPTERS / f"{parts[2]}.py"
        return _literal_all(path) if len(parts) == 3 and path.is_file() else None
    if len(parts) > 1 and not CORE.joinpath(*parts[1:], "__init__.py").is_file():
        return None  # a module inside a package: its package's __init__ says what is public
    names = getattr(importlib.import_module(module), "__all__", None)
    return set(names) if names else None


def _private_imports(source: str, where: str) -> list[str]:
    """Each import of ailens in ``source`` (a file's text) that the public API does not offer."""
    bad = []
    for node in ast.walk(ast.parse(source, where)):
        at = f"{where}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "ailens" and _exports(alias.name) is None:
                    bad.append(f"{at} import {alias.name}")
        elif isinstance(node, ast.ImportFrom) and not node.level:
            module = node.module or ""
            if module.split(".")[0] != "ailens":
                continue
            offered = _exports(module) or set()
            for alias in node.names:
                if alias.name.startswith("_") or alias.name not in offered:
                    bad.append(f"{at} from {module} import {alias.name}")
    return bad


def _scripts() -> list[Path]:
    return sorted(p for d in ("benchmarks", "examples") for p in (REPO / d).rglob("*.py"))


def test_benchmarks_and_examples_import_only_the_public_api():
    scripts = _scripts()
    assert len(scripts) > 20 and any(p.name == "public_cases.py" for p in scripts)
    bad = [
        hit for p in scripts for hit in _private_imports(p.read_text(), str(p.relative_to(REPO)))
    ]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize(
    "source",
    [
        "from ailens.predict.collectives import collective_time",  # a module in a package
        "from ailens.predict import _LAZY",  # a private name
        "from ailens.integrations import _tfdistribute",  # a private module
        "import ailens.record.buffer",
        "from ailens.record import Nope",  # not in __all__
        "from ailens.integrations.horovod import _run_facts",
    ],
)
def test_the_public_api_check_refuses(source):
    """The rule above catches each kind of private import (so its passing means something)."""
    assert len(_private_imports(source, "probe.py")) == 1
    allowed = "from ailens.predict import fit_platform\nfrom ailens.integrations import horovod"
    assert _private_imports(allowed, "probe.py") == []


def test_public_names_resolve():
    """Every name a package's ``__all__`` lists (eager or imported on first use) exists."""
    packages = ["ailens"] + [
        "ailens." + ".".join(p.parent.relative_to(CORE).parts)
        for p in sorted(CORE.rglob("__init__.py"))
        if p.parent != CORE and not p.parent.relative_to(CORE).parts[0] == "integrations"
    ]
    missing = []
    for name in packages:
        mod = importlib.import_module(name)
        missing += [f"{name}.{n}" for n in getattr(mod, "__all__", ()) if not hasattr(mod, n)]
    assert not missing, missing


# What each part of the core may import (docs/internals.md, "Layers"): the layers below it.
_LEAVES = {"_io", "_lazy", "_version", "_recorder", "_stats"}
_FRONT = {"cli", "integrations", "__init__", "__main__"}  # the command line and front doors
_MAY_IMPORT = {
    "phases": set(),
    "record": {"_version", "_recorder", "phases"},
    "model": {"_io", "_stats", "phases", "record"},
    "live": {"_io", "model", "record"},
    "analysis": {"_io", "model", "phases", "record"},
    "predict": {"_io", "_lazy", "_stats", "analysis.ops"},
    "report": {"_io", "_version", "phases", "record"},
    "tools": {"_io", "_version", "analysis", "predict", "record"},
}


def _imported_modules(path: Path, package: list[str]) -> list[tuple[int, str]]:
    """(line, dotted module) of every import in ``path``, a module of ``package``; for
    ``from . import x`` the module ``package.x``."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            if node.module:
                out.append((node.lineno, ".".join([*base, node.module])))
            else:
                out += [(node.lineno, ".".join([*base, a.name])) for a in node.names]
    return out


def test_each_layer_imports_only_the_layers_below_it():
    """Every import of every core module (inside functions too) against the layer table."""
    bad = []
    for path in sorted(CORE.rglob("*.py")):
        rel = path.relative_to(CORE).parts
        layer = rel[0].removesuffix(".py")
        if layer in _FRONT or layer in _LEAVES:
            continue
        allowed = _MAY_IMPORT[layer] | {layer}
        for line, name in _imported_modules(path, ["ailens", *rel[:-1]]):
            inside = name == "ailens" or name.startswith("ailens.")
            if inside and not any(name == f"ailens.{a}" or name.startswith(f"ailens.{a}.")
                                  for a in allowed):  # fmt: skip
                bad.append(f"{path.relative_to(REPO)}:{line} ({layer}) imports {name}")
    assert len(_imported_modules(CORE / "record" / "recorder.py", ["ailens", "record"])) > 5
    assert not bad, bad
    parts = {p.name.removesuffix(".py") for p in CORE.iterdir() if p.suffix == ".py" or p.is_dir()}
    new = parts - _LEAVES - _FRONT - set(_MAY_IMPORT) - {"__pycache__"}
    assert not new, f"{new}: a new part of ailens/, give it a row in _MAY_IMPORT and the docs"


def test_internals_doc_names_every_module():
    """docs/internals.md draws the layout: a module it does not name is one a newcomer cannot
    find (a module added, moved or renamed without its row)."""
    doc = (REPO / "docs" / "internals.md").read_text()
    modules = sorted([*CORE.rglob("*.py"), *ADAPTERS.rglob("*.py")])
    assert len(modules) > 80
    unnamed = [str(p.relative_to(REPO)) for p in modules if f"`{p.relative_to(REPO)}`" not in doc]
    assert not unnamed, f"{unnamed}: give each a row in docs/internals.md"


def _module_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the modules of ``root`` it imports (inside functions too); packages'
    ``__init__`` left out (they gather their modules' names)."""
    mods = {
        ".".join(["ailens", *p.relative_to(CORE).with_suffix("").parts]): p
        for p in root.rglob("*.py")
        if p.name != "__init__.py"
    }
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        pkg = name.split(".")[:-1]
        graph[name] = {m for _, m in _imported_modules(path, pkg) if m in mods and m != name}
    return graph


def test_no_module_of_predict_imports_one_that_imports_it_back():
    """An import cycle (nccl_tests <-> nccl_fit was one) works only in the order Python
    happens to load the two: none in ailens/predict."""
    graph = _module_graph(CORE / "predict")
    assert "ailens.predict.nccl_fit" in graph["ailens.predict.nccl_tests"]
    cycles = []

    def walk(node, path):
        for nxt in sorted(graph[node]):
            if nxt == path[0]:
                cycles.append(" -> ".join([*path, nxt]))
            elif nxt not in path and nxt > path[0]:  # each cycle once, from its least module
                walk(nxt, [*path, nxt])

    for start in sorted(graph):
        walk(start, [start])
    assert not cycles, cycles
