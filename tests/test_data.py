"""crossembed.data (WordNet parser, bundled sample) and the harness's FreeDict reader on small generated files."""

from __future__ import annotations

import gzip

import pytest

from crossembed.data import wordnet as wn
from experiments.tasks import RetrievalTask, example_gloss_task

LICENCE = "  1 This software and database is being provided to you, the LICENSEE, by  \n  2 Princeton University under the following license.  \n"
NOUN_LINES = [
    "00001740 03 n 01 entity 0 001 ~ 00001930 n 0000 | that which is perceived or known  ",
    "00001930 03 n 02 physical_entity 0 thing 1 002 @ 00001740 n 0000 + 00692347 v 0101 | an entity that has "
    'physical existence; "a thing of beauty"; "the physical entity moved"  ',
    '00002000 03 n 01 Hegira 0 001 @i 00001930 n 0000 | the flight of Muhammad (called "the Hegira") in 622  ',
    '00002100 03 n 01 big_cat 0 001 @ 00001930 n 0000 | a large cat: "lions are big cats"  ',
    "00002200 03 n 01 stub 0 000 | ",
]
VERB_LINES = [
    "00001000 29 v 01 breathe 0 002 @ 00002000 v 0000 + 00001930 n 0101 01 + 02 00 | draw air into, and "
    'expel out of, the lungs; "I can breathe better"  ',
    "00002000 29 v 01 respire 0 000 01 + 02 00 | undergo respiration  ",
]
ADJ_LINES = ['00003000 00 a 02 able(p) 0 big(a) 0 000 | having the means; "able to swim"  ']


@pytest.fixture
def wndir(tmp_path):
    (tmp_path / "data.noun").write_text(LICENCE + "\n".join(NOUN_LINES) + "\n")
    (tmp_path / "data.verb").write_text(LICENCE + "\n".join(VERB_LINES) + "\n")
    (tmp_path / "data.adj").write_text(LICENCE + "\n".join(ADJ_LINES) + "\n")
    return tmp_path


def test_read_synsets_fields(wndir):
    syn = wn.read_synsets("noun", wordnet_dir=wndir)
    assert [s.offset for s in syn] == [1740, 1930, 2000, 2100, 2200]
    s = syn[1]
    assert s.pos == "noun"
    assert s.lemmas == ("physical entity", "thing")
    assert s.gloss == "an entity that has physical existence"
    assert s.examples == ("a thing of beauty", "the physical entity moved")
    assert s.hypernyms == (1740,)  # the "+" verb pointer is not a hypernym
    assert syn[2].hypernyms == (1930,)  # instance hypernym "@i"
    # a quote inside the definition is not an example
    assert syn[2].examples == () and "Hegira" in syn[2].gloss
    assert syn[3].gloss == "a large cat" and syn[3].examples == ("lions are big cats",)
    assert syn[4].gloss == "" and syn[4].lemmas == ("stub",)


def test_verbs_frames_and_adj_markers(wndir):
    v = wn.read_synsets("v", wordnet_dir=wndir)
    assert v[0].hypernyms == (2000,) and v[0].examples == ("I can breathe better",)
    assert v[1].gloss == "undergo respiration"
    a = wn.read_synsets("adj", wordnet_dir=wndir)
    assert a[0].lemmas == ("able", "big")


def test_pairs_and_task(wndir):
    pairs = wn.example_gloss_pairs("noun", wordnet_dir=wndir)
    assert pairs == [
        ("a thing of beauty", "an entity that has physical existence"),
        ("lions are big cats", "a large cat"),
    ]
    assert len(wn.example_gloss_pairs("noun", wordnet_dir=wndir, all_examples=True)) == 3
    task = example_gloss_task(pos="noun", wordnet_dir=wndir)
    assert isinstance(task, RetrievalTask) and len(task) == 2
    assert task.relevant == [(0,), (1,)] and task.languages == ["en", "en"]


