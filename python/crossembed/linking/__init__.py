"""GEH vector linking: which rows of two black-box embedding indexes are the same object.

* :class:`GEHLinker` - geometric embedding hashing (multi-view anchor
  signatures, CSLS mutual top-k votes, Beta posterior, bootstrap).
* :func:`procrustes_link`, :func:`relative_link`,
  :func:`bootstrap_procrustes_link` - baselines with the same output.
* :func:`make_partial_overlap`, :func:`evaluate_links` - the evaluation protocol.
"""

from crossembed.linking.baselines import bootstrap_procrustes_link, procrustes_link, relative_link
from crossembed.linking.geh import PROMOTIONS, GEHLinker
from crossembed.linking.protocol import OverlapSplit, evaluate_links, make_partial_overlap
from crossembed.linking.result import LinkResult

__all__ = [
    "GEHLinker",
    "LinkResult",
    "OverlapSplit",
    "PROMOTIONS",
    "bootstrap_procrustes_link",
    "evaluate_links",
    "make_partial_overlap",
    "procrustes_link",
    "relative_link",
]
