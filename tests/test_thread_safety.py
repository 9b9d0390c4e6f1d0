"""Index arrays rewritten by another thread while a kernel runs (issue 12, item 1).

The kernels range-check candidate lists with the GIL held and read them after
releasing it; they must read a private copy. Each scenario runs in a child
process so that an out-of-bounds read shows up as a failed test, not a dead
test session.
"""

import subprocess
import sys
import textwrap

import pytest

_PRELUDE = textwrap.dedent(
    """
    import sys
    import threading
    import numpy as np
    import crossembed
    from crossembed import kernels

    stop = threading.Event()
    sys.setswitchinterval(1e-5)  # hand the GIL back and forth often: the race shows up quickly

    def mutate(arr, bad):
        orig = arr.copy()
        while not stop.is_set():
            arr[...] = bad      # far out of range
            arr[...] = orig     # and back: validation may see either state

    def run(call, arr, bad, expected, rounds):
        t = threading.Thread(target=mutate, args=(arr, bad))
        t.start()
        ok = 0
        try:
            for _ in range(rounds):
                try:
                    got = call()
                except ValueError:
                    continue  # the snapshot held the bad values: rejected, fine
                for g, e in zip(got, expected):
                    np.testing.assert_array_equal(g, e)
                ok += 1
        finally:
            stop.set()
            t.join()
        print("ok", ok)
    """
)


def _run(body: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _PRELUDE + textwrap.dedent(body)], capture_output=True, text=True, timeout=240
    )
    assert proc.returncode == 0, f"child died with {proc.returncode}:\n{proc.stderr[-2000:]}"
    assert proc.stdout.startswith("ok")


@pytest.mark.parametrize("api", ["function", "docs"])
def test_probit_candidates_mutated_during_call(api):
    _run(
        f"""
        rng = np.random.default_rng(0)
        n, d, q, m = 4000, 64, 1000, 128
        mu_c = rng.normal(size=(n, d)).astype(np.float32); v_c = rng.random((n, d)).astype(np.float32)
        mu_q = rng.normal(size=(q, d)).astype(np.float32); v_q = rng.random((q, d)).astype(np.float32)
        cand = np.stack([rng.choice(n, m, replace=False) for _ in range(q)]).astype(np.int64)
        docs = kernels.ProbitDocs(mu_c, v_c)
        if "{api}" == "function":
            call = lambda: crossembed.probit_topk(mu_q, v_q, mu_c, v_c, 5, candidates=cand, num_threads=2)
        else:
            call = lambda: docs.top_k(mu_q, v_q, 5, candidates=cand, num_threads=2)
        expected = call()
        run(call, cand, 1 << 40, expected, 80)
        """
    )


def test_csls_candidates_mutated_during_call():
    _run(
        """
        rng = np.random.default_rng(1)
        na, nb, d, m = 4000, 4000, 32, 64
        SA = rng.random((na, d)).astype(np.float32); SB = rng.random((nb, d)).astype(np.float32)
        ca = np.stack([rng.choice(nb, m, replace=False) for _ in range(na)]).astype(np.int64)
        cb = np.stack([rng.choice(na, m, replace=False) for _ in range(nb)]).astype(np.int64)
        call = lambda: crossembed.kernels.csls_mutual_topk_candidates(SA, SB, ca, cb, k=3, csls_k=5, num_threads=2)
        expected = call()
        run(call, ca, 1 << 40, expected, 80)
        """
    )


def test_core_copies_candidates_too():
    # The binding itself snapshots index arrays (callers of crossembed._core
    # skip the Python checks): same scenario straight at the extension.
    _run(
        """
        from crossembed import _core
        rng = np.random.default_rng(2)
        n, d, q, m = 4000, 64, 1000, 128
        mu_c = rng.normal(size=(n, d)).astype(np.float32); v_c = rng.random((n, d)).astype(np.float32)
        mu_q = rng.normal(size=(q, d)).astype(np.float32); v_q = rng.random((q, d)).astype(np.float32)
        cand = np.stack([rng.choice(n, m, replace=False) for _ in range(q)]).astype(np.int64)
        h = _core.ProbitDocs(mu_c, v_c)
        call = lambda: h.rerank(mu_q, v_q, cand, 5, 2)
        expected = call()
        run(call, cand, 1 << 40, expected, 80)
        """
    )


def test_csls_candidates_huge_k_does_not_reserve():
    rng = __import__("numpy").random.default_rng(3)
    import numpy as np

    import crossembed

    SA = rng.random((20, 4)).astype(np.float32)
    SB = rng.random((30, 4)).astype(np.float32)
    ca = np.stack([rng.choice(30, 5, replace=False) for _ in range(20)])
    cb = np.stack([rng.choice(20, 5, replace=False) for _ in range(30)])
    big = crossembed.kernels.csls_mutual_topk_candidates(SA, SB, ca, cb, k=2**40, csls_k=2**40)
    ref = crossembed.kernels.csls_mutual_topk_candidates(SA, SB, ca, cb, k=5, csls_k=5)
    np.testing.assert_array_equal(big[0], ref[0])
    np.testing.assert_array_equal(big[1], ref[1])
