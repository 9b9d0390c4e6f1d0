"""UECEnsemble.similarity is symmetric by default; the query -> document form is asked for by roles."""

import numpy as np
import pytest

from _word_encoder import WordEncoder
from crossembed.uec import (
    EmbeddingMixing,
    LaplaceEmbedder,
    ProbitScoring,
    ScoreMixing,
    UECEnsemble,
    UniformRouting,
)
from crossembed.uec.ablations import BetaCosineScoring

WORDS = [f"{a} {b}" for a in ("red", "green", "blue", "dark", "pale") for b in ("apple", "pear", "plum", "fig")]


class ShiftedEncoder(WordEncoder):
    """A second toy model: the characters one slot further, and a role-dependent offset (as e5's prefixes)."""

    def encode(self, texts, *, batch_size=64, show_progress_bar=False, role="query"):
        out = np.roll(super().encode(texts), 1, axis=1)
        return out + (0.3 if role == "passage" else 0.0)


@pytest.fixture(scope="module")
def ensemble():
    pairs = [(w, w.split()[1] + " of colour " + w.split()[0]) for w in WORDS]
    embedders = [
        LaplaceEmbedder(enc, batch_size=8, prior_precision=2.0).fit(pairs, show_progress_bar=False)
        for enc in (WordEncoder(), ShiftedEncoder())
    ]
    return UECEnsemble(embedders)


A = ["red apple", "pale fig", "green plum"]
B = ["dark pear", "red plum", "blue apple", "pale apple"]


def test_similarity_of_texts_is_symmetric_by_default(ensemble):
    assert ensemble.mixing.query_head and ensemble.mixing.hubness > 0  # the retrieval form is asymmetric
    ab, ba = ensemble.similarity(A, B), ensemble.similarity(B, A)
    assert ab.shape == (3, 4)
    np.testing.assert_allclose(ab, ba.T, rtol=1e-6, atol=1e-7)
    same = ensemble.similarity(A, A)
    np.testing.assert_allclose(same, same.T, rtol=1e-6, atol=1e-7)
    assert (np.argmax(same, axis=1) == np.arange(3)).all()


def test_the_retrieval_form_is_explicit_and_asymmetric(ensemble):
    qp = ensemble.similarity(A, B, roles=("query", "passage"))
    q = ensemble.encode(A, role="query", show_progress_bar=False)
    d = ensemble.encode(B, role="passage", show_progress_bar=False)
    np.testing.assert_array_equal(qp, ensemble.similarity(q, d))  # Gaussians are scored as given
    back = ensemble.similarity(B, A, roles=("query", "passage"))
    assert np.abs(qp - back.T).max() > 1e-3
    with pytest.raises(ValueError, match="roles"):
        ensemble.similarity(A, B, roles=("query", "document"))
    with pytest.raises(TypeError, match="roles"):
        ensemble.similarity(A, B, roles="query")


def test_the_symmetric_form_is_the_mean_of_the_two_retrieval_directions(ensemble):
    q = {t: ensemble.encode(t, role="query", show_progress_bar=False) for t in (tuple(A), tuple(B))}
    d = {t: ensemble.encode(t, role="passage", show_progress_bar=False) for t in (tuple(A), tuple(B))}
    forward = ensemble.similarity(q[tuple(A)], d[tuple(B)])
    backward = ensemble.similarity(q[tuple(B)], d[tuple(A)])
    np.testing.assert_allclose(ensemble.similarity(A, B), 0.5 * (forward + backward.T), rtol=1e-6, atol=1e-7)
    # Gaussians are scored as given, in either order: the scoring itself is symmetric
    np.testing.assert_allclose(
        ensemble.similarity(q[tuple(A)], d[tuple(B)]), ensemble.similarity(d[tuple(B)], q[tuple(A)]).T, rtol=1e-6
    )


@pytest.mark.parametrize(
    "mixing, scoring",
    [
        (EmbeddingMixing(), ProbitScoring()),
        (ScoreMixing(hubness=0.0, query_head=False), ProbitScoring()),
        (ScoreMixing(), ProbitScoring(use_variance=False)),
        (EmbeddingMixing(), BetaCosineScoring(0.5)),
    ],
)
def test_symmetric_under_every_mixing(ensemble, mixing, scoring):
    ens = UECEnsemble(ensemble.embedders, mixing=mixing, scoring=scoring)
    np.testing.assert_allclose(ens.similarity(A, B), ens.similarity(B, A).T, rtol=1e-5, atol=1e-6)
    uni = UECEnsemble(ensemble.embedders, routing=UniformRouting(), mixing=mixing, scoring=scoring)
    np.testing.assert_allclose(uni.similarity(A, B), uni.similarity(B, A).T, rtol=1e-5, atol=1e-6)


def test_a_similarity_that_was_not_symmetric_would_fail(ensemble):
    """The check above can fail: the retrieval form (query heads, hubness) breaks it."""
    qp = ensemble.similarity(A, A, roles=("query", "passage"))
    with pytest.raises(AssertionError):
        np.testing.assert_allclose(qp, qp.T, rtol=1e-6, atol=1e-7)
