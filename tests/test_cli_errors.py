"""The CLI's line between a user error (one line, exit 2) and a bug (traceback)."""

import numpy as np
import pytest

from crossembed._validation import check_int
from crossembed.cli import _common, main
from crossembed.linking.views import CosineSignatures


def _run_with(monkeypatch, func):
    """Run `crossembed bench` with its handler replaced by ``func``."""
    real = _common.Parser.parse_args

    def parse_args(self, *a, **kw):
        args = real(self, *a, **kw)
        args.func = lambda _args: func()
        return args

    monkeypatch.setattr(_common.Parser, "parse_args", parse_args)
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
