"""``python -m experiments COMMAND``: the research harness's commands (tables, plots, studies).

Each module of ``_COMMAND_MODULES`` registers its sub-commands with
``register(subparsers)``, as the modules of :mod:`crossembed.cli` do, and
uses the same option helpers (:mod:`crossembed.cli.options`), so a user error
prints one line and exits 2 here too.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import List, Optional

from crossembed.cli.options import Parser, run_command
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
    # a ValueError raised by the harness's own code is a user error too
    return run_command(build_parser(), argv, also=(str(Path(__file__).resolve().parent),))


if __name__ == "__main__":
    raise SystemExit(main())
