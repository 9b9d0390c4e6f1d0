"""Read FreeDict bilingual dictionaries (dictd format) into word-translation entries.

Debian installs them as ``/usr/share/dictd/freedict-<src>-eng.{index,dict.dz}``
(packages ``dict-freedict-deu-eng``, ``dict-freedict-fra-eng``, ...: one
per language of :data:`LANGUAGES`). The ``.index`` has one line per headword:
``word<TAB>offset<TAB>length`` with offset/length in dictd's base64; the
``.dict.dz`` is dictzip, i.e. gzip-readable, and the offsets point into the
decompressed text. An entry looks like::

    Hund /hˈʊnt/ <masc, n, sg>
     [zool.] dog <n>, dawg <n>
             Note: used to represent American speech
     see: {Hunde}, {Haushund}

first line = headword, IPA and grammar tags; unindented (or single-space
indented) lines are translations, numbered senses ``1. ...`` included;
deeper-indented lines are notes, examples and cross references.

:func:`translation_task` turns them into a multilingual retrieval task with
one shared English document pool, so scores per query language are
comparable (the "language expert" test of the UEC ensemble).
"""

from __future__ import annotations

import gzip
import json
import os
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple, Union

import numpy as np

from crossembed.cli.options import write_file
from crossembed.encoders.cache import default_cache_dir
from experiments.tasks import RetrievalTask

__all__ = [
    "LANGUAGES",
    "DictEntry",
    "english_noun_senses",
    "find_dictd_dir",
    "read_freedict",
    "single_word",
    "translation_pairs",
    "translation_task",
]

#: language code -> FreeDict source-language code (Debian package ``dict-freedict-<code>-eng``)
LANGUAGES = {
    "de": "deu",
    "fr": "fra",
    "es": "spa",
    "it": "ita",
    "pt": "por",
    "nl": "nld",
    "sv": "swe",
    "da": "dan",
    "pl": "pol",
    "fi": "fin",
    "hu": "hun",
    "af": "afr",
    "tr": "tur",
    "cs": "ces",
}
_NAMES = {
    "de": ("ger", "german"),
    "fr": ("fre", "french"),
    "es": ("spanish",),
    "it": ("italian",),
    "pt": ("portuguese",),
    "nl": ("dut", "dutch"),
    "sv": ("swedish",),
    "da": ("danish",),
    "pl": ("polish",),
    "fi": ("finnish",),
    "hu": ("hungarian",),
    "af": ("afrikaans",),
    "tr": ("turkish",),
    "cs": ("cze", "czech"),
}
_ALIASES = {alias: code for code, names in _NAMES.items() for alias in (code, LANGUAGES[code], *names)}
_SEARCH_DIRS = ("/usr/share/dictd", "/usr/local/share/dictd", "/opt/homebrew/share/dictd")
_B64 = {c: i for i, c in enumerate("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")}
_TAGS = re.compile(r"<[^>]*>|\[[^\]]*\]|\{[^}]*\}")
_NUMBERED = re.compile(r"^\d+\.\s*")
_SPLIT = re.compile(r"\s*[,;]\s*(?![^()]*\))")  # commas/semicolons outside parentheses
_NOTES = ("see:", "synonym", "note:", "antonym", '"', "usage:", "example")

PathLike = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class DictEntry:
    """One dictionary entry.

    Attributes
    ----------
    headword : str
        As written in the entry (case kept), e.g. ``"Hund"``.
    language : str
        A key of :data:`LANGUAGES` (``"de"``, ``"fr"``, ``"it"``, ...).
    pos : tuple of str
        Grammar tags of the headword, e.g. ``("masc", "n", "sg")``; may be empty
        (the Spanish dictionary has none).
    translations : tuple of str
        English translations, tags like ``<n>`` and ``[zool.]`` removed.
    """

    headword: str
    language: str
    pos: Tuple[str, ...]
    translations: Tuple[str, ...]

    @property
    def is_noun(self) -> bool:
        return "n" in self.pos


def _language(language) -> str:
    if not isinstance(language, str):
        raise TypeError(f"language must be a string, got {type(language).__name__}")
    try:
        return _ALIASES[language.lower()]
    except KeyError:
        raise ValueError(f"language must be one of {sorted(LANGUAGES)}, got {language!r}") from None


def _package(lang: str) -> str:
    return f"dict-freedict-{LANGUAGES[lang]}-eng"


