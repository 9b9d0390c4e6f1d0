"""LanguageRouting: the rank head discounted by whether each model reads the query (language + probe)."""

import sys

import numpy as np
import pytest

from crossembed._rows import softmax_rows, unit_rows
from crossembed.uec import LanguageRouting, LaplaceEmbedder, RankRouting, UECEnsemble
from crossembed.uec.languages import LangidIdentifier, language_posterior, model_languages
from crossembed.uec.probe import ProbeHead, fit_probe_head, scramble_sample, scramble_texts
from crossembed.uec.routing import CHANCE_LOG_RANK, default_routing, routing_from_config


class FakeIdentifier:
    """Words starting with 'x' are German, the rest English; log scores 0 / -5."""

    languages = ("en", "de", "fi")

    def log_likelihoods(self, texts):
        out = np.full((len(texts), 3), -5.0)
        for i, t in enumerate(texts):
            out[i, 1 if t.startswith("x") else 0] = 0.0
        return out

    def get_config(self):
        return {"kind": "fake"}


def _embedder(seed, *, scrambled=True, D=8, name=None):
    rng = np.random.default_rng(seed)
    A = unit_rows(rng.normal(size=(64, D)))
    P = unit_rows(A + 0.5 * rng.normal(size=(64, D)))
    S = unit_rows(rng.normal(size=(40, D)) + 2.0 * np.eye(D)[0]) if scrambled else None
    return LaplaceEmbedder(name, batch_size=16, prior_precision=2.0).fit_embeddings(A, P, scrambled=S)


@pytest.fixture(scope="module")
def pair():
    return [_embedder(0), _embedder(1)]


def _comps(embedders, n=6, seed=5):
    rng = np.random.default_rng(seed)
    return [e.transform(rng.normal(size=(n, e.dim)).astype(np.float32)) for e in embedders]


TEXTS = ["dog", "xhund", "cat", "xkatze", "tree", "xbaum"]


def test_every_model_multilingual_routes_as_the_rank_head(pair):
    comps = _comps(pair)
    lang = UECEnsemble(pair, routing=LanguageRouting([None, None], identifier=FakeIdentifier()))
    rank = UECEnsemble(pair, routing=RankRouting())
    np.testing.assert_array_equal(lang.coefficients(comps, texts=TEXTS), rank.coefficients(comps))
    # off signals leave the rank head too
    off = UECEnsemble(pair, routing=LanguageRouting([("en",), None], identifier=None, probe=False))
    assert not off.needs_texts
    np.testing.assert_array_equal(off.coefficients(comps), rank.coefficients(comps))


def test_coefficients_follow_the_expected_log_rank(pair):
    comps = _comps(pair)
    routing = LanguageRouting([("en",), None], identifier=FakeIdentifier(), prior=0.6, temperature=0.8)
    ens = UECEnsemble(pair, routing=routing)
    pi = ens.coefficients(comps, texts=TEXTS)
    ll = FakeIdentifier().log_likelihoods(TEXTS)
    p = language_posterior(ll, FakeIdentifier.languages, ["en"], 0.6)
    c0 = p[:, 0] * pair[0].heads_.reads(comps[0])
    t = np.stack([e.heads_.predicted_log_rank(c) for e, c in zip(pair, comps)], axis=1)
    t0 = c0 * t[:, 0] + (1 - c0) * CHANCE_LOG_RANK
    np.testing.assert_allclose(pi, softmax_rows(-np.stack([t0, t[:, 1]], axis=1) / 0.8), rtol=1e-12)
    # the English-only model loses weight on the 'German' words
    german = np.array([t.startswith("x") for t in TEXTS])
    rank = UECEnsemble(pair, routing=RankRouting(0.8)).coefficients(comps)
    assert (pi[german, 0] < rank[german, 0]).all()
    assert (pi[german, 1] - rank[german, 1]).mean() > (pi[~german, 1] - rank[~german, 1]).mean()


def test_chance_log_rank_is_the_mean_log_rank_of_a_random_ranking():
    u = (np.arange(1_000_000) + 0.5) / 1_000_000
    assert CHANCE_LOG_RANK == pytest.approx(np.log1p(1000.0 * u).mean(), rel=1e-6)


