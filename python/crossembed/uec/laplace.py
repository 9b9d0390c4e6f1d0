"""Post-hoc last-layer Laplace approximation for any text encoder (UEC step 1).

A ``D x D`` linear head ``z = W h`` is put on the pooled, L2-normalised
embedding ``h`` and initialised to the identity, so the MAP (the pretrained
model) and therefore the mean embedding are unchanged; only embeddings are
needed, so black-box encoders work. The curvature of an in-batch InfoNCE loss
on positive text pairs,

    L = sum_b -log softmax_c(<W a_b, W p_c> / tau)[b],

with respect to ``W`` (at ``W = I``) gives a Gaussian posterior over ``W``
whose push-forward through ``z = W h`` is a diagonal Gaussian embedding.

Two posterior forms:

``hessian="diag"`` (the paper's form)
    diagonal curvature ``H_ij``; posterior precision ``P = H + lambda``;
    ``v_i(x) = sum_j h_j(x)^2 / P_ij``.
``hessian="kron"``
    Kronecker-factored (K-FAC) curvature ``H = A (x) G`` with ``A`` the mean
    input second moment ``E[h h^T]`` over the fit inputs and ``G`` the summed
    output-side curvature; with eigendecompositions ``A = U_A S_A U_A^T`` and
    ``G = U_G S_G U_G^T`` the damped precision ``A (x) G + lambda I`` is
    inverted exactly and
    ``v_i(x) = sum_{a,g} (u_a . h)^2 U_G[i, g]^2 / (s_a s_g + lambda)``.
    The ``(u_a . h)^2`` factor makes the variance grow for inputs outside
    the span the fit set covers, which the diagonal form cannot express.

``curvature="ggn"`` uses the generalised Gauss-Newton matrix (the softmax
Hessian ``diag(p) - p p^T`` pulled back through the logit Jacobians);
``curvature="ef"`` the empirical Fisher (sum of squared per-pair gradients).
All sums are closed-form matrix products (no per-pair Jacobians), float64.
"""

from __future__ import annotations

import math
import numbers
from pathlib import Path
from typing import Any, Dict, Optional, Sequence, Tuple, Union

import numpy as np
from tqdm.auto import tqdm

from crossembed._io import load_arrays, save_arrays
from crossembed._validation import as_matrix, check_positive, check_random_state
from crossembed.uec.gaussian import GaussianEmbedding

__all__ = [
    "LaplaceEmbedder",
    "diag_curvature",
    "kron_factors",
    "normalize_rows",
]

_KIND = "crossembed.uec.LaplaceEmbedder"
_HESSIANS = ("kron", "diag")
_CURVATURES = ("ggn", "ef")
# prior precisions searched by "marglik" / "nll" (log-spaced; refined around the best)
_LAMBDA_GRID = np.logspace(-4, 10, 57)


def normalize_rows(x: np.ndarray) -> np.ndarray:
    """L2-normalise rows (zero rows stay zero), float64."""
    x = np.asarray(x, dtype=np.float64)
    n = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(n > 0, n, 1.0)


def _softmax_rows(s: np.ndarray) -> np.ndarray:
    s = s - s.max(axis=1, keepdims=True)
    e = np.exp(s)
    return e / e.sum(axis=1, keepdims=True)


