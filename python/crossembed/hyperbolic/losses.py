"""UNCHA training objective and the baselines it contains (docs/methods.md#uncha-loss).

Every model of the comparison is one :class:`LossConfig`: CLIP, MERU,
HyCoCLIP, UNCHA and the two UNCHA ablations differ only in which terms are
switched on, so one trainer produces all of them.

Conventions: ``p`` entails ``q`` means ``p`` is the more general embedding
(text entails image, part entails whole); it sits closer to the origin and
``q`` must lie in the cone of ``p``. Contrastive scores are ``-distance``
(Lorentz) or cosine similarity (Euclidean CLIP), divided by a temperature.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Dict, Optional, Union

import torch
import torch.nn.functional as F

from crossembed._validation import check_choice
from crossembed.hyperbolic import lorentz as L

__all__ = [
    "LossConfig",
    "PRESETS",
    "MODEL_NAMES",
    "preset",
    "contrastive_loss",
    "entailment_loss",
    "calibration_loss",
    "uncertainty_temperature",
    "Batch",
    "total_loss",
]

MIN_TEMPERATURE = 0.01  # logit scale 1/tau capped at 100


@dataclass(frozen=True)
class LossConfig:
    """Which terms of the UNCHA objective are on, and their constants.

    Attributes
    ----------
    geometry : {"lorentz", "euclidean"}
        ``euclidean`` L2-normalises embeddings and scores by cosine (CLIP).
    local : bool
        Part-image <-> part-text contrastive term (temperature ``tau_l``).
    part_whole : bool
        Part -> whole cross-modal contrastive term (``tau_gl`` or ``tau_un``).
    uncertainty_temperature : bool
        Scale ``tau_gl`` per part by ``exp(u(p)/2)`` (UNCHA).
    entailment : {"none", "global", "all"}
        ``global``: text -> image only (MERU); ``all``: the four pairs.
    alpha : float
        Weight of the always-on linear ``alpha * phi`` term (UNCHA; 0 = plain hinge).
    eta_inter, eta_intra : float
        Aperture multipliers for cross-modal and same-modality pairs.
    calibration : bool
        Uncertainty calibration ``1/2 sg(r) e^{-u} + 1/2 u``.
    entropy : bool
        Entropy of ``softmax(u)`` over the batch, added to the calibration.
    entropy_weight : float
        Weight of that entropy term.
    lam : float
        Weight of the entailment block in the total loss.
    """

    geometry: str = "lorentz"
    local: bool = True
    part_whole: bool = True
    uncertainty_temperature: bool = True
    entailment: str = "all"
    alpha: float = 0.1
    eta_inter: float = 0.7
    eta_intra: float = 1.2
    calibration: bool = True
    entropy: bool = True
    entropy_weight: float = 1.0
    lam: float = 0.2

    def __post_init__(self):
        check_choice(self.geometry, "geometry", ("lorentz", "euclidean"))
        check_choice(self.entailment, "entailment", ("none", "global", "all"))
        if self.geometry == "euclidean" and (self.entailment != "none" or self.calibration):
            raise ValueError("entailment cones and calibration need geometry='lorentz'")
        if self.calibration and self.entailment != "all":
            raise ValueError("calibration needs entailment='all' (it calibrates part -> whole violations)")

    def to_dict(self) -> Dict:
        return asdict(self)

    @property
    def uses_parts(self) -> bool:
        """Whether a batch needs parts and part texts (not for CLIP and MERU, which train on wholes only)."""
        return self.local or self.part_whole or self.entailment == "all"


_BASE = LossConfig()
PRESETS: Dict[str, LossConfig] = {
    # global contrastive only, cosine similarity
    "clip": LossConfig(
        geometry="euclidean",
        local=False,
        part_whole=False,
        uncertainty_temperature=False,
        entailment="none",
        calibration=False,
        entropy=False,
    ),
    # hyperbolic global contrastive + text -> image entailment hinge
    "meru": replace(
        _BASE,
        local=False,
        part_whole=False,
        uncertainty_temperature=False,
        entailment="global",
        alpha=0.0,
        calibration=False,
        entropy=False,
    ),
    # + part/whole contrastive with a fixed (not uncertainty-scaled) temperature, four hinge pairs
    "hycoclip": replace(_BASE, uncertainty_temperature=False, alpha=0.0, calibration=False, entropy=False),
    "uncha": _BASE,
    "uncha-no-unc-temp": replace(_BASE, uncertainty_temperature=False),
    "uncha-no-entropy": replace(_BASE, entropy=False),
}
MODEL_NAMES = tuple(PRESETS)


def preset(name: str) -> LossConfig:
    """The :class:`LossConfig` of a named model (one of :data:`MODEL_NAMES`)."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"model must be one of {', '.join(MODEL_NAMES)}; got {name!r}") from None