def test_language_posterior_tilts_towards_the_fit_languages():
    ll = np.zeros((1, 4))  # an uninformative text
    p = language_posterior(ll, ["en", "de", "fr", "fi"], ["en"], 0.7)
    np.testing.assert_allclose(p, [[0.7, 0.1, 0.1, 0.1]])
    p = language_posterior(np.array([[0.0, np.log(9.0), 0.0, 0.0]]), ["en", "de", "fr", "fi"], ["en", "xx"], 0.5)
    np.testing.assert_allclose(p.sum(), 1.0)
    assert p[0, 1] > p[0, 0]
    # no fit language known: a uniform prior
    np.testing.assert_allclose(language_posterior(np.zeros((1, 2)), ["de", "fr"], ["en"], 0.9), [[0.5, 0.5]])


def test_texts_are_required_and_passed_by_encode(pair):
    comps = _comps(pair)
    ens = UECEnsemble(pair, routing=LanguageRouting([("en",), None], identifier=FakeIdentifier()))
    assert ens.needs_texts
    with pytest.warns(RuntimeWarning, match="texts"):  # routed without the language: the probe still counts
        without = ens.coefficients(comps)
    probe_only = UECEnsemble(pair, routing=LanguageRouting([("en",), None], identifier=None))
    np.testing.assert_array_equal(without, probe_only.coefficients(comps))
    with pytest.raises(ValueError, match="6 strings"):
        ens.combine(comps, texts=TEXTS[:3])
    ens.combine(comps, role="passage")  # documents carry no routing signal: no texts needed

    class Enc:
        name = "toy"

        def encode(self, texts, *, batch_size=64, show_progress_bar=False, role="query"):
            rng = np.random.default_rng(len(texts))
            return rng.normal(size=(len(texts), 8)).astype(np.float32)

    for e in pair:
        e.encoder = Enc()  # setting the encoder drops the loaded one
    try:
        g = ens.encode(TEXTS, show_progress_bar=False)
        np.testing.assert_allclose(g.weights, ens.coefficients(ens.encode_components(TEXTS), texts=TEXTS), atol=1e-6)
    finally:
        for e in pair:
            e.encoder = None


def test_checks_and_config_round_trip(pair):
    with pytest.raises(ValueError, match="2 entries"):
        UECEnsemble(pair, routing=LanguageRouting([("en",)], identifier=None))
    no_probe = [_embedder(0, scrambled=False), _embedder(1, scrambled=False)]
    with pytest.raises(ValueError, match="probe head"):
        UECEnsemble(no_probe, routing=LanguageRouting([("en",), None], identifier=None))
    UECEnsemble(no_probe, routing=LanguageRouting([None, ("en",)], identifier=None, probe=False))
    with pytest.raises(TypeError, match="languages"):
        LanguageRouting("en")
    with pytest.raises(ValueError, match="prior"):
        LanguageRouting([None], identifier=None, prior=1.0)
    r = LanguageRouting([("en",), None], identifier=None, prior=0.6, temperature=2.0)
    back = routing_from_config(r.get_config())
    assert isinstance(back, LanguageRouting) and back.get_config() == r.get_config()
    assert back.languages == (("en",), None) and back.prior == 0.6 and back.identifier is None


def test_default_routing_reads_the_encoder_names(pair):
    assert model_languages("minilm") == ("en",) and model_languages("e5") is None and model_languages(None) is None
    assert type(default_routing([None, "e5"], [e.heads_ for e in pair])) is RankRouting
    assert type(UECEnsemble(pair).routing) is RankRouting  # no names: no metadata, the rank head
    pytest.importorskip("langid")
    r = default_routing(["minilm", "e5"], [e.heads_ for e in pair])
    assert isinstance(r, LanguageRouting) and r.languages == (("en",), None) and r.probe
    assert isinstance(r.identifier, LangidIdentifier)
    no_probe = [_embedder(0, scrambled=False).heads_, pair[1].heads_]
    assert default_routing(["minilm", "e5"], no_probe).probe is False


def test_missing_langid_is_a_clear_import_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "langid", None)
    monkeypatch.setitem(sys.modules, "langid.langid", None)
    with pytest.raises(ImportError, match=r"crossembed\[lang\]"):
        LanguageRouting([("en",), None])
    LanguageRouting([("en",), None], identifier=None)  # the text signal off needs no langid


def test_langid_identifier_reads_sentences():
    pytest.importorskip("langid")
    ident = LangidIdentifier()
    texts = ["the dog sleeps in the garden", "der Hund schläft im Garten", "il cane dorme nel giardino"]
    ll = ident.log_likelihoods(texts)
    assert ll.shape == (3, len(ident.languages))
    best = [ident.languages[i] for i in ll.argmax(axis=1)]
    assert best == ["en", "de", "it"]
    assert ident.log_likelihoods([]).shape == (0, len(ident.languages))
    assert ident.get_config() == {"kind": "langid"}


