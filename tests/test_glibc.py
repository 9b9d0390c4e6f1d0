"""crossembed._glibc: the arena cap `crossembed serve --malloc-arenas` sets, and malloc_trim."""

import ctypes
import os
import subprocess
import sys
import textwrap

import pytest

from crossembed._glibc import limit_arenas, malloc_trim

pytestmark = pytest.mark.skipif(not hasattr(ctypes.CDLL(None), "malloc_stats"), reason="not glibc")

_ARENAS = textwrap.dedent(
    """
    import ctypes, sys, threading
    import numpy as np
    from crossembed._glibc import limit_arenas
    if sys.argv[1] != "0":
        print(limit_arenas(int(sys.argv[1])))
    def work():
        for _ in range(200):
            np.ones(20000)  # 160 kB: from malloc, in this thread's arena
    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ctypes.CDLL(None).malloc_stats()  # one "Arena N:" block per arena, on stderr
    """
)


def _arenas(cap: int, **env):
    environ = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    run = subprocess.run(
        [sys.executable, "-c", _ARENAS, str(cap)], env={**environ, **env}, capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    return run.stdout.strip(), sum(line.startswith("Arena ") for line in run.stderr.splitlines())


def test_the_cap_holds_threads_to_that_many_arenas():
    assert _arenas(1) == ("True", 1)
    assert _arenas(0)[1] > 1  # without it each allocating thread gets an arena of its own
    said, n = _arenas(1, MALLOC_ARENA_MAX="3")  # the environment wins
    assert said == "False" and 1 < n <= 3


def test_bad_cap_and_trim():
    with pytest.raises(ValueError, match="n must be >= 1"):
        limit_arenas(0)
    assert isinstance(malloc_trim(), bool)
