"""Post-hoc last-layer Laplace approximation for any text encoder (UEC step 1).

A ``D x D`` linear head ``z = W h`` is put on the pooled, L2-normalised
embedding ``h`` and initialised to the identity, so the MAP (the pretrained
model) and therefore the mean embedding are unchanged; only embeddings are
needed, so black-box encoders work. The curvature of an in-batch InfoNCE loss
on positive text pairs,

    L = sum_b -log softmax_c(<W a_b, W p_c> / tau)[b],

with respect to ``W`` (at ``W = I``) gives a Gaussian posterior over ``W``
whose push-forward through ``z = W h`` is a diagonal Gaussian embedding.

Two posterior forms (classes in :mod:`crossembed.uec.posteriors`):

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

``layer="last_dense"`` (torch sentence-transformers models: minilm, mpnet)
    puts the same two forms on the model's real last layer instead, the last
    block's FFN output dense ``[W b]`` (``encoder.layer[-1].output.dense``,
    ``D x (D_ff + 1)``), as the official UEC code does. The normalised
    sentence embedding is linearised in ``[W b]`` per input,
    ``de ~= M dW x`` with ``x`` the pooled, ``1/sigma``-weighted FFN
    activations and ``M`` the Jacobian of LayerNorm, pooling and L2
    normalisation (:mod:`crossembed.uec.linearisation`; exact up to the
    token average of LayerNorm's rank-one term). The curvature is that of the
    same InfoNCE loss through this linearisation, and the embedding variance
    is ``diag(M Cov(dW x) M^T)``. The official code instead takes
    ``(mean_t a_t)^2 @ Var(W)^T`` as the variance and drops LayerNorm and the
    normalisation. The mean is the pretrained embedding. Measured on minilm:
    sampling ``[W b]`` from the posterior and running the real model gives
    per-input variance traces within 2% of the predicted ones (400 draws,
    ``lambda = 3e4``); on 10k WordNet pairs the marginal likelihood picks
    ``lambda ~ 35-50``, whose traces (~4-5 for a unit vector) lie far outside
    the range where any linearisation holds: read them as relative
    uncertainties (their relative spread over inputs is 0.21 diag / 0.29
    kron, against 0.003 / 0.07 for the head). The fit takes ~5 min on one
    loaded core, two thirds of it the forward passes
    (``scripts/last_dense_fit_time.py``).

``curvature="ggn"`` uses the generalised Gauss-Newton matrix (the softmax
Hessian ``diag(p) - p p^T`` pulled back through the logit Jacobians);
``curvature="ef"`` the empirical Fisher (sum of squared per-pair gradients).
All sums are closed-form matrix products (no per-pair Jacobians), float64.
"""

from __future__ import annotations

import copy
import math
import time
from pathlib import Path
from typing import Any, Dict, Optional, Sequence, Tuple, Type, Union

import numpy as np
from tqdm.auto import tqdm

from crossembed import kernels
from crossembed._io import CorruptFileError, load_arrays, save_arrays
from crossembed._validation import as_matrix, check_choice, check_int, check_positive, check_random_state
from crossembed.uec.curvature import diag_curvature, kron_factors, normalize_rows
from crossembed.uec.gaussian import GaussianEmbedding
from crossembed.uec.linearisation import PooledLinearisation
from crossembed.uec.posteriors import Posterior, last_dense_class, posterior_class
from crossembed.uec.query_head import QueryHead, fit_query_head
from crossembed.uec.rank_head import RankHead, fit_rank_head

__all__ = [
    "LaplaceEmbedder",
    "diag_curvature",
    "kron_factors",
    "normalize_rows",
]

_KIND = "crossembed.uec.LaplaceEmbedder"
_CURVATURES = ("ggn", "ef")
_LAYERS = ("head", "last_dense")
# prior precisions searched by "marglik" / "nll" (log-spaced; refined around the best)
_LAMBDA_GRID = np.logspace(-4, 10, 57)
# state arrays the embedder itself keeps (the posterior form adds its own, see Posterior.array_names)
_OWN_ARRAYS = ("dim", "prior_precision", "n_pairs", "trace_stats")
# absent in files written by older releases
_OPTIONAL_ARRAYS = (
    "score_scale",
    "rank_head",
    "hub_reference",
    "hub_positives",
    "hub_groups",
    "query_head",
    "query_head_penalty",
)
_RANK_HEAD_PAIRS = 20_000
#: fit anchors kept as the queries a document's hubness is measured against (``hubness``): on
#: WordNet (docs/uec.md, a prototype) half the 3,494 anchors cost 0.24 nDCG@10 against all of them
_HUB_REFERENCE_ROWS = 8192
#: a document whose cosine to a fit positive reaches this is that positive (its own pair)
_SAME_TEXT_COSINE = 1.0 - 1e-5


