"""UNCHA loss terms on small hand-checked cases."""

import math

import pytest
import torch
import torch.nn.functional as F

from crossembed.hyperbolic import lorentz as L
from crossembed.hyperbolic.losses import (
    MODEL_NAMES,
    Batch,
    LossConfig,
    calibration_loss,
    contrastive_loss,
    entailment_loss,
    preset,
    total_loss,
    uncertainty_temperature,
)

torch.set_num_threads(1)
D64 = torch.float64


def test_contrastive_single_positive_hand_value_and_cross_entropy():
    s = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=D64)
    eye = torch.eye(2, dtype=torch.bool)
    assert contrastive_loss(s, eye, 1.0).item() == pytest.approx(math.log(1 + math.exp(-1)))
    g = torch.Generator().manual_seed(0)
    s = torch.randn(5, 7, generator=g, dtype=D64)
    tgt = torch.tensor([0, 3, 6, 2, 2])
    pos = F.one_hot(tgt, 7).bool()
    assert contrastive_loss(s, pos, 0.07).item() == pytest.approx(F.cross_entropy(s / 0.07, tgt).item())


def test_contrastive_multi_positive_and_per_row_temperature():
    s = torch.zeros(1, 3, dtype=D64)
    pos = torch.tensor([[True, True, False]])
    assert contrastive_loss(s, pos, 0.5).item() == pytest.approx(-math.log(2 / 3))
    s = torch.tensor([[2.0, 0.0], [2.0, 0.0]], dtype=D64)
    pos = torch.tensor([[True, False], [True, False]])
    tau = torch.tensor([1.0, 2.0], dtype=D64)
    expect = 0.5 * (math.log(1 + math.exp(-2)) + math.log(1 + math.exp(-1)))
    assert contrastive_loss(s, pos, tau).item() == pytest.approx(expect)
    with pytest.raises(ValueError, match="at least one"):
        contrastive_loss(s, torch.zeros_like(pos), 1.0)


def test_entailment_inside_and_outside_cone():
    p = torch.tensor([[1.0, 0.0]], dtype=D64)
    along = torch.tensor([[3.0, 0.0]], dtype=D64)  # on the cone axis: phi = 0
    side = torch.tensor([[1.0, 2.0]], dtype=D64)
    assert entailment_loss(p, along, L.Lorentz(1.0), eta=0.7, alpha=0.1).item() == pytest.approx(0.0, abs=1e-3)
    phi = L.exterior_angle(p, side).item()
    omega = math.asin(0.2)  # 2K / |p| with K = 0.1
    assert phi > 0.7 * omega  # outside the (shrunk) cone: hinge active
    r = entailment_loss(p, side, L.Lorentz(1.0), eta=0.7, alpha=0.1).item()
    assert r == pytest.approx(phi - 0.7 * omega + 0.1 * phi)
    # a wide cone (eta large) contains it: only the linear alpha * phi term remains
    r_in = entailment_loss(p, side, L.Lorentz(1.0), eta=100.0, alpha=0.1).item()
    assert r_in == pytest.approx(0.1 * phi)
    assert entailment_loss(p, side, L.Lorentz(1.0), eta=100.0, alpha=0.0).item() == 0.0


def test_calibration_minimum_at_log_r_and_entropy_value():
    r = torch.tensor([1.0, 2.0, 0.5], dtype=D64)
    u = torch.log(r).clone().requires_grad_()
    loss = calibration_loss(r, u, entropy=False)
    loss.backward()
    torch.testing.assert_close(u.grad, torch.zeros(3, dtype=D64), atol=1e-12, rtol=0)
    assert calibration_loss(torch.ones(2, dtype=D64), torch.zeros(2, dtype=D64), entropy=False).item() == pytest.approx(
        0.5
    )
    # constant u: softmax is uniform, entropy log(n)
    u = torch.full((4,), 0.3, dtype=D64)
    r = torch.ones(4, dtype=D64)
    with_h = calibration_loss(r, u, entropy=True, entropy_weight=0.5).item()
    without = calibration_loss(r, u, entropy=False).item()
    assert with_h - without == pytest.approx(0.5 * math.log(4))


def test_entropy_term_spreads_uncertainties():
    # minimising the entropy part moves u away from its mean (against collapse)
    grads = []
    for entropy in (True, False):
        u = torch.tensor([0.2, 0.3, 0.4], dtype=D64, requires_grad=True)
        calibration_loss(torch.zeros(3, dtype=D64), u, entropy=entropy).backward()
        grads.append(u.grad)
    g = grads[0] - grads[1]  # gradient of the entropy part alone
    assert g[0] > 0 and g[2] < 0  # descent lowers the smallest u and raises the largest


