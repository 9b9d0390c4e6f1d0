"""Differentiable Lorentz-model operations (docs/methods.md#uncha-lorentz to #uncha-uncertainty).

A point of the hyperboloid ``{p : <p, p>_L = -1/c}`` is stored by its space
components ``x`` in R^n; the time component ``x_t = sqrt(1/c + |x|^2)`` is
implied. Every ``R^n`` vector is therefore a valid point, so plain optimisers
work without projections. ``curvature`` may be a float or a 0-d tensor (a
learnable curvature receives gradients through every function here).
:class:`Lorentz` binds one curvature to all of them (as geoopt's manifold does).

All functions are written so that their gradients stay finite at the origin,
at the aperture clamp and for far-away points, in float32 and float64:
norms are taken as ``sqrt(max(|x|^2, tiny))`` and branches use ``torch.where``
on *safe* inputs so the unused branch never produces inf/NaN.
"""

from __future__ import annotations

import functools
import math
from typing import Union

import torch

from crossembed._validation import check_positive

__all__ = [
    "Lorentz",
    "time_component",
    "inner",
    "pairwise_inner",
    "distance",
    "pairwise_distance",
    "expmap0",
    "logmap0",
    "half_aperture",
    "exterior_angle",
    "uncertainty",
]

Curvature = Union[float, torch.Tensor]

_TINY = 1e-30  # floor for squared norms: sqrt(1e-30) = 1e-15 is a normal float32
_SERIES = 1e-3  # below this sqrt(c)|v| the sinh/asinh ratios use their Taylor series
_MAX_ARG = math.asinh(2.0**15)  # clamp sqrt(c)|v| so sinh never overflows float32
APERTURE_K = 0.1


def _c(curvature: Curvature, like: torch.Tensor) -> torch.Tensor:
    """``curvature`` as a tensor like ``like``; ``c > 0`` is checked for numbers and CPU tensors
    (a CUDA curvature is not read back: that would synchronise every call)."""
    if isinstance(curvature, torch.Tensor):
        if curvature.device.type == "cpu" and curvature.numel() == 1 and not bool(curvature.detach() > 0):
            raise ValueError(f"curvature must be > 0, got {float(curvature.detach())}")
    else:
        check_positive(curvature, "curvature")
    return torch.as_tensor(curvature, dtype=like.dtype, device=like.device)


def _norm_dir(x: torch.Tensor):
    """``(|x|, x / |x|)`` without over- or underflow: rows are divided by their largest entry first.

    ``|x|`` may still be inf when it exceeds the dtype's range (entries near
    its maximum); the direction is always finite, 0 at the origin, and both
    have finite gradients there.
    """
    m = x.abs().amax(-1, keepdim=True)
    xs = x / torch.where(m > 0, m, torch.ones_like(m))
    ns = torch.sqrt(_sq_norm(xs).clamp_min(_TINY))
    return m.squeeze(-1) * ns, xs / ns.unsqueeze(-1), m.squeeze(-1), ns


def _wide(x: torch.Tensor) -> torch.dtype:
    """float64 for narrower floats (where the device has it): the dtype formulas with r^3 terms run in."""
    if x.dtype in (torch.float16, torch.bfloat16, torch.float32) and x.device.type != "mps":
        return torch.float64
    return x.dtype


def _sq_norm(x: torch.Tensor) -> torch.Tensor:
    return (x * x).sum(-1)


def _safe_norm(x: torch.Tensor) -> torch.Tensor:
    # the gradient of |x| at 0 is 0/0; flooring the square keeps it at 0 instead of NaN
    return torch.sqrt(_sq_norm(x).clamp_min(_TINY))


def _nonzero(t: torch.Tensor) -> torch.Tensor:
    """``t`` with zeros replaced by 1 (a safe divisor where the numerator is 0 too)."""
    return torch.where(t > 0, t, torch.ones_like(t))


def _norm0(x: torch.Tensor) -> torch.Tensor:
    """``|x|``, exactly 0 at the origin, with gradient 0 there (not NaN)."""
    n2 = _sq_norm(x)
    return torch.where(n2 > 0, torch.sqrt(_nonzero(n2)), torch.zeros_like(n2))


