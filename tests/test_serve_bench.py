"""``crossembed bench serve --size small``: the load benchmark's seconds-long smoke (what CI runs)."""

import json

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from crossembed.cli import main, serve_bench

pytestmark = pytest.mark.timeout(120)


def test_bench_serve_small_json(capsys):
    argv = ["bench", "serve", "--size", "small", "--duration", "0.5", "--concurrency", "1,8", "--json"]
    assert main(argv + ["--write-rate", "40"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["served_mismatches"] == 0 and out["server_exit_code"] == 0
    assert out["config"]["n_docs"] == serve_bench.SIZES["small"]["n_docs"] and out["config"]["dim"] == 64
    assert out["in_process"]["batch_qps"] > 0 and 0.5 < out["in_process"]["recall"] <= 1.0
    rows = out["rows"]
    assert [(r["concurrency"], r["write_rate"]) for r in rows] == [(1, 0.0), (8, 0.0), (1, 40.0), (8, 40.0)]
    for r in rows:
        assert r["errors"] == 0 and r["requests"] > 0 and r["qps"] > 0
        assert 0 < r["p50_ms"] <= r["p99_ms"] and r["mean_batch"] >= 1
    for r in rows[2:]:
        # the writer ran and nothing failed; how fast is a benchmark's question (benchmarks/), not a test's
        assert r["write_errors"] == 0 and r["write_qps"] > 0
    assert "| HTTP | 8 |" in serve_bench.render(out)


def test_bench_serve_user_errors(capsys):
    assert main(["bench", "serve", "--size", "small", "--duration", "0"]) == 2
    assert "--duration" in capsys.readouterr().err
    assert main(["bench", "serve", "--size", "small", "--concurrency", "0"]) == 2
    assert "--concurrency" in capsys.readouterr().err