# ----------------------------------------------------------------------------- terms
def contrastive_loss(
    scores: torch.Tensor, positives: torch.Tensor, temperature: Union[float, torch.Tensor]
) -> torch.Tensor:
    """Multi-positive InfoNCE over rows: ``mean_i -log sum_{j in P(i)} softmax(s_i / tau_i)_j``.

    With exactly one positive per row this is ``cross_entropy(s / tau, target)``.

    Parameters
    ----------
    scores : Tensor, shape (N, M)
        Similarities (``-distance`` or cosine).
    positives : bool Tensor, shape (N, M)
        Every row needs at least one positive.
    temperature : float or Tensor of shape () or (N,)
        Per-row temperatures allow the uncertainty-scaled ``tau_un``.
    """
    if scores.shape != positives.shape:
        raise ValueError(f"positives has shape {tuple(positives.shape)} but scores has {tuple(scores.shape)}")
    if not bool(positives.any(1).all()):
        raise ValueError("every row of positives needs at least one True")
    tau = torch.as_tensor(temperature, dtype=scores.dtype, device=scores.device)
    logits = scores / (tau.unsqueeze(-1) if tau.ndim == 1 else tau)
    pos_logits = logits.masked_fill(~positives, float("-inf"))
    return (torch.logsumexp(logits, 1) - torch.logsumexp(pos_logits, 1)).mean()


def _check_manifold(manifold) -> L.Lorentz:
    if not isinstance(manifold, L.Lorentz):
        raise TypeError(f"manifold must be a lorentz.Lorentz (e.g. Lorentz(1.0)), got {type(manifold).__name__}")
    return manifold


def entailment_loss(p: torch.Tensor, q: torch.Tensor, manifold: L.Lorentz, *, eta: float, alpha: float) -> torch.Tensor:
    """Per-pair ``r(p, q) = max(0, phi(p, q) - eta * omega(p)) + alpha * phi(p, q)``.

    ``phi`` is the exterior angle at ``p`` towards ``q`` and ``omega`` the
    half-aperture of ``p``'s cone (both on ``manifold``); the linear
    ``alpha * phi`` term keeps a gradient towards the cone axis even for pairs
    already inside the cone.
    """
    manifold = _check_manifold(manifold)
    phi = manifold.exterior_angle(p, q)
    omega = manifold.half_aperture(p)
    return F.relu(phi - eta * omega) + alpha * phi


def calibration_loss(
    r: torch.Tensor, u: torch.Tensor, *, entropy: bool = True, entropy_weight: float = 1.0
) -> torch.Tensor:
    """``mean(1/2 sg(r) e^{-u} + 1/2 u) [+ w * H(softmax(u))]``.

    The first part is minimised at ``u = log r``: a part whose entailment is
    violated more is pushed towards the origin (more uncertain). Adding the
    batch entropy of ``softmax(u)`` to a minimised loss rewards spread-out
    uncertainties, i.e. it works against all parts collapsing to one ``u``.
    """
    if r.shape != u.shape:
        raise ValueError(f"r has shape {tuple(r.shape)} but u has {tuple(u.shape)}")
    cal = (0.5 * r.detach() * torch.exp(-u) + 0.5 * u).mean()
    if entropy:
        logp = torch.log_softmax(u, 0)
        cal = cal + entropy_weight * -(logp.exp() * logp).sum()
    return cal