def test_split_disjoint_deterministic(wndir):
    syn = [wn.Synset(i, "noun", (f"w{i}",), f"g{i}", (f"e{i}",), ()) for i in range(100)]
    a = wn.split_synsets(syn, fit_fraction=0.5, dev_fraction=0.2, random_state=3)
    b = wn.split_synsets(list(reversed(syn)), fit_fraction=0.5, dev_fraction=0.2, random_state=3)
    assert [len(p) for p in a] == [50, 20, 30]
    ids = [{s.offset for s in part} for part in a]
    assert not (ids[0] & ids[1]) and not (ids[0] & ids[2]) and not (ids[1] & ids[2])
    assert set().union(*ids) == set(range(100))
    assert a == b  # independent of the input order
    c = wn.split_synsets(syn, fit_fraction=0.5, dev_fraction=0.2, random_state=4)
    assert a.fit != c.fit
    with pytest.raises(ValueError, match="fit_fraction"):
        wn.split_synsets(syn, fit_fraction=0.9, dev_fraction=0.2)
    with pytest.raises(ValueError, match="duplicates"):
        wn.split_synsets(syn + syn[:1], fit_fraction=0.5, dev_fraction=0.1)
    with pytest.raises(TypeError, match="synsets"):
        wn.split_synsets(["x"], fit_fraction=0.5, dev_fraction=0.1)


def test_errors(tmp_path, wndir, monkeypatch):
    with pytest.raises(FileNotFoundError, match="apt-get install wordnet-base"):
        wn.read_synsets("noun", wordnet_dir=tmp_path / "nowhere")
    monkeypatch.setenv("CROSSEMBED_WORDNET_DIR", str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match="wordnet-base"):
        wn.read_synsets("noun")
    monkeypatch.setenv("CROSSEMBED_WORDNET_DIR", str(wndir))
    assert len(wn.read_synsets("noun")) == 5
    with pytest.raises(FileNotFoundError, match="data.adv"):
        wn.read_synsets("adv")
    with pytest.raises(ValueError, match="pos"):
        wn.read_synsets("pronoun", wordnet_dir=wndir)
    with pytest.raises(TypeError, match="pos"):
        wn.read_synsets(3, wordnet_dir=wndir)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "data.noun").write_text("00001740 03 n zz entity | x\n")
    with pytest.raises(ValueError, match="malformed"):
        wn.read_synsets("noun", wordnet_dir=bad)


def test_retrieval_task_validation():
    with pytest.raises(ValueError, match="outside"):
        RetrievalTask("t", ["q"], ["d"], [(1,)])
    with pytest.raises(ValueError, match="one entry per query"):
        RetrievalTask("t", ["q", "r"], ["d"], [(0,)])
    assert RetrievalTask("t", ["q", "r"], ["d"], [(0,), (0,)]).languages == ["en", "en"]


# ---------------------------------------------------------------- FreeDict
from experiments import freedict as fd  # noqa: E402

_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def b64(n: int) -> str:
    s = ""
    while True:
        s = _B64[n % 64] + s
        n //= 64
        if n == 0:
            return s


DEU_ENTRIES = [
    ("00databaseinfo", "This is a test dictionary\n"),
    (
        "hund",
        "Hund /hˈʊnt/ <masc, n, sg>\n [zool.] dog <n>, dawg <n>\n         Note: American speech\n"
        '      "einen Hund abrichten"  - train a dog\n see: {Hunde}, {Haushund}\n\n',
    ),
    ("katze", "Katze /kˈatsə/ <fem, n, sg>\n1. cat <n>\n2. puss (informal), pussy\n   Synonym: {Mieze}\n"),
    ("laufen", "laufen /lˈaʊfən/ <v>\nrun; walk\n"),
    ("der hund bellt", "Der Hund bellt. /x/\nThe dog barks.\n"),
    ("aster", "Aster <fem, n>\naster\n"),
    ("leer", "Leer /x/ <n>\n"),  # no translation: dropped
]


