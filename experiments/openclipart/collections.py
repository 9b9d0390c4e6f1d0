"""Captioned clip art with category trees, read from Debian packages (no downloads).

* Openclipart (``openclipart-png`` + ``openclipart-svg``, public domain): a
  drawing is one file name; the PNG is under ``png/<category path>/``,
  possibly in several category directories (all of them are its categories),
  and the SVG of the same name holds the Dublin Core metadata: title,
  description and keywords (``dc:subject``).
* TuxPaint stamps (``tuxpaint-stamps-default``, GPL-2): ``<category path>/<name>.png``
  with ``<name>.txt`` whose first line is a one-sentence English caption.
  Stamps that exist only as SVG are left out (no SVG renderer is assumed).

Category paths are tuples of directory names with ``_`` read as a space
(``("animals", "mammals", "big cats")``); their prefixes are the category tree.
"""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

__all__ = [
    "ClipartItem",
    "find_openclipart_dir",
    "find_tuxpaint_dir",
    "read_openclipart",
    "read_tuxpaint",
    "caption",
    "category_prompt",
    "held_out",
    "subsample",
]

Category = Tuple[str, ...]

_OPENCLIPART_DIRS = ("/usr/share/openclipart",)
_TUXPAINT_DIRS = ("/usr/share/tuxpaint/stamps",)
_DC = "{http://purl.org/dc/elements/1.1/}"
_RDF = "{http://www.w3.org/1999/02/22-rdf-syntax-ns#}"
# keywords that say how a file was made or filed, not what it shows
# ("hash" is on 1,492 drawings across unrelated categories: a filing tag of the collection)
_NOISE_KEYWORDS = frozenset(
    {"clip art", "clipart", "hash", "image", "media", "png", "svg", "public domain", "externalsource"}
)
#: Most keywords a caption lists (in the file's order).
MAX_CAPTION_KEYWORDS = 8


@dataclass(frozen=True)
class ClipartItem:
    """One drawing or stamp.

    Attributes
    ----------
    name : str
        File name without ``.png`` (unique within its collection).
    path : Path
        The PNG read for pixels.
    title : str
    keywords : tuple of str
        Lower-cased, de-duplicated, file order (empty for TuxPaint).
    description : str
        Empty when the file has none.
    categories : tuple of Category
        Every category path the item is filed under (at least one).
    """

    name: str
    path: Path
    title: str
    keywords: Tuple[str, ...]
    description: str
    categories: Tuple[Category, ...]


def _find(env: str, candidates: Sequence[str], probe: str, package: str) -> Path:
    value = os.environ.get(env)
    dirs = [Path(value)] if value else [Path(d) for d in candidates]
    for d in dirs:
        if (d / probe).is_dir():
            return d
    raise FileNotFoundError(
        f"{package} not found (looked in {', '.join(map(str, dirs))}); apt-get install {package} or set {env}"
    )


def find_openclipart_dir() -> Path:
    """``$CROSSEMBED_OPENCLIPART_DIR`` or ``/usr/share/openclipart`` (must hold ``png/``)."""
    return _find("CROSSEMBED_OPENCLIPART_DIR", _OPENCLIPART_DIRS, "png", "openclipart-png openclipart-svg")


def find_tuxpaint_dir() -> Path:
    """``$CROSSEMBED_TUXPAINT_DIR`` or ``/usr/share/tuxpaint/stamps`` (must hold ``animals/``)."""
    return _find("CROSSEMBED_TUXPAINT_DIR", _TUXPAINT_DIRS, "animals", "tuxpaint-stamps-default")


def _category(rel: str) -> Category:
    return tuple(part.replace("_", " ").strip() for part in Path(rel).parts)


def _svg_metadata(path: Path) -> Tuple[str, str, Tuple[str, ...]]:
    """``(title, description, keywords)`` of the ``cc:Work`` in an SVG's metadata; empty when unreadable."""
    try:
        root = ET.parse(path).getroot()
    except (ET.ParseError, OSError):
        return "", "", ()
    work = next(root.iter("{http://web.resource.org/cc/}Work"), None)
    if work is None:
        return "", "", ()
    title = (work.findtext(f"{_DC}title") or "").strip()
    description = " ".join((work.findtext(f"{_DC}description") or "").split())
    subject = work.find(f"{_DC}subject")
    words = [] if subject is None else [(li.text or "") for li in subject.iter(f"{_RDF}li")]
    return title, description, _clean_keywords(words)


