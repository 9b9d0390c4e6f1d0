"""The ``crossembed`` command line.

One module per command group registers its sub-commands
(``register(subparsers)`` in the modules of ``_COMMAND_MODULES``); shared
options and helpers live in :mod:`crossembed.cli.options`, so this file stays
a thin dispatcher. User errors (bad arguments, files or data) print one line
and exit 2; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import List, Optional

from crossembed.cli.options import OptionValueError, Parser, check_output_paths, is_user_error

_COMMAND_MODULES = (
    "crossembed.cli.demo",
    "crossembed.cli.bench",
    "crossembed.cli.uec",
    "crossembed.cli.linking",
    "crossembed.cli.hyperbolic",
    "crossembed.cli.serve",
)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="crossembed", description="Embeddings across models (UEC, GEH, UNCHA) on a C++ core.")
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for name in _COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def _version() -> str:
    from crossembed import __version__

    return __version__


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
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
        print("crossembed: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if not is_user_error(exc):
            raise
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"crossembed {args.command}: error: {msg}", file=sys.stderr)
        return 2
    return int(result or 0)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