def write_dictd(folder, stem, entries):
    text = b""
    index = []
    for word, body in entries:
        data = body.encode("utf-8")
        index.append(f"{word}\t{b64(len(text))}\t{b64(len(data))}")
        text += data
    index.append(f"hunde\t{index[1].split(chr(9))[1]}\t{index[1].split(chr(9))[2]}")  # a second word, same entry
    (folder / f"{stem}.index").write_text("\n".join(index) + "\n", encoding="utf-8")
    (folder / f"{stem}.dict.dz").write_bytes(gzip.compress(text))


@pytest.fixture
def dictdir(tmp_path, monkeypatch):
    monkeypatch.setenv("CROSSEMBED_CACHE", str(tmp_path / "cache"))
    d = tmp_path / "dictd"
    d.mkdir()
    write_dictd(d, "freedict-deu-eng", DEU_ENTRIES)
    return d


def test_read_freedict(dictdir):
    entries = fd.read_freedict("german", dictd_dir=dictdir)
    heads = [e.headword for e in entries]
    assert heads == ["Hund", "Katze", "laufen", "Der Hund bellt.", "Aster"]  # metadata, empty, duplicate dropped
    hund = entries[0]
    assert hund.language == "de" and hund.pos == ("masc", "n", "sg") and hund.is_noun
    assert hund.translations == ("dog", "dawg")  # notes, examples and see-also skipped
    assert entries[1].translations == ("cat", "puss (informal)", "pussy")
    assert entries[2].translations == ("run", "walk") and not entries[2].is_noun
    assert entries[3].translations == ("The dog barks.",)
    single = fd.read_freedict("de", single_word=True, nouns_only=True, dictd_dir=dictdir)
    assert [e.headword for e in single] == ["Hund", "Katze", "Aster"]
    # the second read comes from the on-disk copy and agrees
    assert fd.read_freedict("de", single_word=True, nouns_only=True, dictd_dir=dictdir) == single


def test_disk_copy_corruption_is_reparsed(dictdir, tmp_path):
    first = fd.read_freedict("de", dictd_dir=dictdir)
    copies = list((tmp_path / "cache" / "freedict").glob("*.json.gz"))
    assert len(copies) == 1
    copies[0].write_bytes(copies[0].read_bytes()[:-9] + b"garbage!!")
    assert fd.read_freedict("de", dictd_dir=dictdir) == first


def test_translation_pairs(dictdir):
    pairs = fd.translation_pairs("de", dictd_dir=dictdir)
    assert ("Hund", "dog") in pairs and ("Katze", "cat") in pairs
    assert ("Aster", "aster") not in pairs  # same spelling: not a translation test
    assert all(" " not in a and " " not in b for a, b in pairs)
    assert ("laufen", "run") in pairs
    assert ("laufen", "run") not in fd.translation_pairs("de", nouns_only=True, dictd_dir=dictdir)


def test_translation_task(dictdir, wndir):
    # WordNet nouns of the fixture: entity, physical entity/thing, Hegira, big cat, stub; add dog and cat
    extra = [
        '00003000 05 n 01 dog 0 001 @ 00001930 n 0000 | a domesticated canid; "the dog barked"  ',
        "00003100 05 n 02 cat 0 puss 0 001 @ 00001930 n 0000 | a small feline  ",
    ]
    with open(wndir / "data.noun", "a") as fh:
        fh.write("\n".join(extra) + "\n")
    task = fd.translation_task(["de", "en"], n_per_language=10, n_distractors=1, dictd_dir=dictdir, wordnet_dir=wndir)
    relevant = {q: [task.documents[j] for j in r] for q, r in zip(task.queries, task.relevant)}
    de = [q for q, lang in zip(task.queries, task.languages) if lang == "de"]
    assert sorted(de) == ["Hund", "Katze"]
    assert relevant["Hund"] == ["a domesticated canid"] and relevant["Katze"] == ["a small feline"]
    en = [q for q, lang in zip(task.queries, task.languages) if lang == "en"]
    assert "dog" in en and "entity" in en and "physical entity" not in en
    assert len(task.documents) == len(set(task.documents))
    again = fd.translation_task(["de", "en"], n_per_language=10, n_distractors=1, dictd_dir=dictdir, wordnet_dir=wndir)
    assert again == task  # deterministic
    with pytest.raises(ValueError, match="language"):
        fd.translation_task(["xx"], dictd_dir=dictdir, wordnet_dir=wndir)
    with pytest.raises(ValueError, match="n_per_language"):
        fd.translation_task(["de"], n_per_language=0, dictd_dir=dictdir, wordnet_dir=wndir)