def find_dictd_dir(language: str = "de", *, dictd_dir: Optional[PathLike] = None) -> Path:
    """Directory holding ``freedict-<src>-eng.index`` and ``.dict.dz``.

    Order: ``dictd_dir``, ``$CROSSEMBED_DICTD_DIR``, the usual install locations.

    Raises
    ------
    FileNotFoundError
        Naming the Debian package to install (e.g. ``dict-freedict-deu-eng``).
    """
    lang = _language(language)
    stem = f"freedict-{LANGUAGES[lang]}-eng"
    if dictd_dir is not None:
        candidates = [Path(dictd_dir)]
    elif os.environ.get("CROSSEMBED_DICTD_DIR"):
        candidates = [Path(os.environ["CROSSEMBED_DICTD_DIR"])]
    else:
        candidates = [Path(d) for d in _SEARCH_DIRS]
    for cand in candidates:
        if (cand / f"{stem}.index").is_file() and (cand / f"{stem}.dict.dz").is_file():
            return cand.resolve()
    raise FileNotFoundError(
        f"FreeDict dictionary {stem} not found in {', '.join(map(str, candidates))}; install it with "
        f"`apt-get install {_package(lang)}` or point CROSSEMBED_DICTD_DIR at the folder"
    )


def _b64(s: str) -> int:
    v = 0
    for c in s:
        v = v * 64 + _B64[c]
    return v


_HEAD_TAGS = re.compile(r"<([^>]*)>\s*$")


def _parse_head(head: str) -> Tuple[str, Tuple[str, ...]]:
    head = head.strip()
    tags: Tuple[str, ...] = ()
    m = _HEAD_TAGS.search(head)
    if m:
        tags = tuple(t.strip() for t in m.group(1).split(",") if t.strip())
        head = head[: m.start()].strip()
    slash = head.find(" /")
    if slash >= 0:
        head = head[:slash].strip()
    return head, tags


def _parse_translations(lines: Iterable[str]) -> Tuple[str, ...]:
    translations: List[str] = []
    for line in lines:
        if not line.strip() or line.startswith("  "):  # notes, examples: deeper indentation
            continue
        s = line.strip()
        if s.lower().startswith(_NOTES):
            continue
        if s[0].isdigit():
            s = _NUMBERED.sub("", s)
        if "<" in s or "[" in s or "{" in s:
            s = _TAGS.sub("", s)
        for t in _SPLIT.split(s) if ("," in s or ";" in s) else (s,):
            t = " ".join(t.split())
            if t and t not in translations:
                translations.append(t)
    return tuple(translations)


def _parse_files(index_path: str, dict_path: str, lang: str, single_word: bool, nouns_only: bool) -> List[DictEntry]:
    with gzip.open(dict_path) as fh:
        raw = fh.read()
    seen: Set[int] = set()
    out = []
    with open(index_path, encoding="utf-8", errors="replace") as fh:
        for lineno, line in enumerate(fh, 1):
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 3:
                raise ValueError(f"{index_path}:{lineno}: malformed dictd index line")
            word, off, length = parts[:3]
            if not word or word.startswith("00database") or word.startswith("00-database"):
                continue  # dictd metadata entries
            if single_word and " " in word.strip():
                continue  # cheap filter before decoding: the German file is mostly phrases and sentences
            try:
                start, n = _b64(off), _b64(length)
            except KeyError:
                raise ValueError(f"{index_path}:{lineno}: bad base64 offset {off!r}/{length!r}") from None
            if start in seen:  # several index words may point to one entry
                continue
            seen.add(start)
            if start + n > len(raw):
                raise ValueError(f"{index_path}:{lineno}: entry runs past the end of {dict_path}")
            text = raw[start : start + n].decode("utf-8", errors="replace")
            first, _, rest = text.partition("\n")
            head, tags = _parse_head(first)
            if not head or (nouns_only and tags and "n" not in tags) or (single_word and not _single_word(head)):
                continue
            translations = _parse_translations(rest.split("\n"))
            if translations:
                out.append(DictEntry(head, lang, tags, translations))
    return out


_DISK_VERSION = 1