def time_component(x: torch.Tensor, curvature: Curvature = 1.0) -> torch.Tensor:
    """``x_t = sqrt(1/c + |x|^2)`` for space components ``x`` of shape (..., n).

    Where ``|x|^2`` would overflow (and on other devices than the CPU, where
    checking would synchronise) it is taken as ``hypot(1/sqrt(c), |x|)`` with
    ``|x|`` from rows scaled by their largest entry: ``x_t`` is finite
    whenever it is representable (``|x| ~ 1e20`` in float32, ``1e200`` in
    float64). A finite CPU ``x`` whose ``x_t`` is beyond the dtype's range
    raises ``ValueError`` (use float64); other devices are not read back.
    """
    c = _c(curvature, x)
    if x.device.type == "cpu":
        sq = _sq_norm(x)
        if bool(torch.isfinite(sq).all()):  # the common case, in one pass
            return torch.sqrt(1.0 / c + sq)
    norm = _norm_dir(x)[0] if x.shape[-1] else x.new_zeros(x.shape[:-1])
    xt = torch.hypot(torch.rsqrt(c), norm)
    if xt.device.type == "cpu" and not bool(torch.isfinite(xt).all()) and bool(torch.isfinite(x).all()):
        raise ValueError(
            f"x is too far from the origin: its time component sqrt(1/c + |x|^2) exceeds the {x.dtype} range"
        )
    return xt


def inner(x: torch.Tensor, y: torch.Tensor, curvature: Curvature = 1.0) -> torch.Tensor:
    """Lorentz inner product ``x.y - x_t y_t`` of matching rows (broadcasting)."""
    return (x * y).sum(-1) - time_component(x, curvature) * time_component(y, curvature)


def pairwise_inner(x: torch.Tensor, y: torch.Tensor, curvature: Curvature = 1.0) -> torch.Tensor:
    """Lorentz inner products of every row of ``x`` (N, n) with every row of ``y`` (M, n)."""
    xt = time_component(x, curvature)
    yt = time_component(y, curvature)
    return x @ y.transpose(-1, -2) - xt.unsqueeze(-1) * yt.unsqueeze(-2)


def _chord_sq(x: torch.Tensor, y: torch.Tensor, xt: torch.Tensor, yt: torch.Tensor, c: Curvature) -> torch.Tensor:
    """``|x-y|^2 - (x_t-y_t)^2`` (the squared Minkowski chord) as a sum of two non-negative terms.

    With ``r = |x|``, ``dr = r_x - r_y = (x-y).(x+y) / (r_x + r_y)``, ``T = x_t + y_t``
    and ``R = r_x + r_y`` (``T - R = (1/(x_t + r_x) + 1/(y_t + r_y)) / c``):
    ``q = Q_tan + dr^2 (T - R)(T + R) / T^2`` with the tangential part
    ``Q_tan = |x-y|^2 - dr^2`` or ``r_x r_y |x/r_x - y/r_y|^2``, whichever has the
    smaller rounding error here. Nothing cancels for nearby points,
    nor for points at different radii along nearly one direction (where
    ``|x-y|^2 - (x_t-y_t)^2`` computed directly loses everything: ``[1e4, 0]``
    vs ``[2e4, 0]`` is ``ln 2``, not 0). The same decomposition as
    ``crossembed.reference.lorentz_pairwise`` and the C++ kernel.
    """
    c = _c(c, x)
    diff = x - y
    rx, ry = _norm0(x), _norm0(y)
    big_r = rx + ry
    sq = _sq_norm(diff)
    dr = (diff * (x + y)).sum(-1) / _nonzero(big_r)
    sub = sq - dr * dr
    chord = _sq_norm(x / _nonzero(rx).unsqueeze(-1) - y / _nonzero(ry).unsqueeze(-1))
    # each form's absolute error is ~eps times: sq for the difference, 2 sqrt(r_x r_y Q_tan)
    # + eps r_x r_y for the unit-vector chord; take the smaller (Q_tan estimated by sub)
    rxy = rx * ry
    use_sub = sq <= 2.0 * torch.sqrt(rxy * sub.clamp_min(0.0)) + torch.finfo(x.dtype).eps * rxy
    q_tan = torch.where(use_sub, sub, rxy * chord).clamp_min(0.0)
    big_t = xt + yt
    t_minus_r = (1.0 / (xt + rx) + 1.0 / (yt + ry)) / c
    return q_tan + dr * dr * t_minus_r * ((big_t + big_r) / big_t / big_t)


