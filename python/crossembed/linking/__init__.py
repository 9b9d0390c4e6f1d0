"""GEH vector linking: which rows of two black-box embedding indexes are the same object.

* :class:`GEHLinker` - geometric embedding hashing (multi-view anchor
  signatures, CSLS mutual top-k votes, Beta posterior, bootstrap). Each
  choice is an object: growth rules (:class:`ValidatedPromotion`,
  :class:`PaperPromotion`, :class:`CappedPromotion`) and their final passes
  (:class:`DecoyPass`, the default: the pool rebuilt out of sample by
  :class:`CrossFitRelink`, then out-of-sample links, scored by
  :class:`CCAMap` or :class:`RidgeMap`, kept at the best F1 whose
  precision, estimated on decoys, reaches a floor; :class:`MapPass`
  with its no-partner check :class:`CrossFitCheck`; :class:`FoldPass`),
  the stop rule (:class:`StopRule`),
  candidate sources (:class:`AutoCandidates`, :class:`ExactCandidates`,
  :class:`PoolCandidates`, :class:`CellCandidates`, :class:`AnnCandidates`),
  the row sample (:class:`RowSample`), the schedule (:class:`Schedule`),
  signatures, view samplers and per-side preprocessing.
* :func:`procrustes_link`, :func:`relative_link`,
  :func:`bootstrap_procrustes_link` - baselines with the same output.
* :func:`make_partial_overlap`, :func:`evaluate_links` - the evaluation protocol.
"""

from crossembed.linking.baselines import bootstrap_procrustes_link, procrustes_link, relative_link
from crossembed.linking.candidates import (
    AnnCandidates,
    AutoCandidates,
    CandidateSource,
    CellCandidates,
    ExactCandidates,
    PoolCandidates,
)
from crossembed.linking.final_pass import DecoyPass, FoldPass, MapPass
from crossembed.linking.geh import DEFAULT_MAX_ITER, GEHLinker
from crossembed.linking.maps import CCAMap, RidgeMap
from crossembed.linking.pairs import greedy_one_to_one
from crossembed.linking.preprocess import Center, Whiten
from crossembed.linking.promotion import (
    PROMOTIONS,
    CappedPromotion,
    PaperPromotion,
    PromotionRule,
    ValidatedPromotion,
)
from crossembed.linking.proposers import AnnProposer, ExactProposer, PoolProposer, Proposer
from crossembed.linking.protocol import OverlapSplit, evaluate_links, make_partial_overlap
from crossembed.linking.result import LinkResult
from crossembed.linking.sampling import RowSample
from crossembed.linking.schedule import Schedule
from crossembed.linking.stopping import StopRule
from crossembed.linking.verify import CrossFitCheck, CrossFitRelink
from crossembed.linking.views import (
    CosineSignatures,
    FarthestPointViews,
    KernelSignatures,
    RandomViews,
    ViewSampler,
)

__all__ = [
    "PROMOTIONS",
    "AnnCandidates",
    "AnnProposer",
    "AutoCandidates",
    "CCAMap",
    "CandidateSource",
    "CappedPromotion",
    "CellCandidates",
    "Center",
    "CosineSignatures",
    "CrossFitCheck",
    "CrossFitRelink",
    "ExactCandidates",
    "ExactProposer",
    "FarthestPointViews",
    "DecoyPass",
    "FoldPass",
    "DEFAULT_MAX_ITER",
    "GEHLinker",
    "KernelSignatures",
    "LinkResult",
    "MapPass",
    "OverlapSplit",
    "PaperPromotion",
    "PoolCandidates",
    "PoolProposer",
    "PromotionRule",
    "Proposer",
    "RandomViews",
    "RidgeMap",
    "RowSample",
    "Schedule",
    "StopRule",
    "ValidatedPromotion",
    "ViewSampler",
    "Whiten",
    "bootstrap_procrustes_link",
    "evaluate_links",
    "greedy_one_to_one",
    "make_partial_overlap",
    "procrustes_link",
    "relative_link",
]
