"""Every CLI command against bad files and bad numbers: exit 2, one line on stderr, no traceback, nothing written.

Files: each file argument gets a missing path, an empty file, binary data, a
directory, text that is not JSON, JSON of the wrong shape and ``.npy`` files
of the wrong dtype or shape, as far as the argument could be given them.
Numbers: every option whose value is a number is found by walking the parser
(so a new one is covered, and must use ``int_arg``/``float_arg``), then given
values below and above its range, non-numbers, NaN, inf and huge integers.
The CLIs run in-process (``crossembed.cli.main``, and the research harness's
``experiments.__main__.main`` for its commands); a bad input must be refused
before any work starts, so each case takes milliseconds.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np
import pytest

import crossembed.cli
import experiments.__main__ as harness

pytest.importorskip("hnswlib")


def main(argv) -> int:
    """The dispatcher of ``argv``'s command: ``python -m experiments`` for the harness's, else ``crossembed``."""
    return (harness.main if argv and argv[0] in _HARNESS_COMMANDS else crossembed.cli.main)(argv)


# --------------------------------------------------------------------------- the files
def _bad_files(d: Path) -> dict:
    """Name -> path of each kind of bad input (created under ``d``)."""
    d.mkdir()
    files = {"missing": d / "missing.txt", "dir": d / "a_dir"}
    files["dir"].mkdir()

    def put(name, data: bytes):
        files[name] = d / name
        files[name].write_bytes(data)

    put("empty", b"")
    put("binary", bytes(range(256)) * 4)
    put("text", b"hello\nworld\n")
    put("not_json.json", b'{"a": 1,')
    put("json_ints.json", b"[1, 2, 3]")
    put("json_object.json", b'{"a": 1}')
    put("json_records.json", b'[{"key": 1, "method": ["x"]}]')
    put("json_deep.json", b"[" * 100_000 + b"]" * 100_000)
    put("json_null.json", b"null")
    for name, arr in {
        "strings.npy": np.array([["a", "b"], ["c", "d"]]),
        "complex.npy": np.ones((6, 3), np.complex64),
        "bools.npy": np.ones((6, 3), bool),
        "vector.npy": np.ones(6, np.float32),
        "cube.npy": np.ones((3, 6, 3), np.float32),
    }.items():
        np.save(d / name, arr)
        files[name] = d / name
    np.save(d / "objects.npy", np.array([[{"a": 1}, None]], dtype=object), allow_pickle=True)
    files["objects.npy"] = d / "objects.npy"
    put("truncated.npy", (d / "cube.npy").read_bytes()[:-10])
    put("garbage.npz", b"PK\x03\x04" + bytes(100))
    np.savez(d / "strings.npz", mean=np.array(["a"]), var=np.array(["b"]))
    files["strings.npz"] = d / "strings.npz"
    np.savez(d / "nomean.npz", x=np.ones((2, 3)))
    files["nomean.npz"] = d / "nomean.npz"
    return files


_ANY = ["missing", "empty", "binary", "dir"]
_NPY = ["strings.npy", "complex.npy", "bools.npy", "vector.npy", "cube.npy", "objects.npy", "truncated.npy"]
_JSON = ["text", "not_json.json", "json_ints.json", "json_object.json", "json_records.json", "json_deep.json"]
_JSON += ["json_null.json"]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """Good inputs (``good``) beside the bad ones (``bad``)."""
    from crossembed.uec import GaussianEmbedding, IndexConfig, UECIndex

    root = tmp_path_factory.mktemp("clifuzz")
    good = root / "good"
    good.mkdir()
    rng = np.random.default_rng(0)
    np.save(good / "A.npy", rng.normal(size=(30, 4)).astype(np.float32))
    (good / "seeds.csv").write_text("".join(f"{i},{i}\n" for i in range(6)))
    (good / "docs.txt").write_text("one doc\nanother doc\n")
    docs = GaussianEmbedding(rng.normal(size=(20, 4)).astype(np.float32), rng.random((20, 4)).astype(np.float32))
    UECIndex(docs, config=IndexConfig(M=4, ef_construction=10, rerank=5)).save(good / "index.uec")
    (good / "uncha").mkdir()
    return {"good": good, "bad": _bad_files(root / "bad"), "out": root / "out"}


def _snapshot(*dirs: Path) -> set:
    return {(str(p), p.stat().st_size, p.stat().st_mtime_ns) for d in dirs if d.exists() for p in d.rglob("*")} | {
        str(d) for d in dirs if d.exists()
    }


def _refused(argv, env, capsys, monkeypatch) -> str:
    """Run ``crossembed argv`` (``python -m experiments argv``); assert the one-line refusal; return the line."""
    env["out"].mkdir(exist_ok=True)
    monkeypatch.setenv("CROSSEMBED_CACHE", str(env["out"] / "cache"))
    watched = (env["good"], env["bad"]["dir"].parent, env["out"])
    before = _snapshot(*watched)
    capsys.readouterr()
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exc:
        code = exc.code
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert code == 2, (argv, code, captured.err[-800:])
    assert len(lines) == 1 and "Traceback" not in captured.err, (argv, captured.err[-800:])
    assert _snapshot(*watched) == before, f"{argv} wrote something"
    return lines[0]


# --------------------------------------------------------------------------- file arguments
def _file_slots(g: Path, out: Path):
    """(name, argv with None where the bad file goes, the kinds of bad file that argument may be given)."""
    A, seeds, idx, docs = g / "A.npy", g / "seeds.csv", g / "index.uec", g / "docs.txt"
    json_kinds = _ANY + _JSON + ["strings.npy"]
    return [
        ("link A", ["link", None, A, "--seeds", seeds], _ANY + _JSON + _NPY),
        ("link B", ["link", A, None, "--seeds", seeds, "--method", "procrustes"], _ANY + _JSON + _NPY),
        ("link --seeds", ["link", A, A, "--seeds", None], _ANY + ["text", "json_object.json", "strings.npy"]),
        ("link-table --results", ["link-table", "--render-only", "--results", None], json_kinds),
        ("uec-eval --from-json", ["uec-eval", "--from-json", None, "--out", out / "r.md"], json_kinds),
        ("uec-perf --from-json", ["uec-perf", "--from-json", None, "--sizes", "", "--fit-pairs", "0"], json_kinds),
        ("index search INDEX", ["index", "search", None, "--query", "x"], _ANY + _JSON + ["cube.npy"]),
        (
            "index search --queries",
            ["index", "search", idx, "--queries", None, "-o", out / "r.npy"],
            _ANY + _NPY + ["garbage.npz", "strings.npz", "nomean.npz"],
        ),
        ("eval-uncha CHECKPOINT", ["eval-uncha", None], _ANY + ["text", "json_object.json", "cube.npy"]),
        ("encode TEXTS", ["encode", None, "-o", out / "e.npy"], _ANY),
        ("index build DOCS", ["index", "build", None, "-o", out / "i.uec"], _ANY),
        (
            "index build --fit-pairs",
            ["index", "build", docs, "--fit-pairs", None, "-o", out / "i.uec"],
            _ANY + ["text"],
        ),
    ]


def _file_cases():
    g, out = Path("GOOD"), Path("OUT")
    return [(name, argv, kind) for name, argv, kinds in _file_slots(g, out) for kind in kinds]


@pytest.mark.parametrize("name,argv,kind", _file_cases(), ids=[f"{n}-{k}" for n, _, k in _file_cases()])
def test_bad_files_are_refused_in_one_line(env, capsys, monkeypatch, name, argv, kind):
    def place(a):
        if a is None:
            return env["bad"][kind]
        if isinstance(a, Path) and a.parts[0] in ("GOOD", "OUT"):
            return (env["good"] if a.parts[0] == "GOOD" else env["out"]) / Path(*a.parts[1:])
        return a

    line = _refused([place(a) for a in argv], env, capsys, monkeypatch)
    assert line.startswith("python -m experiments " if argv[0] in _HARNESS_COMMANDS else "crossembed ")


def test_resuming_from_a_bad_checkpoint_is_refused(env, capsys, monkeypatch):
    run = env["out"] / "run"
    run.mkdir(parents=True, exist_ok=True)
    for data in (b"", bytes(range(256)), b'{"a": 1}'):
        (run / "checkpoint.cemb").write_bytes(data)
        _refused(["train-uncha", "--out", run, "--resume", "--steps", "1"], env, capsys, monkeypatch)


@pytest.mark.parametrize(
    "seeds",
    ["0,0\n99,99\n", "-1,0\n1,1\n", "0,0\n1e3,2\n", "0,0\n99999999999999999999999,1\n", "0,0\n0,1\n", "x,y\n"],
)
def test_bad_seed_rows_are_refused(env, capsys, monkeypatch, seeds):
    path = env["out"] / "seeds.csv"
    env["out"].mkdir(exist_ok=True)
    path.write_text(seeds)
    _refused(["link", env["good"] / "A.npy", env["good"] / "A.npy", "--seeds", path], env, capsys, monkeypatch)


# --------------------------------------------------------------------------- number arguments
def _commands(parser: argparse.ArgumentParser, prefix=()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, (*prefix, name))
    if prefix:
        yield prefix, parser


_HARNESS_COMMANDS = {prefix[0] for prefix, _ in _commands(harness.build_parser())}


def _numeric_options():
    """(command, option, its type) for every option of ours (both CLIs) whose value is parsed as a number."""
    out = []
    commands = [*_commands(crossembed.cli.build_parser()), *_commands(harness.build_parser())]
    for prefix, parser in commands:
        for action in parser._actions:
            if action.type is not None and action.type is not str and action.option_strings:
                out.append((prefix, action.option_strings[-1], action.type))
    return out


def test_every_number_option_is_range_checked():
    """A number option must use int_arg/float_arg (or a checked parser of its own), never bare int/float."""
    bare = [f"{' '.join(p)} {opt}" for p, opt, t in _numeric_options() if t in (int, float)]
    assert not bare
    assert len(_numeric_options()) >= 40


def _bad_numbers(kind) -> list:
    """Values outside the option's range (read off its type), non-numbers, NaN, inf and huge numbers."""
    values = ["abc", "", "nan", "inf", "-inf", "1e400", "-" + "9" * 30]
    low, high = getattr(kind, "low", None), getattr(kind, "high", None)
    if getattr(kind, "__name__", "") == "integer":
        values += ["1.5", "2**70", "0x10", "9" * 30, str(high + 1)] + ([str(low - 1)] if low is not None else [])
    elif getattr(kind, "__name__", "") == "number":
        values += [str(low - 1)] if low is not None else []
        values += [str(low)] if kind.above else []
        values += [str(2 * high + 1), str(high) if kind.below else "1e400"] if high is not None else []
    else:  # a parser of its own (--prior-precision): what it must refuse
        values += ["-1", "0"]
    return values


