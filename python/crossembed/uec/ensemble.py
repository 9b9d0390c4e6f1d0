"""Uncertainty-driven convolution of K Gaussian embedders (UEC steps 2-4).

Per input ``x`` and model ``k`` the coefficient is

    pi_k(x) = softmax_k(-t_k(x) / T),

with ``t_k(x) = tr(Sigma_k(x))`` (raw) or that trace standardised by the
model's fit-set trace mean and std (``standardize=True``), because raw traces
of different models live on unrelated scales and would hand every input to
the model with the smallest posterior.

Two ways of mixing, both closed-form Gaussian and both scored with the probit
similarity (:func:`crossembed.probit_scores`) on L2-normalised means:

``mixing="embedding"`` (the paper)
    ``mu = sum_k pi_k mu_k``, ``v = sum_k pi_k^2 v_k`` in one ``D``-dimensional
    space, then ``mu`` is L2-normalised (``v`` scaled alike). Queries and
    documents are convolved with their own coefficients. Models with
    different ``D`` are first mapped to the smallest ``D`` by a fixed random
    orthonormal projection ``R`` (seeded), ``mu' = R^T mu`` and the diagonal of
    ``R^T diag(v) R``.
``mixing="score"``
    The K spaces are kept side by side (direct sum): a query becomes the
    blocks ``[pi_1 mu_1 | ... | pi_K mu_K]`` with variances ``pi_k^2 v_k``, a
    document the unweighted unit blocks ``[mu_1 | ... | mu_K]``. Their probit
    similarity is exactly the probit of ``s = sum_k pi_k(q) s_k`` with
    independent per-model similarities ``s_k ~ N(mu_sk, sig2_sk)``: the
    coefficients mix per-model *scores*, never vectors of unrelated spaces.
    Different ``D`` need no projection. Encode documents with
    ``role="passage"`` and queries with ``role="query"``.

Two rule sets (``rules=``; formulas in :mod:`crossembed.uec.rules`):

``rules="paper"``
    means L2-normalised with the variance scaled alike (``v / |mu|^2``, the
    exact Gaussian of ``x / |mu|``), ``t_k`` the (standardised) trace,
    probit similarity ``mu_s / sqrt(1 + pi/8 sig2_s)``.
``rules="official"`` (the MLAI-Yonsei/UEC code)
    ``v' = v / |v|_2^2`` per input, ``pi_k = softmax_k(sum_d 1/v'_kd / T)``
    (precision sum), similarity ``cos / (1 + beta sig2_s / pi)``.

Which uncertainty drives the query coefficients (``uncertainty=``):

``"laplace"``
    the posterior of each :class:`LaplaceEmbedder` under the chosen rules.
``"confidence"``
    each model's own retrieval confidence over a reference collection
    (:meth:`UECEnsemble.set_reference`, set by :meth:`UECIndex.build` to the
    indexed documents): the calibrated gap ``g_k(q)`` between its top-1
    cosine and the mean of the next ``confidence_top - 1``, turned into the
    score variance ``sigma_k^2(q) = (c_k / g_k(q))^2`` (``c_k`` the model's
    unrelated-pair cosine spread). The coefficients are
    ``softmax_k(-log sigma_k^2(q) / T)`` (``∝ sigma^(-2/T)``, T = 1 is
    inverse-variance weighting), optionally with ``log sigma_k^2`` centred
    by its mean over calibration queries (``center_confidence``) or
    standardised by its mean and standard deviation over them
    (``standardize_confidence``: ``(log sigma_k^2 - m_k) / s_k``, so a model
    that is confident everywhere does not win everywhere; T is then in
    units of those standard deviations). What the
    probit then scores (``confidence_scoring``): ``"replace"`` (default) -
    the query's variance is ``sigma_k^2(q)`` isotropically and documents are
    deterministic, so ``sig2_s = sum_k w_k^2 sigma_k^2(q)`` for unit
    documents: the ranking is the confidence-weighted score and the score
    itself is shrunk by the query's uncertainty; ``"add"`` - ``sigma_k^2``
    added to the Laplace variances; ``"laplace"`` - the Laplace variances
    only. (Measured in ``docs/uec.md``: the kron head's document variances
    in the probit cost 1.3 nDCG@10 on FreeDict once the weights route.)
    Documents carry no retrieval confidence: their coefficients are uniform
    (they only matter for embedding mixing).
``"confidence*laplace"``
    the product of the two: ``sigma_k^2(q) * tr(Sigma_k(q)) / mean_fit tr(Sigma_k)``.
``"rank"``
    each model's predicted log-rank of the right document for the query,
    ``t_k(q)`` (:mod:`crossembed.uec.rank_head`: a ridge head on the model's
    own query embedding, fitted on the fit pairs' in-batch ranks by
    :meth:`LaplaceEmbedder.fit`), with ``pi_k = softmax_k(-t_k(q) / T)``. It
    sees what the posterior cannot (an English-only model on a German word
    ranks it badly) and needs no reference collection. Documents get uniform
    coefficients. With ``confidence_scoring="replace"`` (default) both sides
    are scored as deterministic (the rank head carries no score variance, and
    the kron head's variances cost 2.5 nDCG@10 on FreeDict once the weights
    route); ``"laplace"`` or ``"add"`` score the Laplace variances.

Document hubness (``hubness=beta``, score mixing with the paper's rules;
the default ``beta = 1/2``): a document close to many queries (a hub) gets a
high cosine from all of them, whatever the query. Each model's score becomes
``s_k(q, d) - beta r_k(d)``, with ``r_k(d)`` the mean of the document's
``hubness_k`` best cosines to that model's fit anchors
(:meth:`LaplaceEmbedder.hubness`); ``beta = 1/2`` ranks as CSLS (Conneau et
al., 2018), ``2 cos - r_q - r_d``, whose query term is the same for every
document. It enters as K extra coordinates, ``r_k(d)`` on a document and
``-beta w_k(q)`` on a query (zero variance), so an inner-product index and
the probit kernel rank it unchanged. Measured in ``docs/uec.md``: +0.61
nDCG@10 on WordNet (22.23 vs 21.62) and +2.73 on FreeDict (24.51 vs 21.78)
over the same routing without it.

Query heads (``query_head``, score mixing with the paper's rules; on by
default when every embedder has one): each model's query mean is replaced by
``normalize(mu_k W_k)``, ``W_k`` the map its :class:`LaplaceEmbedder` fitted
on the fit pairs (:mod:`crossembed.uec.query_head`), after the routing
weights are computed from the encoder's own query. Documents are not mapped
(an index of them serves any head); their hubness is measured against the
mapped fit anchors, the queries the documents will actually meet.

Without a reference collection (no :meth:`UECEnsemble.set_reference`, no
:meth:`UECIndex.build` with texts) the confidence forms weight queries by the
Laplace coefficients (``rules``' Laplace formula and default T), with a
``RuntimeWarning``; the reference is never set implicitly by ``encode`` or
``similarity``, so a query's encoding does not depend on call order.
"""

