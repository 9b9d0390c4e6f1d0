"""``python -m experiments COMMAND``: the research harness's commands (tables, plots, studies).

Each module of ``_COMMAND_MODULES`` registers its sub-commands with
``register(subparsers)``, as the modules of :mod:`crossembed.cli` do, and
uses the same option helpers (:mod:`crossembed.cli.options`), so a user error
prints one line and exits 2 here too.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import List, Optional

from crossembed.cli.options import OptionValueError, Parser, check_output_paths, is_user_error
from experiments import PROG

_COMMAND_MODULES = (
    "experiments.commands_uec",
    "experiments.commands_linking",
    "experiments.commands_uncha",
)


def build_parser() -> Parser:
    parser = Parser(prog=PROG, description="crossembed's research harness: tables, plots, studies.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for name in _COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except OptionValueError as exc:
        print(f"{exc.prog}: error: {exc}", file=sys.stderr)
        return 2
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        check_output_paths(args)
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("experiments: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if not is_user_error(exc, also=(str(Path(__file__).resolve().parent),)):
            raise
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"{PROG} {args.command}: error: {msg}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
