"""Small generated linking problems shared by the tests/test_linking_*.py files."""

import numpy as np

from crossembed.linking.protocol import make_partial_overlap


def rotated_pair(n, *, latent=16, dim_a=32, dim_b=24, noise=0.05, seed=0):
    """A shared Gaussian latent placed in two spaces by random isometries, plus noise."""
    rng = np.random.default_rng(seed)
    Z = rng.standard_normal((n, latent))

    def embed(dim):
        Q, _ = np.linalg.qr(rng.standard_normal((dim, latent)))
        return (Z @ Q.T + noise * rng.standard_normal((n, dim))).astype(np.float32)

    return embed(dim_a), embed(dim_b)


def linking_problem(n=600, *, alpha=0.3, n_seeds=15, noise=0.05, seed=0, **kw):
    XA, XB = rotated_pair(n, noise=noise, seed=seed, **kw)
    split = make_partial_overlap(n, alpha=alpha, n_seeds=n_seeds, random_state=seed)
    return XA[split.rows_a], XB[split.rows_b], split
