"""``crossembed bench``: JSON structure, real timings, agreement checks and user errors."""

import json

import numpy as np
import pytest

from crossembed.cli import kernel_bench as bench
from crossembed.cli import kernel_peers as baselines
from crossembed.cli import main


def test_bench_lorentz_json(capsys):
    assert main(["bench", "--scale", "small", "--kernels", "lorentz", "--json", "--repeat", "1"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["scale"] == "small" and out["repeat"] == 1 and out["ok"] is True
    assert out["simd"] in ("avx512", "avx2", "neon", "generic")
    ops = [(r["op"], r["baseline"]) for r in out["cases"]]
    expected = [("lorentz_pairwise", "numpy float32"), ("lorentz_topk", "numpy float32")]
    assert [c for c in ops if c[1] == "numpy float32"] == expected
    try:
        import torch  # noqa: F401
    except ImportError:
        assert any("torch" in note for note in out["notes"])
    else:
        assert ("lorentz_pairwise", "torch float32") in ops and ("lorentz_topk", "torch float32") in ops
    for r in out["cases"]:
        assert r["kernel"] == "lorentz" and r["agree"] is True
        assert r["size"]["NX"] == 512 and r["size"]["D"] == 128
        assert r["flops"] == 2.0 * 512 * 512 * 128
        assert r["kernel_ms"] > 0 and r["baseline_ms"] > 0
        assert r["ratio"] == pytest.approx(r["baseline_ms"] / r["kernel_ms"])
        assert r["kernel_gflops"] == pytest.approx(r["flops"] / (r["kernel_ms"] * 1e6))


def test_bench_table_and_probit_sgemm(capsys):
    assert main(["bench", "--kernels", "probit", "--repeat", "1", "--num-threads", "1"]) == 0
    text = capsys.readouterr().out
    assert "| kernel | size | baseline | kernel ms | baseline ms | ratio | kernel GFLOP/s |" in text
    assert "| probit_topk | Q=64 N=5,000 D=384 k=10 | numpy float32 |" in text
    assert "of numpy sgemm" in text and "MISMATCH" not in text


@pytest.mark.parametrize(
    "argv, word",
    [
        (["--kernels", "lorentz,nope"], "'nope'"),
        (["--kernels", ","], "--kernels"),
        (["--repeat", "0"], "repeat"),
        (["--num-threads", "0"], "num_threads"),
        (["--scale", "huge"], "--scale"),
    ],
)
def test_bench_user_errors_exit_2(capsys, argv, word):
    try:  # our checks return 2; argparse's own (--scale choices) exit 2
        code = main(["bench", *argv])
    except SystemExit as exc:
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and word in err[0]


def test_parse_kernels_keeps_order_and_drops_repeats():
    assert bench.parse_kernels(" CSLS, probit,csls ") == ["csls", "probit"]


def test_mismatch_is_reported_and_exits_1(capsys, monkeypatch):
    # a baseline that computes something else must be caught, not timed silently
    right = baselines.numpy_lorentz
    monkeypatch.setattr(baselines, "numpy_lorentz", lambda X, Y, c=1.0: right(X, Y, 2.0))  # wrong curvature
    assert main(["bench", "--kernels", "lorentz", "--repeat", "1", "--json"]) == 1
    captured = capsys.readouterr()
    agree = {(r["op"], r["baseline"]): r["agree"] for r in json.loads(captured.out)["cases"]}
    assert not agree[("lorentz_pairwise", "numpy float32")] and not agree[("lorentz_topk", "numpy float32")]
    assert all(ok for (op, base), ok in agree.items() if base != "numpy float32")
    assert "disagree" in captured.err and "lorentz_pairwise vs numpy float32" in captured.err


def test_mismatch_marked_in_table(capsys):
    result = {
        "scale": "small",
        "simd": "avx2",
        "threads": None,
        "repeat": 1,
        "notes": [],
        "seconds": 1.0,
        "cases": [
            bench._row(
                "csls",
                "csls_mutual_topk",
                {"N": 10},
                "numpy float32",
                1e9,
                0.5,
                1.0,
                (False, "3 common of 5 kernel / 5 baseline pairs"),
            )
        ],
    }
    line = bench.render(result).splitlines()[4]
    assert line == (
        "| csls_mutual_topk | N=10 | numpy float32 | 500.0 | 1000.0 | 2.00x | 2.0 | "
        "MISMATCH: 3 common of 5 kernel / 5 baseline pairs |"
    )


def test_topk_agreement_check():
    vals = np.array([[0.9, 0.8, 0.7]])
    ok, _ = bench._topk_agree(vals, [[1, 2, 3]], vals, [[1, 2, 3]], atol=1e-6)
    assert ok
    ok, detail = bench._topk_agree(vals, [[1, 2, 3]], vals, [[1, 2, 4]], atol=1e-6)
    assert not ok and "overlap 0.667" in detail
    ok, _ = bench._topk_agree(vals, [[1, 2, 3]], vals + 1e-3, [[1, 2, 3]], atol=1e-6)
    assert not ok
