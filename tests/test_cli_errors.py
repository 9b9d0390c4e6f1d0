"""The CLI's line between a user error (one line, exit 2) and a bug (traceback)."""

import numpy as np
import pytest

import experiments.__main__ as harness
from crossembed._validation import check_int
from crossembed.cli import main, options
from experiments.linking_rules import CosineSignatures


def _run_with(monkeypatch, func):
    """Run `crossembed bench` with its handler replaced by ``func``."""
    real = options.Parser.parse_args

    def parse_args(self, *a, **kw):
        args = real(self, *a, **kw)
        args.func = lambda _args: func()
        return args

    monkeypatch.setattr(options.Parser, "parse_args", parse_args)
    return main(["bench"])


def test_our_value_error_is_one_line(monkeypatch, capsys):
    def bad():
        check_int(0, "repeat", low=1)

    assert _run_with(monkeypatch, bad) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["crossembed bench: error: repeat must be >= 1, got 0"]


@pytest.mark.parametrize("exc", [FileNotFoundError("no such file: x.npy"), ImportError("pip install hnswlib")])
def test_missing_files_and_packages_are_user_errors(monkeypatch, capsys, exc):
    def bad():
        raise exc

    assert _run_with(monkeypatch, bad) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "bug, kind",
    [
        (lambda: {}["missing"], KeyError),
        (lambda: len(3), TypeError),
        (lambda: np.linalg.norm(np.zeros(3), axis=4), ValueError),  # raised inside numpy: our bug
        # a wrong-shape product inside crossembed's own code is a bug too, not the user's error
        (lambda: CosineSignatures()(np.ones((3, 4), np.float32), np.ones((2, 5), np.float32)), ValueError),
    ],
)
def test_bugs_keep_their_traceback(monkeypatch, bug, kind):
    with pytest.raises(kind):
        _run_with(monkeypatch, bug)


def test_unknown_option_is_one_line(capsys):
    with pytest.raises(SystemExit) as info:
        main(["link", "a.npy", "b.npy", "--seeds", "s.csv", "--bogus"])
    assert info.value.code == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_a_number_out_of_range_returns_2_before_any_work(capsys):
    """Option values are range-checked as they are parsed: main returns 2 (argparse's own errors still exit 2)."""
    assert main(["link", "a.npy", "b.npy", "--seeds", "s.csv", "--max-iter", str(2**64)]) == 2
    assert (
        capsys.readouterr().err.strip()
        == "crossembed link: error: --max-iter must be <= 2147483647, got 18446744073709551616"
    )
    assert main(["index", "build", "docs.txt", "-o", "i.uec", "--hubness=nan"]) == 2
    assert capsys.readouterr().err.strip() == "crossembed index build: error: --hubness must be finite, got 'nan'"
    assert main(["eval-uncha", "ckpt", "--num-threads", "0"]) == 2
    assert capsys.readouterr().err.strip() == "crossembed eval-uncha: error: num_threads must be >= 1, got 0"


@pytest.mark.parametrize(
    "argv,message",
    [
        (["link", "{strings}", "{good}", "--seeds", "{seeds}"], "holds <U1 values; a numeric (int or float) array"),
        (["link", "{good}", "{good}", "--seeds", "{binary}"], "--seeds: {binary} is not UTF-8 text"),
    ],
)
def test_the_reported_cli_inputs_are_one_line_errors(tmp_path, capsys, argv, message):
    assert _check_one_line(main, tmp_path, capsys, argv, message).startswith(f"crossembed {argv[0]}: error: ")


@pytest.mark.parametrize(
    "argv,message",
    [
        (["link-table", "--render-only", "--results", "{binary}"], "is not UTF-8 text"),
        (["link-table", "--render-only", "--results", "{seeds}"], "is not JSON"),
        (["link-table", "--render-only", "--results", "{shape}"], "[0] must be an object, got int"),
        (["uec-eval", "--from-json", "{seeds}"], "is not JSON"),
        (["uec-eval", "--from-json", "{shape}"], "[0] must be an object, got int"),
        (["uec-perf", "--sizes", "abc"], "--sizes: 'abc' is not NxD"),
        (["uec-perf", "--sizes", "0x16"], "--sizes: '0x16' needs 10 <= N"),
    ],
)
def test_the_harness_inputs_are_one_line_errors(tmp_path, capsys, argv, message):
    """The harness's own checks (``raise`` in experiments/) are user errors there too: one line, exit 2."""
    line = _check_one_line(harness.main, tmp_path, capsys, argv, message)
    assert line.startswith(f"python -m experiments {argv[0]}: error: ")


def _check_one_line(main, tmp_path, capsys, argv, message) -> str:
    """Run ``main(argv)`` on files made in ``tmp_path``: exit 2, one line holding ``message``, nothing written."""
    paths = {"good": tmp_path / "good.npy", "strings": tmp_path / "s.npy", "seeds": tmp_path / "seeds.csv"}
    paths.update(binary=tmp_path / "bin.dat", shape=tmp_path / "shape.json")
    np.save(paths["good"], np.ones((8, 3), np.float32))
    np.save(paths["strings"], np.array([["a", "b"], ["c", "d"]]))
    paths["seeds"].write_text("0,0\n1,1\n")
    paths["binary"].write_bytes(bytes(range(256)))
    paths["shape"].write_text("[1, 2, 3]")
    assert main([a.format(**paths) for a in argv]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and message.format(**paths) in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in paths.values())
    return err.strip()