def diag_curvature(A: np.ndarray, P: np.ndarray, *, tau: float, curvature: str = "ggn") -> np.ndarray:
    """Diagonal curvature of one in-batch InfoNCE batch w.r.t. the identity head.

    Parameters
    ----------
    A, P : ndarray, shape (B, D)
        Normalised anchor and positive embeddings (row ``b`` of each is a pair).
    tau : float
        InfoNCE temperature.
    curvature : {"ggn", "ef"}

    Returns
    -------
    ndarray, shape (D, D), float64
        ``H[i, j]`` for weight ``W[i, j]`` (output ``i``, input ``j``).

    Notes
    -----
    At ``W = I`` the logit Jacobian is ``ds_bc / dW_ij = (p_c[i] a_b[j] +
    a_b[i] p_c[j]) / tau`` and the per-pair gradient is ``g_b a_b^T + a_b
    g_b^T`` with ``g_b = (sum_c p_bc p_c - p_b) / tau``; both squares expand
    into a few GEMMs.
    """
    A = np.asarray(A, dtype=np.float64)
    P = np.asarray(P, dtype=np.float64)
    probs = _softmax_rows(A @ P.T / tau)
    if curvature == "ef":
        g = (probs @ P - P) / tau
        return _sym_square_sum(g, A)
    if curvature != "ggn":
        raise ValueError(f"curvature must be 'ggn' or 'ef', got {curvature!r}")
    B, D = A.shape
    # E_c[J_c^2] part: sum_c p_bc (p_c[i] a[j] + a[i] p_c[j])^2
    m = probs @ (P * P)  # (B, D): sum_c p_bc p_c[i]^2
    term = m.T @ (A * A)
    first = term + term.T
    x = (np.sqrt(probs)[:, :, None] * A[:, None, :] * P[None, :, :]).reshape(B * B, D)
    first += 2.0 * (x.T @ x)
    # minus (E_c[J_c])^2 with E_c[J_c] = pbar a^T + a pbar^T
    pbar = probs @ P
    return (first - _sym_square_sum(pbar, A)) / tau**2


def _sym_square_sum(g: np.ndarray, a: np.ndarray) -> np.ndarray:
    """``sum_b (g_b a_b^T + a_b g_b^T)**2`` elementwise, as GEMMs."""
    t = (g * g).T @ (a * a)
    ga = g * a
    return t + t.T + 2.0 * (ga.T @ ga)


def kron_factors(
    A: np.ndarray, P: np.ndarray, *, tau: float, curvature: str = "ggn"
) -> Tuple[np.ndarray, np.ndarray, int]:
    """K-FAC factors of one InfoNCE batch for the shared head.

    Both the anchors and the positives pass through the head, so each batch
    contributes ``2B`` layer inputs.

    Returns
    -------
    input_sum : ndarray (D, D)
        ``sum_u h_u h_u^T`` over the ``2B`` inputs.
    output_sum : ndarray (D, D)
        ``sum_u G_u`` with ``G_u`` the output-side curvature of input ``u``:
        the outer product of the loss gradient w.r.t. ``z_u`` (``"ef"``) or
        ``J_u^T Lambda J_u`` with ``J_u = d logits / d z_u`` (``"ggn"``).
    count : int
        Number of inputs (``2B``).
    """
    A = np.asarray(A, dtype=np.float64)
    P = np.asarray(P, dtype=np.float64)
    probs = _softmax_rows(A @ P.T / tau)
    input_sum = A.T @ A + P.T @ P
    if curvature == "ef":
        g_a = (probs @ P - P) / tau
        resid = probs - np.eye(len(A))
        g_p = resid.T @ A / tau
        output_sum = g_a.T @ g_a + g_p.T @ g_p
    elif curvature == "ggn":
        pbar = probs @ P
        col = probs.sum(axis=0)
        out_a = (P * col[:, None]).T @ P - pbar.T @ pbar  # sum_b P^T (diag p_b - p_b p_b^T) P
        w = (probs * (1.0 - probs)).sum(axis=1)  # per anchor b: sum_c p_bc (1 - p_bc)
        out_p = (A * w[:, None]).T @ A
        output_sum = (out_a + out_p) / tau**2
    else:
        raise ValueError(f"curvature must be 'ggn' or 'ef', got {curvature!r}")
    return input_sum, output_sum, 2 * len(A)


def _check_choice(value, name: str, choices: Sequence[str]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}, got {value!r}")
    return value


