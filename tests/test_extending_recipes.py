"""docs/extending.md against the code: its recipes run, and what it cites exists.

* Every ```python block runs, in order; the blocks of one ``##`` section share
  one namespace, a module named ``my_rules`` (the module name the recipes
  give their own code), so a recipe can name its objects as
  ``my_rules:attribute`` the way the harness imports them. A block right
  after a ``<!-- not run -->`` line is skipped.
* Every ``python -m experiments`` line of a ```bash block parses with the
  harness's parser (the options exist; nothing runs).
* Every file the page names in backticks exists, every ``test_*`` it names is
  in a test file, and every name of the kernel recipe is in a file that its
  step names, so a renamed header, handler or helper fails here.
"""

import re
import shlex
import sys
import types
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "extending.md"
TEXT = DOC.read_text(encoding="utf-8")
MODULE = "my_rules"
SKIP_MARK = "<!-- not run -->"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.S | re.M)
# where a header, module or test named by its file name alone lives
SEARCH_DIRS = ("", "cpp/include/crossembed", "cpp/include/crossembed/detail", "python/crossembed", "tests")
PATH = re.compile(r"^\.?[\w./-]+\.(hpp|cpp|py|md|toml)$|^(\.ci|cpp|tests|benchmarks|docs|python|experiments)/[\w./-]*$")
NAME = re.compile(r"^[A-Za-z_][\w:.]*(\(\))?$")


def _sections():
    """``(title, body)`` of each ``##`` section (its ``###`` subsections included)."""
    parts = re.split(r"^## (.+)$", TEXT, flags=re.M)
    return list(zip(parts[1::2], parts[2::2]))


def _blocks(body: str, language: str):
    """The code of each fenced ``language`` block of ``body`` not marked as not run."""
    return [
        m.group(2)
        for m in FENCE.finditer(body)
        if m.group(1) == language and not body[: m.start()].rstrip().endswith(SKIP_MARK)
    ]


def _prose(text: str) -> str:
    return FENCE.sub("", text)


def _ticked(text: str):
    return re.findall(r"`([^`\n]+)`", _prose(text))


def _resolve(token: str):
    """The repository file or folder a backticked path names, or None."""
    token = token.rstrip("/")
    if token.startswith("crossembed/"):
        token = "python/" + token
    for folder in SEARCH_DIRS:
        path = REPO / folder / token
        if path.exists():
            return path
    return None


def _paths(text: str):
    """The backticked paths of ``text``, without templates (``<name>.hpp``) and the user's own module."""
    return [t for t in _ticked(text) if PATH.match(t) and "<" not in t and "*" not in t and t != f"{MODULE}.py"]


RUN_SECTIONS = [(title, blocks) for title, body in _sections() if (blocks := _blocks(body, "python"))]


@pytest.mark.parametrize("title, blocks", RUN_SECTIONS, ids=[t for t, _ in RUN_SECTIONS])
def test_the_python_blocks_run(title, blocks, monkeypatch):
    module = types.ModuleType(MODULE)
    monkeypatch.setitem(sys.modules, MODULE, module)  # dataclasses and the harness look the module up
    for i, code in enumerate(blocks):
        exec(compile(code, f"{DOC.name}, {title}, block {i + 1}", "exec"), module.__dict__)


def test_the_recipes_cover_each_extension_point():
    assert RUN_SECTIONS, "no python block found"
    geh = dict(_sections())["Add a GEH rule"]
    for base in ("PoolCandidates", "CandidateSource", "Proposer", "FinalPass", "PromotionRule", "KernelSignatures"):
        assert re.search(rf"^class \w+\({base}\):", "\n".join(_blocks(geh, "python")), re.M), base


def test_the_harness_commands_parse():
    from experiments.__main__ import build_parser

    commands = [
        shlex.split(line)
        for code in _blocks(TEXT, "bash")
        for line in code.replace("\\\n", " ").splitlines()
        if line.strip().startswith("python -m experiments")
    ]
    assert commands
    for words in commands:
        build_parser().parse_args(words[3:])