def test_uncertainty_temperature():
    parts = torch.tensor([[0.0, 0.0], [100.0, 0.0]], dtype=D64, requires_grad=True)
    tau = uncertainty_temperature(parts, torch.tensor(0.06, dtype=D64))
    assert tau[0].item() == pytest.approx(math.sqrt(2) * 0.06)
    assert tau[1].item() == pytest.approx(0.06, rel=1e-6)
    assert not tau.requires_grad  # u is detached


def _batch(seed=0, D=4):
    g = torch.Generator().manual_seed(seed)
    B, P, U = 3, 5, 3

    def r(n):
        return (torch.randn(n, D, generator=g, dtype=D64) * 0.7).requires_grad_()

    part_text = torch.tensor([0, 1, 2, 0, 1])
    part_scene = torch.tensor([0, 0, 1, 2, 2])
    scene_has = torch.zeros(B, U, dtype=torch.bool)
    scene_has[part_scene, part_text] = True
    return Batch(r(B), r(B), r(P), r(U), part_text, part_scene, torch.tensor([0, 1, 2]), scene_has)


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_total_loss_every_preset_is_finite_and_differentiable(name):
    b = _batch()
    c = torch.tensor(1.0, dtype=D64, requires_grad=True)
    taus = [torch.tensor(t, dtype=D64, requires_grad=True) for t in (0.07, 0.05, 0.06)]
    out = total_loss(b, preset(name), manifold=L.Lorentz(c), tau_g=taus[0], tau_l=taus[1], tau_gl=taus[2])
    out["loss"].backward()
    assert torch.isfinite(out["loss"])
    assert torch.isfinite(b.image.grad).all() and torch.isfinite(b.text.grad).all()
    if name == "clip":
        assert set(out) == {"global", "contrastive", "loss"}
        assert b.image_part.grad is None
    else:
        assert c.grad is not None and torch.isfinite(c.grad)


def test_total_loss_terms_switch_as_documented():
    kw = dict(manifold=L.Lorentz(1.0), tau_g=0.07, tau_l=0.05, tau_gl=0.06)
    b = _batch(1)
    full = total_loss(b, preset("uncha"), **kw)
    no_h = total_loss(b, preset("uncha-no-entropy"), **kw)
    # the only difference is the two batch entropies over the proper parts (scene 1's only part,
    # row 2, is the scene itself and is left out of the part -> whole terms)
    proper = torch.tensor([0, 1, 3, 4])
    ip_u, tp_u = L.uncertainty(b.image_part[proper]), L.uncertainty(b.text_part[b.part_text][proper])

    def H(u):
        return -(torch.softmax(u, 0) * torch.log_softmax(u, 0)).sum()

    diff = (full["loss"] - no_h["loss"]).item()
    assert diff == pytest.approx(0.2 * (H(ip_u) + H(tp_u)).item())
    meru = total_loss(b, preset("meru"), **kw)
    assert set(meru) == {"global", "contrastive", "entailment", "loss"}
    # MERU's entailment is the plain text->image hinge
    r = entailment_loss(b.text, b.image, L.Lorentz(1.0), eta=0.7, alpha=0.0).mean()
    assert meru["entailment"].item() == pytest.approx(r.item())
    assert meru["loss"].item() == pytest.approx((meru["global"] + 0.2 * r).item())


def test_sole_part_equal_to_its_scene_gives_no_gradient_blow_up():
    # a one-item scene: its part image is pixel-for-pixel the scene, so the embeddings coincide
    b = _batch(2)
    with torch.no_grad():
        b.image_part[2] = b.image[1]
    kw = dict(manifold=L.Lorentz(1.0), tau_g=0.07, tau_l=0.05, tau_gl=0.06)
    total_loss(b, preset("uncha"), **kw)["loss"].backward()
    assert float(b.image_part.grad.norm()) < 1e3 and float(b.image.grad.norm()) < 1e3
    # every scene with a single part: no proper part, no intra-modal pair and no calibration
    g = torch.Generator().manual_seed(4)
    one = Batch(
        *(torch.randn(n, 4, generator=g, dtype=D64) * 0.7 for n in (3, 3, 3, 3)),
        part_text=torch.arange(3),
        part_scene=torch.arange(3),
        scene_caption=torch.arange(3),
        scene_has=torch.eye(3, dtype=torch.bool),
    )
    out = total_loss(one, preset("uncha"), **kw)
    assert torch.isfinite(out["loss"]) and "calibration" not in out


def test_config_validation():
    with pytest.raises(ValueError, match="geometry"):
        LossConfig(geometry="sphere")
    with pytest.raises(ValueError, match="lorentz"):
        LossConfig(geometry="euclidean")
    with pytest.raises(ValueError, match="model must be"):
        preset("bert")


def test_cli_model_names_match_the_presets():
    from crossembed.cli import hyperbolic as commands
    from crossembed.hyperbolic.losses import MODEL_NAMES

    assert commands.MODEL_NAMES == MODEL_NAMES