def _clean_keywords(words: Sequence[str]) -> Tuple[str, ...]:
    out: Dict[str, None] = {}
    for w in words:
        for piece in re.split(r"[,;]", w):
            k = " ".join(piece.lower().replace("_", " ").split())
            if k and k not in _NOISE_KEYWORDS:
                out[k] = None
    return tuple(out)


def _title_from_name(name: str) -> str:
    # openclipart names are "<title words>_<author words>_NN"; without metadata the words are all we have
    return " ".join(re.sub(r"_\d+$", "", name).replace("-", " ").split("_"))


def read_openclipart(root: Optional[os.PathLike] = None) -> List[ClipartItem]:
    """Every Openclipart drawing, sorted by name.

    ``root`` is the directory holding ``png/`` and ``svg/`` (default
    :func:`find_openclipart_dir`). The title falls back to the file name's
    words when the SVG has none.
    """
    root = Path(root) if root is not None else find_openclipart_dir()
    png = root / "png"
    found: Dict[str, List[str]] = {}
    for d, _dirs, files in os.walk(png):
        rel = os.path.relpath(d, png)
        for f in files:
            if f.endswith(".png") and rel != ".":
                found.setdefault(f[:-4], []).append(rel)
    items = []
    for name in sorted(found):
        rels = sorted(found[name])
        title, description, keywords = _svg_metadata(root / "svg" / rels[0] / f"{name}.svg")
        items.append(
            ClipartItem(
                name=name,
                path=png / rels[0] / f"{name}.png",
                title=title or _title_from_name(name),
                keywords=keywords,
                description=description,
                categories=tuple(_category(r) for r in rels),
            )
        )
    return items


def read_tuxpaint(root: Optional[os.PathLike] = None) -> List[ClipartItem]:
    """Every TuxPaint stamp with a PNG and an English caption, sorted by path.

    ``root`` is the stamps directory (default :func:`find_tuxpaint_dir`).
    """
    root = Path(root) if root is not None else find_tuxpaint_dir()
    items = []
    for d, _dirs, files in sorted(os.walk(root)):
        rel = os.path.relpath(d, root)
        for f in sorted(files):
            if not f.endswith(".png") or rel == ".":
                continue
            txt = Path(d) / (f[:-4] + ".txt")
            if not txt.is_file():
                continue
            lines = txt.read_text(encoding="utf-8", errors="replace").splitlines()
            sentence = " ".join(lines[0].split()) if lines else ""
            if sentence:
                items.append(ClipartItem(f"{rel}/{f[:-4]}", Path(d) / f, sentence, (), "", (_category(rel),)))
    return items


def caption(item: ClipartItem) -> str:
    """The whole image's text: title, up to :data:`MAX_CAPTION_KEYWORDS` keywords, description.

    ``"Baby Tux. baby, icons, linux, penguin."``; a TuxPaint stamp's caption is its sentence.
    """
    text = item.title.rstrip(".")
    if item.keywords:
        text += ". " + ", ".join(item.keywords[:MAX_CAPTION_KEYWORDS])
    if item.description:
        text += ". " + item.description.rstrip(".")
    return text + "."


def category_prompt(category: Category) -> str:
    """The zero-shot text of a category node: ``"a picture of big cats"`` (its last name)."""
    if not category:
        raise ValueError("category must name at least one level")
    return f"a picture of {category[-1]}"


def held_out(names: Sequence[str], fraction: float = 0.2) -> List[bool]:
    """Whether each item (by :attr:`ClipartItem.name`) is in the test split: its name's CRC-32 below ``fraction``.

    Independent of order, seeds and which other items are present.
    """
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"fraction must be in (0, 1), got {fraction!r}")
    if isinstance(names, str):
        raise TypeError("names must be a sequence of names, not one string")
    return [zlib.crc32(n.encode("utf-8")) / 2**32 < fraction for n in names]


def subsample(items: Sequence[ClipartItem], limit: Optional[int], random_state=0) -> List[ClipartItem]:
    """At most ``limit`` items drawn without replacement (order kept); all when ``limit`` is None."""
    if limit is None or limit >= len(items):
        return list(items)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"limit must be an integer >= 1, got {limit!r}")
    rng = np.random.default_rng(random_state)
    keep = sorted(rng.choice(len(items), size=limit, replace=False).tolist())
    return [items[i] for i in keep]
