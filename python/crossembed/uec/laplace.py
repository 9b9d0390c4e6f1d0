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
    normalisation. The mean is the pretrained embedding. With the marginal
    likelihood's prior the variances lie far outside the range where the
    linearisation holds: read them as relative uncertainties.

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
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Type, Union

import numpy as np
from tqdm.auto import tqdm

from crossembed._io import CorruptFileError, load_arrays, save_arrays
from crossembed._rows import unit_rows
from crossembed._validation import as_matrix, check_bool, check_choice, check_int, check_positive, check_random_state
from crossembed.uec.gaussian import GaussianEmbedding
from crossembed.uec.heads import ModelHeads
from crossembed.uec.linearisation import PooledLinearisation
from crossembed.uec.posteriors import Posterior, last_dense_class, posterior_class
from crossembed.uec.probe import scramble_sample

__all__ = ["LaplaceEmbedder", "encode_pairs"]

_KIND = "crossembed.uec.LaplaceEmbedder"
_CURVATURES = ("ggn", "ef")
_LAYERS = ("head", "last_dense")
# prior precisions searched by "marglik" / "nll" (log-spaced; refined around the best)
_LAMBDA_GRID = np.logspace(-4, 10, 57)
#: version of the saved embedder state (``meta["format"]``); other versions are refused
FORMAT_VERSION = 2
#: constructor settings saved in the state's metadata under their own names
_SETTINGS = ("layer", "hessian", "curvature", "loss_temperature", "batch_size", "ln_rank", "query_head")


def _log_marginal_likelihood(posterior: Posterior, lam: float) -> float:
    """Laplace log evidence up to a constant, as a function of ``lambda``.

    ``0.5 p log(lambda) - 0.5 sum log(h_k + lambda) - 0.5 lambda |W_MAP|^2`` with ``p`` the
    posterior's parameters, ``h_k`` its curvature eigenvalues and ``W_MAP`` its MAP weights
    (``|I|_F^2 = D`` for the head; zero-mean prior); the data term is constant in ``lambda``.
    """
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


def _select_nll(posterior: Posterior, A_hold, P_hold, *, tau: float, batch_size: int) -> float:
    """The grid ``lambda`` minimising the probit-InfoNCE NLL of held-out pairs."""

    def nll(lam):
        va, vp = posterior.predictive_variance(A_hold, lam), posterior.predictive_variance(P_hold, lam)
        total = 0.0
        for b in _batches(np.arange(len(A_hold)), batch_size):
            a, p, qa, qp = _means(A_hold)[b], _means(P_hold)[b], va[b], vp[b]
            mu = a @ p.T
            sig2 = (a * a) @ qp.T + qa @ (p * p).T + qa @ qp.T
            s = mu / np.sqrt(1.0 + math.pi / 8.0 * sig2) / tau
            s = s - s.max(axis=1, keepdims=True)
            total += float((np.log(np.exp(s).sum(axis=1)) - np.diag(s)).sum())
        return total / len(A_hold)

    vals = [nll(l) for l in _LAMBDA_GRID]
    return float(_LAMBDA_GRID[int(np.argmin(vals))])


