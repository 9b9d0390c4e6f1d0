"""Writing generated markdown into a document between named markers."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Union

from crossembed.cli.options import write_file


def markers(name: str):
    """The start and end marker lines of block ``name``."""
    return f"<!-- {name}:start -->", f"<!-- {name}:end -->"


def replace_block(path: Union[str, os.PathLike], name: str, markdown: str, *, title: str = "") -> Path:
    """Replace the text between ``name``'s markers in ``path`` (append them when missing).

    A missing file is created with ``title`` as its heading. Written atomically.
    """
    start, end = markers(name)
    p = Path(path)
    text = p.read_text(encoding="utf-8") if p.is_file() else (f"# {title}\n" if title else "")
    block = f"{start}\n{markdown.strip()}\n{end}"
    if start in text and end in text and text.index(start) < text.index(end):
        text = text[: text.index(start)] + block + text[text.index(end) + len(end) :]
    else:
        text = text.rstrip("\n") + ("\n\n" if text else "") + block + "\n"
    return write_file(p, text)
