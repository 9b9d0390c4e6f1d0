"""The package is a downward stack: cli -> methods -> kernels/encoders/data -> _validation/_io; the research
harness (the top-level ``experiments/``, outside the package) sits on top and uses only the public API.

Checked statically from the source (every ``import``, also the ones inside
functions), so a lazy import cannot hide a cycle, a library module that
reaches into the harness, or a harness module that reaches into a private name.
"""

import ast
import re
from pathlib import Path

import pytest

import crossembed

ROOT = Path(crossembed.__file__).resolve().parent
HARNESS = ROOT.parents[1] / "experiments"

# layer of each top-level part; a module may import its own layer (no cycles) or lower ones
LAYERS = {
    "cli": 5,
    "__main__": 5,
    "serve": 4,
    "uec": 3,
    "linking": 3,
    "hyperbolic": 3,
    "distributed": 3,
    "kernels": 2,
    "ann": 2,
    "reference": 2,
    "baselines": 4,  # the translation baselines build on linking's preprocessing and result types
    "encoders": 2,
    "data": 2,
    "_validation": 1,
    "_rows": 1,
    "_config": 1,
    "_io": 1,
    "_glibc": 1,
    "_core": 1,
    "_native": 1,
    "__init__": 6,  # the package root re-exports
}
LIBRARY = (
    "uec",
    "linking",
    "hyperbolic",
    "kernels",
    "ann",
    "encoders",
    "data",
    "distributed",
    "serve",
    "_validation",
    "_rows",
    "_io",
    "_glibc",
    "_config",
    "_native",
)
HARNESS_ONLY = ("argparse", "matplotlib")


def _modules():
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__" and len(parts) > 1:
            parts = parts[:-1]
        yield "crossembed." + ".".join(parts) if parts != ["__init__"] else "crossembed", path


def _imports(name, path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            yield mod
            for alias in node.names:  # `from crossembed import kernels` imports a module
                yield f"{mod}.{alias.name}"


MODULES = dict(_modules())


def _internal_edges():
    edges = {}
    for name, path in MODULES.items():
        targets = set()
        for mod in _imports(name, path):
            while mod and mod not in MODULES:
                mod = mod.rpartition(".")[0]
            if mod and mod != name and mod != "crossembed":
                targets.add(mod)
        edges[name] = targets
    return edges


def _part(name):
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_every_module_has_a_layer():
    assert {_part(m) for m in MODULES} <= set(LAYERS), sorted({_part(m) for m in MODULES} - set(LAYERS))


def test_imports_only_point_down():
    bad = [
        f"{src} -> {dst}"
        for src, dsts in _internal_edges().items()
        for dst in dsts
        if LAYERS[_part(dst)] > LAYERS[_part(src)]
    ]
    assert not bad, bad


def test_no_import_cycle():
    edges = _internal_edges()
    state = {}

    def visit(node, stack):
        state[node] = "open"
        for nxt in sorted(edges[node]):
            if state.get(nxt) == "open":
                pytest.fail("import cycle: " + " -> ".join(stack[stack.index(nxt) :] + [nxt]))
            if nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])


@pytest.mark.parametrize("part", LIBRARY)
def test_library_has_no_harness_imports(part):
    offenders = [
        f"{name} imports {mod}"
        for name, path in MODULES.items()
        if _part(name) == part
        for mod in _imports(name, path)
        if mod.split(".")[0] in HARNESS_ONLY
    ]
    assert not offenders, offenders


@pytest.mark.parametrize("part", LIBRARY)
def test_library_has_no_docs_default_paths(part):
    offenders = [
        str(path.relative_to(ROOT))
        for name, path in MODULES.items()
        if _part(name) == part and ('"docs/' in path.read_text() or "'docs/" in path.read_text())
    ]
    assert not offenders, offenders


def test_the_library_never_imports_the_harness():
    offenders = [
        f"{name} imports {mod}"
        for name, path in MODULES.items()
        for mod in _imports(name, path)
        if mod.split(".")[0] == "experiments"
    ]
    assert not offenders, offenders


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _private_crossembed_imports(path: Path):
    """Each import of ``path`` that names a private crossembed module or name (``crossembed._x``,
    ``crossembed.a._b``, ``from crossembed.x import _y``)."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        private = [n for n in names if n.split(".")[0] == "crossembed" and any(map(_private, n.split(".")[1:]))]
        if private:
            yield f"{path.relative_to(HARNESS.parent)}:{node.lineno} imports {private[-1]}"


def test_the_harness_uses_only_public_crossembed_names():
    """experiments/ uses the library as a user would: no ``crossembed._x`` module, no ``_y`` name."""
    if not HARNESS.is_dir():
        pytest.skip("no experiments/ beside the package (an installed copy)")
    offenders = [line for path in sorted(HARNESS.rglob("*.py")) for line in _private_crossembed_imports(path)]
    assert not offenders, offenders


def test_no_cli_default_writes_a_file():
    """Outputs go only where the user points: no command (of crossembed or of the harness) has a default path."""
    import argparse

    from crossembed.cli import build_parser

    parsers = [build_parser()]
    if HARNESS.is_dir():
        from experiments.__main__ import build_parser as harness_parser

        parsers.append(harness_parser())
    subs = [next(a for a in p._actions if isinstance(a, argparse._SubParsersAction)) for p in parsers]
    offenders = []
    for name, parser in ((name, parser) for sub in subs for name, parser in sub.choices.items()):
        for action in parser._actions:
            d = action.default
            if isinstance(d, str) and ("/" in d or d.rsplit(".", 1)[-1] in ("md", "json", "png", "npy", "csv", "cemb")):
                offenders.append(f"{name} {action.option_strings}: {d!r}")
    assert not offenders, offenders


def test_the_library_cites_only_the_formulas_in_docs():
    """Measured figures live in docs/, not in code: a library module names no docs path but docs/methods.md,
    and every docs/methods.md#anchor it cites exists (the CLI's help may point users to any guide)."""
    methods = HARNESS.parent / "docs" / "methods.md"
    if not methods.is_file():
        pytest.skip("no docs/ beside the package (an installed copy)")
    anchors = set(re.findall(r'<a id="([\w-]+)"></a>', methods.read_text(encoding="utf-8")))
    offenders = []
    for path in sorted(ROOT.rglob("*.py")):
        if "cli" in path.relative_to(ROOT).parts:
            continue
        for ref in re.findall(r"docs/[\w./#-]+", path.read_text(encoding="utf-8")):
            doc, _, anchor = ref.rstrip(".").partition("#")
            if doc != "docs/methods.md" or (anchor and anchor not in anchors):
                offenders.append(f"{path.relative_to(ROOT)}: {ref}")
    assert not offenders, offenders