def uncertainty_temperature(parts: torch.Tensor, tau_gl: torch.Tensor) -> torch.Tensor:
    """Per-part ``tau_un = exp(u(p)/2) * tau_gl`` with ``u`` detached."""
    return torch.exp(L.uncertainty(parts).detach() / 2.0) * tau_gl


# ----------------------------------------------------------------------------- total
@dataclass
class Batch:
    """Embeddings of one training batch (space components, or raw vectors for CLIP).

    Attributes
    ----------
    image, text : Tensor (B, D)
        Scene images and their captions.
    image_part : Tensor (P, D)
        Part (box crop) images.
    text_part : Tensor (U, D)
        The distinct part captions of the batch.
    part_text : LongTensor (P,)
        Row of ``text_part`` naming each part.
    part_scene : LongTensor (P,)
        Scene (row of ``image``/``text``) each part comes from.
    scene_caption : LongTensor (B,)
        Caption id per scene (equal ids = identical captions, both positives).
    scene_has : BoolTensor (B, U)
        Whether scene ``b`` contains an item named by part text ``j`` (all such
        scenes are positives of that part in the part -> whole terms).
    """

    image: torch.Tensor
    text: torch.Tensor
    image_part: Optional[torch.Tensor] = None
    text_part: Optional[torch.Tensor] = None
    part_text: Optional[torch.Tensor] = None
    part_scene: Optional[torch.Tensor] = None
    scene_caption: Optional[torch.Tensor] = None
    scene_has: Optional[torch.Tensor] = None


def _scores(a: torch.Tensor, b: torch.Tensor, geometry: str, manifold: L.Lorentz) -> torch.Tensor:
    if geometry == "euclidean":
        return F.normalize(a, dim=-1) @ F.normalize(b, dim=-1).T
    return -manifold.pairwise_distance(a, b, stable=False)  # logits: speed over last-ulp accuracy


def total_loss(
    batch: Batch, config: LossConfig, *, manifold: L.Lorentz, tau_g, tau_l, tau_gl
) -> Dict[str, torch.Tensor]:
    """All enabled terms and ``loss = L_con + lam * L_ent``.

    ``manifold`` carries the (learnable) curvature, e.g.
    ``CompositionalModel.manifold()``; Euclidean CLIP ignores it. Temperatures
    are tensors already clamped to ``>= MIN_TEMPERATURE``. Returns a dict with
    ``loss`` and every computed term (for logging).
    """
    manifold = _check_manifold(manifold)
    g = config.geometry
    out: Dict[str, torch.Tensor] = {}
    B = batch.image.shape[0]
    cap = batch.scene_caption if batch.scene_caption is not None else torch.arange(B)
    same_caption = cap[:, None] == cap[None, :]
    s_it = _scores(batch.image, batch.text, g, manifold)
    out["global"] = 0.5 * (contrastive_loss(s_it, same_caption, tau_g) + contrastive_loss(s_it.T, same_caption, tau_g))
    con = out["global"]
    tp = None
    if config.local or config.part_whole or config.entailment == "all":
        _check_parts(batch)
        tp = batch.text_part[batch.part_text]  # part text per part row (made here: autograd's order stays fixed)
    if config.local:
        out["local"] = _local_term(batch, g, manifold, tau_l)
        con = con + out["local"]
    if config.part_whole:
        out["part_whole"] = _part_whole_term(batch, config, manifold, tau_gl)
        con = con + out["part_whole"]
    out["contrastive"] = con
    loss = con
    if config.entailment != "none":
        out["entailment"] = _entailment_term(batch, tp, config, manifold, out)
        loss = loss + config.lam * out["entailment"]
    out["loss"] = loss
    return out


