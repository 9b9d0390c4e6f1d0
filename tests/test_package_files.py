"""The files a distribution must carry besides the code (licences, the typing marker), and what it must not:
the research harness (``experiments/``) stays out of the wheel and of what the sdist installs."""

from pathlib import Path

import crossembed

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = Path(crossembed.__file__).resolve().parent


def test_apache_licence_at_the_root():
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text


def test_py_typed_marker():
    assert (PACKAGE / "py.typed").is_file()


def test_bundled_data_carry_their_licences():
    bundled = PACKAGE / "data" / "bundled"
    assert "WordNet 3.0 Copyright" in (bundled / "LICENSE-WordNet.txt").read_text()
    assert "GNU General Public License" in (bundled / "LICENSE-FreeDict.txt").read_text()


def test_the_wheel_installs_the_package_only():
    """The wheel (and the one built from the sdist) installs python/crossembed, which holds no harness:
    .ci/wheel_smoke.py checks the installed files of both."""
    lines = (ROOT / "pyproject.toml").read_text(encoding="utf-8").splitlines()
    assert [line for line in lines if line.startswith("wheel.")] == ['wheel.packages = ["python/crossembed"]']
    assert not list(PACKAGE.rglob("experiments")), "the research harness lives in the top-level experiments/"
