"""What every command shares (also the research harness's, ``python -m experiments``): the parser
class, common options, input readers, output printing and the line between a user error and a bug."""

from __future__ import annotations

import argparse
import json
import math
import re
import shlex
import sys
import traceback
from pathlib import Path
from typing import Any, Callable, List, Optional, Sequence, Tuple

import numpy as np

import crossembed
from crossembed._validation import INT64_MAX, INT_MAX, show_int

_PACKAGE_DIR = str(Path(crossembed.__file__).resolve().parent)


class OptionValueError(ValueError):
    """A value that an option's ``type`` (:func:`int_arg`, :func:`float_arg`) refused: ``main``
    prints it as one line and returns 2, like any other user error."""

    def __init__(self, prog: str, message: str):
        super().__init__(message)
        self.prog = prog


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors and exit status 2 (argparse's own convention)."""

    def error(self, message):
        # "argument -k/--top-k: must be >= 1, got 0" from a typed option reads "--top-k must be >= 1, got 0"
        # (or "<name> must be ..." where the type names the value itself)
        m = re.fullmatch(r"argument ([^:\s]+): ([\w.]+ )?(must be .*)", message, flags=re.DOTALL)
        if m:
            what = (m.group(2) or "").strip() or m.group(1).split("/")[-1]
            raise OptionValueError(self.prog, " ".join(f"{what} {m.group(3)}".split()))
        message = " ".join(message.split())  # one line, whatever the value held
        self.exit(2, f"{self.prog}: error: {message}\n")


# --------------------------------------------------------------------------- number options
#: The range of ``--seed``: what numpy, torch and the HNSW graph all take.
SEED_MAX = 2**32 - 1


def int_arg(low: Optional[int] = None, high: int = INT_MAX, *, name: str = "") -> Callable[[str], int]:
    """An argparse ``type``: an integer in ``[low, high]`` (default top: a C ``int``).

    Every integer option goes through one of these, so a bad number is one
    line and exit status 2 (:class:`OptionValueError`) before any work starts
    or any file is written. Errors name the option, or ``name`` when given
    (the library's name of the value, e.g. ``num_threads``).
    """
    what = f"{name} " if name else ""

    def integer(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what}must be an integer, got {text[:40]!r}") from None
        if low is not None and value < low:
            raise argparse.ArgumentTypeError(f"{what}must be >= {low}, got {show_int(value)}")
        if value > high:
            raise argparse.ArgumentTypeError(f"{what}must be <= {high}, got {show_int(value)}")
        return value

    integer.low, integer.high = low, high  # the range, for help and tests
    return integer


def float_arg(low: Optional[float] = None, high: Optional[float] = None, *, above: bool = False, below: bool = False):
    """An argparse ``type``: a finite number ``>= low`` (``> low`` with ``above``) and ``<= high``
    (``< high`` with ``below``)."""

    def number(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number, got {text[:40]!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be finite, got {text[:40]!r}")
        if low is not None and (value < low or (above and value == low)):
            raise argparse.ArgumentTypeError(f"must be {'>' if above else '>='} {low:g}, got {value:g}")
        if high is not None and (value > high or (below and value == high)):
            raise argparse.ArgumentTypeError(f"must be {'<' if below else '<='} {high:g}, got {value:g}")
        return value

    number.low, number.high, number.above, number.below = low, high, above, below
    return number


def prior_precision_arg(text: str):
    """The argparse ``type`` of ``--prior-precision``: ``marglik``, ``nll`` or a finite number > 0."""
    if text in ("marglik", "nll"):
        return text
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be 'marglik', 'nll' or a number > 0, got {text[:40]!r}")
    return value


# --------------------------------------------------------------------------- errors
def is_user_error(exc: BaseException, *, also: Sequence[str] = ()) -> bool:
    """Whether ``exc`` is the user's to fix (one line, exit 2) rather than a bug (traceback).

    Missing files, unreadable paths and missing optional packages always are.
    A ``ValueError`` is when a ``raise`` statement in crossembed's own code
    (or under the directories ``also``: the research harness's) raised it -
    its boundary checks name the argument. One raised inside
    numpy, torch or another library (or by an operation such as a matmul of
    the wrong shapes in crossembed's code) means crossembed computed
    something wrong, which is a bug. ``TypeError``, ``KeyError`` and the rest
    are bugs: the CLI builds every argument itself, so a wrong type is never
    the user's.
    """
    if isinstance(
        exc, (FileNotFoundError, FileExistsError, PermissionError, IsADirectoryError, NotADirectoryError, ImportError)
    ):
        return True
    if isinstance(exc, OSError) and getattr(exc, "filename", None) is not None:
        return True  # about one of the user's paths (disk full, read-only, name too long, ...)
    if isinstance(exc, ValueError):
        frames = traceback.extract_tb(exc.__traceback__)
        if not frames:
            return False
        last = frames[-1]
        ours = str(Path(last.filename).resolve()).startswith((_PACKAGE_DIR, *also))
        return ours and (last.line or "").lstrip().startswith("raise")
    return False


# --------------------------------------------------------------------------- output paths
#: Options that name a file the command writes, and ones that name a directory;
#: a sub-command whose ``--out`` is a directory says so with
#: ``set_defaults(output_dirs=("out",))``.
OUTPUT_FILES = ("out", "output", "plot", "results")
OUTPUT_DIRS = ("work", "cache_dir")


def run_command(parser: argparse.ArgumentParser, argv: Optional[List[str]] = None, *, also: Sequence[str] = ()) -> int:
    """Parse ``argv`` with ``parser`` and run the chosen sub-command's ``func``: its exit status.

    A user error (a bad option value, a path, :func:`is_user_error` with ``also``) prints one line,
    ``PROG COMMAND: error: ...``, and returns 2; an interrupt returns 130; anything else is a bug
    and keeps its traceback. No sub-command prints the help and returns 2.
    """
    try:
        args = parser.parse_args(argv)
    except OptionValueError as exc:  # a number out of its option's range: before any work
        print(f"{exc.prog}: error: {exc}", file=sys.stderr)
        return 2
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        check_output_paths(args)
        result = args.func(args)
    except KeyboardInterrupt:
        print(f"{parser.prog}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if not is_user_error(exc, also=also):
            raise
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"{parser.prog} {args.command}: error: {msg}", file=sys.stderr)
        return 2
    return int(result or 0)


def _file_ancestor(path: Path) -> Optional[Path]:
    """The nearest existing ancestor of ``path`` that is not a directory (None if there is none)."""
    for parent in path.parents:
        if parent.exists():
            return None if parent.is_dir() else parent
    return None


def check_output_paths(args: argparse.Namespace) -> None:
    """Refuse, before any work is done, output paths that can never be written.

    A file option naming an existing directory, a directory option naming an
    existing file, and any path below a regular file raise a ValueError that
    names the option.
    """
    dirs = set(getattr(args, "output_dirs", ())) | set(OUTPUT_DIRS)
    for attr in set(OUTPUT_FILES) | dirs:
        value = getattr(args, attr, None)
        if not isinstance(value, (str, Path)) or not str(value):
            continue
        opt, path = "--" + attr.replace("_", "-"), Path(value)
        blocker = _file_ancestor(path)
        if blocker is not None:
            raise ValueError(f"{opt}: {str(blocker)!r} is a file, so {str(path)!r} cannot be created below it")
        if attr in dirs:
            if path.exists() and not path.is_dir():
                raise ValueError(f"{opt}: {str(path)!r} is an existing file, not a directory")
        elif path.is_dir():
            raise ValueError(f"{opt}: {str(path)!r} is a directory; name a file")


# --------------------------------------------------------------------------- input arrays
def check_real_dtype(dtype: np.dtype, name: str, path) -> None:
    """Raise ValueError unless ``dtype`` holds real numbers (ints or floats: not bools, strings, complex)."""
    if dtype.kind not in "fiu":
        raise ValueError(f"{name} file {str(path)!r} holds {dtype} values; a numeric (int or float) array is needed")


def load_npy(path: str, name: str) -> np.ndarray:
    """A ``.npy`` array whose header is checked against the file before anything is allocated.

    A header that claims more data than the file holds (a truncated or forged
    file: e.g. a 4 PiB shape) is a ValueError, not a MemoryError.
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{name} file {path!r} does not exist")
    try:
        with open(p, "rb") as fh:
            version = np.lib.format.read_magic(fh)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(fh)
            else:
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(fh)
            offset = fh.tell()
    except (ValueError, OSError, EOFError, SyntaxError) as exc:
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ValueError(f"{name} file {path!r} is not a readable .npy array ({msg})") from None
    if dtype.hasobject:
        raise ValueError(f"{name} file {path!r} holds Python objects; only numeric arrays are read")
    check_real_dtype(dtype, name, path)
    count = 1
    for dim in shape:
        count *= int(dim)
    need, have = count * dtype.itemsize, p.stat().st_size - offset
    if need != have:
        raise ValueError(
            f"{name} file {path!r}: its header claims shape {tuple(shape)} of {dtype} ({need} bytes) "
            f"but the file holds {have} bytes of data"
        )
    try:
        return np.load(p, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise ValueError(f"{name} file {path!r} is not a readable .npy array ({str(exc).splitlines()[0]})") from None


# --------------------------------------------------------------------------- common options
def add_seed(p: argparse.ArgumentParser, help: str = "random seed (makes the run reproducible)") -> None:
    p.add_argument("--seed", type=int_arg(0, SEED_MAX), default=0, help=f"{help} (default 0)")


def add_num_threads(p: argparse.ArgumentParser, default: Optional[int] = None) -> None:
    what = "all cores" if default is None else str(default)
    p.add_argument(
        "--num-threads",
        type=int_arg(1, name="num_threads"),
        default=default,
        help=f"threads for kernels and encoders (default {what})",
    )


def add_output_flags(p: argparse.ArgumentParser) -> None:
    """``--json`` (machine-readable result on stdout) and ``--quiet`` (no progress bars)."""
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress bars")


def print_result(result: Any, as_json: bool, render: Callable[[Any], str] = None) -> None:
    """JSON on request, otherwise ``render(result)`` (default: one ``key: value`` per line)."""
    if as_json:
        print(json.dumps(result, indent=2, default=_jsonable))
    elif render is not None:
        print(render(result))
    else:
        for key, value in result.items():
            print(f"{key}: {value}")


def _jsonable(obj):
    if hasattr(obj, "tolist"):
        return obj.tolist()
    raise TypeError(f"{type(obj).__name__} is not JSON serialisable")


def command_line(prog: str = "crossembed") -> str:
    """The command as typed, ``prog`` then the arguments (for the header of generated reports)."""
    return " ".join([prog, *(shlex.quote(a) for a in sys.argv[1:])])


def write_file(path, content) -> Path:
    """Write ``content`` (str as UTF-8, or bytes) to ``path`` atomically: readers see the old file or the new one."""
    from crossembed._io import atomic_write

    return atomic_write(path, content.encode() if isinstance(content, str) else content)


# --------------------------------------------------------------------------- input parsing
def read_text(path: str, name: str) -> str:
    """The text of a UTF-8 file: a missing file is FileNotFoundError, a directory, binary data
    (NUL bytes) or another encoding a ValueError (``name`` is the option, for the error)."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"--{name} file {path!r} does not exist")
    if p.is_dir():
        raise ValueError(f"--{name}: {path!r} is a directory, not a file")
    data = p.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"--{name}: {path} is not UTF-8 text") from None
    if "\x00" in text:
        raise ValueError(f"--{name}: {path} is binary data (it holds NUL bytes), not text")
    return text


def read_lines(path: str, name: str) -> List[str]:
    """Non-empty lines of a UTF-8 text file (``name`` is the option, for the error)."""
    text = read_text(path, name)
    lines = [line.rstrip("\r") for line in text.split("\n") if line.strip()]
    if not lines:
        raise ValueError(f"--{name}: {path} holds no non-empty line")
    return lines


def split_list(text: str, name: str) -> List[str]:
    """``"a, b,c"`` -> ``["a", "b", "c"]``; an empty list is an error."""
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise ValueError(f"--{name} names nothing")
    return items


def parse_ints(text: str, name: str, *, low: int = 1, high: int = INT64_MAX) -> List[int]:
    """A comma list of integers in ``[low, high]``."""
    out = []
    for item in split_list(text, name):
        try:
            value = int(item)
        except ValueError:
            raise ValueError(f"--{name}: {item!r} is not an integer") from None
        if not low <= value <= high:
            raise ValueError(f"--{name}: {show_int(value)} is out of range [{low}, {high}]")
        out.append(value)
    return out


def parse_tuples(text: str, name: str, types: Sequence[type]) -> List[Tuple]:
    """A comma list of ``:``-separated tuples, e.g. ``"minilm:e5:10000"`` with ``(str, str, int)``."""
    out = []
    for item in split_list(text, name):
        parts = item.split(":")
        if len(parts) != len(types):
            raise ValueError(f"--{name}: {item!r} must have {len(types)} ':'-separated fields")
        try:
            out.append(tuple(t(p) for t, p in zip(types, parts)))
        except ValueError:
            raise ValueError(f"--{name}: {item!r} has a field of the wrong type") from None
    return out
