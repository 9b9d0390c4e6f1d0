"""``crossembed bench serve --soak``: a short soak against the real server samples RSS, latency and errors."""

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from crossembed.cli import main, serve_soak


def test_a_short_soak_samples_the_server_and_its_index(tmp_path):
    result = serve_soak.soak_serve(0.15, n_docs=600, dim=16, concurrency=2, write_rate=40, window=50, sample_s=3)
    samples = result["samples"]
    assert result["server_exit_code"] == 0 and len(samples) == 3
    assert all(s["searches"] > 0 and s["writes"] > 0 and s["server_errors"] == 0 for s in samples)
    assert all(s["rss_mib"] > 10 for s in samples)
    assert 600 <= samples[-1]["documents"] <= 650 and samples[-1]["deleted_slots"] > 0  # upserts and removals
    text = serve_soak.render_soak(result)
    assert "| minute | server RSS MiB |" in text and "5xx responses: 0" in text


def test_searches_paced_to_the_search_rate():
    result = serve_soak.soak_serve(0.1, n_docs=400, dim=16, concurrency=2, search_rate=20, write_rate=0, sample_s=2)
    searches = sum(s["searches"] for s in result["samples"])
    assert 0.5 * 20 * 6 <= searches <= 20 * 6 + 2  # 6 s at 20/s (a connection's first goes at once)
    assert "paced to 20 searches/s in all" in serve_soak.render_soak(result)


def test_soak_arguments_are_checked(capsys):
    with pytest.raises(ValueError, match="minutes"):
        serve_soak.soak_serve(0)
    with pytest.raises(ValueError, match="search_rate"):
        serve_soak.soak_serve(1, search_rate=-1)
    assert main(["bench", "serve", "--soak", "-1"]) == 2 and "--soak must be > 0" in capsys.readouterr().err
    assert main(["bench", "serve", "--soak", "1", "--search-rate", "-1"]) == 2
    assert "--search-rate" in capsys.readouterr().err
