"""The WordNet noun hierarchy embedded in the Lorentz model (second UNCHA testbed).

Nodes are the synsets below a root (e.g. ``mammal.n.01``) following the
hypernym pointers ``@`` and ``@i`` of ``data.noun``; the training relation is
the transitive closure ``(child, ancestor)``. Points are free space
components (every vector is on the hyperboloid), trained with Adam on

* the Nickel & Kiela (2017) softmax over negatives:
  ``-log exp(-d(u, v)) / sum_{v' in {v} + N(u)} exp(-d(u, v'))`` where the
  negatives ``N(u)`` are sampled nodes not related to ``u``;
* plus ``entailment_weight`` times the entailment-cone loss of
  :func:`crossembed.hyperbolic.losses.entailment_loss` (ancestor entails child).

Reconstruction is scored like Nickel & Kiela: for every related pair
``(u, v)`` (either direction) the rank of ``d(u, v)`` among the distances
from ``u`` to all nodes *not* related to ``u`` (mean rank, 1 is perfect),
and the mean average precision of ranking all other nodes by distance with
the related ones as relevant. Distances for the evaluation come from the C++
:func:`crossembed.lorentz_pairwise`.
"""

from __future__ import annotations

from collections import deque
from typing import Dict, List, Optional, Tuple

import numpy as np
import torch
from tqdm.auto import tqdm

from crossembed._validation import check_int
from crossembed.hyperbolic import lorentz as L
from crossembed.hyperbolic.losses import entailment_loss
from crossembed.kernels import lorentz_pairwise

__all__ = [
    "Hierarchy",
    "load_hierarchy",
    "resolve_synset",
    "embed_hierarchy",
    "reconstruction",
]


class Hierarchy:
    """Nodes, the transitive closure and depths of one noun subtree.

    Attributes
    ----------
    names : list of str  (first lemma of each synset)
    offsets : int64 (N,)
    closure : int64 (E, 2)  (child, ancestor) pairs, child != ancestor
    depth : int64 (N,)  shortest hypernym distance to the root
    """

    def __init__(self, names: List[str], offsets: np.ndarray, closure: np.ndarray, depth: np.ndarray):
        self.names, self.offsets, self.closure, self.depth = names, offsets, closure, depth

    def __len__(self) -> int:
        return len(self.names)

    def related(self) -> List[np.ndarray]:
        """For each node, the sorted nodes related to it in either direction."""
        n = len(self)
        rel: List[List[int]] = [[] for _ in range(n)]
        for a, b in self.closure:
            rel[a].append(b)
            rel[b].append(a)
        return [np.unique(np.array(r, np.int64)) for r in rel]