def _check_parts(batch: Batch) -> None:
    if any(x is None for x in (batch.image_part, batch.text_part, batch.part_text, batch.part_scene, batch.scene_has)):
        raise ValueError(
            "this configuration needs part embeddings (image_part, text_part, part_text, part_scene, scene_has)"
        )


def _local_term(batch: Batch, geometry: str, manifold: L.Lorentz, tau_l) -> torch.Tensor:
    """Part image <-> part caption contrastive term (symmetric)."""
    pt = batch.part_text
    pos = pt[:, None] == torch.arange(batch.text_part.shape[0], device=pt.device)[None, :]
    s_pp = _scores(batch.image_part, batch.text_part, geometry, manifold)
    return 0.5 * (contrastive_loss(s_pp, pos, tau_l) + contrastive_loss(s_pp.T, pos.T, tau_l))


def _part_whole_term(batch: Batch, config: LossConfig, manifold: L.Lorentz, tau_gl) -> torch.Tensor:
    """Part -> whole contrastive term: a part's positives are all wholes containing an item of its kind."""
    ip, tp_unique, g = batch.image_part, batch.text_part, config.geometry
    pos_it = batch.scene_has[:, batch.part_text].T  # (P, B)
    pos_ti = batch.scene_has.T  # (U, B)
    if config.uncertainty_temperature:
        tau_i, tau_t = uncertainty_temperature(ip, tau_gl), uncertainty_temperature(tp_unique, tau_gl)
    else:
        tau_i = tau_t = tau_gl
    return 0.5 * (
        contrastive_loss(_scores(ip, batch.text, g, manifold), pos_it, tau_i)
        + contrastive_loss(_scores(tp_unique, batch.image, g, manifold), pos_ti, tau_t)
    )


def _entailment_term(batch: Batch, tp, config: LossConfig, c: L.Lorentz, out: Dict[str, torch.Tensor]) -> torch.Tensor:
    """Entailment-cone term: text -> image, and with ``entailment="all"`` the part terms.

    ``tp`` is the caption embedding of each part row; sets ``out["calibration"]`` when calibrating.
    """
    r_ti = entailment_loss(batch.text, batch.image, c, eta=config.eta_inter, alpha=config.alpha)
    if config.entailment == "global":
        return r_ti.mean()
    ip, ps = batch.image_part, batch.part_scene
    r_pp = entailment_loss(tp, ip, c, eta=config.eta_inter, alpha=config.alpha)
    # The only part of a one-item scene *is* the scene (same pixels, same caption): the
    # part -> whole pair is a point and itself, where the exterior angle is undefined and
    # its gradient ~ 1/|x - y| blows up. Such a part entails its whole trivially, so only
    # proper parts enter.
    proper = torch.bincount(ps, minlength=batch.image.shape[0])[ps] > 1
    ent = 0.5 * r_ti.mean() + 0.5 * r_pp.mean()
    if bool(proper.any()):
        ipp, whole = ip[proper], ps[proper]
        tpp = tp[proper]
        r_ii = entailment_loss(ipp, batch.image[whole], c, eta=config.eta_intra, alpha=config.alpha)
        r_tt = entailment_loss(tpp, batch.text[whole], c, eta=config.eta_intra, alpha=config.alpha)
        ent = ent + 0.25 * r_ii.mean() + 0.25 * r_tt.mean()
        if config.calibration:
            kw = dict(entropy=config.entropy, entropy_weight=config.entropy_weight)
            out["calibration"] = calibration_loss(r_ii, L.uncertainty(ipp), **kw) + calibration_loss(
                r_tt, L.uncertainty(tpp), **kw
            )
            ent = ent + out["calibration"]
    return ent