def _read_entries(
    index_path: str, dict_path: str, stamp: str, lang: str, single_word: bool, nouns_only: bool
) -> List[DictEntry]:
    """Parse the dictionary, or reuse the gzip'ed JSON copy of an earlier parse in the crossembed cache.

    Parsing a large dictionary (German) is slow, so the parsed entries are
    kept on disk, keyed by the source files' size and mtime (``stamp``) and
    written atomically; gzip's CRC catches corruption, and a copy that is
    unreadable or of another format version is parsed again and replaced.
    """
    name = f"{Path(index_path).stem}-{int(single_word)}{int(nouns_only)}-{stamp}.json.gz"
    cache = default_cache_dir() / "freedict" / name
    try:
        blob = json.loads(gzip.decompress(cache.read_bytes()))
        if blob.get("version") == _DISK_VERSION and blob.get("language") == lang:
            return [DictEntry(h, lang, tuple(p), tuple(t)) for h, p, t in blob["entries"]]
    except (OSError, ValueError, EOFError, KeyError, TypeError, zlib.error):
        pass  # missing or corrupt: parse again
    entries = _parse_files(index_path, dict_path, lang, single_word, nouns_only)
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "version": _DISK_VERSION,
            "language": lang,
            "entries": [[e.headword, list(e.pos), list(e.translations)] for e in entries],
        }
        write_file(cache, gzip.compress(json.dumps(payload, ensure_ascii=False).encode("utf-8"), 6))
    except OSError:
        pass  # a read-only cache only costs time
    return entries


def read_freedict(
    language: str = "de",
    *,
    single_word: bool = False,
    nouns_only: bool = False,
    dictd_dir: Optional[PathLike] = None,
) -> List[DictEntry]:
    """Entries of ``freedict-<language>-eng`` in index order.

    The first call parses the dictionary and keeps a copy in the crossembed
    cache folder (``$CROSSEMBED_CACHE``); later calls, in any process, read
    that copy until the dictionary files change.

    Parameters
    ----------
    language : str
        A key of :data:`LANGUAGES` (``"de"``, ``"it"``, ...).
        Also ``"deu"``, ``"german"``, ... The German dictionary is large,
        many of its entries phrases and example sentences.
    single_word : bool
        Keep one-word headwords only (letters and hyphens); much faster for German.
    nouns_only : bool
        Drop entries tagged as another part of speech (untagged entries, e.g.
        the whole Spanish dictionary, are kept).
    """
    lang = _language(language)
    folder = find_dictd_dir(lang, dictd_dir=dictd_dir)
    stem = f"freedict-{LANGUAGES[lang]}-eng"
    index, dz = folder / f"{stem}.index", folder / f"{stem}.dict.dz"
    stamp = "-".join(f"{p.stat().st_size}x{p.stat().st_mtime_ns}" for p in (index, dz))
    return _read_entries(str(index), str(dz), stamp, lang, bool(single_word), bool(nouns_only))


def single_word(s: str) -> bool:
    """True for one word of letters and hyphens (``"sea-horse"``, not ``"sea horse"`` or ``"B2"``)."""
    return bool(s) and " " not in s and s.replace("-", "").isalpha()


_single_word = single_word


def translation_pairs(
    language: str = "de",
    *,
    single_word: bool = True,
    nouns_only: bool = False,
    dictd_dir: Optional[PathLike] = None,
) -> List[Tuple[str, str]]:
    """``(foreign headword, English translation)`` pairs, one per translation.

    ``single_word`` keeps one-word headwords and translations; pairs whose two
    sides are the same string (``"Amsterdam" -> "Amsterdam"``) are dropped.
    """
    out = []
    for e in read_freedict(language, single_word=single_word, nouns_only=nouns_only, dictd_dir=dictd_dir):
        for t in e.translations:
            if single_word and not _single_word(t):
                continue
            if t.lower() != e.headword.lower():
                out.append((e.headword, t))
    return out


def english_noun_senses(wordnet_dir: Optional[PathLike] = None) -> Dict[str, List[Tuple[int, str]]]:
    """Lower-cased WordNet noun lemma -> ``[(synset offset, gloss), ...]`` of its senses (glossed synsets only)."""
    from crossembed.data.wordnet import read_synsets

    senses: Dict[str, List[Tuple[int, str]]] = {}
    for s in read_synsets("noun", wordnet_dir=wordnet_dir):
        if not s.gloss:
            continue
        for lemma in s.lemmas:
            senses.setdefault(lemma.lower(), []).append((s.offset, s.gloss))
    return senses


_english_noun_senses = english_noun_senses


def _task_languages(languages) -> List[str]:
    """Language codes of ``languages`` ("en" or a FreeDict language), first occurrence order."""
    if isinstance(languages, str):
        languages = [languages]
    langs: List[str] = []
    for lang in languages:
        code = "en" if isinstance(lang, str) and lang.lower() in ("en", "eng", "english") else _language(lang)
        if code not in langs:
            langs.append(code)
    return langs