def _batches(order: np.ndarray, batch_size: int) -> List[np.ndarray]:
    """``order`` cut into InfoNCE batches; the last partial batch joins the final full one."""
    cuts = [i * batch_size for i in range(max(1, len(order) // batch_size))] + [len(order)]
    return [order[a:b] for a, b in zip(cuts[:-1], cuts[1:])]


def _accumulate(posterior: Posterior, A, P, batches, *, tau: float, curvature: str) -> Dict[str, np.ndarray]:
    """Batch statistics of ``posterior`` summed over ``batches`` (index arrays into the pairs)."""
    totals: Optional[Dict[str, np.ndarray]] = None
    for b in batches:
        stats = posterior.batch_statistics(A[b], P[b], tau=tau, curvature=curvature)
        totals = stats if totals is None else {k: totals[k] + stats[k] for k in totals}
    return totals


def _fit_posterior(
    posterior: Posterior, A, P, order: np.ndarray, prior_precision, *, loss: Dict[str, Any], desc: Optional[str]
) -> Tuple[float, np.ndarray]:
    """Fit ``posterior`` on the pairs in ``order``; returns its prior precision and the pairs not held out.

    ``prior_precision``: a float, ``"marglik"`` or ``"nll"`` (:class:`LaplaceEmbedder`); ``loss``: the
    InfoNCE's ``tau``, ``curvature`` and ``batch_size``; ``desc``: the progress bar's label (None: no bar).
    """
    holdout = None
    if prior_precision == "nll":
        n_hold = max(2, int(round(0.2 * len(order))))
        if len(order) - n_hold < 2:
            raise ValueError("prior_precision='nll' needs at least 4 pairs")
        holdout, order = order[:n_hold], order[n_hold:]
    tau, B = loss["tau"], loss["batch_size"]
    batches = tqdm(_batches(order, B), desc=desc, disable=desc is None, leave=False)
    totals = _accumulate(posterior, A, P, batches, tau=tau, curvature=loss["curvature"])
    lam = prior_precision
    if holdout is not None:
        extra = _accumulate(posterior, A, P, _batches(holdout, B), tau=tau, curvature=loss["curvature"])
        lam = _select_nll(posterior.fit(totals), A[holdout], P[holdout], tau=tau, batch_size=B)
        totals = {k: totals[k] + extra[k] for k in totals}
    posterior.fit(totals)
    if prior_precision == "marglik":
        lam = _select_marglik(posterior)
    return float(lam), order


def _posterior_template(hessian, layer: str) -> Posterior:
    """The unfitted posterior of ``hessian`` for ``layer``, copied for each fit (an instance may carry settings)."""
    form = posterior_class(hessian)
    if layer == "last_dense":
        form = last_dense_class(form)
        if isinstance(hessian, Posterior) and not isinstance(hessian, form):
            raise ValueError("hessian: a Posterior instance for layer='last_dense' must be a last-dense form")
    return hessian if isinstance(hessian, Posterior) else form()


def _means(side) -> np.ndarray:
    """The embeddings of a side: normalised rows (head) or a linearisation's ``embeddings``."""
    return side.embeddings if isinstance(side, PooledLinearisation) else side


def _pair_matrices(anchors, positives, scrambled) -> Tuple[np.ndarray, np.ndarray, Optional[np.ndarray]]:
    """The checked matrices of :meth:`LaplaceEmbedder.fit_embeddings`."""
    A = as_matrix(anchors, "anchors", allow_float64=True)
    P = as_matrix(positives, "positives", allow_float64=True)
    if A.shape != P.shape:
        raise ValueError(f"positives has shape {P.shape} but anchors has shape {A.shape}")
    if A.shape[0] < 2:
        raise ValueError("need at least 2 pairs (in-batch negatives)")
    if scrambled is not None:
        scrambled = as_matrix(scrambled, "scrambled", allow_float64=True)
        if scrambled.shape[1] != A.shape[1]:
            raise ValueError(f"scrambled has dimension {scrambled.shape[1]} but anchors has {A.shape[1]}")
    return A, P, scrambled


def _check_texts(texts) -> list:
    if isinstance(texts, str) or not isinstance(texts, Sequence):
        raise TypeError("texts must be a list of strings")
    if len(texts) == 0:
        raise ValueError("texts must not be empty")
    if not all(isinstance(t, str) for t in texts):
        raise TypeError("texts must hold only strings")
    return list(texts)


def encode_pairs(pairs, encode: Callable[[List[str], str], Any], *, probe_seed: int = 0) -> Tuple[Any, Any, Any]:
    """``(anchors, positives, scrambled)`` embeddings of text pairs: what :meth:`LaplaceEmbedder.fit` fits on.

    ``pairs`` holds at least 2 ``(anchor, positive)`` string pairs; ``encode(texts, role)`` is a
    model's embedding of texts. Anchors are encoded as queries, positives as passages, and
    scrambled copies of (at most 4,096 of) the anchors as queries, the probe head's negatives
    (:func:`~crossembed.uec.probe.scramble_sample` seeded by ``probe_seed``).
    """
    pairs = list(pairs)
    if len(pairs) < 2:
        raise ValueError(f"pairs must hold at least 2 pairs (in-batch negatives), got {len(pairs)}")
    for p in pairs:
        if not (isinstance(p, (tuple, list)) and len(p) == 2 and all(isinstance(t, str) for t in p)):
            raise TypeError("pairs must be (anchor, positive) string pairs")
    anchors = [a for a, _ in pairs]
    scrambled = scramble_sample(anchors, random_state=check_int(probe_seed, "probe_seed", low=0))
    return encode(anchors, "query"), encode([p for _, p in pairs], "passage"), encode(scrambled, "query")


class _TextReader:
    """Texts as the posterior reads them: an encoder's rows, or its last dense block's pooled linearisation.

    ``encoder`` is what :class:`LaplaceEmbedder` takes; it is loaded, and its block found, on first use.
    """

    def __init__(self, encoder):
        self.encoder = encoder
        self._model = self._block = None

    @property
    def name(self) -> Optional[str]:
        """The string given, or the encoder object's ``name``."""
        if isinstance(self.encoder, str):
            return self.encoder
        name = getattr(self.encoder, "name", None)
        return name if isinstance(name, str) and name else None

    def model(self):
        """The encoder object: objects with ``encode`` as they are, names, paths and callables through load_encoder."""
        if self._model is None:
            if self.encoder is None:
                raise ValueError("this LaplaceEmbedder has no encoder; pass embeddings to transform()/fit_embeddings()")
            from crossembed.encoders import load_encoder

            enc = self.encoder
            self._model = enc if hasattr(enc, "encode") and not isinstance(enc, (str, bytes)) else load_encoder(enc)
        return self._model

    def rows(self, texts, role: str, show_progress_bar: bool, batch_size: int) -> np.ndarray:
        """The encoder's raw ``(n, D)`` embeddings of ``texts`` in ``role``."""
        out = self.model().encode(
            _check_texts(texts), batch_size=batch_size, show_progress_bar=show_progress_bar, role=role
        )
        return as_matrix(out, "encoder output")

    def encoding(self, encode, cache_dir, batch_size: int, show_progress_bar: bool):
        """``encode(texts, role)`` for :meth:`LaplaceEmbedder.fit`: the one given, or the encoder's (cached)."""
        if encode is not None:
            if cache_dir is not None:
                raise ValueError("pass encode or cache_dir, not both (encode may cache itself)")
            return encode
        if cache_dir is None:
            return lambda texts, role: self.rows(texts, role, show_progress_bar, batch_size)
        from crossembed.encoders import encode_cached

        enc = self.model()
        return lambda texts, role: encode_cached(
            enc, texts, role=role, cache_dir=cache_dir, batch_size=batch_size, show_progress_bar=show_progress_bar
        )

    def block(self):
        """The encoder's last dense block (``layer="last_dense"``)."""
        if self._block is None:
            from crossembed.uec.last_dense import last_dense_block

            model = getattr(self.model(), "torch_model", None)
            if model is None:
                raise ValueError(
                    f"layer='last_dense' needs a torch sentence-transformers encoder (minilm, mpnet), got "
                    f"{self.name or type(self.encoder).__name__}; use layer='head' for black boxes"
                )
            self._block = last_dense_block(model)
        return self._block

    def linearise(self, texts, show_progress_bar: bool, batch_size: int, *, rank: int, in_dim: int = 0):
        """The :class:`PooledLinearisation` of ``texts``, keeping ``rank`` LayerNorm directions.

        ``in_dim``: the inputs the fitted posterior's block has (0: any).
        """
        from crossembed.uec.last_dense import linearise_texts

        block = self.block()
        check_int(batch_size, "batch_size", low=1)
        if in_dim not in (0, block.in_dim):
            raise ValueError(f"the encoder's last dense has {block.in_dim} inputs but the posterior has {in_dim}")
        return linearise_texts(
            block,
            texts,
            batch_size=batch_size,
            rank=rank,
            num_threads=getattr(self.model(), "num_threads", None),
            show_progress_bar=show_progress_bar,
        )


class LaplaceEmbedder:
    """Gaussian embeddings from any encoder by a last-layer Laplace approximation.

    Parameters
    ----------
    encoder : str, encoder object or None
        Anything :func:`crossembed.encoders.load_encoder` accepts (``"minilm"``, ``"e5"``, a path, a callable,
        an object with ``encode``); ``None`` for embeddings only (:meth:`fit_embeddings`, :meth:`transform`).
    layer : {"head", "last_dense"}
        Where the posterior lives (module docstring): an identity-initialised ``D x D`` head on the pooled
        normalised embedding (any encoder), or the last FFN output dense of a torch sentence-transformers
        model (needs the texts: :meth:`fit` and :meth:`encode` only).
    hessian : {"kron", "diag"}, Posterior subclass or instance
        Posterior form (:mod:`crossembed.uec.posteriors`; the strings name ``KronPosterior`` and
        ``DiagPosterior``). ``"diag"`` is the paper's form; ``"kron"`` (default) has traces that vary
        with the input and grow outside the span of the fit inputs.
    curvature : {"ggn", "ef"}
        Generalised Gauss-Newton or empirical Fisher.
    prior_precision : float or {"marglik", "nll"}
        Isotropic prior precision ``lambda`` on the head (prior mean 0, as in laplace-torch), or how to
        tune it after fitting: the Laplace marginal likelihood (closed form in ``lambda``) or the NLL of
        held-out pairs under the probit-adjusted InfoNCE (20% of the pairs, held out from the curvature
        for the search, then added back).
    loss_temperature : float
        ``tau`` of the InfoNCE loss (0.05, sentence-transformers' default scale 20).
    batch_size : int
        Pairs per InfoNCE batch (the in-batch negatives).
    random_state : int, Generator or None
        Shuffles pairs into batches; the heads' subsample and the query head's seed follow from it.
    ln_rank : int
        ``layer="last_dense"`` only: directions kept of the token-averaged LayerNorm rank-one term
        (:mod:`crossembed.uec.linearisation`).
    query_head : bool
        Also fit the query head (default True; :mod:`crossembed.uec.query_head`), a linear map of this
        model's queries that :class:`~crossembed.uec.UECEnsemble` applies by default. The mean of
        :meth:`transform` and :meth:`encode` stays the pretrained embedding.

    Attributes
    ----------
    posterior_ : Posterior
        The fitted posterior form.
    prior_precision_ : float
        The prior precision in use after :meth:`fit`.
    heads_ : ModelHeads
        What the ensemble uses besides the posterior, fitted on the same pairs
        (:meth:`ModelHeads.fit <crossembed.uec.heads.ModelHeads.fit>`).
    n_pairs_ : int
    fit_seconds_ : float
        Seconds :meth:`fit` / :meth:`fit_embeddings` took, the heads included (for ``layer="last_dense"``
        also the forward passes, which ``fit_forward_seconds_`` reports alone).
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
        # the string stays the public spelling (and the saved form); the template does the work
        self._template = _posterior_template(hessian, self.layer)
        self.ln_rank = check_int(ln_rank, "ln_rank", low=1)
        self.query_head = check_bool(query_head, "query_head")
        self.hessian = self._template.name
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
        self.posterior_: Optional[Posterior] = None
        self.heads_: Optional[ModelHeads] = None

    # ------------------------------------------------------------------ encoder plumbing
    @property
    def encoder(self):
        """The encoder given (setting it drops the loaded one)."""
        return self._reader.encoder

    @encoder.setter
    def encoder(self, encoder) -> None:
        self._reader = _TextReader(encoder)

    @property
    def encoder_name(self) -> Optional[str]:
        """The name saved with the posterior: the string given, or a loaded encoder's ``name``."""
        return self._reader.name

    def _linearise(self, texts, show_progress_bar: bool, batch_size: int) -> PooledLinearisation:
        in_dim = getattr(self.posterior_, "in_dim_", 0)
        return self._reader.linearise(texts, show_progress_bar, batch_size, rank=self.ln_rank, in_dim=in_dim)

    def _require_head(self, what: str) -> None:
        if self.layer != "head":
            raise ValueError(f"{what} needs layer='head' (layer='last_dense' works on texts: use fit()/encode())")

    def _require_fit(self):
        if self.posterior_ is None:
            raise ValueError("this LaplaceEmbedder is not fitted yet; call fit() or load()")

    @property
    def is_fitted(self) -> bool:
        return self.posterior_ is not None

    @property
    def dim(self) -> int:
        self._require_fit()
        return self.posterior_.dim_

    @property
    def prior_precision_(self) -> float:
        self._require_fit()
        return self._prior_precision

    @property
    def n_pairs_(self) -> int:
        self._require_fit()
        return self._n_pairs

    # ------------------------------------------------------------------ fitting
    def fit(
        self,
        pairs,
        *,
        encode: Optional[Callable[[List[str], str], np.ndarray]] = None,
        cache_dir=None,
        probe_seed: Optional[int] = None,
        batch_size: int = 64,
        show_progress_bar: bool = True,
    ) -> LaplaceEmbedder:
        """Fit the posterior, then the heads, on positive text pairs ``[(anchor, positive), ...]``.

        The texts are encoded as :func:`encode_pairs` says (anchors as queries, positives as passages).
        Use pairs disjoint from every evaluation split, covering the languages and domains the embedder will serve.

        Parameters
        ----------
        pairs : sequence of (str, str)
            At least 2 pairs (the in-batch negatives).
        encode : callable or None
            ``encode(texts, role) -> (len(texts), D)``: this model's raw embeddings of
            ``texts`` in ``role`` (``layer="head"`` only), e.g. rows of embeddings computed
            before. Default: the encoder's ``encode`` with ``batch_size``.
        cache_dir : path or None
            Memoise the encoder's embeddings on disk there
            (:func:`crossembed.encoders.encode_cached`; ``layer="head"`` only; not with ``encode``).
        probe_seed : int or None
            Seed of the scrambled anchors (default: ``random_state`` when it is an int, else 0).
        batch_size : int
            Texts per encoder batch (default 64).
        show_progress_bar : bool
        """
        if probe_seed is None:
            probe_seed = self.random_state if isinstance(self.random_state, (int, np.integer)) else 0
        if self.layer == "head":
            A, P, S = encode_pairs(
                pairs, self._reader.encoding(encode, cache_dir, batch_size, show_progress_bar), probe_seed=probe_seed
            )
            return self.fit_embeddings(A, P, scrambled=S, show_progress_bar=show_progress_bar)
        if encode is not None or cache_dir is not None:
            raise ValueError("layer='last_dense' linearises the model itself: pass neither encode nor cache_dir")
        t0 = time.perf_counter()
        A, P, S = encode_pairs(
            pairs, lambda texts, role: self._linearise(texts, show_progress_bar, batch_size), probe_seed=probe_seed
        )
        self.fit_forward_seconds_ = time.perf_counter() - t0
        self._fit_inputs(A, P, S.embeddings, show_progress_bar)
        self.fit_seconds_ = time.perf_counter() - t0  # includes the forward passes
        return self

    def fit_embeddings(self, anchors, positives, *, scrambled=None, show_progress_bar: bool = False) -> LaplaceEmbedder:
        """Fit from precomputed pair embeddings (rows of ``anchors`` and ``positives`` pair up).

        ``scrambled``: embeddings of scrambled anchors (``crossembed.uec.probe.scramble_sample`` of
        the anchor texts, encoded as queries) to fit the probe head on; None fits none.
        """
        self._require_head("fit_embeddings()")
        A, P, scrambled = _pair_matrices(anchors, positives, scrambled)
        t0 = time.perf_counter()
        self._fit_inputs(unit_rows(A), unit_rows(P), scrambled, show_progress_bar)
        self.fit_seconds_ = time.perf_counter() - t0
        return self

    def refit_heads(self, anchors, positives) -> LaplaceEmbedder:
        """A copy whose heads are refitted on other pairs (:meth:`ModelHeads.refit
        <crossembed.uec.heads.ModelHeads.refit>`), the posterior shared; ``self`` is left as it was.

        ``anchors``, ``positives``: (n, D) embeddings of the pairs (rows pair up; normalised here), e.g. the
        means of :meth:`transform` or :meth:`encode`. What cross-fitting a calibration needs: heads that never
        saw the pairs they are judged on.
        """
        self._require_fit()
        A, P, _ = _pair_matrices(anchors, positives, None)
        if A.shape[1] != self.dim:
            raise ValueError(f"anchors has dimension {A.shape[1]} but the posterior has {self.dim}")
        out = copy.copy(self)
        rng = check_random_state(self.random_state)
        out.heads_ = self.heads_.refit(unit_rows(A), unit_rows(P), rng, tau=self.loss_temperature)
        out._n_pairs = A.shape[0]
        return out

    def _fit_inputs(self, A, P, scrambled, show_progress_bar: bool) -> None:
        """Fit the posterior, then the heads, on normalised embeddings (head) or linearisations (last dense)."""
        rng, n = check_random_state(self.random_state), len(_means(A))
        posterior = self._new_posterior()
        loss = {"tau": self.loss_temperature, "curvature": self.curvature, "batch_size": self.batch_size}
        desc = f"Laplace {self.hessian}/{self.curvature}" if show_progress_bar else None
        lam, order = _fit_posterior(posterior, A, P, rng.permutation(n), self.prior_precision, loss=loss, desc=desc)
        self.posterior_, self._prior_precision, self._n_pairs = posterior, lam, n
        both = PooledLinearisation.concatenate([A, P]) if isinstance(A, PooledLinearisation) else np.concatenate([A, P])
        self.heads_ = ModelHeads.fit(
            _means(A),
            _means(P),
            self._var(both).sum(axis=1),
            order,
            rng,
            tau=self.loss_temperature,
            query_head=self.query_head,
            scrambled=scrambled,
            show_progress_bar=show_progress_bar,
        )

    def _new_posterior(self) -> Posterior:
        posterior = copy.deepcopy(self._template)
        if self.layer == "last_dense":
            W = self._reader.block().weight_matrix()
            posterior.weight_sq_norm = np.float64((W * W).sum())
        return posterior

    def log_marginal_likelihood(self, prior_precision: float) -> float:
        """Laplace log evidence up to a constant at prior precision ``lambda`` (:func:`_log_marginal_likelihood`)."""
        self._require_fit()
        return _log_marginal_likelihood(self.posterior_, check_positive(prior_precision, "prior_precision"))

    # ------------------------------------------------------------------ prediction
    def _var(self, H: np.ndarray) -> np.ndarray:
        """Predictive variance of ``z = W h`` for normalised ``H`` (float64)."""
        return self.posterior_.predictive_variance(H, self._prior_precision)

    def transform(self, embeddings) -> GaussianEmbedding:
        """Gaussian embeddings of raw encoder outputs ``(n, D)`` (``layer="head"``); the mean is the unit input."""
        self._require_fit()
        self._require_head("transform()")
        H = as_matrix(embeddings, "embeddings", allow_float64=True, allow_empty=True)
        if H.shape[1] != self.dim:
            raise ValueError(f"embeddings has dimension {H.shape[1]} but the posterior has {self.dim}")
        H = unit_rows(H)
        return GaussianEmbedding(H.astype(np.float32), self._var(H).astype(np.float32))

    def encode(
        self, texts, *, role: str = "query", batch_size: int = 64, show_progress_bar: bool = False
    ) -> GaussianEmbedding:
        """Encode texts to Gaussian embeddings ``(mean, var)``, float32 ``(n, D)``."""
        self._require_fit()
        if self.layer == "last_dense":
            check_choice(role, "role", ("query", "passage"))  # symmetric torch models: the role changes nothing
            lin = self._linearise(_check_texts(texts), show_progress_bar, batch_size)
            return GaussianEmbedding(lin.embeddings.astype(np.float32), self._var(lin).astype(np.float32))
        return self.transform(self._reader.rows(texts, role, show_progress_bar, batch_size))

    # ------------------------------------------------------------------ persistence
    def get_state(self) -> Tuple[Dict[str, np.ndarray], Dict[str, Any]]:
        """Arrays (the posterior's, the heads' and its own) and JSON metadata of the fitted embedder."""
        self._require_fit()
        meta = {"format": FORMAT_VERSION, "encoder": self.encoder_name, **{k: getattr(self, k) for k in _SETTINGS}}
        own = {"dim": np.int64(self.dim), "prior_precision": np.float64(self._prior_precision)}
        own["n_pairs"] = np.int64(self._n_pairs)
        return {**own, **self.heads_.get_state(), **self.posterior_.to_arrays()}, meta

    @classmethod
    def from_state(cls, arrays: Dict[str, np.ndarray], meta: Dict[str, Any], encoder=None) -> LaplaceEmbedder:
        """Rebuild from :meth:`get_state`; ``encoder`` overrides the stored name."""
        found = meta.get("format")
        if found != FORMAT_VERSION:
            raise ValueError(
                f"LaplaceEmbedder state has format version {found!r}, this release reads version {FORMAT_VERSION}: "
                "refit the embedder"
            )
        try:
            lam = float(arrays["prior_precision"])
            settings = {k: meta[k] for k in _SETTINGS}
            obj = cls(encoder if encoder is not None else meta["encoder"], prior_precision=lam, **settings)
            obj.posterior_ = type(obj._template).from_arrays(arrays, int(arrays["dim"]))
            obj.heads_ = ModelHeads.from_state(arrays)
            obj._n_pairs, obj._prior_precision = int(arrays["n_pairs"]), lam
        except (KeyError, TypeError) as exc:
            raise CorruptFileError(f"incomplete LaplaceEmbedder state ({exc})") from None
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
        name = f"{self.encoder_name or type(self.encoder).__name__}{layer}, hessian={self.hessian!r}"
        return f"LaplaceEmbedder({name}, curvature={self.curvature!r}, prior_precision={lam})"
