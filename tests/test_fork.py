"""Kernels in processes forked after the parent ran them on several threads.

GNU libgomp keeps its thread pool's bookkeeping across ``fork()`` but not the
pool's threads: a child forked after the parent's first multi-threaded kernel
used to wait forever in its own first one. Every process forked after
``import crossembed`` now runs its kernels on one thread, with the parent's
results bit for bit. Each scenario waits a bounded time, so a hang fails the
test instead of the run.
"""

import ast
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

from crossembed import _core, kernels
from crossembed import reference as ref

pytestmark = pytest.mark.skipif(
    "fork" not in multiprocessing.get_all_start_methods() or not os.path.isdir("/proc/self/task"),
    reason="needs the fork start method and /proc (Linux)",
)

TIMEOUT = 90  # seconds for a pool to answer (the work takes well under one); a hang fails here


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _unit(a: np.ndarray) -> np.ndarray:
    return (a / np.linalg.norm(a, axis=1, keepdims=True)).astype(np.float32)


def _lists(rng, n: int, n_other: int, m: int) -> np.ndarray:
    return np.stack([rng.choice(n_other, m, replace=False) for _ in range(n)]).astype(np.int64)


def _inputs() -> dict:
    """The same inputs in every process (seeded); sizes give every kernel several tasks."""
    rng = np.random.default_rng(31)
    x = {
        "mu_q": rng.standard_normal((40, 48)).astype(np.float32),
        "mu_c": rng.standard_normal((2100, 48)).astype(np.float32),  # three blocks of ProbitDocs' preparation
        "X": rng.standard_normal((300, 32)).astype(np.float32),
        "anchors": rng.standard_normal((24, 32)).astype(np.float32),
        "SA": _unit(rng.random((300, 24))),
        "SB": _unit(rng.random((260, 24))),
        "P": (0.7 * rng.standard_normal((200, 16))).astype(np.float32),
        "Q": (0.7 * rng.standard_normal((150, 16))).astype(np.float32),
        "cols": rng.integers(0, 64, 20),
        "cand_q": _lists(rng, 40, 2100, 60),
        "cand_a": _lists(rng, 300, 260, 12),
        "cand_b": _lists(rng, 260, 300, 12),
    }
    x["v_q"] = rng.uniform(0, 0.1, x["mu_q"].shape).astype(np.float32)
    x["v_c"] = rng.uniform(0, 0.1, x["mu_c"].shape).astype(np.float32)
    x["C"] = np.clip(_unit(x["X"]) @ _unit(rng.standard_normal((64, 32))).T, -1, 1).astype(np.float32)
    return x


def _every_kernel(x: dict, num_threads) -> dict:
    """Every multi-threaded kernel of crossembed.kernels: name -> tuple of output arrays."""
    nt = {"num_threads": num_threads}
    docs = kernels.ProbitDocs(x["mu_c"], x["v_c"])
    half = kernels.ProbitDocs(x["mu_c"], x["v_c"], storage="float16")
    lists = kernels.CandidateLists(x["cand_a"], x["cand_b"])
    csls = {"k": 3, "csls_k": 10, **nt}
    p64, q64 = x["P"].astype(np.float64), x["Q"].astype(np.float64)
    return {
        "probit_topk": kernels.probit_topk(x["mu_q"], x["v_q"], x["mu_c"], x["v_c"], 5, **nt),
        "probit_topk_candidates": docs.top_k(x["mu_q"], x["v_q"], 5, candidates=x["cand_q"], **nt),
        "probit_scores": docs.scores(x["mu_q"], x["v_q"], return_moments=True, **nt),
        "probit_topk_float16": half.top_k(x["mu_q"], x["v_q"], 5, **nt),
        # every document a candidate: the exact float32 inner-product top-k through the code pass
        **{
            f"quantized_topk_{c}": kernels.QuantizedDocs(x["mu_c"], codes=c, **nt).top_k(
                x["mu_q"], 5, candidates=len(x["mu_c"]), **nt
            )
            for c in ("int8", "bf16")
        },
        "median_anchor_distance": (np.float64(kernels.median_anchor_distance(x["anchors"], **nt)),),
        "anchor_signatures": (kernels.anchor_signatures(x["X"], x["anchors"], **nt),),
        "signatures_from_cosines": (kernels.signatures_from_cosines(x["C"], x["cols"], sigma=0.4, **nt),),
        "csls_mutual_topk": kernels.csls_mutual_topk(x["SA"], x["SB"], **csls),
        "topk_rows_and_columns": kernels.topk_rows_and_columns(x["SA"], x["SB"], 4, **nt),
        "csls_mutual_topk_candidates": kernels.csls_mutual_topk_candidates(
            x["SA"], x["SB"], x["cand_a"], x["cand_b"], **csls
        ),
        "csls_mutual_topk_lists": kernels.csls_mutual_topk_lists(x["SA"], x["SB"], lists, **csls),
        "candidate_dots": (kernels.candidate_dots(x["SA"], x["SB"], x["cand_a"], **nt),),
        "lorentz_pairwise": (kernels.lorentz_pairwise(x["P"], x["Q"], **nt),),
        "lorentz_pairwise_float64": (kernels.lorentz_pairwise(p64, q64, **nt),),
        "lorentz_topk": kernels.lorentz_topk(x["P"], x["Q"], 4, **nt),
    }


