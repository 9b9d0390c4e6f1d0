"""Output paths that can never be written, and forged .npy headers: one line, exit 2 (issue 12, item 6)."""

import numpy as np
import numpy.lib.format as npformat
import pytest

from crossembed.cli import main


@pytest.fixture
def files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(0)
    np.save("a.npy", rng.random((20, 4)).astype(np.float32))
    np.save("b.npy", rng.random((20, 4)).astype(np.float32))
    (tmp_path / "s.csv").write_text("0,0\n1,1\n2,2\n3,3\n")
    (tmp_path / "afile").write_text("x")
    (tmp_path / "texts.txt").write_text("one\ntwo\n")
    (tmp_path / "adir").mkdir()
    with open("huge.npy", "wb") as fh:  # a header claiming 4 PiB over 64 bytes of data
        npformat.write_array_header_1_0(fh, {"descr": "<f4", "fortran_order": False, "shape": (2**40, 2**10)})
        fh.write(b"\0" * 64)
    with open("short.npy", "wb") as fh:  # a plausible shape, truncated data
        npformat.write_array_header_2_0(fh, {"descr": "<f8", "fortran_order": False, "shape": (20, 4)})
        fh.write(b"\0" * 100)
    return tmp_path


def _one_line_exit_2(argv, capsys, match):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and match in err[0], err


@pytest.mark.parametrize(
    "argv, match",
    [
        (["link", "a.npy", "b.npy", "--seeds", "s.csv", "--out", "adir"], "--out: 'adir' is a directory"),
        (["link", "a.npy", "b.npy", "--seeds", "s.csv", "--out", "afile/x.csv"], "'afile' is a file"),
        (["link", "a.npy", "b.npy", "--seeds", "s.csv", "--out", "afile/deeper/x.csv"], "'afile' is a file"),
        (["train-uncha", "--out", "afile", "--steps", "1"], "--out: 'afile' is an existing file"),
        (["train-uncha", "--out", "afile/sub", "--steps", "1"], "'afile' is a file"),
        (["train-uncha", "--out", "adir", "--steps", "1", "--plot", "adir"], "--plot: 'adir' is a directory"),
        (["encode", "texts.txt", "-o", "adir"], "--output: 'adir' is a directory"),
        (["link", "huge.npy", "b.npy", "--seeds", "s.csv"], "claims shape (1099511627776, 1024)"),
        (["link", "a.npy", "short.npy", "--seeds", "s.csv"], "holds 100 bytes"),
        (["link", "a.npy", "s.csv", "--seeds", "s.csv"], "not a readable .npy"),
    ],
)
def test_unwritable_outputs_and_forged_inputs(files, capsys, argv, match):
    _one_line_exit_2(argv, capsys, match)


def test_oserror_on_a_named_path_is_a_user_error():
    from crossembed.cli.options import is_user_error

    assert is_user_error(FileExistsError(17, "File exists", "x"))
    assert is_user_error(OSError(28, "No space left on device", "out.bin"))
    assert not is_user_error(OSError("no filename: could be anything"))