def test_every_cited_file_exists():
    missing = sorted({t for t in _paths(TEXT) if _resolve(t) is None})
    assert not missing, missing


def test_every_cited_test_exists():
    tests = "\n".join(p.read_text(encoding="utf-8") for p in (REPO / "tests").glob("*.py"))
    missing = [t for t in _ticked(TEXT) if re.fullmatch(r"test_\w+", t) and f"def {t}(" not in tests]
    assert not missing, missing


def _steps(body: str):
    """The kernel recipe's paragraphs and numbered steps."""
    return [s for s in re.split(r"\n(?=\d+\. )|\n\n", _prose(body)) if s.strip()]


def test_every_name_of_the_kernel_recipe_is_in_a_file_its_step_names():
    body = dict(_sections())["Add a kernel"]
    section_files = [p for t in _paths(body) if (p := _resolve(t)) is not None and p.is_file()]
    assert len(section_files) >= 15
    missing = []
    for step in _steps(body):
        files = [p for t in _paths(step) if (p := _resolve(t)) is not None and p.is_file()] or section_files
        text = "\n".join(p.read_text(encoding="utf-8") for p in files)
        for token in _ticked(step):
            if PATH.match(token) or not NAME.match(token):
                continue
            name = token.removesuffix("()")
            if not re.search(rf"(?<![\w.:]){re.escape(name)}(?!\w)", text):
                missing.append(f"{name} (step: {step.strip()[:40]}...)")
    assert not missing, missing


def test_every_class_and_fit_member_of_the_geh_recipe_exists():
    import builtins
    import dataclasses
    import importlib

    from crossembed.linking._fit import FitState

    body = dict(_sections())["Add a GEH rule"]
    sources = [p for d in ("python/crossembed/linking", "experiments", "tests") for p in (REPO / d).rglob("*.py")]
    defined = set(re.findall(r"^class (\w+)", "\n".join(_blocks(body, "python")), re.M))
    defined |= {c for p in sources for c in re.findall(r"^class (\w+)", p.read_text(encoding="utf-8"), re.M)}
    fields = {f.name for f in dataclasses.fields(FitState)}
    missing = []
    for token in _ticked(body):
        if token.startswith("fit."):
            member = re.match(r"fit\.(\w+)", token).group(1)
            if member not in fields and not hasattr(FitState, member):
                missing.append(token)
        elif m := re.fullmatch(r"((?:[a-z_]\w*\.)+)([A-Z]\w*)(\(.*\))?", token):
            if not hasattr(importlib.import_module(m.group(1)[:-1]), m.group(2)):
                missing.append(token)
        elif m := re.fullmatch(r"([A-Z]\w*[a-z]\w*)(\(.*\))?", token):  # a class, not a CONSTANT
            if m.group(1) not in defined and not hasattr(builtins, m.group(1)):
                missing.append(token)
    assert not missing, missing


def test_the_link_table_takes_a_method_of_ones_own(monkeypatch):
    from experiments.link_table import METHODS, find_method, geh_method, render_markdown

    module = types.ModuleType(MODULE)
    module.row = geh_method()
    module.number = 3
    monkeypatch.setitem(sys.modules, MODULE, module)
    assert find_method("geh-validated") is METHODS["geh-validated"]
    assert find_method(f"{MODULE}:row") is module.row
    for name, message in [
        ("geh-best", "unknown method"),
        (f"{MODULE}:missing", "has no attribute"),
        ("no_such_module_here:row", "No module named"),
        (f"{MODULE}:number", "not a callable"),
    ]:
        with pytest.raises(ValueError, match=message):
            find_method(name)
    record = dict(a="x", b="y", corpus=10, n_objects=10, alpha=0.3, n_seeds=15, draw=0, seconds=1.0)
    scores = dict(precision=0.5, recall=0.5, f1=0.5)
    md = render_markdown([dict(record, method=m, **scores) for m in ("geh-validated", f"{MODULE}:row")])
    assert f"| {MODULE}:row | 50.0 ± 0.0 |" in md