def _references(x: dict) -> dict:
    """The float64 twins of :func:`_every_kernel` (float16 documents: the reference on the stored values)."""
    h16 = {n: x[n].astype(np.float16).astype(np.float32) for n in ("mu_c", "v_c")}
    csls = {"k": 3, "csls_k": 10}
    dots = np.take_along_axis(x["SA"].astype(np.float64) @ x["SB"].T.astype(np.float64), x["cand_a"], axis=1)
    return {
        "probit_topk": ref.probit_topk(x["mu_q"], x["v_q"], x["mu_c"], x["v_c"], 5),
        "probit_topk_candidates": ref.probit_topk(x["mu_q"], x["v_q"], x["mu_c"], x["v_c"], 5, candidates=x["cand_q"]),
        "probit_scores": ref.probit_scores(x["mu_q"], x["v_q"], x["mu_c"], x["v_c"], return_moments=True),
        "probit_topk_float16": ref.probit_topk(x["mu_q"], x["v_q"], h16["mu_c"], h16["v_c"], 5),
        **{
            f"quantized_topk_{c}": ref.probit_topk(x["mu_q"], 0 * x["mu_q"], x["mu_c"], 0 * x["mu_c"], 5)
            for c in ("int8", "bf16")
        },
        "median_anchor_distance": (ref.median_anchor_distance(x["anchors"]),),
        "anchor_signatures": (ref.anchor_signatures(x["X"], x["anchors"]),),
        "signatures_from_cosines": (ref.signatures_from_cosines(x["C"], x["cols"], sigma=0.4),),
        "csls_mutual_topk": ref.csls_mutual_topk(x["SA"], x["SB"], **csls),
        "topk_rows_and_columns": ref.topk_rows_and_columns(x["SA"], x["SB"], 4),
        "csls_mutual_topk_candidates": ref.csls_mutual_topk_candidates(
            x["SA"], x["SB"], x["cand_a"], x["cand_b"], **csls
        ),
        "csls_mutual_topk_lists": ref.csls_mutual_topk_candidates(x["SA"], x["SB"], x["cand_a"], x["cand_b"], **csls),
        "candidate_dots": (dots,),
        "lorentz_pairwise": (ref.lorentz_pairwise(x["P"], x["Q"]),),
        "lorentz_pairwise_float64": (ref.lorentz_pairwise(x["P"], x["Q"]),),
        "lorentz_topk": ref.lorentz_topk(x["P"], x["Q"], 4),
    }


def _assert_identical(got: dict, expect: dict, who: str) -> None:
    assert got.keys() == expect.keys()
    for name, arrays in expect.items():
        assert len(got[name]) == len(arrays), name
        for g, e in zip(got[name], arrays):
            g, e = np.asarray(g), np.asarray(e)
            assert g.dtype == e.dtype and g.shape == e.shape, f"{who}: {name}"
            assert g.tobytes() == e.tobytes(), f"{who}: {name} differs from the parent's result"


def _in_child(num_threads):
    """Pool task: (marked single-threaded?, threads before, threads after, every kernel's result)."""
    x = _inputs()  # before counting: numpy may start its BLAS threads while building the inputs
    before = _threads()
    out = _every_kernel(x, num_threads)
    return kernels.single_threaded_after_fork(), before, _threads(), out


def _forked_map(fn, args, processes: int = 2) -> list:
    with warnings.catch_warnings():  # Python >= 3.12 warns when a process with threads forks: that is the point here
        warnings.simplefilter("ignore", DeprecationWarning)
        pool = multiprocessing.get_context("fork").Pool(processes)
    try:
        return pool.map_async(fn, args).get(timeout=TIMEOUT)
    except multiprocessing.TimeoutError:
        pytest.fail(f"forked workers gave no answer in {TIMEOUT} s: a kernel hung after fork")
    finally:
        pool.terminate()
        pool.join()


def test_every_kernel_matches_its_reference_and_ignores_the_thread_count():
    # the premise of running forked children on one thread: nothing changes but the speed
    x = _inputs()
    two = _every_kernel(x, 2)
    _assert_identical(_every_kernel(x, 1), two, "one thread")
    _assert_identical(_every_kernel(x, 3), two, "three threads")
    expect = _references(x)
    for name, arrays in expect.items():
        for g, e in zip(two[name], arrays):
            if np.asarray(e).dtype.kind in "iu":
                np.testing.assert_array_equal(g, e, err_msg=name)
            else:
                np.testing.assert_allclose(np.asarray(g, np.float64), e, rtol=2e-4, atol=2e-5, err_msg=name)


@pytest.mark.timeout(4 * TIMEOUT)
def test_forked_children_compute_every_kernel_after_the_parent_ran_them():
    x = _inputs()
    parent = _every_kernel(x, 2)  # the parent's thread pool now exists (OpenMP keeps it between calls)
    pooled = _threads()
    answers = _forked_map(_in_child, [2, 3, None])  # thread counts the children ask for (None: all cores)
    assert pooled > 1 or not _core.openmp
    assert len(answers) == 3
    for one_thread, before, after, got in answers:
        assert one_thread
        assert after == before, "a forked child started threads"
        _assert_identical(got, parent, "forked child")
    assert not kernels.single_threaded_after_fork()