def _log_marginal_likelihood(posterior: Posterior, lam: float) -> float:
    """``0.5 p log(lambda) - 0.5 sum log(h_k + lambda) - 0.5 lambda |W_MAP|^2`` (see the method)."""
    h = posterior.curvature_eigenvalues()
    return float(
        0.5 * posterior.n_params * math.log(lam) - 0.5 * np.log(h + lam).sum() - 0.5 * lam * posterior.map_sq_norm
    )


def _select_marglik(posterior: Posterior) -> float:
    """The grid ``lambda`` maximising the marginal likelihood, refined between its neighbours."""
    vals = [_log_marginal_likelihood(posterior, l) for l in _LAMBDA_GRID]
    best = int(np.argmax(vals))
    fine = np.logspace(
        np.log10(_LAMBDA_GRID[max(best - 1, 0)]), np.log10(_LAMBDA_GRID[min(best + 1, len(_LAMBDA_GRID) - 1)]), 41
    )
    return float(fine[int(np.argmax([_log_marginal_likelihood(posterior, l) for l in fine]))])


def _means(side) -> np.ndarray:
    """The embeddings of a side: normalised rows (head) or a linearisation's ``embeddings``."""
    return side.embeddings if isinstance(side, PooledLinearisation) else side


def _concat(a, b):
    if isinstance(a, PooledLinearisation):
        return PooledLinearisation.concatenate([a, b])
    return np.concatenate([a, b])


