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


def linear_problem(n=1200, *, d=24, d_b=32, alpha=0.4, noise=0.15, seed=0):
    """Unit rows of a noisy linear pair (B = A M up to noise, dimensions differ) split at overlap ``alpha``;
    returns the seed's generator too, for what the caller draws next."""
    rng = np.random.default_rng(seed)
    Z = rng.standard_normal((n, d))
    M = rng.standard_normal((d, d_b))
    XA = Z + noise * rng.standard_normal(Z.shape)
    XB = Z @ M + noise * rng.standard_normal((n, d_b)) * np.linalg.norm(M, axis=0)
    split = make_partial_overlap(n, alpha=alpha, n_seeds=15, random_state=seed)
    unit = lambda X: (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32)  # noqa: E731
    return unit(XA[split.rows_a]), unit(XB[split.rows_b]), split, Z, rng


def clustered_pair(n=480, dim=16, noise=0.02, seed=0):
    """Clusters of unequal sizes at random places; B is A rotated, plus noise, rows shuffled."""
    rng = np.random.default_rng(seed)
    sizes = np.array([3, 5, 8, 12, 20, 32]) * n // 80
    centres = rng.normal(size=(len(sizes), dim)) * 3
    X = np.concatenate([c + rng.normal(size=(s, dim)) for c, s in zip(centres, sizes)])
    Q, _ = np.linalg.qr(rng.normal(size=(dim, dim)))
    Y = X @ Q + noise * rng.normal(size=X.shape)
    order = rng.permutation(len(X))
    truth = np.stack([np.arange(len(X)), np.argsort(order)], 1)
    return X.astype(np.float32), Y[order].astype(np.float32), truth