def _nested_fork(task):
    """Pool task: a process forked from a forked child is single-threaded too, with the parent's top-k."""
    num_threads, expect = task
    x = _inputs()
    pid = os.fork()
    if pid == 0:  # grandchild: exit code 0 when its kernel finishes single-threaded with the parent's result
        signal.signal(signal.SIGALRM, signal.SIG_DFL)  # not pytest-timeout's handler: it cannot run in a hung kernel
        signal.alarm(TIMEOUT)  # so a hung grandchild ends itself (its parent is terminated with the pool)
        ok = False
        try:
            s, i = kernels.probit_topk(x["mu_q"], x["v_q"], x["mu_c"], x["v_c"], 5, num_threads=num_threads)
            ok = kernels.single_threaded_after_fork() and (s.tobytes(), i.tobytes()) == expect
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


@pytest.mark.timeout(4 * TIMEOUT)
def test_processes_forked_from_a_forked_child_are_single_threaded_too():
    x = _inputs()
    s, i = kernels.probit_topk(x["mu_q"], x["v_q"], x["mu_c"], x["v_c"], 5, num_threads=2)
    assert _forked_map(_nested_fork, [(2, (s.tobytes(), i.tobytes()))], processes=1) == [0]


def _script(body: str, *, torch: bool = False) -> dict:
    """Run ``body`` in a fresh interpreter (a known thread count); it prints a repr'd dict."""
    prelude = textwrap.dedent(
        """
        import multiprocessing, os
        import numpy as np
        {torch}
        import crossembed
        from crossembed import _core, kernels

        TIMEOUT = {timeout}

        def threads():
            return len(os.listdir("/proc/self/task"))

        rng = np.random.default_rng(0)
        x = rng.standard_normal((400, 24)).astype(np.float32)
        v = rng.uniform(0, 0.1, x.shape).astype(np.float32)

        def topk(num_threads):
            return kernels.probit_topk(x, v, x, v, 4, num_threads=num_threads)

        def child(num_threads):
            before = threads()
            s, i = topk(num_threads)
            return kernels.single_threaded_after_fork(), before, threads(), s.tobytes(), i.tobytes()

        def forked(num_threads):
            pool = multiprocessing.get_context("fork").Pool(1)
            try:
                return pool.map_async(child, [num_threads]).get(timeout=TIMEOUT)[0]
            finally:
                pool.terminate()
                pool.join()
        """
    )
    code = prelude.format(torch="import torch" if torch else "", timeout=TIMEOUT) + textwrap.dedent(body)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=3 * TIMEOUT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return ast.literal_eval(proc.stdout.strip().splitlines()[-1])


@pytest.mark.timeout(4 * TIMEOUT)
def test_parent_keeps_its_threads_after_forking():
    out = _script(
        """
        first = topk(2)
        pooled = threads()
        flag, _, _, s, i = forked(2)
        grown_from = threads()
        again = topk(4)  # a team of four: OpenMP starts two more threads in the parent
        print(repr(dict(child=flag, parent=kernels.single_threaded_after_fork(), openmp=_core.openmp,
                        pooled=pooled, grown_from=grown_from, grown=threads(),
                        same=(s, i) == (first[0].tobytes(), first[1].tobytes())
                        and (again[0].tobytes(), again[1].tobytes()) == (s, i))))
        """
    )
    assert out["child"] and not out["parent"] and out["same"]
    if out["openmp"]:
        assert out["pooled"] > 1 and out["grown"] > out["grown_from"], out


@pytest.mark.timeout(4 * TIMEOUT)
def test_child_of_a_parent_that_ran_only_torch_does_not_hang():
    # torch's bundled libgomp.so.1 and the system's are one library by soname, so a pool torch started
    # in the parent is the one crossembed's kernels would use in the child: the child is single-threaded
    # although the parent never ran a kernel
    pytest.importorskip("torch")
    out = _script(
        """
        torch.set_num_threads(2)
        a = torch.randn(1000, 1000)
        for _ in range(3):
            torch.exp(a).sum()
        flag, before, after, s, i = forked(2)
        ref = topk(2)
        print(repr(dict(child=flag, started=after - before, same=(s, i) == (ref[0].tobytes(), ref[1].tobytes()))))
        """,
        torch=True,
    )
    assert out == {"child": True, "started": 0, "same": True}


@pytest.mark.timeout(4 * TIMEOUT)
def test_spawned_children_keep_their_threads():
    out = _script(
        """
        if __name__ == "__main__":
            topk(2)
            pool = multiprocessing.get_context("spawn").Pool(1)
            try:
                flag = pool.apply_async(kernels.single_threaded_after_fork).get(timeout=TIMEOUT)
            finally:
                pool.terminate()
                pool.join()
            print(repr(dict(child=flag)))
        """
    )
    assert out == {"child": False}
