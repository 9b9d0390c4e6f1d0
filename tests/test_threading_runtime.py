"""crossembed's OpenMP runtime next to torch's bundled libgomp, and the std::thread fallback contract.

torch wheels ship their own libgomp; both runtimes must coexist in one
process whichever is imported first, and kernels must give the same answer
afterwards. Each order runs in a fresh interpreter.
"""

import subprocess
import sys

import numpy as np
import pytest

import crossembed as ce

_SCRIPT = """
import numpy as np
{first}
{second}
torch.set_num_threads(2)
rng = np.random.default_rng(0)
x = rng.standard_normal((300, 40)).astype(np.float32)
t = torch.from_numpy(x) @ torch.from_numpy(x).T
s, i = crossembed.probit_topk(x, np.zeros_like(x), x, np.zeros_like(x), 3, num_threads=2)
d = crossembed.lorentz_pairwise(x, x, num_threads=2)
t2 = torch.from_numpy(x) @ torch.from_numpy(x).T
assert (i[:, 0] == np.arange(300)).all()
assert np.allclose(t.numpy(), t2.numpy())
assert np.allclose(np.diag(d), 0, atol=1e-3)
print("ok")
"""


@pytest.mark.parametrize("torch_first", [True, False])
def test_crossembed_and_torch_openmp_coexist(torch_first):
    pytest.importorskip("torch")
    imports = ["import torch", "import crossembed"]
    if not torch_first:
        imports.reverse()
    code = _SCRIPT.format(first=imports[0], second=imports[1])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_results_do_not_depend_on_thread_count():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((700, 33)).astype(np.float32)
    v = rng.uniform(0, 0.1, x.shape).astype(np.float32)
    runs = [ce.probit_topk(x, v, x, v, 5, num_threads=n) for n in (1, 2, 3)]
    for s, i in runs[1:]:
        assert np.array_equal(s, runs[0][0]) and np.array_equal(i, runs[0][1])
