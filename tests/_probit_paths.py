"""The agreement every ProbitDocs storage owes: top_k, rerank and the dense scores give the same bits."""

import numpy as np


def assert_paths_agree(docs, mu_q, v_q, k):
    """top_k, rerank over every doc and the dense scores give the same bits, for 1-3 threads."""
    scores, idx = docs.top_k(mu_q, v_q, k)
    dense = docs.scores(mu_q, v_q)
    np.testing.assert_array_equal(np.take_along_axis(dense, idx, axis=1), scores)
    everything = np.tile(np.arange(docs.n), (len(mu_q), 1))
    r_scores, r_idx = docs.top_k(mu_q, v_q, k, candidates=everything)
    np.testing.assert_array_equal(r_scores, scores)
    np.testing.assert_array_equal(r_idx, idx)
    for t in (1, 2, 3):
        s_t, i_t = docs.top_k(mu_q, v_q, k, num_threads=t)
        np.testing.assert_array_equal(s_t, scores)
        np.testing.assert_array_equal(i_t, idx)
        np.testing.assert_array_equal(docs.scores(mu_q, v_q, num_threads=t), dense)
    return scores, idx, dense