from __future__ import annotations

import copy
import warnings
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
from tqdm.auto import tqdm

import crossembed.uec.rules as _rules
from crossembed import kernels
from crossembed._validation import as_matrix, check_choice, check_int, check_positive, check_random_state
from crossembed.uec._random import int_seed
from crossembed.uec.gaussian import GaussianEmbedding, normalize_gaussian
from crossembed.uec.laplace import LaplaceEmbedder
from crossembed.uec.scoring import BetaCosineScoring, ProbitScoring

__all__ = ["UECEnsemble", "uncertainty_coefficients", "convolve"]

_MIXINGS = ("score", "embedding")
_ROLES = ("query", "passage")
_RULES = ("paper", "official")
_UNCERTAINTIES = ("laplace", "confidence", "confidence*laplace", "rank")
_REFERENCE_UNCERTAINTIES = ("confidence", "confidence*laplace")  # measured over a reference collection
_CONFIDENCE_SCORING = ("replace", "add", "laplace")
#: ``temperature=None`` resolves to these, chosen on the FreeDict dev halves of docs/uec.md: the
#: paper's Laplace form picked the top of its grid (near-uniform weights); the official precision
#: sum is in raw units (T ~ 1 for the diagonal posterior, the official code's form; a Kronecker
#: head's precision sums spread ~1000x wider); confidence routing picked T = 2 (paper rules) and 1-2
#: (official rules). The rank head's T = 1 (paper rules, where the query heads apply) is the best mean
#: over the dev halves of both tasks with query heads (WordNet 23.19 vs 23.14 at 0.5, FreeDict 28.29
#: vs 28.22); without heads FreeDict's dev halves had chosen 0.5, which the official rules keep.
DEFAULT_TEMPERATURES = {
    ("paper", "laplace"): 10.0,
    ("official", "laplace"): 1.0,
    ("paper", "confidence"): 2.0,
    ("official", "confidence"): 1.0,
    ("paper", "confidence*laplace"): 1.0,
    ("official", "confidence*laplace"): 1.0,
    ("paper", "rank"): 1.0,
    ("official", "rank"): 0.5,
}


