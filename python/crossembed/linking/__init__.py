"""GEH vector linking: which rows of two black-box embedding indexes are the same object.

* :class:`GEHLinker` - geometric embedding hashing (multi-view anchor
  signatures, CSLS mutual top-k votes, Beta posterior, bootstrap); its
  growth rules (:class:`PaperPromotion`, :class:`CappedPromotion`,
  :class:`ValidatedPromotion`), proposers and view choices are objects.
* :func:`procrustes_link`, :func:`relative_link`,
  :func:`bootstrap_procrustes_link` - baselines with the same output.
* :func:`make_partial_overlap`, :func:`evaluate_links` - the evaluation protocol.
"""

from crossembed.linking.baselines import bootstrap_procrustes_link, procrustes_link, relative_link
from crossembed.linking.geh import CANDIDATES, GEHLinker
from crossembed.linking.pairs import greedy_one_to_one
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
from crossembed.linking.views import (
    FarthestPointViews,
    RandomViews,
    ViewSampler,
    cosine_signatures,
    kernel_signatures,
)

__all__ = [
    "CANDIDATES",
    "PROMOTIONS",
    "AnnProposer",
    "CappedPromotion",
    "ExactProposer",
    "FarthestPointViews",
    "GEHLinker",
    "LinkResult",
    "OverlapSplit",
    "PaperPromotion",
    "PoolProposer",
    "PromotionRule",
    "Proposer",
    "RandomViews",
    "ValidatedPromotion",
    "ViewSampler",
    "bootstrap_procrustes_link",
    "cosine_signatures",
    "evaluate_links",
    "greedy_one_to_one",
    "kernel_signatures",
    "make_partial_overlap",
    "procrustes_link",
    "relative_link",
]