def test_scrambling_keeps_each_words_letters():
    texts = ["a red-brick house, 12 rooms", "Hund", "ok"]
    out = scramble_texts(texts, random_state=3)
    assert len(out) == 3
    for t, s in zip(texts, out):
        assert len(t) == len(s)
        assert [sorted(w) for w in t.split()] == [sorted(w) for w in s.split()]
        assert [c for c in t if not c.isalpha()] == [c for c in s if not c.isalpha()]
    assert out != texts
    assert scramble_texts(texts, random_state=3) == out  # reproducible
    sample = scramble_sample([f"word{i}abc" for i in range(50)], max_rows=10, random_state=0)
    assert len(sample) == 10


def test_probe_head_separates_real_from_scrambled():
    rng = np.random.default_rng(0)
    real = unit_rows(rng.normal(size=(200, 6)) + 1.5 * np.eye(6)[0])
    fake = unit_rows(rng.normal(size=(100, 6)) - 1.5 * np.eye(6)[0])
    head = fit_probe_head(real, fake)
    assert head.probability(real).mean() > 0.8 and head.probability(fake).mean() < 0.2
    back = ProbeHead.from_array(head.to_array())
    np.testing.assert_array_equal(back.probability(real), head.probability(real))
    # the objective's gradient is the analytic one: the fit is a stationary point
    eps, w = 1e-5, head.to_array()

    def objective(theta):
        X = np.concatenate([real, fake])
        y = np.r_[np.ones(200), -np.ones(100)]
        weight = np.where(y > 0, 0.5 / 200, 0.5 / 100)
        m = y * (X @ theta[:-1] + theta[-1])
        return weight @ np.logaddexp(0, -m) + 0.5 / 300 * theta[:-1] @ theta[:-1]

    grad = [(objective(w + eps * e) - objective(w - eps * e)) / (2 * eps) for e in np.eye(len(w))]
    assert np.abs(grad).max() < 1e-4
    with pytest.raises(ValueError, match="real and one scrambled"):
        fit_probe_head(real, real[:0])


def test_probe_head_is_saved_with_the_embedder(tmp_path, pair):
    e = pair[0]
    path = e.save(tmp_path / "e.cxa")
    back = LaplaceEmbedder.load(path)
    x = _comps(pair)[0]
    np.testing.assert_array_equal(back.heads_.reads(x), e.heads_.reads(x))
    assert LaplaceEmbedder.load(_embedder(2, scrambled=False).save(tmp_path / "n.cxa")).heads_.probe_head is None
    with pytest.raises(ValueError, match="probe head"):
        _embedder(2, scrambled=False).heads_.reads(x)


def test_an_index_saves_and_serves_the_language_routing(tmp_path):
    pytest.importorskip("langid")
    from _word_encoder import WordEncoder
    from crossembed.uec import IndexConfig, UECIndex

    words = [f"{a} {b}" for a in ("red", "green", "blue", "dark") for b in ("apple", "pear", "plum")]
    pairs = [(w, w.split()[1] + " coloured " + w.split()[0]) for w in words]
    embedders = [LaplaceEmbedder(WordEncoder(), batch_size=4, prior_precision=2.0).fit(pairs) for _ in range(2)]
    ens = UECEnsemble(embedders, routing=LanguageRouting([("en",), None]))
    index = UECIndex.build(ens, [p for _, p in pairs], show_progress_bar=False, config=IndexConfig(M=8, rerank=10))
    queries = ["red apple", "der rote Apfel"]
    scores, ids = index.search(queries, 3, exact=True)
    w = ens.encode(queries, show_progress_bar=False).weights
    assert w[1, 1] > w[0, 1]  # the German query leans on the model that reads German
    index.save(tmp_path / "lang.uec")
    back = UECIndex.load(tmp_path / "lang.uec", encoders=[WordEncoder(), WordEncoder()])
    assert back.ensemble.routing.get_config() == ens.routing.get_config()
    assert isinstance(back.ensemble.routing.identifier, LangidIdentifier)
    again, again_ids = back.search(queries, 3, exact=True)
    np.testing.assert_array_equal(again_ids, ids)
    np.testing.assert_allclose(again, scores, rtol=1e-6)