@pytest.mark.parametrize(
    "prefix,option,kind", _numeric_options(), ids=[f"{' '.join(p)} {o}" for p, o, _ in _numeric_options()]
)
def test_bad_numbers_are_refused_in_one_line(env, capsys, monkeypatch, prefix, option, kind):
    for value in _bad_numbers(kind):
        # --opt=VALUE: a value such as "-inf" is then the option's value, not something that looks like an option
        argv = [*prefix, f"{option}={value}"] if option.startswith("--") else [*prefix, option, value]
        line = _refused(argv, env, capsys, monkeypatch)
        assert "must be" in line or (value.startswith("-") and not option.startswith("--")), line


@pytest.mark.parametrize(
    "argv",
    [
        ["uec-perf", "--sizes", s, "--fit-pairs", "0"]
        for s in ("abc", "0x16", "10x0", "1e400x8", "nanx8", "5x8", "100x1e9", "100.5x8", "100xabc", "-100x8")
    ]
    + [["uec-perf", "--sizes", "", "--fit-pairs", "0", "--reranks", r] for r in ("0", "abc", ",", "9" * 30)]
    + [["uec-perf", "--sizes", "", "--fit-pairs", "0", "--efs", "10,20"]]
    + [["link-scale", "--sizes", s, "--view-sizes", ""] for s in ("0", "1", "15", "abc", "9" * 30)]
    + [["link-scale", "--sizes", "", "--view-sizes", s] for s in ("1", "255", "-3")]
    + [
        ["link-table", "--settings", s, "--results", "OUT/r.json"]
        for s in ("nan:15", "0:15", "2:15", "0.3:1", "0.3:-1", "x:y")
    ]
    + [["link-table", "--pairs", p, "--results", "OUT/r.json"] for p in ("a:b:0", "a:b:x", "a:b")]
    + [["index", "build", "GOOD/docs.txt", "-o", "OUT/i.uec", "--prior-precision", p] for p in ("nan", "-1", "0", "x")]
    + [["uec-eval", "--prior-precision", p] for p in ("inf", "-2")],
    ids=repr,
)
def test_bad_lists_of_numbers_are_refused(env, capsys, monkeypatch, argv):
    def place(a):
        for tag, key in (("GOOD/", "good"), ("OUT/", "out")):
            if a.startswith(tag):
                return str(env[key] / a[len(tag) :])
        return a

    _refused([place(a) for a in argv], env, capsys, monkeypatch)