def _dist_from_chord(q: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    sc = torch.sqrt(c)
    # sqrt(q) has an infinite slope at q = 0 (x == y): take the subgradient 0 there,
    # and feed the unused branch a safe value so backward never sees inf * 0
    pos = q > 0
    root = torch.where(pos, torch.sqrt(torch.where(pos, q, torch.ones_like(q))), torch.zeros_like(q))
    return (2.0 / sc) * torch.asinh(sc * root / 2.0)


def _dist_checked(q: torch.Tensor, c: torch.Tensor, x: torch.Tensor, y: torch.Tensor, again) -> torch.Tensor:
    """Distances from the chord ``q`` of ``x`` and ``y``. On the CPU, where ``q`` overflowed although
    ``x`` and ``y`` are finite (norms near the square root of the dtype's range, ~1e19 in float32):
    ``again(x, y)`` in float64, cast back, or ValueError when float64 overflows too (other devices
    are not read back, as in :func:`time_component`)."""
    if q.device.type == "cpu" and not bool(torch.isfinite(q).all()):
        if bool(torch.isfinite(x).all()) and bool(torch.isfinite(y).all()):
            if x.dtype != torch.float64:
                return again(x.to(torch.float64), y.to(torch.float64)).to(x.dtype)
            raise ValueError("x and y are too far from the origin: their squared chord exceeds float64's range")
    return _dist_from_chord(q, c)


def distance(x: torch.Tensor, y: torch.Tensor, curvature: Curvature = 1.0) -> torch.Tensor:
    """Geodesic distance between matching rows of ``x`` and ``y`` (broadcasting).

    ``d = (2/sqrt(c)) asinh(sqrt(c) sqrt(|x-y|^2 - (x_t-y_t)^2) / 2)``, which
    equals ``acosh(-c <x,y>_L) / sqrt(c)`` but does not lose the small
    distances to cancellation. Points too far out for the dtype's squares
    are measured in float64 (see :func:`_dist_checked`).
    """
    c = _c(curvature, x)
    xt = time_component(x, c)
    yt = time_component(y, c)
    return _dist_checked(_chord_sq(x, y, xt, yt, c), c, x, y, lambda a, b: distance(a, b, curvature))


def pairwise_distance(
    x: torch.Tensor, y: torch.Tensor, curvature: Curvature = 1.0, *, stable: bool = True, chunk_elements: int = 1 << 22
) -> torch.Tensor:
    """Distances between every row of ``x`` (N, n) and every row of ``y`` (M, n).

    Parameters
    ----------
    stable : bool
        ``True`` (default): the cancellation-free chord of :func:`distance`, which
        needs the (rows, M, n) difference tensor; rows of ``x`` are processed
        in chunks of at most ``chunk_elements`` elements. ``False``: the chord
        from one matrix product, ``q = 2 (x_t y_t - x.y - 1/c)``, several times
        faster; its absolute error ``~ eps * x_t y_t`` only matters for nearly
        coincident points (used for training logits, never for evaluation).
    """
    if x.ndim != 2 or y.ndim != 2:
        raise ValueError(f"x and y must be 2-dimensional, got shapes {tuple(x.shape)} and {tuple(y.shape)}")
    c = _c(curvature, x)
    xt = time_component(x, c)
    yt = time_component(y, c)
    if not stable:
        q = 2.0 * (xt.unsqueeze(-1) * yt.unsqueeze(-2) - x @ y.T - 1.0 / c)
        return _dist_checked(q.clamp_min(0.0), c, x, y, lambda a, b: pairwise_distance(a, b, curvature, stable=False))
    rows = max(1, chunk_elements // max(1, y.shape[0] * y.shape[1]))
    out = []
    for s in range(0, x.shape[0], rows):
        xs, xts = x[s : s + rows].unsqueeze(1), xt[s : s + rows].unsqueeze(1)
        q = _chord_sq(xs, y.unsqueeze(0), xts, yt.unsqueeze(0), c)
        again = functools.partial(pairwise_distance, curvature=curvature, chunk_elements=chunk_elements)
        out.append(_dist_checked(q, c, x[s : s + rows], y, again))
    if not out:
        return x.new_zeros((0, y.shape[0]))
    return torch.cat(out, 0)


def expmap0(v: torch.Tensor, curvature: Curvature = 1.0) -> torch.Tensor:
    """Exponential map at the origin: tangent ``v`` -> space components.

    ``sinh(sqrt(c)|v|) v / (sqrt(c)|v|)``, with ``sqrt(c)|v|`` clamped to
    ``asinh(2**15)`` and the Taylor series ``1 + z^2/6`` near 0. Written as
    ``sinh(z) / sqrt(c)`` times the unit direction of ``v``, so huge tangents
    (``|v| = 1e20`` in float32) land on the clamp instead of 0.
    """
    c = _c(curvature, v)
    norm, direction, _, _ = _norm_dir(v)
    z = torch.sqrt(c) * norm
    small = z < _SERIES
    z2 = torch.where(small, z * z, torch.zeros_like(z))  # the series branch only sees small z
    zc = torch.where(small, torch.ones_like(z), z).clamp_max(_MAX_ARG)  # safe: never 0 in the used branch
    far = direction * (torch.sinh(zc) / torch.sqrt(c)).unsqueeze(-1)
    return torch.where(small.unsqueeze(-1), v * (1.0 + z2 / 6.0).unsqueeze(-1), far)


def logmap0(x: torch.Tensor, curvature: Curvature = 1.0) -> torch.Tensor:
    """Logarithmic map at the origin (inverse of :func:`expmap0` below the clamp).

    ``asinh(sqrt(c)|x|) x / (sqrt(c)|x|)``, series ``1 - z^2/6`` near 0;
    ``asinh(z) / sqrt(c)`` times the unit direction of ``x``, with
    ``asinh(z) = ln 2 + ln z`` (from logs of the scaled norm) where ``z``
    would overflow, so every finite ``x`` maps to a finite tangent.
    """
    c = _c(curvature, x)
    norm, direction, m, ns = _norm_dir(x)
    z = torch.sqrt(c) * norm
    small = z < _SERIES
    z2 = torch.where(small, z * z, torch.zeros_like(z))
    huge = z > 1e18  # asinh(z) = ln(2z) to float precision; ln z from the scaled norm never overflows
    safe_m = torch.where(huge, m, torch.ones_like(m))
    log_z = 0.5 * torch.log(c) + torch.log(safe_m) + torch.log(ns)
    zs = torch.where(small | huge, torch.ones_like(z), z)
    asinh_z = torch.where(huge, math.log(2.0) + log_z, torch.asinh(zs))
    far = direction * (asinh_z / torch.sqrt(c)).unsqueeze(-1)
    return torch.where(small.unsqueeze(-1), x * (1.0 - z2 / 6.0).unsqueeze(-1), far)


def half_aperture(
    x: torch.Tensor, curvature: Curvature = 1.0, *, k: float = APERTURE_K, eps: float = 1e-6
) -> torch.Tensor:
    """Half-aperture of the entailment cone at ``x``: ``asin(2K / (sqrt(c)|x|))`` clamped.

    Points within ``2K/sqrt(c)`` of the origin get the widest cone
    ``asin(1 - eps)``; the clamp has zero gradient there, never NaN.
    """
    c = _c(curvature, x)
    ratio = 2.0 * k / (torch.sqrt(c) * _safe_norm(x))
    return torch.asin(ratio.clamp(-1.0 + eps, 1.0 - eps))


# (c q / 2)(c q / 2 + 2) below this (chord ~1e-5) counts as coincident in exterior_angle
_COINCIDENT = 1e-10


def exterior_angle(x: torch.Tensor, y: torch.Tensor, curvature: Curvature = 1.0, *, eps: float = 1e-6) -> torch.Tensor:
    """Exterior angle at ``x`` between the origin and ``y`` (matching rows).

    ``acos((y_t + x_t c<x,y>_L) / (|x| sqrt((c<x,y>_L)^2 - 1)))``, clamped to
    ``[-1+eps, 1-eps]``. ``(c<x,y>_L)^2 - 1`` is formed from the stable chord
    ``q`` as ``(c q/2)(c q/2 + 2)`` so it is exact for nearby points.
    """
    out_dtype = x.dtype
    # its terms grow like |x|^3: in float64 (for float32 and narrower inputs) every finite x, y fits
    x, y = x.to(_wide(x)), y.to(_wide(x))
    c = _c(curvature, x)
    xt = time_component(x, c)
    yt = time_component(y, c)
    q = _chord_sq(x, y, xt, yt, c)
    a = 1.0 + c * q / 2.0  # = -c <x, y>_L >= 1
    den_sq = (c * q / 2.0) * (c * q / 2.0 + 2.0)
    # floor the denominator well above float32's underflow so d(num/den)/d(den)
    # stays finite (the clamp below then zeroes it) at the origin and for x == y
    den = (_safe_norm(x) * torch.sqrt(den_sq.clamp_min(_TINY))).clamp_min(1e-12)
    num = yt - xt * a
    # at (nearly) coincident points the angle is undefined and num/den is 0/0: its gradient
    # reached 1e9-1e10 there (an UNCHA part equal to its scene); such pairs get the angle of
    # a zero ratio (pi/2) and no gradient
    ratio = torch.where(den_sq > _COINCIDENT, num / den, torch.zeros_like(num))
    return torch.acos(ratio.clamp(-1.0 + eps, 1.0 - eps)).to(out_dtype)


def uncertainty(x: torch.Tensor) -> torch.Tensor:
    """``u(x) = softplus(-|x|)`` in ``(0, ln 2]``: high near the origin (generic), low far out."""
    return torch.nn.functional.softplus(-_safe_norm(x))


class Lorentz:
    """The hyperboloid of curvature ``-c``: the functions of this module with ``c`` bound.

    Like geoopt's ``Lorentz`` manifold, the math stays in the module-level
    functions and this class only holds the curvature, so code that passes one
    curvature to many operations (the losses, the model) carries one object.
    It is a plain object, not an ``nn.Module``: a learnable curvature stays a
    parameter of its model (and of its checkpoints), and a ``Lorentz`` built
    from the tensor it yields passes gradients through every method.

    Parameters
    ----------
    curvature : float or 0-d Tensor
        ``c > 0`` (floats are checked; a tensor is used as given).

    Examples
    --------
    >>> m = Lorentz(0.5)
    >>> d = m.pairwise_distance(m.expmap0(torch.randn(3, 4)), m.expmap0(torch.randn(5, 4)))
    """

    __slots__ = ("curvature",)

    def __init__(self, curvature: Curvature = 1.0):
        if isinstance(curvature, torch.Tensor):
            if curvature.ndim != 0:
                raise ValueError(f"curvature must be a 0-d tensor, got shape {tuple(curvature.shape)}")
        else:
            curvature = check_positive(curvature, "curvature")
        self.curvature = curvature

    def __repr__(self) -> str:
        c = self.curvature
        return f"Lorentz(curvature={float(c.detach()) if isinstance(c, torch.Tensor) else c:g})"

    def time_component(self, x: torch.Tensor) -> torch.Tensor:
        """See :func:`time_component`."""
        return time_component(x, self.curvature)

    def inner(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """See :func:`inner`."""
        return inner(x, y, self.curvature)

    def pairwise_inner(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """See :func:`pairwise_inner`."""
        return pairwise_inner(x, y, self.curvature)

    def distance(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """See :func:`distance`."""
        return distance(x, y, self.curvature)

    def pairwise_distance(
        self, x: torch.Tensor, y: torch.Tensor, *, stable: bool = True, chunk_elements: int = 1 << 22
    ) -> torch.Tensor:
        """See :func:`pairwise_distance`."""
        return pairwise_distance(x, y, self.curvature, stable=stable, chunk_elements=chunk_elements)

    def expmap0(self, v: torch.Tensor) -> torch.Tensor:
        """See :func:`expmap0`."""
        return expmap0(v, self.curvature)

    def logmap0(self, x: torch.Tensor) -> torch.Tensor:
        """See :func:`logmap0`."""
        return logmap0(x, self.curvature)

    def half_aperture(self, x: torch.Tensor, *, k: float = APERTURE_K, eps: float = 1e-6) -> torch.Tensor:
        """See :func:`half_aperture`."""
        return half_aperture(x, self.curvature, k=k, eps=eps)

    def exterior_angle(self, x: torch.Tensor, y: torch.Tensor, *, eps: float = 1e-6) -> torch.Tensor:
        """See :func:`exterior_angle`."""
        return exterior_angle(x, y, self.curvature, eps=eps)