def uncertainty_coefficients(traces, *, temperature: float, center=None, scale=None) -> np.ndarray:
    """``softmax_k(-t_k / T)`` row-wise, with ``t = (traces - center) / scale`` when given.

    Parameters
    ----------
    traces : array_like, shape (n, K)
        ``tr(Sigma_k(x))`` per input and model.
    temperature : float
        ``T > 0``; small ``T`` picks the least uncertain model, large ``T`` is uniform.
    center, scale : array_like, shape (K,), optional
        Per-model standardisation.

    Returns
    -------
    ndarray, shape (n, K), float64, rows sum to 1
    """
    t = as_matrix(traces, "traces", dtype=np.float64, allow_float64=True)
    T = check_positive(temperature, "temperature")
    if center is not None:
        t = t - np.asarray(center, dtype=np.float64)[None, :]
    if scale is not None:
        t = t / np.asarray(scale, dtype=np.float64)[None, :]
    z = -t / T
    z -= z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def _log_variance_moments(u: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Per-model mean and standard deviation of ``log sigma^2`` over calibration rows ``u`` (n, K).

    A spread below 1e-12 (one calibration query, or a model whose confidence
    never moves) counts as 1, so the z-score stays finite.
    """
    t = np.log(np.asarray(u, dtype=np.float64))
    sd = t.std(axis=0)
    return t.mean(axis=0), np.where(sd > 1e-12, sd, 1.0)


def convolve(components: Sequence[GaussianEmbedding], weights) -> GaussianEmbedding:
    """Gaussian convolution ``N(sum_k pi_k mu_k, sum_k pi_k^2 v_k)`` (same ``D``), float64 sums."""
    w = as_matrix(weights, "weights", dtype=np.float64, allow_float64=True, nonnegative=True)
    if w.shape != (len(components[0]), len(components)):
        raise ValueError(f"weights must have shape {(len(components[0]), len(components))}, got {w.shape}")
    mu = sum(w[:, k : k + 1] * c.mean.astype(np.float64) for k, c in enumerate(components))
    var = sum((w[:, k : k + 1] ** 2) * c.var.astype(np.float64) for k, c in enumerate(components))
    return GaussianEmbedding(mu.astype(np.float32), var.astype(np.float32), w.astype(np.float32))


def _projection(d_from: int, d_to: int, seed: int) -> np.ndarray:
    """A fixed random ``d_from x d_to`` matrix with orthonormal columns."""
    q, _ = np.linalg.qr(check_random_state(seed).normal(size=(d_from, d_to)))
    return q


class UECEnsemble:
    """Uncertainty-weighted ensemble of :class:`LaplaceEmbedder` s.

    Parameters
    ----------
    embedders : sequence of LaplaceEmbedder
        Fitted embedders (K >= 1).
    temperature : float or None
        ``T`` of the coefficients: in units of the standardised trace for
        ``rules="paper"`` with ``uncertainty="laplace"``, of the precision sum
        for ``rules="official"``, of ``log sigma^2`` for the confidence
        uncertainties. ``None`` takes :data:`DEFAULT_TEMPERATURES` for the
        chosen rules and uncertainty (what the dev halves of ``docs/uec.md``
        chose). Tune it on your own dev split.
    mixing : {"score", "embedding"}
        See the module docstring. ``"score"`` is the default (+0.45 and +1.67
        nDCG@10 over embedding mixing on the two real tasks, ``docs/uec.md``);
        ``"embedding"`` is the paper's form.
    weights : {"uncertainty", "uniform"} or sequence of K floats
        Per-input uncertainty coefficients (UEC), ``1/K`` (uniform ensemble,
        the "- Unc Conv" ablation) or fixed global weights (weighted ensemble).
    standardize : bool
        Standardise each model's trace by its fit-set mean and std first.
    use_variance : bool
        Score with the probit similarity (True) or the plain dot product of
        the means (False, the "- Unc Sim" ablation).
    calibrate_scores : bool
        Score mixing only: divide each model's similarity by its cosine spread
        between unrelated fit texts (:attr:`LaplaceEmbedder.score_scale_`),
        so an anisotropic model (e5: unrelated texts at ~0.78) is not drowned
        out by models with a wider score range. Measured in ``docs/uec.md``.
    rules : {"paper", "official"}
        Variance normalisation, Laplace coefficient formula and similarity
        (module docstring).
    uncertainty : {"laplace", "confidence", "confidence*laplace", "rank"}
        What drives the per-query coefficients when ``weights="uncertainty"``
        (module docstring). The confidence forms need a reference collection
        (:meth:`set_reference`, or build an index).
    beta : float
        ``beta >= 0`` of the official similarity (``rules="official"`` only).
    confidence_top : int
        The gap compares the top-1 cosine with the mean of the next
        ``confidence_top - 1`` (default 20: the next 19).
    center_confidence : bool
        Subtract each model's mean ``log sigma^2`` over the calibration
        queries given to :meth:`set_reference` (removes a model's overall
        confidence level, keeps its per-query variation).
    standardize_confidence : bool
        Also divide the centred ``log sigma^2`` by its per-model standard
        deviation over the calibration queries (a per-model z-score; implies
        centring). Measured in ``docs/uec.md``: it removes the overall lead
        of the anisotropic multilingual model and costs nDCG on FreeDict.
    confidence_scoring : {"replace", "add", "laplace"}
        Which variances the probit scores under the confidence uncertainties
        (module docstring).
    hubness : float or None
        ``beta >= 0``, the weight of each document's hubness subtracted from
        its per-model scores (module docstring; 0 turns it off). ``None``:
        1/2 (CSLS) for score mixing under the paper's rules, 0 otherwise
        (embedding mixing has no per-model scores, and the official cosine
        would renormalise the extra coordinates).
    hubness_k : int
        A document's hubness is the mean of its ``hubness_k`` best cosines to
        the fit anchors (10, as CSLS).
    query_head : bool or None
        Map each model's queries by its fitted query head
        (:mod:`crossembed.uec.query_head`) before scoring; documents, the
        routing and the index are unchanged, and hubness is measured against
        the mapped fit anchors. ``None``: on for score mixing under the
        paper's rules when every embedder has a head, off otherwise. Measured
        in ``docs/uec.md``.
    random_state : int, Generator or None
        Seed of the projections used when ``mixing="embedding"`` and the
        models' dimensions differ (None or a Generator: one int seed is
        drawn and kept, so a saved ensemble rebuilds the same projections).
    """

    def __init__(
        self,
        embedders: Sequence[LaplaceEmbedder],
        *,
        temperature: Optional[float] = None,
        mixing: str = "score",
        weights: Union[str, Sequence[float]] = "uncertainty",
        standardize: bool = True,
        use_variance: bool = True,
        calibrate_scores: bool = True,
        rules: str = "paper",
        uncertainty: str = "rank",
        beta: float = 1.0,
        confidence_top: int = 20,
        center_confidence: bool = False,
        standardize_confidence: bool = False,
        confidence_scoring: str = "replace",
        hubness: Optional[float] = None,
        hubness_k: int = 10,
        query_head: Optional[bool] = None,
        random_state=0,
    ):
        embedders = list(embedders) if not isinstance(embedders, LaplaceEmbedder) else [embedders]
        if not embedders:
            raise ValueError("embedders must hold at least one LaplaceEmbedder")
        for e in embedders:
            if not isinstance(e, LaplaceEmbedder):
                raise TypeError(f"embedders must hold LaplaceEmbedder objects, got {type(e).__name__}")
            if not e.is_fitted:
                raise ValueError("every embedder must be fitted (call fit() or load())")
        self.embedders = embedders
        self.rules = check_choice(rules, "rules", _RULES)
        self.uncertainty = check_choice(uncertainty, "uncertainty", _UNCERTAINTIES)
        if temperature is None:
            temperature = DEFAULT_TEMPERATURES[(self.rules, self.uncertainty)]
        self.temperature = check_positive(temperature, "temperature")
        self.beta = check_positive(beta, "beta", allow_zero=True)
        self.confidence_top = check_int(confidence_top, "confidence_top", low=2)
        self.standardize_confidence = bool(standardize_confidence)
        # a z-score is centred by definition: one flag asks for the calibration queries
        self.center_confidence = bool(center_confidence) or self.standardize_confidence
        self.confidence_scoring = check_choice(confidence_scoring, "confidence_scoring", _CONFIDENCE_SCORING)
        self.reference_: Optional[List[np.ndarray]] = None
        self.confidence_center_: Optional[np.ndarray] = None
        self.confidence_spread_: Optional[np.ndarray] = None
        self.mixing = check_choice(mixing, "mixing", _MIXINGS)
        if isinstance(weights, str):
            if weights not in ("uncertainty", "uniform"):
                raise ValueError(f"weights must be 'uncertainty', 'uniform' or K numbers, got {weights!r}")
            self.weights = weights
        else:
            w = as_matrix(weights, "weights", ndim=1, dtype=np.float64, nonnegative=True)
            if w.shape[0] != len(embedders) or w.sum() <= 0:
                raise ValueError(f"weights must hold {len(embedders)} non-negative numbers with a positive sum")
            self.weights = w / w.sum()
        self.hubness = self._check_hubness(hubness)
        self.hubness_k = check_int(hubness_k, "hubness_k", low=1)
        self.query_head = self._check_query_head(query_head)
        self.standardize = bool(standardize)
        self.use_variance = bool(use_variance)
        self.calibrate_scores = bool(calibrate_scores)
        self.random_state = int_seed(random_state)
        dims = [e.dim for e in embedders]
        self._proj: Dict[int, np.ndarray] = {}
        if mixing == "embedding" and len(set(dims)) > 1:
            d = min(dims)
            self._proj = {k: _projection(dk, d, self.random_state + k) for k, dk in enumerate(dims) if dk != d}

    @property
    def _scores_per_model(self) -> bool:
        """Score mixing under the paper's rules: per-model scores a hubness term or a query head can adjust."""
        return self.mixing == "score" and self.rules == "paper"

    def _check_hubness(self, hubness: Optional[float]) -> float:
        """Resolve ``hubness=None`` and check that the embedders can measure it."""
        supported = self._scores_per_model
        if hubness is None:
            hubness = 0.5 if supported else 0.0
        beta = check_positive(hubness, "hubness", allow_zero=True)
        if beta > 0 and not supported:
            raise ValueError("hubness > 0 needs mixing='score' and rules='paper' (per-model scores, probit similarity)")
        if beta > 0:
            for k, e in enumerate(self.embedders):
                if e.hub_reference_ is None:
                    raise ValueError(
                        f"embedders[{k}] was saved by an older release without fit anchors: refit it, or pass hubness=0"
                    )
        return beta

    def _check_query_head(self, query_head: Optional[bool]) -> bool:
        """Resolve ``query_head=None``: the heads are used where score mixing can take them and all exist."""
        supported = self._scores_per_model
        missing = [k for k, e in enumerate(self.embedders) if e.query_head_ is None]
        if query_head is None:
            return supported and not missing
        if not isinstance(query_head, (bool, np.bool_)):
            raise TypeError(f"query_head must be a bool or None, got {type(query_head).__name__}")
        if query_head and not supported:
            raise ValueError("query_head=True needs mixing='score' and rules='paper' (per-model scores)")
        if query_head and missing:
            raise ValueError(
                f"embedders[{missing[0]}] has no query head (fitted with query_head=False or by an older release): "
                "refit it, or pass query_head=False"
            )
        return bool(query_head)

    @property
    def n_models(self) -> int:
        return len(self.embedders)

    @property
    def dim(self) -> int:
        """Dimension of the encoded means (``sum D_k``, plus K hubness coordinates, for score mixing)."""
        dims = [e.dim for e in self.embedders]
        if self.mixing == "embedding":
            return min(dims)
        return sum(dims) + (self.n_models if self.hubness > 0 else 0)

    # ------------------------------------------------------------------ maths
    @property
    def needs_reference(self) -> bool:
        """True when the coefficients use retrieval confidence (a reference collection)."""
        return self._routed_by(_REFERENCE_UNCERTAINTIES)

    def _routed_by(self, kinds: Tuple[str, ...]) -> bool:
        """Whether the query coefficients come from one of these uncertainties."""
        return isinstance(self.weights, str) and self.weights == "uncertainty" and self.uncertainty in kinds

    @property
    def scoring(self):
        """The scoring object this ensemble scores with (:mod:`crossembed.uec.scoring`)."""
        if self.rules == "official":
            return BetaCosineScoring(self.beta)
        return ProbitScoring(self.use_variance)

    @property
    def has_reference(self) -> bool:
        """True once a reference collection is set (:meth:`with_reference`)."""
        return self.reference_ is not None

    def with_reference(self, documents, *, queries=None) -> UECEnsemble:
        """A new ensemble with the retrieval-confidence reference collection; ``self`` is left as it was.

        ``documents`` and ``queries`` as for :meth:`set_reference`.
        """
        return copy.copy(self).set_reference(documents, queries=queries)

    def set_reference(self, documents, *, queries=None) -> UECEnsemble:
        """The collection the retrieval confidence is measured over (K items, one per model).

        Each item is model ``k``'s documents as a :class:`GaussianEmbedding`
        (e.g. :meth:`LaplaceEmbedder.transform` of cached embeddings) or an
        ``(N, D_k)`` array; only the L2-normalised means are kept (and saved).
        Needs ``N >= 2`` (with ``N < confidence_top`` the gap uses all ``N``). ``queries`` (K items of the same kinds,
        e.g. the Laplace fit anchors) calibrate ``center_confidence``: the mean
        ``log sigma_k^2`` over them is kept. Returns ``self``.
        """
        if isinstance(documents, (GaussianEmbedding, np.ndarray)):
            raise TypeError("documents must be a sequence of K GaussianEmbeddings or arrays (one per model)")
        docs = list(documents)
        if len(docs) != self.n_models:
            raise ValueError(f"documents must hold {self.n_models} items (one per model), got {len(docs)}")
        ref = []
        for k, d in enumerate(docs):
            m = self._model_matrix(d, k, "documents")
            if m.shape[0] < 2:
                raise ValueError(f"documents[{k}] has {m.shape[0]} rows, need at least 2")
            norm = np.linalg.norm(m.astype(np.float64), axis=1, keepdims=True)
            ref.append((m / np.maximum(norm, 1e-30)).astype(np.float32))
        if len({r.shape[0] for r in ref}) != 1:
            raise ValueError("documents must hold the same number of rows for every model")
        self.reference_ = ref
        self.confidence_center_ = None
        self.confidence_spread_ = None
        if queries is not None:
            if isinstance(queries, (GaussianEmbedding, np.ndarray)) or len(queries) != self.n_models:
                raise ValueError(f"queries must hold {self.n_models} items (one per model)")
            qs = []
            for k, q in enumerate(queries):
                m = self._model_matrix(q, k, "queries")
                qs.append(GaussianEmbedding(m, np.zeros_like(m)))
            self.confidence_center_, self.confidence_spread_ = _log_variance_moments(self.confidence_variance(qs))
        return self

    def _model_matrix(self, item, k: int, name: str) -> np.ndarray:
        """Model ``k``'s means of ``item`` (a GaussianEmbedding or an array), checked against its dimension."""
        m = as_matrix(item.mean if isinstance(item, GaussianEmbedding) else item, f"{name}[{k}]")
        if m.shape[1] != self.embedders[k].dim:
            raise ValueError(f"{name}[{k}] has dimension {m.shape[1]} but embedder {k} has {self.embedders[k].dim}")
        return m

    def confidence_variance(self, components: Sequence[GaussianEmbedding], *, num_threads=None) -> np.ndarray:
        """``sigma_k^2(q) = (c_k / g_k(q))^2`` of shape (n, K), float64 (module docstring)."""
        if self.reference_ is None:
            raise ValueError(
                f"uncertainty={self.uncertainty!r} needs a reference collection: call set_reference() "
                "or build a UECIndex with this ensemble"
            )
        cols = []
        for k, c in enumerate(components):
            scale = self.embedders[k].score_scale_
            gap = _rules.retrieval_gap(
                c.mean,
                self.reference_[k],
                top=min(self.confidence_top, self.reference_[k].shape[0]),
                scale=scale,
                num_threads=num_threads,
            )
            cols.append(_rules.confidence_variance(gap, scale))
        return np.stack(cols, axis=1)

    def _laplace_logits(self, components: Sequence[GaussianEmbedding]) -> np.ndarray:
        """Logits ``z`` (n, K) of the Laplace coefficients ``softmax(z / T)``."""
        if self.rules == "official":
            return np.stack([_rules.precision_sum(c.var) for c in components], axis=1)
        traces = np.stack([c.trace() for c in components], axis=1)
        if self.standardize:
            center = np.array([e.trace_mean_ for e in self.embedders])
            scale = np.array([e.trace_std_ for e in self.embedders])
            traces = (traces - center[None, :]) / scale[None, :]
        return -traces

    def coefficients(
        self, components: Sequence[GaussianEmbedding], *, role: str = "query", confidence_var=None
    ) -> np.ndarray:
        """``pi`` of shape (n, K) for per-model Gaussians of the same inputs.

        ``components`` are as :meth:`combine` prepares them (normalised under
        the rules). ``confidence_var`` (n, K) reuses
        :meth:`confidence_variance` (computed here when needed and not given).
        """
        check_choice(role, "role", _ROLES)
        n = len(components[0])
        if isinstance(self.weights, np.ndarray):
            return np.tile(self.weights, (n, 1))
        if self.weights == "uniform":
            return np.full((n, self.n_models), 1.0 / self.n_models)
        if self.uncertainty == "laplace":
            return _rules.softmax_rows(self._laplace_logits(components) / self.temperature)
        if role == "passage":  # documents carry no retrieval confidence and no rank
            if self.uncertainty in ("confidence", "rank"):
                return np.full((n, self.n_models), 1.0 / self.n_models)
            return _rules.softmax_rows(self._laplace_logits(components) / self.temperature)
        if self.uncertainty == "rank":
            t = np.stack([e.predicted_log_rank(c.mean) for e, c in zip(self.embedders, components)], axis=1)
            return _rules.softmax_rows(-t / self.temperature)
        u = self.confidence_variance(components) if confidence_var is None else np.asarray(confidence_var)
        t = np.log(u)
        if self.center_confidence:
            if self.confidence_center_ is None:
                raise ValueError(
                    "center_confidence=True needs calibration queries: set_reference(documents, queries=...)"
                )
            t = t - self.confidence_center_[None, :]
            if self.standardize_confidence:
                if self.confidence_spread_ is None:
                    raise ValueError("standardize_confidence=True needs the spread of calibration queries")
                t = t / self.confidence_spread_[None, :]
        if self.uncertainty == "confidence*laplace":
            tr = np.stack([c.trace() for c in components], axis=1)
            t = t + np.log(np.maximum(tr, 1e-300) / np.array([e.trace_mean_ for e in self.embedders])[None, :])
        return _rules.softmax_rows(-t / self.temperature)

    def _prepare(self, c: GaussianEmbedding) -> GaussianEmbedding:
        """Unit mean; the variance by the rules (paper: ``v / |mu|^2``, official: ``v / |v|^2``)."""
        g = normalize_gaussian(c)
        if self.rules == "official":
            g = GaussianEmbedding(g.mean, _rules.normalize_variance_official(c.var).astype(np.float32), g.weights)
        return g

    def combine(self, components: Sequence[GaussianEmbedding], *, role: str = "query") -> GaussianEmbedding:
        """Ensemble Gaussians from the K models' Gaussians of the same inputs.

        Parameters
        ----------
        components : sequence of K GaussianEmbedding
            Model ``k``'s output for the same ``n`` inputs (e.g. from
            :meth:`LaplaceEmbedder.transform` of cached embeddings).
        role : {"query", "passage"}
            Documents stay unweighted for ``mixing="score"`` and carry no
            retrieval confidence.
        """
        check_choice(role, "role", _ROLES)
        comps = list(components)
        if len(comps) != self.n_models:
            raise ValueError(f"components must hold {self.n_models} GaussianEmbeddings, got {len(comps)}")
        n = len(comps[0]) if comps and isinstance(comps[0], GaussianEmbedding) else None
        for k, c in enumerate(comps):
            if not isinstance(c, GaussianEmbedding):
                raise TypeError(f"components[{k}] must be a GaussianEmbedding, got {type(c).__name__}")
            if len(c) != n:
                raise ValueError(f"components[{k}] has {len(c)} rows but components[0] has {n}")
            if c.dim != self.embedders[k].dim:
                raise ValueError(f"components[{k}] has dimension {c.dim} but embedder {k} has {self.embedders[k].dim}")
        comps = [self._prepare(c) for c in comps]
        routed, fallback = self.needs_reference, False
        if routed and role == "query" and self.reference_ is None:
            warnings.warn(
                f"uncertainty={self.uncertainty!r} has no reference collection yet (set_reference(), an index, or "
                "encode the documents first): these queries are weighted by the Laplace posterior",
                RuntimeWarning,
                stacklevel=2,
            )
            routed, fallback = False, True
        u = self.confidence_variance(comps) if role == "query" and routed else None
        if fallback:
            pi = _rules.softmax_rows(self._laplace_logits(comps) / DEFAULT_TEMPERATURES[(self.rules, "laplace")])
        else:
            pi = self.coefficients(comps, role=role, confidence_var=u)
        if routed and self.confidence_scoring != "laplace":
            if role == "passage" and self.confidence_scoring == "replace":  # documents: deterministic
                comps = [GaussianEmbedding(c.mean, np.zeros_like(c.var)) for c in comps]
            elif u is not None:  # queries: isotropic sigma_k^2 (adds exactly sigma_k^2 to sig2_s of a unit document)
                keep = 0.0 if self.confidence_scoring == "replace" else 1.0
                comps = [
                    GaussianEmbedding(c.mean, (keep * c.var + u[:, k : k + 1]).astype(np.float32))
                    for k, c in enumerate(comps)
                ]
        if self._routed_by(("rank",)) and self.confidence_scoring == "replace":
            # the rank head is no score variance: "replace" scores deterministic Gaussians (the weighted
            # cosine). Measured on FreeDict (docs/uec.md): kron variances in the probit cost 2.5 nDCG@10.
            comps = [GaussianEmbedding(c.mean, np.zeros_like(c.var)) for c in comps]
        if self.query_head and role == "query":  # after the routing: the rank head reads the encoder's own query
            comps = [GaussianEmbedding(e.map_queries(c.mean), c.var) for e, c in zip(self.embedders, comps)]
        if self.mixing == "score":
            w = pi * self._score_scales()[None, :] if role == "query" else np.ones_like(pi)
            means = [w[:, k : k + 1] * c.mean for k, c in enumerate(comps)]
            var = [(w[:, k : k + 1] ** 2) * c.var for k, c in enumerate(comps)]
            if self.hubness > 0:  # <[-beta w(q) | r(d)]> = -beta sum_k w_k(q) r_k(d)
                means.append(self._hub_coordinates(comps, w, role))
                var.append(np.zeros((n, self.n_models)))
            mean, var = np.concatenate(means, axis=1), np.concatenate(var, axis=1)
            return GaussianEmbedding(mean.astype(np.float32), var.astype(np.float32), pi.astype(np.float32))
        comps = [self._project(k, c) for k, c in enumerate(comps)]
        out = convolve(comps, pi)
        # the official code scores the unnormalised convolution (its cosine normalises the means itself)
        return out if self.rules == "official" else normalize_gaussian(out)

    def _hub_coordinates(self, comps: Sequence[GaussianEmbedding], w: np.ndarray, role: str) -> np.ndarray:
        """The K hubness coordinates (module docstring): ``-beta w_k(q)`` or ``r_k(d)``."""
        if role == "query":
            return -self.hubness * w
        return np.stack(
            [
                e.hubness(c.mean, k=self.hubness_k, mapped_queries=self.query_head)
                for e, c in zip(self.embedders, comps)
            ],
            axis=1,
        )

    def _score_scales(self) -> np.ndarray:
        """Per-model factors putting the K cosine scales on one footing (score mixing).

        ``c_k = g / s_k`` with ``s_k`` the model's cosine spread between
        unrelated fit texts and ``g`` their geometric mean (so the overall
        magnitude, and with it the probit's shrinkage, stays as before).
        """
        if not self.calibrate_scores:
            return np.ones(self.n_models)
        s = np.array([e.score_scale_ for e in self.embedders])
        return np.exp(np.log(s).mean()) / s

    def _project(self, k: int, c: GaussianEmbedding) -> GaussianEmbedding:
        R = self._proj.get(k)
        if R is None:
            return c
        return GaussianEmbedding((c.mean @ R).astype(np.float32), (c.var @ (R * R)).astype(np.float32))

    # ------------------------------------------------------------------ text API
    def encode(
        self, texts, *, role: str = "query", batch_size: int = 64, show_progress_bar: bool = True
    ) -> GaussianEmbedding:
        """Encode texts with every model and convolve: ``GaussianEmbedding(mean, var, weights)``."""
        comps = self.encode_components(texts, role=role, batch_size=batch_size, show_progress_bar=show_progress_bar)
        return self.combine(comps, role=role)

    def encode_components(
        self, texts, *, role: str = "query", batch_size: int = 64, show_progress_bar: bool = True
    ) -> List[GaussianEmbedding]:
        """Each model's Gaussians of ``texts`` (before combining), one per embedder."""
        check_choice(role, "role", _ROLES)
        bar = tqdm(self.embedders, desc=f"UEC encode ({role})", disable=not show_progress_bar, unit="model")
        return [e.encode(texts, role=role, batch_size=batch_size, show_progress_bar=False) for e in bar]

    def _scoring_inputs(self, g: GaussianEmbedding, name: str) -> Tuple[np.ndarray, np.ndarray]:
        if not isinstance(g, GaussianEmbedding):
            raise TypeError(f"{name} must be a GaussianEmbedding (from encode()), got {type(g).__name__}")
        if g.dim != self.dim:
            raise ValueError(f"{name} has dimension {g.dim} but this ensemble produces {self.dim}")
        return g.mean, (g.var if self.use_variance else np.zeros_like(g.var))

    def similarity(self, a, b, *, num_threads: Optional[int] = None) -> np.ndarray:
        """Probit similarity matrix ``(len(a), len(b))`` between encoded queries ``a`` and documents ``b``.

        Strings are encoded first (``a`` as queries, ``b`` as passages). With
        ``use_variance=False`` this is the dot product of the means.
        """
        if isinstance(b, (list, tuple)) and (not b or isinstance(b[0], str)):
            b = self.encode(list(b), role="passage", show_progress_bar=False)
        if isinstance(a, (list, tuple)) and (not a or isinstance(a[0], str)):
            a = self.encode(list(a), role="query", show_progress_bar=False)
        mq, vq = self._scoring_inputs(a, "a")
        mc, vc = self._scoring_inputs(b, "b")
        if self.rules == "official":
            return _rules.beta_scores(mq, vq, mc, vc, beta=self.beta, num_threads=num_threads)
        return kernels.probit_scores(mq, vq, mc, vc, num_threads=num_threads)

    def topk(self, queries: GaussianEmbedding, docs, k: int, *, candidates=None, num_threads: Optional[int] = None):
        """Best ``k`` documents per query under this ensemble's similarity.

        ``docs`` is a passage :class:`GaussianEmbedding` (or, for the probit
        rules, a prepared :class:`crossembed.ProbitDocs`); ``candidates``
        (Q, M) int64 reranks only those rows. Returns ``(scores, indices)``,
        best first.
        """
        mq, vq = self._scoring_inputs(queries, "queries")
        if isinstance(docs, kernels.ProbitDocs):
            if self.rules == "official":
                raise TypeError("docs must be a GaussianEmbedding for rules='official'")
            return docs.top_k(mq, vq, k, candidates=candidates, num_threads=num_threads)
        mc, vc = self._scoring_inputs(docs, "docs")
        if self.rules == "official":
            return _rules.beta_topk(mq, vq, mc, vc, k, beta=self.beta, candidates=candidates, num_threads=num_threads)
        return kernels.probit_topk(mq, vq, mc, vc, k, candidates=candidates, num_threads=num_threads)

    # ------------------------------------------------------------------ persistence
    def get_state(self) -> Tuple[Dict[str, np.ndarray], Dict[str, Any]]:
        """Arrays (prefixed ``m{k}.``) and JSON metadata of the whole ensemble."""
        arrays: Dict[str, np.ndarray] = {}
        metas = []
        for k, e in enumerate(self.embedders):
            arr, meta = e.get_state()
            arrays.update({f"m{k}.{name}": v for name, v in arr.items()})
            metas.append(meta)
        if self.reference_ is not None:
            arrays.update({f"ref{k}": r for k, r in enumerate(self.reference_)})
        if self.confidence_center_ is not None:
            arrays["confidence_center"] = self.confidence_center_
        if self.confidence_spread_ is not None:
            arrays["confidence_spread"] = self.confidence_spread_
        weights = self.weights if isinstance(self.weights, str) else [float(x) for x in self.weights]
        meta = {
            "embedders": metas,
            "temperature": self.temperature,
            "mixing": self.mixing,
            "weights": weights,
            "standardize": self.standardize,
            "use_variance": self.use_variance,
            "calibrate_scores": self.calibrate_scores,
            "rules": self.rules,
            "uncertainty": self.uncertainty,
            "beta": self.beta,
            "confidence_top": self.confidence_top,
            "center_confidence": self.center_confidence,
            "standardize_confidence": self.standardize_confidence,
            "confidence_scoring": self.confidence_scoring,
            "hubness": self.hubness,
            "hubness_k": self.hubness_k,
            "query_head": self.query_head,
            "has_reference": self.reference_ is not None,
            "random_state": self.random_state,
        }
        return arrays, meta

    @classmethod
    def from_state(cls, arrays: Dict[str, np.ndarray], meta: Dict[str, Any], *, encoders=None) -> UECEnsemble:
        """Rebuild from :meth:`get_state`; ``encoders`` (K items) override the stored names."""
        metas = meta["embedders"]
        if encoders is not None and len(encoders) != len(metas):
            raise ValueError(f"encoders must hold {len(metas)} items, got {len(encoders)}")
        embedders = []
        for k, m in enumerate(metas):
            prefix = f"m{k}."
            arr = {name[len(prefix) :]: v for name, v in arrays.items() if name.startswith(prefix)}
            embedders.append(LaplaceEmbedder.from_state(arr, m, encoder=None if encoders is None else encoders[k]))
        ens = cls(
            embedders,
            temperature=meta["temperature"],
            mixing=meta["mixing"],
            weights=meta["weights"],
            standardize=meta["standardize"],
            use_variance=meta["use_variance"],
            calibrate_scores=meta.get("calibrate_scores", False),
            rules=meta.get("rules", "paper"),  # files from before the rule sets
            uncertainty=meta.get("uncertainty", "laplace"),
            beta=meta.get("beta", 1.0),
            confidence_top=meta.get("confidence_top", 20),
            center_confidence=meta.get("center_confidence", False),
            standardize_confidence=meta.get("standardize_confidence", False),
            confidence_scoring=meta.get("confidence_scoring", "replace"),
            hubness=meta.get("hubness", 0.0),  # files from before hubness scored without it
            hubness_k=meta.get("hubness_k", 10),
            query_head=meta.get("query_head", False),  # files from before the query heads scored without them
            random_state=meta["random_state"] if "random_state" in meta else meta["projection_seed"],  # older files
        )
        if meta.get("has_reference"):
            missing = [f"ref{k}" for k in range(len(metas)) if f"ref{k}" not in arrays]
            if missing:
                raise ValueError(f"ensemble state lacks its reference arrays {missing}")
            ens.set_reference([arrays[f"ref{k}"] for k in range(len(metas))])
            if "confidence_center" in arrays:
                ens.confidence_center_ = np.asarray(arrays["confidence_center"], dtype=np.float64)
            if "confidence_spread" in arrays:
                ens.confidence_spread_ = np.asarray(arrays["confidence_spread"], dtype=np.float64)
        return ens

    def __repr__(self) -> str:
        names = [e.encoder_name or type(e.encoder).__name__ for e in self.embedders]
        w = self.weights if isinstance(self.weights, str) else list(np.round(self.weights, 3))
        return (
            f"UECEnsemble({names}, temperature={self.temperature:g}, mixing={self.mixing!r}, weights={w!r}, "
            f"rules={self.rules!r}, uncertainty={self.uncertainty!r}, hubness={self.hubness:g}, "
            f"query_head={self.query_head})"
        )