class LaplaceEmbedder:
    """Gaussian embeddings from any encoder by a last-layer Laplace approximation.

    Parameters
    ----------
    encoder : str, encoder object or None
        Anything :func:`crossembed.encoders.load_encoder` accepts (``"minilm"``,
        ``"e5"``, a path, a callable, an object with ``encode``). ``None`` is
        allowed when only embeddings are passed (:meth:`fit_embeddings`,
        :meth:`transform`).
    layer : {"head"}
        Where the Laplace posterior lives: an identity-initialised ``D x D``
        head on the pooled normalised embedding.
    hessian : {"kron", "diag"}
        Posterior form (module docstring). ``"diag"`` is the paper's form.
        On the two real tasks of ``docs/uec.md`` the two tie on retrieval
        (score mixing: -0.08 and +0.09 nDCG@10, inside the std over draws);
        ``"kron"`` is the default because its traces actually vary with the
        input (relative trace std ~0.07 vs ~0.003 for diag) and grow outside
        the span of the fit inputs.
    curvature : {"ggn", "ef"}
        Generalised Gauss-Newton or empirical Fisher.
    prior_precision : float or {"marglik", "nll"}
        Isotropic prior precision ``lambda`` on the head (prior mean 0, as in
        laplace-torch), or how to tune it after fitting: the Laplace marginal
        likelihood (closed form in ``lambda`` for both posterior forms) or the
        negative log-likelihood of held-out pairs under the probit-adjusted
        InfoNCE (20% of the pairs are held out from the curvature for the
        search, then added back).
    loss_temperature : float
        ``tau`` of the InfoNCE loss (0.05, sentence-transformers' default scale 20).
    batch_size : int
        Pairs per InfoNCE batch (the in-batch negatives).
    random_state : int, Generator or None
        Shuffles pairs into batches.

    Attributes
    ----------
    prior_precision_ : float
        The prior precision in use after :meth:`fit`.
    trace_mean_, trace_std_ : float
        Mean and std of ``tr(Sigma(x))`` over the fit inputs (for per-model
        standardisation in :class:`~crossembed.uec.UECEnsemble`).
    score_scale_ : float
        Std of the model's cosine between unrelated fit texts; score mixing
        divides each model's similarity by it (``calibrate_scores``).
    n_pairs_ : int
    fit_seconds_ : float
    """

    def __init__(
        self,
        encoder=None,
        *,
        layer: str = "head",
        hessian: str = "kron",
        curvature: str = "ggn",
        prior_precision: Union[float, str] = "marglik",
        loss_temperature: float = 0.05,
        batch_size: int = 64,
        random_state=0,
    ):
        if layer != "head":
            raise ValueError(
                f"layer must be 'head', got {layer!r} (the 'last_dense' variant for torch models is not implemented)"
            )
        self.encoder = encoder
        self.layer = layer
        self.hessian = _check_choice(hessian, "hessian", _HESSIANS)
        self.curvature = _check_choice(curvature, "curvature", _CURVATURES)
        if isinstance(prior_precision, str):
            _check_choice(prior_precision, "prior_precision", ("marglik", "nll"))
        else:
            check_positive(prior_precision, "prior_precision")
        self.prior_precision = prior_precision
        self.loss_temperature = check_positive(loss_temperature, "loss_temperature")
        if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral) or batch_size < 2:
            raise ValueError(f"batch_size must be an integer >= 2 (in-batch negatives), got {batch_size!r}")
        self.batch_size = int(batch_size)
        self.random_state = random_state
        self._encoder_obj = None
        self._state: Optional[Dict[str, np.ndarray]] = None

    # ------------------------------------------------------------------ encoder plumbing
    @property
    def encoder_name(self) -> Optional[str]:
        return self.encoder if isinstance(self.encoder, str) else None

    def _get_encoder(self):
        if self._encoder_obj is None:
            if self.encoder is None:
                raise ValueError("this LaplaceEmbedder has no encoder; pass embeddings to transform()/fit_embeddings()")
            from crossembed.encoders import load_encoder

            # objects with encode() are used as they are; names, paths and callables go through load_encoder
            enc = self.encoder
            self._encoder_obj = (
                enc if hasattr(enc, "encode") and not isinstance(enc, (str, bytes)) else load_encoder(enc)
            )
        return self._encoder_obj

    def _embed(self, texts, role: str, show_progress_bar: bool, batch_size: int) -> np.ndarray:
        if isinstance(texts, str) or not isinstance(texts, Sequence):
            raise TypeError("texts must be a list of strings")
        if len(texts) == 0:
            raise ValueError("texts must not be empty")
        if not all(isinstance(t, str) for t in texts):
            raise TypeError("texts must hold only strings")
        enc = self._get_encoder()
        out = enc.encode(list(texts), batch_size=batch_size, show_progress_bar=show_progress_bar, role=role)
        return as_matrix(out, "encoder output")

    @property
    def is_fitted(self) -> bool:
        return self._state is not None

    @property
    def dim(self) -> int:
        self._require_fit()
        return int(self._state["dim"])

    def _require_fit(self):
        if self._state is None:
            raise ValueError("this LaplaceEmbedder is not fitted yet; call fit() or load()")

    # ------------------------------------------------------------------ fitting
    def fit(self, pairs, *, show_progress_bar: bool = True, batch_size: int = 64) -> LaplaceEmbedder:
        """Fit the posterior on positive text pairs ``[(anchor, positive), ...]``.

        Anchors are encoded as queries, positives as passages (this matters
        for e5). Use pairs disjoint from every evaluation split, covering the
        languages and domains the embedder will serve.
        """
        pairs = list(pairs)
        if len(pairs) < 2:
            raise ValueError(f"pairs must hold at least 2 pairs (in-batch negatives), got {len(pairs)}")
        for p in pairs:
            if not (isinstance(p, (tuple, list)) and len(p) == 2 and all(isinstance(t, str) for t in p)):
                raise TypeError("pairs must be (anchor, positive) string pairs")
        A = self._embed([a for a, _ in pairs], "query", show_progress_bar, batch_size)
        P = self._embed([p for _, p in pairs], "passage", show_progress_bar, batch_size)
        return self.fit_embeddings(A, P, show_progress_bar=show_progress_bar)

    def fit_embeddings(self, anchors, positives, *, show_progress_bar: bool = False) -> LaplaceEmbedder:
        """Fit from precomputed pair embeddings (rows of ``anchors`` and ``positives`` pair up)."""
        import time

        A = as_matrix(anchors, "anchors", allow_float64=True)
        P = as_matrix(positives, "positives", allow_float64=True)
        if A.shape != P.shape:
            raise ValueError(f"positives has shape {P.shape} but anchors has shape {A.shape}")
        if A.shape[0] < 2:
            raise ValueError("need at least 2 pairs (in-batch negatives)")
        t0 = time.perf_counter()
        A, P = normalize_rows(A), normalize_rows(P)
        n, D = A.shape
        rng = check_random_state(self.random_state)
        order = rng.permutation(n)
        holdout = None
        if self.prior_precision == "nll":
            n_hold = max(2, int(round(0.2 * n)))
            if n - n_hold < 2:
                raise ValueError("prior_precision='nll' needs at least 4 pairs")
            holdout, order = order[:n_hold], order[n_hold:]
        main = self._accumulate(A, P, order, show_progress_bar)
        if holdout is not None:
            extra = self._accumulate(A, P, holdout, False)
            lam = self._select_nll(main, A[holdout], P[holdout])
            main = {k: main[k] + extra[k] for k in main}
        elif self.prior_precision == "marglik":
            lam = None
        else:
            lam = float(self.prior_precision)
        self._state = self._finalize(main, D)
        if lam is None:
            lam = self._select_marglik()
        self._state["prior_precision"] = np.float64(lam)
        self._state["n_pairs"] = np.int64(n)
        tr = self._var(np.concatenate([A, P])).sum(axis=1)
        self._state["trace_stats"] = np.array([tr.mean(), max(tr.std(), 1e-12)])
        # Spread of this model's cosines between unrelated texts (anchors vs the
        # other pairs' positives): models differ several-fold here (e5 is
        # anisotropic), so score mixing divides each model's score by it.
        m = min(n, 1000)
        cross = A[:m] @ P[:m].T
        self._state["score_scale"] = np.float64(max(float(cross[~np.eye(m, dtype=bool)].std()), 1e-12))
        self.fit_seconds_ = time.perf_counter() - t0
        return self

    def _batches(self, order: np.ndarray):
        B = self.batch_size
        n_full = max(1, len(order) // B)
        for i in range(n_full):  # the last partial batch joins the final full one
            yield order[i * B : (i + 1) * B] if i < n_full - 1 else order[i * B :]

    def _accumulate(self, A, P, order, show_progress_bar) -> Dict[str, np.ndarray]:
        D = A.shape[1]
        tau = self.loss_temperature
        batches = list(self._batches(order))
        it = tqdm(batches, desc=f"Laplace {self.hessian}/{self.curvature}", disable=not show_progress_bar, leave=False)
        if self.hessian == "diag":
            H = np.zeros((D, D))
            for b in it:
                H += diag_curvature(A[b], P[b], tau=tau, curvature=self.curvature)
            return {"H": H}
        in_sum, out_sum, count = np.zeros((D, D)), np.zeros((D, D)), 0
        for b in it:
            i_s, o_s, c = kron_factors(A[b], P[b], tau=tau, curvature=self.curvature)
            in_sum += i_s
            out_sum += o_s
            count += c
        return {"in_sum": in_sum, "out_sum": out_sum, "count": np.array(float(count))}

    def _finalize(self, acc: Dict[str, np.ndarray], D: int) -> Dict[str, np.ndarray]:
        if self.hessian == "diag":
            return {"dim": np.int64(D), "H": np.maximum(acc["H"], 0.0)}
        # H ~ sum_u (h h^T) (x) G_u  ~  E[h h^T] (x) sum_u G_u  (K-FAC expectation split)
        s_in, u_in = np.linalg.eigh(acc["in_sum"] / float(acc["count"]))
        s_out, u_out = np.linalg.eigh(acc["out_sum"])
        return {
            "dim": np.int64(D),
            "s_in": np.maximum(s_in, 0.0),
            "u_in": u_in,
            "s_out": np.maximum(s_out, 0.0),
            "u_out": u_out,
        }

    def _curv_eigs(self) -> np.ndarray:
        """All curvature eigenvalues (diag: the entries), for the marginal likelihood."""
        st = self._state
        if self.hessian == "diag":
            return st["H"].ravel()
        return np.outer(st["s_in"], st["s_out"]).ravel()

    def log_marginal_likelihood(self, prior_precision: float) -> float:
        """Laplace log evidence up to a constant, as a function of ``lambda``.

        ``0.5 p log(lambda) - 0.5 sum log(h_k + lambda) - 0.5 lambda |W_MAP|^2``
        with ``p = D^2`` parameters, ``h_k`` the curvature eigenvalues and
        ``|I|_F^2 = D`` (zero-mean prior); the data term is constant in ``lambda``.
        """
        self._require_fit()
        lam = check_positive(prior_precision, "prior_precision")
        h = self._curv_eigs()
        D = int(self._state["dim"])
        return float(0.5 * h.size * math.log(lam) - 0.5 * np.log(h + lam).sum() - 0.5 * lam * D)

    def _select_marglik(self) -> float:
        vals = [self.log_marginal_likelihood(l) for l in _LAMBDA_GRID]
        best = int(np.argmax(vals))
        fine = np.logspace(
            np.log10(_LAMBDA_GRID[max(best - 1, 0)]), np.log10(_LAMBDA_GRID[min(best + 1, len(_LAMBDA_GRID) - 1)]), 41
        )
        return float(fine[int(np.argmax([self.log_marginal_likelihood(l) for l in fine]))])

    def _select_nll(self, acc, A_hold, P_hold) -> float:
        """Prior precision minimising the probit-InfoNCE NLL of held-out pairs."""
        D = A_hold.shape[1]
        self._state = self._finalize(acc, D)
        tau = self.loss_temperature

        def nll(lam):
            self._state["prior_precision"] = np.float64(lam)
            va, vp = self._var(A_hold), self._var(P_hold)
            total = 0.0
            for b in self._batches(np.arange(len(A_hold))):
                a, p, qa, qp = A_hold[b], P_hold[b], va[b], vp[b]
                mu = a @ p.T
                sig2 = (a * a) @ qp.T + qa @ (p * p).T + qa @ qp.T
                s = mu / np.sqrt(1.0 + math.pi / 8.0 * sig2) / tau
                s = s - s.max(axis=1, keepdims=True)
                total += float((np.log(np.exp(s).sum(axis=1)) - np.diag(s)).sum())
            return total / len(A_hold)

        vals = [nll(l) for l in _LAMBDA_GRID]
        return float(_LAMBDA_GRID[int(np.argmin(vals))])

    # ------------------------------------------------------------------ prediction
    def _var(self, H: np.ndarray) -> np.ndarray:
        """Predictive variance of ``z = W h`` for normalised ``H`` (float64)."""
        st = self._state
        lam = float(st["prior_precision"])
        if self.hessian == "diag":
            return (H * H) @ (1.0 / (st["H"] + lam)).T
        proj = (H @ st["u_in"]) ** 2  # (n, D): (u_a . h)^2
        coef = 1.0 / (np.outer(st["s_in"], st["s_out"]) + lam)  # (a, g)
        return (proj @ coef) @ (st["u_out"] ** 2).T

    def transform(self, embeddings) -> GaussianEmbedding:
        """Gaussian embeddings from raw encoder outputs ``(n, D)``.

        The mean is the L2-normalised input (the identity head's MAP output).
        """
        self._require_fit()
        H = as_matrix(embeddings, "embeddings", allow_float64=True, allow_empty=True)
        if H.shape[1] != self.dim:
            raise ValueError(f"embeddings has dimension {H.shape[1]} but the posterior has {self.dim}")
        H = normalize_rows(H)
        return GaussianEmbedding(H.astype(np.float32), self._var(H).astype(np.float32))

    def encode(
        self, texts, *, role: str = "query", batch_size: int = 64, show_progress_bar: bool = False
    ) -> GaussianEmbedding:
        """Encode texts to Gaussian embeddings ``(mean, var)``, float32 ``(n, D)``."""
        self._require_fit()
        return self.transform(self._embed(texts, role, show_progress_bar, batch_size))

    @property
    def prior_precision_(self) -> float:
        self._require_fit()
        return float(self._state["prior_precision"])

    @property
    def trace_mean_(self) -> float:
        self._require_fit()
        return float(self._state["trace_stats"][0])

    @property
    def trace_std_(self) -> float:
        self._require_fit()
        return float(self._state["trace_stats"][1])

    @property
    def score_scale_(self) -> float:
        """Std of this model's cosine between unrelated fit texts (score-mixing calibration)."""
        self._require_fit()
        return float(self._state.get("score_scale", 1.0))

    @property
    def n_pairs_(self) -> int:
        self._require_fit()
        return int(self._state["n_pairs"])

    # ------------------------------------------------------------------ persistence
    def get_state(self) -> Tuple[Dict[str, np.ndarray], Dict[str, Any]]:
        """Arrays and JSON metadata describing the fitted posterior."""
        self._require_fit()
        meta = {
            "layer": self.layer,
            "hessian": self.hessian,
            "curvature": self.curvature,
            "loss_temperature": self.loss_temperature,
            "batch_size": self.batch_size,
            "encoder": self.encoder_name,
        }
        return dict(self._state), meta

    @classmethod
    def from_state(cls, arrays: Dict[str, np.ndarray], meta: Dict[str, Any], encoder=None) -> LaplaceEmbedder:
        try:
            obj = cls(
                encoder if encoder is not None else meta.get("encoder"),
                layer=meta["layer"],
                hessian=meta["hessian"],
                curvature=meta["curvature"],
                prior_precision=float(arrays["prior_precision"]),
                loss_temperature=meta["loss_temperature"],
                batch_size=meta["batch_size"],
            )
            need = ("H",) if obj.hessian == "diag" else ("s_in", "u_in", "s_out", "u_out")
            D = int(arrays["dim"])
            for k in need:
                if arrays[k].shape not in ((D,), (D, D)):
                    raise ValueError(f"array {k} has shape {arrays[k].shape}")
            state = {k: arrays[k] for k in ("dim", "prior_precision", "n_pairs", "trace_stats") + need}
            if "score_scale" in arrays:
                state["score_scale"] = arrays["score_scale"]
        except (KeyError, TypeError) as exc:
            from crossembed._io import CorruptFileError

            raise CorruptFileError(f"incomplete LaplaceEmbedder state ({exc})") from None
        obj._state = state
        return obj

    def save(self, path) -> Path:
        """Write the fitted posterior (atomic, checksummed, versioned)."""
        arrays, meta = self.get_state()
        return save_arrays(path, _KIND, arrays, meta)

    @classmethod
    def load(cls, path, *, encoder=None) -> LaplaceEmbedder:
        """Read a posterior written by :meth:`save`; ``encoder`` overrides the stored name."""
        arrays, meta = load_arrays(path, _KIND)
        return cls.from_state(arrays, meta, encoder=encoder)

    def __repr__(self) -> str:
        lam = f"{self.prior_precision_:.3g}" if self.is_fitted else repr(self.prior_precision)
        return f"LaplaceEmbedder({self.encoder_name or type(self.encoder).__name__}, hessian={self.hessian!r}, curvature={self.curvature!r}, prior_precision={lam})"
