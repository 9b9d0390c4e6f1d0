"""UECEnsemble as an MTEB v2 encoder, on a tiny in-memory retrieval task (slow: importing mteb takes ~10 s).

No downloads: the task's data are built here and the encoders are bag-of-words callables.
"""

import numpy as np
import pytest

pytestmark = pytest.mark.slow

WORDS = "river bank money loan water fish tree leaf green red car road wheel engine".split()
DOCS = {
    "d0": "river water fish",
    "d1": "bank money loan",
    "d2": "tree leaf green",
    "d3": "car road wheel engine",
}
QUERIES = {"q0": "fish in the river", "q1": "a loan from the bank", "q2": "green leaf", "q3": "engine of a car"}


def _bag(seed):
    vecs = np.random.default_rng(seed).normal(size=(len(WORDS), 16))

    def encode(texts):
        out = np.full((len(texts), 16), 1e-3)
        for i, t in enumerate(texts):
            for w in t.split():
                if w in WORDS:
                    out[i] += vecs[WORDS.index(w)]
        return out

    return encode


@pytest.fixture(scope="module")
def model(request):
    if "slow" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("run with `pytest -m slow` (imports mteb)")
    pytest.importorskip("mteb")
    from crossembed.encoders import CallableEncoder
    from crossembed.uec import LaplaceEmbedder, UECEnsemble
    from crossembed.uec.mteb_adapter import UECMTEBEncoder

    pairs = [(q, DOCS["d" + k[1:]]) for k, q in QUERIES.items()] * 4
    embedders = []
    for seed in (0, 1):
        enc = CallableEncoder(_bag(seed), name=f"bag{seed}", dim=16)
        lap = LaplaceEmbedder(enc, prior_precision=1.0, batch_size=4)
        embedders.append(lap.fit(pairs, show_progress_bar=False))
    return UECMTEBEncoder(UECEnsemble(embedders), name="crossembed/uec-test")


def _task():
    from datasets import Dataset
    from mteb.abstasks.retrieval import AbsTaskRetrieval
    from mteb.abstasks.retrieval_dataset_loaders import RetrievalSplitData
    from mteb.abstasks.task_metadata import TaskMetadata

    class TinyRetrieval(AbsTaskRetrieval):
        metadata = TaskMetadata(
            type="Retrieval",
            name="CrossembedTinyRetrieval",
            main_score="ndcg_at_10",
            description="Four queries, four documents, built in the test (no download).",
            reference="https://example.org/crossembed",
            dataset={"path": "NA", "revision": "NA"},
            category="t2t",
            eval_splits=["test"],
            eval_langs=["eng-Latn"],
            date=("2026-01-01", "2026-01-01"),
            dialect=["Written"],
            domains=[],
            task_subtypes=[],
            license="cc-by-4.0",
            annotations_creators="derived",
            modalities=["text"],
            sample_creation="found",
            bibtex_citation="",
        )

        def load_data(self, num_proc=None, **kwargs):
            split = RetrievalSplitData(
                queries=Dataset.from_list([{"id": k, "text": v} for k, v in QUERIES.items()]),
                corpus=Dataset.from_list([{"id": k, "text": v, "title": ""} for k, v in DOCS.items()]),
                relevant_docs={q: {"d" + q[1:]: 1} for q in QUERIES},
                top_ranked=None,
            )
            self.dataset = {"default": {"test": split}}
            self.data_loaded = True

    return TinyRetrieval()


def test_uec_runs_as_an_mteb_retrieval_model(model):
    import mteb

    assert isinstance(model, mteb.models.models_protocols.EncoderProtocol)
    results = mteb.evaluate(model, [_task()], cache=None, show_progress_bar=False)
    score = results.task_results[0].scores["test"][0]["ndcg_at_10"]
    assert score == pytest.approx(1.0)


def test_mteb_similarity_is_the_ensembles(model):
    queries, docs = list(QUERIES.values()), list(DOCS.values())
    q = model.encode([{"text": queries}], prompt_type="query")
    d = model.encode([{"text": docs}], prompt_type="document")
    D = model.ensemble.dim
    assert q.shape == (4, 2 * D) and (q[:, D:] >= 0).all()  # [mean | var]
    # retrieval keeps the query -> document form
    ref = model.ensemble.similarity(queries, docs, roles=("query", "passage"))
    np.testing.assert_allclose(model.similarity(q, d), ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(model.similarity_pairwise(q, d), np.diag(ref), rtol=1e-5, atol=1e-6)
    # symmetric tasks (no prompt type): text against text as the ensemble's default similarity (both
    # retrieval directions averaged: each text carries its query and its passage encoding), either way round
    s1 = model.encode([{"text": queries}], prompt_type=None)
    s2 = model.encode([{"text": docs}], prompt_type=None)
    assert s1.shape == (4, 4 * D)
    np.testing.assert_allclose(s1[:, : 2 * D], q, rtol=1e-6)
    want = model.ensemble.similarity(queries, docs)
    np.testing.assert_allclose(model.similarity(s1, s2), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(model.similarity(s2, s1), want.T, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(model.similarity_pairwise(s1, s2), np.diag(want), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="different kinds"):
        model.similarity(s1, d)
    assert model.mteb_model_meta.name == "crossembed/uec-test"
    with pytest.raises(ValueError, match="columns"):
        model.similarity(q[:, :D], d)
    with pytest.raises(ValueError, match="prompt_type"):
        model.encode([{"text": queries}], prompt_type="sentence")
    with pytest.raises(TypeError, match="UECEnsemble"):
        type(model)(object())
