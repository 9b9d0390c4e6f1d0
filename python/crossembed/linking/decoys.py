"""Out-of-sample links and a no-partner threshold calibrated on decoys.

At low overlap most rows have no partner on the other side, yet each still
finds a mutual neighbour through the map, and its score is the only thing
that tells it from a right link. Two things go wrong with the map pass's
scores there: the anchors the map was fitted on sit on their partners with
scores no other row can reach (so any threshold mostly separates anchors
from the rest), and nothing says where the scores of partnerless rows end.

:func:`decoy_links` fixes both with one split of A's rows into folds:

* every row is linked by the scores fitted without its fold's anchors
  (``scorer``, :mod:`crossembed.linking.maps`: regularised CCA by default),
  so all scores are out of sample and comparable;
* each fold's anchors become **decoys** once their B rows are removed: A rows
  known to have no partner, scored like every other row. The
  share of decoys linked at a score ``>= t``, ``f0(t)``, is the null; with
  their partners present, the anchors give the shares linked at all,
  ``g(t)``, and linked to their own partner, ``f1(t)``.

With ``n`` linkable A rows of which ``m`` have a partner, the links found at
the lowest threshold number about ``m g + (n - m) f0``, which gives ``m``;
the wrong links above ``t`` number about ``(n - m) f0(t) + m (g(t) -
f1(t))``, and the right ones about ``N(t)`` minus those. Of the thresholds where
the wrong links stay within ``1 - precision`` of the links above, the kept
links are those above the one with the best estimated F1: on an easy pair
the precision floor alone would keep more wrong links than right ones gained.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import numpy as np

from crossembed import kernels
from crossembed.linking.maps import CCAMap
from crossembed.linking.pairs import contains, greedy_one_to_one, positions, row_positions

__all__ = ["decoy_links", "decoy_threshold"]


def decoy_threshold(
    scores: np.ndarray, right: np.ndarray, linked: np.ndarray, decoys: np.ndarray, n_rows: int, precision: float
) -> Dict:
    """The score threshold with the best estimated F1 among those whose estimated precision is ``>= precision``.

    Parameters
    ----------
    scores : ndarray of float
        Scores of every out-of-sample link (one per linked row).
    right : ndarray of float
        Per held-out anchor, its score when re-found with its own partner (``-inf``: not re-found).
    linked : ndarray of float
        Per held-out anchor, the score of its link whatever the partner (``-inf``: unlinked).
    decoys : ndarray of float
        Per held-out anchor, its score once its partner is removed (``-inf``: unlinked).
    n_rows : int
        Rows that could be linked (``scores`` come from these).
    precision : float
        Least share of right links among those kept, in (0, 1).

    Returns
    -------
    dict
        ``threshold`` (``inf``: keep nothing), ``partnered`` (the estimate of
        ``m``), ``null_rate`` and ``power`` (the shares of decoys linked and
        of anchors linked at all).
    """
    scores = np.sort(np.asarray(scores, np.float64))[::-1]
    power = float(np.isfinite(linked).mean()) if len(linked) else 1.0
    null = float(np.isfinite(decoys).mean()) if len(decoys) else 0.0
    info = {"partnered": 0.0, "null_rate": round(null, 4), "power": round(power, 4)}
    if len(scores) == 0 or len(decoys) == 0 or len(linked) == 0:
        return {"threshold": np.inf, **info}

    def share_above(values):  # at each candidate cut, the share of ``values`` at or above it
        ordered = np.sort(np.asarray(values, np.float64))
        return (len(ordered) - np.searchsorted(ordered, scores, side="left")) / len(ordered)

    f0, g, f1 = share_above(decoys), share_above(linked), share_above(right)
    n_above = share_above(scores) * len(scores)  # links at or above each cut (ties count whole)
    # m from N(t) = m g(t) + (n - m) f0(t) at the cut where the estimate varies least (binomial
    # errors of f0 and g); a power at or below the null leaves no signal
    cut = np.flatnonzero(g > f0)
    m = 0.0
    if len(cut):
        gap, f0c, gc = g[cut] - f0[cut], f0[cut], g[cut]
        est = np.clip((n_above[cut] - n_rows * f0c) / gap, 0.0, n_rows)
        variance = n_rows**2 * f0c * (1 - f0c) / len(decoys) + est**2 * gc * (1 - gc) / len(linked)
        m = float(est[np.argmin(variance / gap**2)])
    info["partnered"] = round(m, 1)
    # wrong links above t: partnerless rows linked (the decoys' rate) and partnered rows linked elsewhere
    wrong = (n_rows - m) * f0 + m * (g - f1)
    # of the cuts that reach the target, the one with the best estimated F1 (right links above t
    # against m); with no partnered row estimated, the lowest that reaches it
    ok = np.flatnonzero(wrong / n_above <= 1.0 - precision)
    if len(ok) == 0:
        return {"threshold": np.inf, **info}
    best = ok[-1] if m <= 0 else ok[int(np.argmax((n_above[ok] - wrong[ok]) / (n_above[ok] + m)))]
    return {"threshold": float(scores[best]), **info}


def decoy_links(
    A: np.ndarray,
    B: np.ndarray,
    anchors: np.ndarray,
    seeds: np.ndarray,
    rng: np.random.Generator,
    *,
    precision: float = 0.85,
    folds: int = 5,
    scorer: Optional[Any] = None,
    num_threads: Optional[int] = None,
) -> Tuple[np.ndarray, np.ndarray, Dict]:
    """One-to-one links ``(L, 2)`` and their scores, kept above :func:`decoy_threshold`.

    Parameters
    ----------
    A, B : ndarray
        Unit rows of both sides (dimensions may differ).
    anchors : ndarray, shape (P, 2)
        Links the scores are fitted on besides the seeds (the pool as the pool check hands it over).
    seeds : ndarray, shape (S, 2)
        Known pairs: in every map, linked to nothing.
    rng : numpy Generator
        Draws the folds.
    precision : float
        Least share of right links among those kept, in (0, 1) (default 0.85).
    folds : int
        Parts of A's rows, ``>= 2``; each is linked by the scores fitted on the
        other parts' anchors (default 5).
    scorer : object with ``rows(A, B, pairs)``, optional
        Fits the scores on a fold's anchors (:mod:`crossembed.linking.maps`);
        None: ``CCAMap()``.
    num_threads : int, optional
        Kernel threads; None: all cores.

    Returns
    -------
    links, scores, info
        ``info`` is :func:`decoy_threshold`'s dict.
    """
    anchors = np.asarray(anchors, np.int64).reshape(-1, 2)
    scorer = CCAMap() if scorer is None else scorer
    fold_of = rng.integers(0, folds, len(A))
    fold_of[anchors[:, 0]] = anchor_fold = rng.permutation(len(anchors)) % folds
    pairs, scores, right, linked, decoys = [], [], [], [], []
    for f in range(folds):
        held = anchors[anchor_fold == f]
        XA, XB = scorer.rows(A, B, np.concatenate([seeds, anchors[anchor_fold != f]]))
        kw = dict(k=1, csls_k=10, exclude_a=seeds[:, 0], num_threads=num_threads)
        p, s = kernels.csls_mutual_topk(XA, XB, exclude_b=seeds[:, 1], **kw)
        mine = fold_of[p[:, 0]] == f
        pairs.append(p[mine])
        scores.append(s[mine])
        right.append(_score_of(p, s, held, partner_only=True, n_a=len(A), n_b=len(B)))
        linked.append(_score_of(p, s, held, partner_only=False, n_a=len(A), n_b=len(B)))
        # the fold's anchors without their partners: rows known to have none
        p, s = kernels.csls_mutual_topk(XA, XB, exclude_b=np.concatenate([seeds[:, 1], held[:, 1]]), **kw)
        decoys.append(_score_of(p, s, held, partner_only=False, n_a=len(A), n_b=len(B)))
    pairs, scores = np.concatenate(pairs), np.concatenate(scores)
    n_rows = len(A) - len(np.unique(seeds[:, 0]))
    info = decoy_threshold(scores, *map(np.concatenate, (right, linked, decoys)), n_rows, precision)
    # rows of different folds may claim one B row: the better score keeps it (ties to the lower A row)
    links = greedy_one_to_one(pairs, scores.astype(np.float64))
    at = positions(pairs, links, len(B))
    keep = scores[at] >= info["threshold"]
    return links[keep], scores[at][keep], info


def _score_of(pairs, scores, rows, *, partner_only: bool, n_a: int, n_b: int) -> np.ndarray:
    """Score of the link of each of ``rows``' A rows among ``pairs`` (-inf: unlinked); with
    ``partner_only`` only a link to the row's own B row counts."""
    out = np.full(len(rows), -np.inf)
    if partner_only:
        hit = contains(pairs, rows, n_b)
        out[hit] = scores[positions(pairs, rows[hit], n_b)]
    else:
        at = row_positions(pairs[:, 0], n_a)[rows[:, 0]]
        out[at >= 0] = scores[at[at >= 0]]
    return out