def resolve_synset(name: str, *, wordnet_dir=None) -> int:
    """Offset of ``lemma.n.NN`` (the NN-th sense in WordNet's ``index.noun``)."""
    from crossembed.data.wordnet import find_wordnet_dir

    try:
        lemma, pos, num = name.rsplit(".", 2)
        sense = int(num)
    except ValueError:
        raise ValueError(f"root must look like 'mammal.n.01', got {name!r}") from None
    if pos != "n" or sense < 1:
        raise ValueError(f"root must be a noun sense like 'mammal.n.01', got {name!r}")
    key = lemma.lower().replace(" ", "_")
    with open(find_wordnet_dir(wordnet_dir) / "index.noun", encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if line.startswith(key + " "):
                f = line.split()
                p_cnt = int(f[3])
                offsets = f[6 + p_cnt :]  # lemma pos synset_cnt p_cnt [ptr]* sense_cnt tagsense_cnt offsets
                if sense > len(offsets):
                    raise ValueError(f"{lemma!r} has only {len(offsets)} noun senses")
                return int(offsets[sense - 1])
    raise ValueError(f"no noun {lemma!r} in WordNet")


def load_hierarchy(root: str = "mammal.n.01", *, max_nodes: Optional[int] = None, wordnet_dir=None) -> Hierarchy:
    """The subtree below ``root`` (``"all"``: every noun under ``entity.n.01``).

    ``max_nodes`` keeps the first nodes in breadth-first order from the root
    (a connected, top-down truncation of big hierarchies).
    """
    from crossembed.data.wordnet import read_synsets

    syn = read_synsets("noun", wordnet_dir=wordnet_dir)
    by_off = {s.offset: s for s in syn}
    children: Dict[int, List[int]] = {}
    for s in syn:
        for h in s.hypernyms:
            children.setdefault(h, []).append(s.offset)
    root_off = resolve_synset("entity.n.01" if root == "all" else root, wordnet_dir=wordnet_dir)
    order, depth_of = [root_off], {root_off: 0}
    queue = deque([root_off])
    while queue:  # BFS: the node set and shortest depths
        o = queue.popleft()
        for ch in sorted(children.get(o, ())):
            if ch not in depth_of:
                depth_of[ch] = depth_of[o] + 1
                order.append(ch)
                queue.append(ch)
    if max_nodes is not None:
        check_int(max_nodes, "max_nodes", low=2)
        order = order[:max_nodes]
    index = {o: i for i, o in enumerate(order)}
    # ancestors within the node set, by memoised DFS up the hypernym pointers
    anc: Dict[int, set] = {}

    def ancestors(o: int) -> set:
        if o in anc:
            return anc[o]
        out: set = set()
        anc[o] = out  # guards against (non-existent) cycles
        for h in by_off[o].hypernyms:
            if h in index:
                out.add(h)
                out |= ancestors(h)
        return out

    pairs = [(index[o], index[a]) for o in order for a in ancestors(o)]
    closure = np.array(sorted(pairs), np.int64).reshape(-1, 2)
    names = [by_off[o].lemmas[0] for o in order]
    return Hierarchy(names, np.array(order, np.int64), closure, np.array([depth_of[o] for o in order], np.int64))


def reconstruction(
    emb: np.ndarray,
    hierarchy: Hierarchy,
    *,
    curvature: float = 1.0,
    chunk: int = 512,
    num_threads: Optional[int] = None,
) -> Dict[str, float]:
    """Mean rank and MAP of reconstructing the closure from distances (see module docstring).

    ``num_threads`` is for the C++ distance kernel (``None``: all cores).
    """
    emb = np.ascontiguousarray(emb, np.float32)
    rel = hierarchy.related()
    n = len(hierarchy)
    ranks: List[np.ndarray] = []
    aps: List[float] = []
    for s in range(0, n, chunk):
        D = lorentz_pairwise(emb[s : s + chunk], emb, curvature=curvature, num_threads=num_threads).astype(np.float64)
        for r, u in enumerate(range(s, min(n, s + chunk))):
            nb = rel[u]
            if nb.size == 0:
                continue
            d = D[r].copy()
            d[u] = np.inf  # u itself takes no part
            mask = np.zeros(n, bool)
            mask[nb] = True
            others = np.sort(d[~mask])
            dn = d[nb]
            # rank among the unrelated nodes (+1): ties count against the pair
            ranks.append(1 + np.searchsorted(others, dn, side="right"))
            # average precision over the full ranking
            dn_sorted = np.sort(dn)
            pos = np.arange(1, nb.size + 1) + np.searchsorted(others, dn_sorted, side="right")
            aps.append(float(np.mean(np.arange(1, nb.size + 1) / pos)))
    all_ranks = np.concatenate(ranks) if ranks else np.array([np.nan])
    return {
        "mean_rank": float(all_ranks.mean()),
        "map": float(np.mean(aps)) if aps else float("nan"),
        "pairs_scored": int(all_ranks.size),
    }


def embed_hierarchy(
    hierarchy: Hierarchy,
    *,
    dim: int = 10,
    epochs: int = 300,
    batch_size: int = 512,
    negatives: int = 50,
    lr: float = 0.1,
    entailment_weight: float = 0.0,
    curvature: float = 1.0,
    burn_in: int = 20,
    random_state: int = 0,
    show_progress_bar: bool = True,
) -> Tuple[np.ndarray, List[float]]:
    """Train the embedding; returns ``(space components (N, dim), loss per epoch)``.

    The first ``burn_in`` epochs use a 10x smaller learning rate (as in
    Nickel & Kiela) so that the initial angular layout forms near the origin.

    ``random_state`` is an int seed only: it seeds both the torch
    initialisation and the numpy sampling of batches and negatives.
    """
    n, E = len(hierarchy), len(hierarchy.closure)
    if E == 0:
        raise ValueError("the hierarchy has no edges (a leaf root?)")
    for name, value in (("dim", dim), ("epochs", epochs), ("batch_size", batch_size), ("negatives", negatives)):
        check_int(value, name, low=1)
    check_int(burn_in, "burn_in", low=0)
    seed = check_int(random_state, "random_state", low=0)
    manifold = L.Lorentz(curvature)
    g = torch.Generator().manual_seed(seed)
    emb = torch.nn.Parameter((torch.rand(n, dim, generator=g) - 0.5) * 2e-3)
    opt = torch.optim.Adam([emb], lr=lr)
    closure = torch.from_numpy(hierarchy.closure)
    # related-pair lookup for masking sampled negatives: keys a * n + b, both directions
    keys = np.concatenate(
        [hierarchy.closure[:, 0] * n + hierarchy.closure[:, 1], hierarchy.closure[:, 1] * n + hierarchy.closure[:, 0]]
    )
    keys = np.unique(keys)
    rng = np.random.default_rng(seed)
    losses = []
    for epoch in tqdm(range(epochs), desc="embed-wordnet", disable=not show_progress_bar, leave=False):
        for grp in opt.param_groups:
            grp["lr"] = lr / 10 if epoch < burn_in else lr
        perm = torch.from_numpy(rng.permutation(E))
        total = 0.0
        for s in range(0, E, batch_size):
            b = closure[perm[s : s + batch_size]]
            u, v = b[:, 0], b[:, 1]
            neg = rng.integers(0, n, size=(len(b), negatives))
            un = u.numpy()[:, None]
            bad = np.isin(un * n + neg, keys) | (neg == un)
            cand = torch.cat([v[:, None], torch.from_numpy(neg)], 1)  # column 0 is the positive
            eu = emb[u]
            d = manifold.distance(eu[:, None, :], emb[cand])
            logits = (-d).masked_fill(
                torch.from_numpy(np.concatenate([np.zeros((len(b), 1), bool), bad], 1)), float("-inf")
            )
            loss = torch.nn.functional.cross_entropy(logits, torch.zeros(len(b), dtype=torch.long))
            if entailment_weight:
                loss = loss + entailment_weight * entailment_loss(emb[v], eu, manifold, eta=1.0, alpha=0.0).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(b)
        losses.append(total / E)
    return emb.detach().numpy().astype(np.float32), losses