def test_freedict_missing(tmp_path):
    with pytest.raises(FileNotFoundError, match="apt-get install dict-freedict-fra-eng"):
        fd.read_freedict("fr", dictd_dir=tmp_path)
    with pytest.raises(ValueError, match="language"):
        fd.read_freedict("klingon", dictd_dir=tmp_path)


# ---------------------------------------------------------------- bundled
def test_bundled_wordnet():
    from crossembed.data import load_bundled_wordnet

    syn = load_bundled_wordnet()
    assert len(syn) == 1500
    assert all(isinstance(s, wn.Synset) and s.pos == "noun" and s.gloss and s.examples and s.lemmas for s in syn)
    assert [s.offset for s in syn] == sorted({s.offset for s in syn})
    split = wn.split_synsets(syn, fit_fraction=0.5, dev_fraction=0.1, random_state=0)
    assert [len(p) for p in split] == [750, 150, 600]
    from importlib import resources

    licence = resources.files("crossembed.data.bundled").joinpath("LICENSE-WordNet.txt").read_text()
    assert "WordNet 3.0 Copyright 2006 by Princeton University" in licence


def test_bundled_words():
    from importlib import resources

    from crossembed.data import load_bundled_wordnet
    from crossembed.data.bundled import load_bundled_words

    words = load_bundled_words()
    offsets = {s.offset for s in load_bundled_wordnet()}
    assert len(words) == 1200
    assert {lang: sum(1 for _, l, _ in words if l == lang) for lang in ("en", "de", "fr", "es")} == dict.fromkeys(
        ("en", "de", "fr", "es"), 300
    )
    assert all(w and 1 <= len(offs) <= 2 and set(offs) <= offsets for w, _, offs in words)
    licence = resources.files("crossembed.data.bundled").joinpath("LICENSE-FreeDict.txt").read_text()
    assert "GPL-3+" in licence and "freedict.org" in licence


@pytest.mark.slow
def test_real_wordnet_and_freedict():
    try:
        nouns = wn.read_synsets("noun")
    except FileNotFoundError:
        pytest.skip("wordnet-base not installed")
    assert len(nouns) == 82115
    assert 8700 <= len(wn.synsets_with_examples("noun")) <= 8800
    try:
        task = fd.translation_task(["en", "fr", "es"], n_per_language=50)
    except FileNotFoundError:
        pytest.skip("FreeDict dictionaries not installed")
    assert len(task) == 150 and set(task.languages) == {"en", "fr", "es"}


def test_wordnet_task_parts_of_speech(wndir):
    from experiments.tasks import wordnet_task

    noun = wordnet_task(wordnet_dir=wndir, fit_fraction=0.5)
    verb = wordnet_task(wordnet_dir=wndir, pos="verb", fit_fraction=0.5)
    assert noun.name == "wordnet-example-gloss" and verb.name == "wordnet-verb-example-gloss"
    # only the verb with an example is a query; the fit pairs and the evaluated queries are disjoint
    assert verb.task.queries == ["I can breathe better"]
    assert len(verb.fit_pairs) + len(verb.eval_queries) == 1
    with pytest.raises(ValueError, match="pos"):
        wordnet_task(wordnet_dir=wndir, pos="adj")
