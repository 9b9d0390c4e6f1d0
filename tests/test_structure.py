"""The Python layer stays small and explicit: short functions, small constructors, no hidden state.

Checked statically from the source, like the layer test: a long function, a
constructor that grows past a dozen options, a module-level cache or a reach
into ``kernels``' privates fails here before review.
"""

import ast
import re
from pathlib import Path

import pytest

import crossembed
from test_layout import LIBRARY  # the library parts (the harness, cli/ and experiments/, may cite results)

ROOT = Path(crossembed.__file__).resolve().parent
FILES = sorted(ROOT.rglob("*.py"))
MAX_FUNCTION_LINES = 70
MAX_CONSTRUCTOR_ARGS = 12
_MUTATORS = {"append", "update", "setdefault", "pop", "clear", "add", "extend", "insert", "popitem", "move_to_end"}
_CONTAINERS = {"dict", "list", "set", "OrderedDict", "defaultdict", "WeakValueDictionary", "WeakKeyDictionary"}


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _is_library(path: Path) -> bool:
    return _rel(path).split("/")[0].removesuffix(".py") in LIBRARY


def test_no_long_functions():
    long = [
        f"{_rel(p)}:{n.lineno} {n.name} ({n.end_lineno - n.lineno + 1} lines)"
        for p in FILES
        for n in ast.walk(_tree(p))
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert not long, long


def _constructor_size(cls: ast.ClassDef) -> int:
    if any(ast.unparse(d).split("(")[0].endswith("dataclass") for d in cls.decorator_list):
        return sum(isinstance(item, ast.AnnAssign) for item in cls.body)
    for item in cls.body:
        if isinstance(item, ast.FunctionDef) and item.name == "__init__":
            a = item.args
            return len(a.posonlyargs) + len(a.args) - 1 + len(a.kwonlyargs)
    return 0


def test_public_classes_take_few_arguments():
    big = [
        f"{_rel(p)}:{n.lineno} {n.name} ({_constructor_size(n)})"
        for p in FILES
        for n in ast.walk(_tree(p))
        if isinstance(n, ast.ClassDef) and not n.name.startswith("_") and _constructor_size(n) > MAX_CONSTRUCTOR_ARGS
    ]
    assert not big, big


def test_kernel_privates_stay_in_kernels():
    offenders = []
    for p in FILES:
        if p.name == "kernels.py":
            continue
        for n in ast.walk(_tree(p)):
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "kernels":
                if n.attr.startswith("_"):
                    offenders.append(f"{_rel(p)}:{n.lineno} kernels.{n.attr}")
            if isinstance(n, ast.ImportFrom) and (n.module or "").endswith("kernels"):
                offenders += [f"{_rel(p)}:{n.lineno} {a.name}" for a in n.names if a.name.startswith("_")]
    assert not offenders, offenders


def _module_containers(tree: ast.Module) -> set:
    names = set()
    for st in tree.body:
        if isinstance(st, (ast.Assign, ast.AnnAssign)) and st.value is not None:
            v = st.value
            mutable = isinstance(v, (ast.Dict, ast.List, ast.Set)) or (
                isinstance(v, ast.Call) and ast.unparse(v.func).split(".")[-1] in _CONTAINERS
            )
            targets = st.targets if isinstance(st, ast.Assign) else [st.target]
            if mutable:
                names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names


def _mutations(fn: ast.AST, names: set):
    for n in ast.walk(fn):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in _MUTATORS:
            if isinstance(n.func.value, ast.Name) and n.func.value.id in names:
                yield n.lineno, n.func.value.id
        if isinstance(n, (ast.Assign, ast.AugAssign, ast.Delete)):
            for t in n.targets if isinstance(n, (ast.Assign, ast.Delete)) else [n.target]:
                if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id in names:
                    yield n.lineno, t.value.id
        if isinstance(n, ast.Global):
            yield n.lineno, ",".join(n.names)


# plug-in registries filled by an explicit register_*() call: state the user asks for, not a cache
REGISTRIES = {"encoders/registry.py": {"_REGISTRY", "_PACKAGES"}}


def test_no_module_level_caches():
    offenders = []
    for p in FILES:
        tree = _tree(p)
        names = _module_containers(tree) - REGISTRIES.get(_rel(p), set())
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                offenders += [f"{_rel(p)}:{line} mutates {name}" for line, name in _mutations(fn, names)]
                offenders += [
                    f"{_rel(p)}:{fn.lineno} {fn.name} is cached by {ast.unparse(d)}"
                    for d in fn.decorator_list
                    if re.search(r"\b(lru_cache|cache)\b", ast.unparse(d))
                ]
    assert not offenders, sorted(set(offenders))


# history in library text: dates, "was X, now Y", releases and issues belong in docs/ and git log
_HISTORY = re.compile(
    r"\b20[0-9]{2}-[0-9]{2}-[0-9]{2}\b|\bwas [0-9.]+\b|\b(earlier|older|previous) (release|default|rule)s?\b"
    r"|\bissue\s*#?[0-9]+|\bthis session\b",
    re.IGNORECASE,
)


@pytest.mark.parametrize("path", [p for p in FILES if _is_library(p)], ids=_rel)
def test_library_text_has_no_history(path):
    hits = [f"{i}: {line.strip()}" for i, line in enumerate(path.read_text().splitlines(), 1) if _HISTORY.search(line)]
    assert not hits, hits
