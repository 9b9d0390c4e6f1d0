"""GEH vector linking: which rows of two black-box embedding indexes are the same object.

:class:`GEHLinker` (geometric embedding hashing: multi-view anchor
signatures, CSLS mutual top-k votes, a Beta posterior per pair, pool growth)
returns a :class:`LinkResult`. Each choice it makes is a frozen object
passed in; the defaults are the supported method:

* the growth rule :class:`ValidatedPromotion` and its final pass
  :class:`DecoyPass` (the pool rebuilt out of sample by
  :class:`CrossFitRelink`, checked by :class:`CrossFitCheck`, every row
  linked out of sample through :class:`CCAMap` or :class:`RidgeMap` scores,
  links kept at the best F1 whose precision, estimated on decoys, reaches a
  floor) or :class:`MapPass` (one ridge map; the decoy pass's pass at scale);
* the stop rule :class:`StopRule`;
* the candidate sources :class:`AutoCandidates` (by size: exact,
  :class:`PoolCandidates`, then anchor cells) or one path forced
  (:class:`ExactCandidates`, :class:`PoolCandidates`);
* the row sample :class:`RowSample`, the schedule :class:`Schedule`, the
  view anchors :class:`FarthestPointViews`, the signatures
  :class:`KernelSignatures` and the per-side preprocessing :class:`Center`.

The extension points are public in their modules: ``promotion.PromotionRule``,
``final_pass.FinalPass``, ``candidates.CandidateSource``,
``proposers.Proposer``, ``views.ViewSampler``. The baselines with the same
output are in :mod:`crossembed.linking.baselines`; :func:`make_partial_overlap`
and :func:`evaluate_links` are the evaluation protocol.
"""

from crossembed.linking.candidates import AutoCandidates, ExactCandidates, PoolCandidates
from crossembed.linking.final_pass import DecoyPass, MapPass
from crossembed.linking.geh import GEHLinker
from crossembed.linking.maps import CCAMap, RidgeMap
from crossembed.linking.preprocess import Center
from crossembed.linking.promotion import ValidatedPromotion
from crossembed.linking.protocol import evaluate_links, make_partial_overlap
from crossembed.linking.result import LinkResult
from crossembed.linking.sampling import RowSample
from crossembed.linking.schedule import Schedule
from crossembed.linking.stopping import StopRule
from crossembed.linking.verify import CrossFitCheck, CrossFitRelink
from crossembed.linking.views import FarthestPointViews, KernelSignatures

__all__ = [
    "AutoCandidates",
    "CCAMap",
    "Center",
    "CrossFitCheck",
    "CrossFitRelink",
    "DecoyPass",
    "ExactCandidates",
    "FarthestPointViews",
    "GEHLinker",
    "KernelSignatures",
    "LinkResult",
    "MapPass",
    "PoolCandidates",
    "RidgeMap",
    "RowSample",
    "Schedule",
    "StopRule",
    "ValidatedPromotion",
    "evaluate_links",
    "make_partial_overlap",
]