def _check_count(name: str, value, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
    if value < low:
        raise ValueError(f"{name} must be >= {low}, got {value}")


def _query_words(lang: str, usable: Set[str], dictd_dir) -> List[Tuple[str, Tuple[str, ...]]]:
    """``(query word, English lemmas it stands for)``, sorted: the lemma itself for "en", else its translations."""
    if lang == "en":
        return sorted((w, (w,)) for w in usable)
    by_word: Dict[str, List[str]] = {}
    for e in read_freedict(lang, single_word=True, nouns_only=True, dictd_dir=dictd_dir):
        for t in e.translations:
            tl = t.lower()
            if tl in usable and tl != e.headword.lower():
                lst = by_word.setdefault(e.headword, [])
                if tl not in lst:
                    lst.append(tl)
    return sorted((w, tuple(ts)) for w, ts in by_word.items())


def _with_offsets(words, senses, max_senses: int) -> List[Tuple[str, List[int]]]:
    """``(word, offsets of all senses of its English lemmas)`` for words with at most ``2 * max_senses`` senses."""
    out = []
    for word, english in words:
        offsets = sorted({off for t in english for off, _ in senses[t]})
        # a foreign word with many translations would be relevant to half the pool
        if len(offsets) <= 2 * max_senses:
            out.append((word, offsets))
    return out


def _document_pool(gloss_of: Dict[int, str], targets: List[List[int]], n_distractors: int, rng) -> List[int]:
    """Sorted synset offsets of the documents: every target plus ``n_distractors`` random other nouns."""
    needed = sorted({o for t in targets for o in t})
    rest = sorted(set(gloss_of) - set(needed))
    extra = [rest[i] for i in rng.permutation(len(rest))[:n_distractors]] if rest else []
    return sorted(set(needed) | set(extra))


def translation_task(
    languages: Sequence[str] = ("en", "de", "fr", "es"),
    *,
    n_per_language: int = 300,
    max_senses: int = 2,
    n_distractors: int = 2000,
    random_state=0,
    dictd_dir: Optional[PathLike] = None,
    wordnet_dir: Optional[PathLike] = None,
) -> RetrievalTask:
    """Multilingual word -> English definition retrieval ("reverse dictionary" across languages).

    Documents are English WordNet noun glosses, one shared pool for every
    language. A query is a single word: an English noun lemma (``"en"``) or a
    foreign headword (a key of :data:`LANGUAGES`) whose FreeDict translation
    is such a lemma; its relevant documents are the glosses of all WordNet
    noun senses of the (translated) word. Words with more than ``max_senses``
    senses are skipped so labels stay specific (foreign words: more than
    ``2 * max_senses`` over all their translations); foreign words spelled
    like their translation are skipped so the task needs the language.

    Parameters
    ----------
    languages : sequence of str
        ``"en"`` and keys of :data:`LANGUAGES`.
    n_per_language : int
        Queries sampled per language (fewer if the dictionary has fewer); default 300.
    max_senses : int
        Most WordNet noun senses an English query word may have; default 2.
    n_distractors : int
        Extra random noun glosses added to the document pool; default 2000.
    random_state : None, int or numpy Generator
        Sampling is deterministic for a fixed seed; default 0.
    dictd_dir, wordnet_dir : path, optional
        Where the dictionaries and WordNet are; default: see :func:`find_dictd_dir`
        and :func:`~crossembed.data.wordnet.find_wordnet_dir`.

    Returns
    -------
    RetrievalTask
        ``languages[i]`` tags query ``i``.
    """
    langs = _task_languages(languages)
    _check_count("n_per_language", n_per_language, 1)
    _check_count("max_senses", max_senses, 1)
    _check_count("n_distractors", n_distractors, 0)
    rng = np.random.default_rng(random_state)
    senses = _english_noun_senses(wordnet_dir)
    usable = {w for w, s in senses.items() if len(s) <= max_senses and _single_word(w)}

    queries: List[str] = []
    qlangs: List[str] = []
    targets: List[List[int]] = []
    for lang in langs:
        with_offsets = _with_offsets(_query_words(lang, usable, dictd_dir), senses, max_senses)
        for i in sorted(rng.permutation(len(with_offsets))[:n_per_language]):
            queries.append(with_offsets[i][0])
            qlangs.append(lang)
            targets.append(with_offsets[i][1])

    gloss_of = {off: g for lst in senses.values() for off, g in lst}
    doc_offsets = _document_pool(gloss_of, targets, n_distractors, rng)
    position = {off: i for i, off in enumerate(doc_offsets)}
    return RetrievalTask(
        name="freedict-wordnet-" + "-".join(langs),
        queries=queries,
        documents=[gloss_of[o] for o in doc_offsets],
        relevant=[tuple(position[o] for o in t) for t in targets],
        languages=qlangs,
    )
