"""The ``crossembed`` command line.

Each method registers its own sub-commands (``register(subparsers)`` in the
modules listed in ``_COMMAND_MODULES``) so this file stays a thin dispatcher.
User errors (bad arguments, bad files, bad data) print one line and exit 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import List, Optional

_COMMAND_MODULES = (
    "crossembed.commands.demo",
    "crossembed.commands.bench",
    "crossembed.uec.commands",
    "crossembed.linking.commands",
    "crossembed.hyperbolic.commands",
)


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2 (argparse's own convention)
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="crossembed", description="Embeddings across models (UEC, GEH, UNCHA) on a C++ core.")
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in _COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def _version() -> str:
    from crossembed import __version__

    return __version__


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        result = args.func(args)
    except (ValueError, TypeError, FileNotFoundError, PermissionError, ImportError, KeyError) as exc:
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"crossembed {args.command}: error: {msg}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("crossembed: interrupted", file=sys.stderr)
        return 130
    return int(result or 0)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
