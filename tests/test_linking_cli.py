"""``crossembed link`` / ``link-table``: files in, links out, one-line errors."""

import json

import numpy as np
import pytest

from _linking_data import clustered_pair, linking_problem
from crossembed.cli import main
from crossembed.cli.linking import read_seeds
from experiments._report import replace_block
from experiments.link_table import render_markdown


@pytest.fixture
def saved(tmp_path):
    A, B, split = linking_problem(300, noise=0.0, n_seeds=30)
    np.save(tmp_path / "A.npy", A)
    np.save(tmp_path / "B.npy", B)
    (tmp_path / "seeds.csv").write_text("a,b\n" + "\n".join(f"{i},{j}" for i, j in split.seeds) + "\n")
    return tmp_path, split


def test_link_writes_csv_and_json(saved, capsys):
    d, split = saved
    rc = main(
        [
            "link",
            str(d / "A.npy"),
            str(d / "B.npy"),
            "--seeds",
            str(d / "seeds.csv"),
            "--method",
            "procrustes",
            "--out",
            str(d / "links.csv"),
            "--json",
        ]
    )
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    lines = (d / "links.csv").read_text().splitlines()
    assert lines[0] == "a,b,posterior,votes" and len(lines) == out["n_links"] + 1
    links = {tuple(map(int, l.split(",")[:2])) for l in lines[1:]}
    assert set(map(tuple, split.truth.tolist())) <= links  # noise-free rotation: every true pair


def test_link_geh_runs(saved, capsys):
    d, _ = saved
    rc = main(
        [
            "link",
            str(d / "A.npy"),
            str(d / "B.npy"),
            "--seeds",
            str(d / "seeds.csv"),
            "--max-iter",
            "2",
            "--quiet",
        ]
    )
    assert rc == 0
    assert "links from 30 seeds" in capsys.readouterr().out


def test_link_sample_rows_flag(saved, capsys):
    d, _ = saved
    args = ["link", str(d / "A.npy"), str(d / "B.npy"), "--seeds", str(d / "seeds.csv"), "--max-iter", "2"]
    assert main([*args, "--sample-rows", "100", "--quiet", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["history"][-1]["final_pass"] == "decoys"
    assert main([*args, "--sample-rows", "0", "--quiet"]) == 0
    assert main([*args, "--sample-rows", "100", "--row-sample", "random", "--quiet"]) == 0
    capsys.readouterr()
    assert main([*args, "--sample-rows", "-1", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--sample-rows" in err and len(err.splitlines()) == 1


def test_link_without_seeds_finds_its_own(tmp_path, capsys):
    A, B, truth = clustered_pair()
    np.save(tmp_path / "A.npy", A)
    np.save(tmp_path / "B.npy", B)
    args = ["link", str(tmp_path / "A.npy"), str(tmp_path / "B.npy"), "--max-iter", "2", "--quiet"]
    assert main(args) == 0
    assert "seeds found, confidence" in capsys.readouterr().out
    assert main([*args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    right = {tuple(p) for p in truth.tolist()}
    assert sum(tuple(p) in right for p in out["seeds_found"]) >= 14 and out["seed_confidence"] >= 0.8


def test_link_without_trusted_seeds_says_so_in_one_line(tmp_path, capsys):
    rng = np.random.default_rng(1)
    np.save(tmp_path / "A.npy", rng.normal(size=(300, 12)).astype(np.float32))
    np.save(tmp_path / "B.npy", rng.normal(size=(300, 12)).astype(np.float32))
    assert main(["link", str(tmp_path / "A.npy"), str(tmp_path / "B.npy"), "--quiet"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("0 links from no seeds:") and "pass --seeds" in captured.out
    assert captured.err == ""  # the search's warning is the summary line, not a second message


def test_link_baselines_need_seeds(saved, capsys):
    d, _ = saved
    assert main(["link", str(d / "A.npy"), str(d / "B.npy"), "--method", "procrustes"]) == 2
    err = capsys.readouterr().err.strip()
    assert "needs --seeds" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize(
    "setup, message",
    [
        (lambda d: (d / "A.npy").write_bytes(b"not numpy"), "not a readable .npy"),
        (lambda d: np.save(d / "A.npy", np.zeros(5)), "2-D array"),
        (lambda d: (d / "seeds.csv").write_text("1,2\nx,y\n"), "not two integers"),
        (lambda d: (d / "seeds.csv").write_text("1,2,3\n"), "2 comma-separated"),
        (lambda d: (d / "seeds.csv").write_text("0,0\n0,1\n"), "one-to-one"),
        (lambda d: (d / "seeds.csv").unlink(), "does not exist"),
    ],
)
def test_link_bad_files_give_one_line_errors(saved, capsys, setup, message):
    d, _ = saved
    setup(d)
    rc = main(["link", str(d / "A.npy"), str(d / "B.npy"), "--seeds", str(d / "seeds.csv"), "--method", "relative"])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and len(err.strip().splitlines()) == 1


def test_read_seeds_header_and_comments(tmp_path):
    p = tmp_path / "s.csv"
    p.write_text("# known pairs\nrow_a,row_b\n3, 4\n5,6\n")
    np.testing.assert_array_equal(read_seeds(str(p)), [[3, 4], [5, 6]])


def test_table_rendering_and_markers(tmp_path):
    recs = [
        dict(
            a="x",
            b="y",
            corpus=10,
            n_objects=10,
            alpha=0.3,
            n_seeds=15,
            method=m,
            draw=d,
            precision=p,
            recall=p,
            f1=p,
            seconds=1.0,
        )
        for m, p in (("procrustes", 0.1), ("geh-validated", 0.5))
        for d in range(2)
    ]
    md = render_markdown(recs)
    assert "| geh-validated | 50.0 ± 0.0 |" in md and "5.0x" in md
    assert "by overlap" not in md  # one overlap: no overlap columns
    low = [dict(r, alpha=0.1, f1=0.2 + 0.1 * r["draw"], precision=0.9) for r in recs if r["method"] == "geh-validated"]
    md2 = render_markdown(recs + low)
    assert "| pair | alpha 0.1 | alpha 0.3 |" in md2
    assert "| x ↔ y | 25.0 ± 5.0 (90.0 / 50.0) [2] | 50.0 ± 0.0 (50.0 / 50.0) [2] |" in md2
    assert "| mean of the pairs (± std across pairs) | – | – |" in md2  # one pair: no mean
    other = [dict(r, a="z", f1=r["f1"] / 2) for r in recs + low if r["method"] == "geh-validated"]
    md3 = render_markdown(recs + low + other)
    # each pair's mean counts once: (25 + 12.5) / 2 at alpha 0.1, (50 + 25) / 2 at alpha 0.3
    assert "| mean of the pairs (± std across pairs) | 18.8 ± 6.2 (90.0 / 50.0) [2 pairs] | 37.5 ± 12.5" in md3
    doc = tmp_path / "linking.md"
    doc.write_text("# Title\n\ntext\n")
    replace_block(doc, "link-table", md)
    replace_block(doc, "link-table", "NEW")
    text = doc.read_text()
    assert text.startswith("# Title") and "NEW" in text and "geh-validated" not in text