def test_the_good_inputs_are_good(env, capsys, monkeypatch):
    """The fixtures the bad cases are mixed with pass on their own (so each refusal is about the bad part)."""
    monkeypatch.setenv("CROSSEMBED_CACHE", str(env["out"] / "cache"))
    g = env["good"]
    assert (
        main(["link", str(g / "A.npy"), str(g / "A.npy"), "--seeds", str(g / "seeds.csv"), "--method", "procrustes"])
        == 0
    )
    q = np.stack([np.ones((2, 4), np.float32), np.zeros((2, 4), np.float32)])
    np.save(env["out"] / "q.npy", q)
    out = env["out"] / "r.npy"
    assert main(["index", "search", str(g / "index.uec"), "--queries", str(env["out"] / "q.npy"), "-o", str(out)]) == 0
    assert np.load(out).shape == (2, 10)
    out.unlink()
    (env["out"] / "q.npy").unlink()
    capsys.readouterr()
    assert os.path.isdir(g / "uncha")


def test_saved_results_still_load():
    """The shape checks accept what the commands wrote (the results behind docs/), and the reports render."""
    from experiments import link_table, uec_eval, uec_perf

    docs = Path(__file__).resolve().parents[1] / "docs"
    if not (docs / "uec_perf.json").is_file():
        pytest.skip("no docs/ beside the tests")
    for name in ("uec.json", "uec_freedict.json", "uec_wordnet.json", "uec_wordnet_verb.json"):
        assert "UEC default" in uec_eval.render_markdown(uec_eval.load_results(docs / name))
    assert "| N docs |" in uec_perf.render_perf_markdown(uec_perf.load_runs(docs / "uec_perf.json"))
    for name in ("linking_results.json", "linking_pool_vs_exact.json"):
        assert "F1" in link_table.render_markdown(link_table.load_records(docs / name))


def test_good_sizes_still_parse():
    from experiments.uec_perf import parse_sizes

    assert parse_sizes("100000x1152, 1e6,10x1") == [(100000, 1152), (1000000, 384), (10, 1)]
    assert parse_sizes("") == [] and parse_sizes(" , ") == []