class LaplaceEmbedder:
    """Gaussian embeddings from any encoder by a last-layer Laplace approximation.

    Parameters
    ----------
    encoder : str, encoder object or None
        Anything :func:`crossembed.encoders.load_encoder` accepts (``"minilm"``,
        ``"e5"``, a path, a callable, an object with ``encode``). ``None`` is
        allowed when only embeddings are passed (:meth:`fit_embeddings`,
        :meth:`transform`).
    layer : {"head", "last_dense"}
        Where the Laplace posterior lives: an identity-initialised ``D x D``
        head on the pooled normalised embedding (any encoder), or the last
        FFN output dense of a torch sentence-transformers model (module
        docstring; needs the texts, so :meth:`fit` and :meth:`encode` only).
    hessian : {"kron", "diag"}, Posterior subclass or instance
        Posterior form (module docstring, :mod:`crossembed.uec.posteriors`);
        the strings name :class:`~crossembed.uec.posteriors.KronPosterior` and
        :class:`~crossembed.uec.posteriors.DiagPosterior`. ``"diag"`` is the paper's form.
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
    ln_rank : int
        ``layer="last_dense"`` only: directions kept of the token-averaged
        LayerNorm rank-one term (:mod:`crossembed.uec.linearisation`).
    query_head : bool
        Also fit the query head (:mod:`crossembed.uec.query_head`): a linear
        map of this model's queries, the MAP of the same InfoNCE loss with a
        prior at the identity, which :class:`~crossembed.uec.UECEnsemble`
        applies by default. It adds 13-51 s per model at 3,494 pairs on this
        project's 2-core machine (``docs/uec.md``); the mean of
        :meth:`transform` and :meth:`encode` stays the pretrained embedding.

    Attributes
    ----------
    posterior_ : Posterior
        The fitted posterior form.
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
        Seconds :meth:`fit` / :meth:`fit_embeddings` took, the query head included
        (for ``layer="last_dense"`` also the forward passes, which
        ``fit_forward_seconds_`` reports alone).
    query_head_ : QueryHead or None
        The fitted query head (:mod:`crossembed.uec.query_head`), None when
        ``query_head=False`` or in a file from an older release.
    """

    def __init__(
        self,
        encoder=None,
        *,
        layer: str = "head",
        hessian: Union[str, Posterior, Type[Posterior]] = "kron",
        curvature: str = "ggn",
        prior_precision: Union[float, str] = "marglik",
        loss_temperature: float = 0.05,
        batch_size: int = 64,
        random_state=0,
        ln_rank: int = 8,
        query_head: bool = True,
    ):
        self.layer = check_choice(layer, "layer", _LAYERS)
        self.encoder = encoder
        # the string stays the public spelling (and the saved form); the class does the work
        self._posterior_cls = posterior_class(hessian)
        if self.layer == "last_dense":
            self._posterior_cls = last_dense_class(self._posterior_cls)
            if isinstance(hessian, Posterior) and not isinstance(hessian, self._posterior_cls):
                raise ValueError("hessian: a Posterior instance for layer='last_dense' must be a last-dense form")
        self.ln_rank = check_int(ln_rank, "ln_rank", low=1)
        if not isinstance(query_head, (bool, np.bool_)):
            raise TypeError(f"query_head must be a bool, got {type(query_head).__name__}")
        self.query_head = bool(query_head)
        self._posterior_template = hessian if isinstance(hessian, Posterior) else None
        self.hessian = self._posterior_cls.name
        self.curvature = check_choice(curvature, "curvature", _CURVATURES)
        if isinstance(prior_precision, str):
            check_choice(prior_precision, "prior_precision", ("marglik", "nll"))
        else:
            check_positive(prior_precision, "prior_precision")
        self.prior_precision = prior_precision
        self.loss_temperature = check_positive(loss_temperature, "loss_temperature")
        self.batch_size = check_int(batch_size, "batch_size (in-batch negatives)", low=2)
        check_random_state(random_state)  # type check only; fit() draws from it
        self.random_state = random_state
        self._encoder_obj = None
        self._block = None  # the torch model's last dense block (layer="last_dense")
        self._state: Optional[Dict[str, np.ndarray]] = None  # the embedder's own arrays (_OWN_ARRAYS, score_scale)
        self.posterior_: Optional[Posterior] = None

    # ------------------------------------------------------------------ encoder plumbing
    @property
    def encoder_name(self) -> Optional[str]:
        """The name saved with the posterior: the string given, or a loaded encoder's ``name``."""
        if isinstance(self.encoder, str):
            return self.encoder
        name = getattr(self.encoder, "name", None)
        return name if isinstance(name, str) and name else None

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

    @staticmethod
    def _check_texts(texts) -> list:
        if isinstance(texts, str) or not isinstance(texts, Sequence):
            raise TypeError("texts must be a list of strings")
        if len(texts) == 0:
            raise ValueError("texts must not be empty")
        if not all(isinstance(t, str) for t in texts):
            raise TypeError("texts must hold only strings")
        return list(texts)

    def _embed(self, texts, role: str, show_progress_bar: bool, batch_size: int) -> np.ndarray:
        texts = self._check_texts(texts)
        enc = self._get_encoder()
        out = enc.encode(list(texts), batch_size=batch_size, show_progress_bar=show_progress_bar, role=role)
        return as_matrix(out, "encoder output")

    def _get_block(self):
        """The encoder's last dense block (``layer="last_dense"``)."""
        if self._block is None:
            from crossembed.uec.last_dense import last_dense_block

            model = getattr(self._get_encoder(), "torch_model", None)
            if model is None:
                raise ValueError(
                    f"layer='last_dense' needs a torch sentence-transformers encoder (minilm, mpnet), got "
                    f"{self.encoder_name or type(self.encoder).__name__}; use layer='head' for black boxes"
                )
            self._block = last_dense_block(model)
        return self._block

    def _linearise(self, texts, show_progress_bar: bool, batch_size: int) -> PooledLinearisation:
        from crossembed.uec.last_dense import linearise_texts

        block = self._get_block()
        check_int(batch_size, "batch_size", low=1)
        if self.posterior_ is not None and self.posterior_.in_dim_ not in (0, block.in_dim):
            raise ValueError(
                f"the encoder's last dense has {block.in_dim} inputs but the posterior has {self.posterior_.in_dim_}"
            )
        return linearise_texts(
            block,
            texts,
            batch_size=batch_size,
            rank=self.ln_rank,
            num_threads=getattr(self._get_encoder(), "num_threads", None),
            show_progress_bar=show_progress_bar,
        )

    def _require_head(self, what: str) -> None:
        if self.layer != "head":
            raise ValueError(f"{what} needs layer='head' (layer='last_dense' works on texts: use fit()/encode())")

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
        if self.layer == "last_dense":
            t0 = time.perf_counter()
            A = self._linearise([a for a, _ in pairs], show_progress_bar, batch_size)
            P = self._linearise([p for _, p in pairs], show_progress_bar, batch_size)
            self.fit_forward_seconds_ = time.perf_counter() - t0
            self._fit_inputs(A, P, show_progress_bar)
            self.fit_seconds_ = time.perf_counter() - t0  # includes the forward passes
            return self
        A = self._embed([a for a, _ in pairs], "query", show_progress_bar, batch_size)
        P = self._embed([p for _, p in pairs], "passage", show_progress_bar, batch_size)
        return self.fit_embeddings(A, P, show_progress_bar=show_progress_bar)

    def fit_embeddings(self, anchors, positives, *, show_progress_bar: bool = False) -> LaplaceEmbedder:
        """Fit from precomputed pair embeddings (rows of ``anchors`` and ``positives`` pair up)."""
        self._require_head("fit_embeddings()")
        A = as_matrix(anchors, "anchors", allow_float64=True)
        P = as_matrix(positives, "positives", allow_float64=True)
        if A.shape != P.shape:
            raise ValueError(f"positives has shape {P.shape} but anchors has shape {A.shape}")
        if A.shape[0] < 2:
            raise ValueError("need at least 2 pairs (in-batch negatives)")
        t0 = time.perf_counter()
        self._fit_inputs(normalize_rows(A), normalize_rows(P), show_progress_bar)
        self.fit_seconds_ = time.perf_counter() - t0
        return self

    def _fit_inputs(self, A, P, show_progress_bar: bool) -> None:
        """Fit on normalised embeddings (head) or linearisations (last dense) of the pairs."""
        n, D = _means(A).shape
        rng = check_random_state(self.random_state)
        order = rng.permutation(n)
        holdout = None
        if self.prior_precision == "nll":
            n_hold = max(2, int(round(0.2 * n)))
            if n - n_hold < 2:
                raise ValueError("prior_precision='nll' needs at least 4 pairs")
            holdout, order = order[:n_hold], order[n_hold:]
        posterior = self._new_posterior()
        main = self._accumulate(posterior, A, P, order, show_progress_bar)
        if holdout is not None:
            extra = self._accumulate(posterior, A, P, holdout, False)
            lam = self._select_nll(posterior.fit(main), A[holdout], P[holdout])
            main = {k: main[k] + extra[k] for k in main}
        posterior.fit(main)
        if self.prior_precision == "marglik":
            lam = _select_marglik(posterior)
        elif holdout is None:
            lam = float(self.prior_precision)
        self.posterior_ = posterior
        self._state = {"dim": np.int64(D), "prior_precision": np.float64(lam), "n_pairs": np.int64(n)}
        tr = self._var(_concat(A, P)).sum(axis=1)
        self._state["trace_stats"] = np.array([tr.mean(), max(tr.std(), 1e-12)])
        # Spread of this model's cosines between unrelated texts (anchors vs the
        # other pairs' positives): models differ several-fold here (e5 is
        # anisotropic), so score mixing divides each model's score by it.
        m = min(n, 1000)
        cross = _means(A)[:m] @ _means(P)[:m].T
        self._state["score_scale"] = np.float64(max(float(cross[~np.eye(m, dtype=bool)].std()), 1e-12))
        # where the frozen encoder itself fails (uncertainty="rank"): at most _RANK_HEAD_PAIRS pairs,
        # so the in-batch ranks stay O(n^2 D) on a bounded n
        sub = order[:_RANK_HEAD_PAIRS] if n > _RANK_HEAD_PAIRS else slice(None)
        self._state["rank_head"] = fit_rank_head(_means(A)[sub], _means(P)[sub]).to_array()
        # the queries this model was fitted on: what a document's hubness is measured against
        keep = np.sort(order[:_HUB_REFERENCE_ROWS])
        self._state["hub_reference"] = normalize_rows(_means(A)[keep]).astype(np.float32)
        # their positives (once per distinct text): a fit document's own queries are no sign of hubness
        positives = normalize_rows(_means(P)[keep]).astype(np.float32)
        unique, groups = np.unique(positives, axis=0, return_inverse=True)
        self._state["hub_positives"] = unique
        self._state["hub_groups"] = groups.reshape(-1).astype(np.int64)
        if self.query_head:
            head = fit_query_head(
                _means(A)[sub],
                _means(P)[sub],
                tau=self.loss_temperature,
                random_state=int(rng.integers(2**31)),
                show_progress_bar=show_progress_bar,
            )
            self._state["query_head"] = head.weight
            self._state["query_head_penalty"] = np.float64(head.penalty)

    def _batches(self, order: np.ndarray):
        B = self.batch_size
        n_full = max(1, len(order) // B)
        for i in range(n_full):  # the last partial batch joins the final full one
            yield order[i * B : (i + 1) * B] if i < n_full - 1 else order[i * B :]

    def _new_posterior(self) -> Posterior:
        # a given instance is a template (it may carry settings): each fit starts from a fresh copy
        if self._posterior_template is not None:
            posterior = copy.deepcopy(self._posterior_template)
        else:
            posterior = self._posterior_cls()
        if self.layer == "last_dense":
            W = self._get_block().weight_matrix()
            posterior.weight_sq_norm = np.float64((W * W).sum())
        return posterior

    def _accumulate(self, posterior: Posterior, A, P, order, show_progress_bar) -> Dict[str, np.ndarray]:
        """Batch statistics of ``posterior`` summed over the batches of ``order``."""
        tau = self.loss_temperature
        batches = list(self._batches(order))
        it = tqdm(batches, desc=f"Laplace {self.hessian}/{self.curvature}", disable=not show_progress_bar, leave=False)
        totals: Optional[Dict[str, np.ndarray]] = None
        for b in it:
            stats = posterior.batch_statistics(A[b], P[b], tau=tau, curvature=self.curvature)
            totals = stats if totals is None else {k: totals[k] + stats[k] for k in totals}
        return totals

    def log_marginal_likelihood(self, prior_precision: float) -> float:
        """Laplace log evidence up to a constant, as a function of ``lambda``.

        ``0.5 p log(lambda) - 0.5 sum log(h_k + lambda) - 0.5 lambda |W_MAP|^2``
        with ``p = D^2`` parameters, ``h_k`` the curvature eigenvalues and
        ``|I|_F^2 = D`` (zero-mean prior); the data term is constant in ``lambda``.
        """
        self._require_fit()
        return _log_marginal_likelihood(self.posterior_, check_positive(prior_precision, "prior_precision"))

    def _select_nll(self, posterior: Posterior, A_hold, P_hold) -> float:
        """Prior precision minimising the probit-InfoNCE NLL of held-out pairs."""
        tau = self.loss_temperature

        def nll(lam):
            va, vp = posterior.predictive_variance(A_hold, lam), posterior.predictive_variance(P_hold, lam)
            total = 0.0
            for b in self._batches(np.arange(len(A_hold))):
                a, p, qa, qp = _means(A_hold)[b], _means(P_hold)[b], va[b], vp[b]
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
        return self.posterior_.predictive_variance(H, float(self._state["prior_precision"]))

    def transform(self, embeddings) -> GaussianEmbedding:
        """Gaussian embeddings from raw encoder outputs ``(n, D)`` (``layer="head"`` only).

        The mean is the L2-normalised input (the identity head's MAP output).
        """
        self._require_fit()
        self._require_head("transform()")
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
        if self.layer == "last_dense":
            check_choice(role, "role", ("query", "passage"))  # symmetric torch models: the role changes nothing
            lin = self._linearise(self._check_texts(texts), show_progress_bar, batch_size)
            return GaussianEmbedding(lin.embeddings.astype(np.float32), self._var(lin).astype(np.float32))
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
    def rank_head_(self) -> RankHead:
        """The fit pairs' log-rank head (:mod:`crossembed.uec.rank_head`)."""
        self._require_fit()
        if "rank_head" not in self._state:
            raise ValueError("this embedder was saved by an older release without a rank head: refit it")
        return RankHead.from_array(self._state["rank_head"])

    def _model_rows(self, embeddings, *, allow_empty: bool = False) -> np.ndarray:
        """This model's ``(n, D)`` rows from raw embeddings or a :class:`GaussianEmbedding` (its means)."""
        m = as_matrix(
            embeddings.mean if isinstance(embeddings, GaussianEmbedding) else embeddings,
            "embeddings",
            allow_empty=allow_empty,
        )
        if m.shape[1] != self.dim:
            raise ValueError(f"embeddings have dimension {m.shape[1]} but this embedder has {self.dim}")
        return m

    def predicted_log_rank(self, embeddings) -> np.ndarray:
        """(n,) predicted ``log(1 + rank per 1,000 candidates)`` of the right document, per input.

        ``embeddings``: this model's raw embeddings ``(n, D)`` or a
        :class:`GaussianEmbedding` of them (the means are L2-normalised first).
        """
        return self.rank_head_.predict(normalize_rows(self._model_rows(embeddings)))

    @property
    def query_head_(self) -> Optional[QueryHead]:
        """The fitted query head (None when fitted with ``query_head=False`` or saved by an older release)."""
        self._require_fit()
        if "query_head" not in self._state:
            return None
        return QueryHead(self._state["query_head"], float(self._state["query_head_penalty"]), {})

    def map_queries(self, embeddings) -> np.ndarray:
        """(n, D) float32 unit queries mapped by the query head (raw embeddings or a GaussianEmbedding)."""
        head = self.query_head_
        if head is None:
            raise ValueError("this embedder has no query head: refit it with query_head=True")
        return head.apply(self._model_rows(embeddings, allow_empty=True))

    @property
    def hub_reference_(self) -> Optional[np.ndarray]:
        """Unit fit anchors ``(m, D)`` that :meth:`hubness` measures against (None in older files)."""
        self._require_fit()
        return self._state.get("hub_reference")

    def hubness(
        self, embeddings, *, k: int = 10, mapped_queries: bool = False, num_threads: Optional[int] = None
    ) -> np.ndarray:
        """(n,) float64 hubness ``r(d)``: the mean of each input's ``k`` best cosines to the fit anchors.

        A document close to many queries (a hub) gets a high cosine from
        every query; CSLS (Conneau et al., 2018) ranks by ``cos - r(d) / 2``
        instead (:class:`~crossembed.uec.UECEnsemble` ``hubness``). The
        reference is up to 8,192 of the fit pairs' anchors (the queries this
        model saw), so no query collection is needed. An input that is one of
        those pairs' positives (cosine >= 1 - 1e-5) leaves out the anchors
        paired with it: its own queries would otherwise mark every document
        the fit pairs saw as a hub (on WordNet, where every fit gloss is also
        a document and none answers a test query, counting them inflated the
        correction's gain from +0.61 to +0.84 nDCG@10).
        ``embeddings``: this model's raw embeddings ``(n, D)`` or a
        :class:`GaussianEmbedding` (means L2-normalised first); ``k`` is
        capped at the reference size (fewer when an input's own anchors are
        left out; 0 when none remain). ``mapped_queries``: measure against the
        anchors as the query head maps them (what an ensemble that maps its
        queries compares documents with).
        """
        ref = self.hub_reference_
        if ref is None:
            raise ValueError("this embedder was saved by an older release without fit anchors: refit it for hubness")
        if mapped_queries:
            ref = self.map_queries(ref)
        k = check_int(k, "k", low=1)
        m = self._model_rows(embeddings, allow_empty=True)
        if m.shape[0] == 0:
            return np.zeros(0)
        m = normalize_rows(m).astype(np.float32)
        groups, positives = self._state["hub_groups"], self._state["hub_positives"]
        n_ref = ref.shape[0]
        k = min(k, n_ref)
        # enough candidates to drop the largest group of anchors sharing one positive
        width = min(n_ref, k + int(np.bincount(groups).max()))
        # the tiled dot-product top-k (GEH's list kernel); the column lists it also returns are unused
        vals, idx, _, _ = kernels.topk_rows_and_columns(m, ref, width, 1, num_threads=num_threads)
        # an anchor is the input's own when its positive is the input: only listed anchors can matter
        own = kernels.candidate_dots(m, positives, groups[idx], num_threads=num_threads) >= _SAME_TEXT_COSINE
        keep = ~own
        keep &= np.cumsum(keep, axis=1) <= k  # the k best of the others
        count = keep.sum(axis=1)
        total = np.where(keep, vals.astype(np.float64), 0.0).sum(axis=1)
        return np.where(count > 0, total / np.maximum(count, 1), 0.0)

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
            "ln_rank": self.ln_rank,
            "query_head": self.query_head,
        }
        return {**self._state, **self.posterior_.to_arrays()}, meta

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
                ln_rank=meta.get("ln_rank", 8),
                query_head=bool(meta.get("query_head", "query_head" in arrays)),
            )
            D = int(arrays["dim"])
            posterior = obj._posterior_cls.from_arrays(arrays, D)
            state = {k: arrays[k] for k in _OWN_ARRAYS}
            state.update({k: arrays[k] for k in _OPTIONAL_ARRAYS if k in arrays})
        except (KeyError, TypeError) as exc:
            raise CorruptFileError(f"incomplete LaplaceEmbedder state ({exc})") from None
        obj._state = state
        obj.posterior_ = posterior
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
        layer = "" if self.layer == "head" else f", layer={self.layer!r}"
        return f"LaplaceEmbedder({self.encoder_name or type(self.encoder).__name__}{layer}, hessian={self.hessian!r}, curvature={self.curvature!r}, prior_precision={lam})"
