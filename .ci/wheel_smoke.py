"""Smoke test of an installed crossembed wheel: run away from the source tree (argv[1] is the
source root, which the imported package must not come from); one call of every kernel against
the float64 reference."""

import importlib.metadata
import subprocess
import sys

import numpy as np

import crossembed as ce
from crossembed import _core
from crossembed import reference as ref


def close(a, b, tol=1e-4):
    np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=tol, atol=tol)


src = sys.argv[1]
assert not ce.__file__.startswith(src) and not _core.__file__.startswith(src), (ce.__file__, _core.__file__)
print("crossembed", ce.__version__, "from", ce.__file__, "simd:", ce.simd_level(), "threads:", _core.max_threads())
rng = np.random.default_rng(0)
mu = rng.normal(size=(40, 8)).astype(np.float32)
v = (0.1 * rng.random((40, 8))).astype(np.float32)
close(ce.probit_scores(mu[:5], v[:5], mu, v), ref.probit_scores(mu[:5], v[:5], mu, v))
s, i = ce.probit_topk(mu[:5], v[:5], mu, v, 3)
close(s, ref.probit_topk(mu[:5], v[:5], mu, v, 3)[0])
docs = ce.ProbitDocs(mu, v)
cand = np.tile(np.arange(10), (5, 1))
close(docs.top_k(mu[:5], v[:5], 2, candidates=cand)[0], ref.probit_topk(mu[:5], v[:5], mu, v, 2, candidates=cand)[0])
half = ce.ProbitDocs(mu, v, storage="float16")  # float16 storage: the reference on the stored (rounded) values
mu_h, v_h = mu.astype(np.float16).astype(np.float32), v.astype(np.float16).astype(np.float32)
close(half.scores(mu[:5], v[:5]), ref.probit_scores(mu[:5], v[:5], mu_h, v_h), 1e-3)
close(ce.kernels.median_anchor_distance(mu[:6]), ref.median_anchor_distance(mu[:6]))
close(ce.anchor_signatures(mu, mu[:6]), ref.anchor_signatures(mu, mu[:6]))
C = np.clip(mu[:10] @ mu[10:16].T / 8.0, -1, 1).astype(np.float32)
close(ce.kernels.signatures_from_cosines(C, [0, 2, 5], sigma=0.4), ref.signatures_from_cosines(C, [0, 2, 5], sigma=0.4))
SA, SB = ce.anchor_signatures(mu[:20], mu[:6]), ce.anchor_signatures(mu[20:], mu[:6])
p, _ = ce.csls_mutual_topk(SA, SB, k=3, csls_k=5, exclude_a=[2])
np.testing.assert_array_equal(p, ref.csls_mutual_topk(SA, SB, k=3, csls_k=5, exclude_a=[2])[0])
for got, want in zip(ce.kernels.topk_rows_and_columns(SA, SB, 3, 4)[::2], ref.topk_rows_and_columns(SA, SB, 3, 4)[::2]):
    close(got, want)
ca = np.tile(np.arange(20), (20, 1))
p, _ = ce.kernels.csls_mutual_topk_candidates(SA, SB, ca, ca, k=3, csls_k=5)
np.testing.assert_array_equal(p, ref.csls_mutual_topk_candidates(SA, SB, ca, ca, k=3, csls_k=5)[0])
close(ce.kernels.candidate_dots(SA, SB, ca[:, :5]), SA.astype(np.float64) @ SB[:5].astype(np.float64).T)
vals = rng.random(100)
assert ce.kernels.otsu_threshold(vals) == ref.otsu_threshold(vals)
pairs, sc = np.array([[0, 1], [0, 2], [3, 1]]), np.array([0.9, 0.8, 0.7])
np.testing.assert_array_equal(ce.kernels.greedy_one_to_one(pairs, sc), ref.greedy_one_to_one(pairs, sc, -np.inf))
t = ce.kernels.VoteTable()
t.add(pairs)
assert t.votes(pairs).tolist() == [1, 1, 1] and t.n_views == 1
X = rng.normal(size=(7, 3))
close(ce.lorentz_pairwise(X, X), ref.lorentz_pairwise(X, X), 1e-9)
close(ce.lorentz_topk(X, X, 2)[0], ref.lorentz_topk(X, X, 2)[0], 1e-9)
close(ce.lorentz_pairwise(X.astype(np.float32), X), ref.lorentz_pairwise(X.astype(np.float32), X), 1e-4)
# the compiled HNSW graph: exact neighbours on a tiny set, rows read back, and a UECIndex on it
from crossembed.ann import MeanGraph  # noqa: E402
from crossembed.uec import GaussianEmbedding, IndexConfig, UECIndex  # noqa: E402

unit = (mu / np.linalg.norm(mu, axis=1, keepdims=True)).astype(np.float32)
graph = MeanGraph(8, max_elements=40)
graph.add(unit, np.arange(40))
labels, _ = graph.knn(unit[:5], 3, ef=40)
np.testing.assert_array_equal(labels, np.argsort(-(unit[:5].astype(np.float64) @ unit.T), axis=1, kind="stable")[:, :3])
np.testing.assert_array_equal(graph.rows([3, 7]), unit[[3, 7]])
index = UECIndex(GaussianEmbedding(unit, np.zeros_like(unit)), config=IndexConfig(M=8))
np.testing.assert_array_equal(index.search(GaussianEmbedding(unit[:5], np.zeros_like(unit[:5])), 3)[1], labels)
# the research harness stays in the repository: no installed file of the distribution is under experiments/
installed = [str(f) for f in importlib.metadata.files("crossembed") or ()]
assert installed and not [f for f in installed if f.split("/")[0] == "experiments"], installed
usage = subprocess.run(["crossembed", "--help"], check=True, capture_output=True, text=True).stdout.splitlines()[0]
print(f"smoke test (Python {sys.version.split()[0]}): every kernel matches the reference; crossembed --help: {usage}")
