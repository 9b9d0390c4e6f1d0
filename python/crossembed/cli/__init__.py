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
from typing import List, Optional

from crossembed.cli.options import Parser, run_command

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
    return run_command(build_parser(), argv)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
