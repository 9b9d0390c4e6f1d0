"""crossembed.uec is library only and its modules import each other without cycles."""

import ast
from pathlib import Path

import crossembed.uec

UEC_DIR = Path(crossembed.uec.__file__).parent
FORBIDDEN = ("argparse", "matplotlib", "crossembed.cli", "crossembed.experiments")
_DOCUMENTED = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def _imports(path: Path):
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):  # lazy imports inside functions too
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
    return out


def _graph():
    mods = {p.stem: p for p in UEC_DIR.glob("*.py") if p.stem != "__init__"}
    return {
        name: {m.rsplit(".", 1)[1] for m in _imports(p) if m.startswith("crossembed.uec.")} & set(mods)
        for name, p in mods.items()
    }


def test_uec_modules_have_no_import_cycle():
    graph = _graph()
    state = {}

    def visit(node, stack):
        state[node] = "open"
        for nxt in graph[node]:
            assert state.get(nxt) != "open", f"import cycle: {' -> '.join([*stack, node, nxt])}"
            if nxt not in state:
                visit(nxt, [*stack, node])
        state[node] = "done"

    for name in graph:
        if name not in state:
            visit(name, [])
    assert "index" not in graph["ensemble"]  # the index is built from an ensemble, never the reverse


def test_uec_is_library_only():
    for path in UEC_DIR.glob("*.py"):
        bad = [m for m in _imports(path) if m.split(".")[0] in FORBIDDEN or m.startswith(FORBIDDEN)]
        assert not bad, f"{path.name} imports {bad}"
        # no default output under docs/ (docstrings may cite docs/uec.md; string constants are paths)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {
            id(n.body[0].value) for n in ast.walk(tree) if isinstance(n, _DOCUMENTED) and ast.get_docstring(n)
        }
        paths = [
            n.value
            for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings
        ]
        assert not [v for v in paths if v.startswith(("docs/", "./docs"))], path.name
