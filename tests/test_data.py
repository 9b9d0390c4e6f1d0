"""crossembed.data: WordNet / FreeDict parsers on small generated files, bundled sample."""
from __future__ import annotations

import gzip

import pytest

from crossembed.data import wordnet as wn
from crossembed.data.tasks import RetrievalTask

LICENCE = "  1 This software and database is being provided to you, the LICENSEE, by  \n  2 Princeton University under the following license.  \n"
NOUN_LINES = [
    "00001740 03 n 01 entity 0 001 ~ 00001930 n 0000 | that which is perceived or known  ",
    "00001930 03 n 02 physical_entity 0 thing 1 002 @ 00001740 n 0000 + 00692347 v 0101 | an entity that has "
    'physical existence; "a thing of beauty"; "the physical entity moved"  ',
    "00002000 03 n 01 Hegira 0 001 @i 00001930 n 0000 | the flight of Muhammad (called \"the Hegira\") in 622  ",
    '00002100 03 n 01 big_cat 0 001 @ 00001930 n 0000 | a large cat: "lions are big cats"  ',
    "00002200 03 n 01 stub 0 000 | "
    ,
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
    assert pairs == [("a thing of beauty", "an entity that has physical existence"), ("lions are big cats", "a large cat")]
    assert len(wn.example_gloss_pairs("noun", wordnet_dir=wndir, all_examples=True)) == 3
    gl = wn.gloss_lemma_pairs("noun", wordnet_dir=wndir)
    assert ("that which is perceived or known", "entity") in gl and all(g for g, _ in gl)
    task = wn.example_gloss_task(pos="noun", wordnet_dir=wndir)
    assert isinstance(task, RetrievalTask) and len(task) == 2
    assert task.relevance_matrix().tolist() == [[True, False], [False, True]]
    assert task.languages == ["en", "en"]


def test_split_disjoint_deterministic(wndir):
    syn = [wn.Synset(i, "noun", (f"w{i}",), f"g{i}", (f"e{i}",), ()) for i in range(100)]
    a = wn.split_synsets(syn, fit_fraction=0.5, dev_fraction=0.2, seed=3)
    b = wn.split_synsets(list(reversed(syn)), fit_fraction=0.5, dev_fraction=0.2, seed=3)
    assert [len(p) for p in a] == [50, 20, 30]
    ids = [{s.offset for s in part} for part in a]
    assert not (ids[0] & ids[1]) and not (ids[0] & ids[2]) and not (ids[1] & ids[2])
    assert set().union(*ids) == set(range(100))
    assert a == b  # independent of the input order
    c = wn.split_synsets(syn, fit_fraction=0.5, dev_fraction=0.2, seed=4)
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
    t = RetrievalTask("t", ["q", "r"], ["d"], [(0,), (0,)], ["en", "de"])
    assert t.by_language("de").queries == ["r"]
