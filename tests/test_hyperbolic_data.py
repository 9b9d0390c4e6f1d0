"""Compositional scenes: layout invariants, captions, determinism, split, errors."""

import gzip

import numpy as np
import pytest

from crossembed.hyperbolic import data as D


def _source(n=200, seed=0):
    rng = np.random.default_rng(seed)
    images = rng.integers(1, 256, size=(n, 28, 28)).astype(np.uint8)  # no zero pixel: boxes are fully painted
    labels = np.arange(n) % 10
    return images, labels


def test_scenes_layout_and_representativeness():
    s = D.make_scenes(60, canvas=48, random_state=0, source=_source())
    assert s.scenes.shape == (60, 48, 48)
    for i in range(60):
        idx = np.flatnonzero(s.part_scene == i)
        assert 1 <= idx.size <= 4
        np.testing.assert_allclose(s.representativeness[idx].sum(), 1.0)
        mass = s.parts[idx].reshape(idx.size, -1).sum(1, dtype=np.float64)
        np.testing.assert_allclose(s.representativeness[idx], mass / s.scenes[i].sum(dtype=np.float64))
        areas = s.part_boxes[idx, 2] * s.part_boxes[idx, 3]
        labels = s.part_labels[idx]
        assert len(set(labels)) == len(labels)  # different classes per scene
        assert list(s.scene_labels[i, : idx.size]) == list(labels) and (s.scene_labels[i, idx.size :] == -1).all()
        assert (np.diff(s.part_boxes[idx, 2]) <= 0).all()  # largest first
        assert s.captions[i] == D.scene_caption(labels)
        # boxes do not overlap: painted area equals the sum of box areas
        painted = (s.scenes[i] > 0).sum()
        assert painted == areas.sum()


def test_a_part_is_its_scene_with_the_other_items_masked_at_the_same_scale():
    s = D.make_scenes(40, canvas=40, random_state=1, source=_source())
    # same canvas, same scale: a part is never an upscaled crop
    assert s.parts.shape[1:] == s.scenes.shape[1:]
    for t in range(len(s.parts)):
        scene, part = s.scenes[s.part_scene[t]], s.parts[t]
        r, c, h, w = s.part_boxes[t]
        inside = np.zeros(scene.shape, bool)
        inside[r : r + h, c : c + w] = True
        assert np.array_equal(part[inside], scene[inside])  # the item, pixel for pixel, where it is in the scene
        assert not part[~inside].any()  # everything else masked out
        assert (part <= scene).all()  # a pixel-wise subset: less specific than the whole
    for i in range(40):
        idx = np.flatnonzero(s.part_scene == i)
        assert np.array_equal(s.parts[idx].max(0), s.scenes[i])  # the parts make up the scene


def test_representativeness_is_a_share_in_unit_interval_and_orders_by_ink():
    s = D.make_scenes(80, random_state=2, source=_source())
    rep = s.representativeness
    assert rep.dtype == np.float64 and ((rep >= 0) & (rep <= 1)).all()
    one = np.bincount(s.part_scene)[s.part_scene] == 1
    np.testing.assert_allclose(rep[one], 1.0)
    # the larger box of two items with similar ink density carries the larger share
    big = [np.flatnonzero(s.part_scene == i) for i in range(80)]
    pairs = [(i[0], i[1]) for i in big if i.size >= 2 and s.part_boxes[i[0], 2] > 1.5 * s.part_boxes[i[1], 2]]
    assert pairs and all(rep[a] > rep[b] for a, b in pairs)


def test_an_all_black_scene_shares_equally():
    images = np.zeros((20, 28, 28), np.uint8)
    s = D.make_scenes(10, random_state=0, source=(images, np.arange(20) % 10))
    n = np.bincount(s.part_scene)[s.part_scene]
    np.testing.assert_allclose(s.representativeness, 1.0 / n)


def test_captions_and_vocabulary():
    assert D.part_caption(9) == "an ankle boot"
    assert D.scene_caption([4, 8, 9]) == "a coat, a bag and an ankle boot"
    assert D.scene_caption([1]) == "a trouser"
    v = D.Vocabulary()
    tok = v.encode(["a coat, a bag and an ankle boot", "a bag"])
    assert tok.shape == (2, 9) and (tok[1, 2:] == 0).all()
    assert [v.itos[i] for i in tok[0].tolist()] == "a coat , a bag and an ankle boot".split()
    with pytest.raises(ValueError, match="unknown word"):
        v.encode(["a unicorn"])


def test_deterministic_by_seed_and_caption_ids():
    a = D.make_scenes(30, random_state=3, source=_source())
    b = D.make_scenes(30, random_state=3, source=_source())
    c = D.make_scenes(30, random_state=4, source=_source())
    assert np.array_equal(a.scenes, b.scenes) and a.captions == b.captions
    assert not np.array_equal(a.scenes, c.scenes)
    for i in range(30):
        for j in range(30):
            assert (a.caption_ids[i] == a.caption_ids[j]) == (a.captions[i] == a.captions[j])


def test_argument_errors():
    with pytest.raises(ValueError, match="n_scenes"):
        D.make_scenes(0, source=_source())
    with pytest.raises(ValueError, match="max_items"):
        D.make_scenes(5, max_items=11, source=_source())
    with pytest.raises(ValueError, match="min_size"):
        D.make_scenes(5, min_size=30, max_size=20, source=_source())
    with pytest.raises(ValueError, match="split"):
        D.load_fashion_mnist("valid")


def test_missing_dataset_names_the_debian_package(tmp_path, monkeypatch):
    monkeypatch.setenv("CROSSEMBED_FASHION_MNIST_DIR", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="dataset-fashion-mnist"):
        D.load_fashion_mnist("test")


def test_idx_reader_roundtrip_and_truncation(tmp_path, monkeypatch):
    imgs = np.arange(2 * 28 * 28, dtype=np.uint32).reshape(2, 28, 28).astype(np.uint8)

    def idx(arr):
        header = bytes([0, 0, 8, arr.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in arr.shape)
        return header + arr.tobytes()

    for name, arr in (("t10k-images-idx3-ubyte.gz", imgs), ("t10k-labels-idx1-ubyte.gz", np.array([3, 7], np.uint8))):
        with gzip.open(tmp_path / name, "wb") as fh:
            fh.write(idx(arr))
    monkeypatch.setenv("CROSSEMBED_FASHION_MNIST_DIR", str(tmp_path))
    x, y = D.load_fashion_mnist("test")
    assert np.array_equal(x, imgs) and list(y) == [3, 7]
    with gzip.open(tmp_path / "t10k-images-idx3-ubyte.gz", "wb") as fh:
        fh.write(idx(imgs)[:-5])
    with pytest.raises(ValueError, match="truncated"):
        D.load_fashion_mnist("test")


def test_real_fashion_mnist_split_items_are_disjoint():
    try:
        train_x, _ = D.load_fashion_mnist("train")
        test_x, test_y = D.load_fashion_mnist("test")
    except FileNotFoundError:
        pytest.skip("dataset-fashion-mnist not installed")
    assert train_x.shape == (60000, 28, 28) and test_x.shape == (10000, 28, 28)
    s = D.make_scenes(20, split="test", random_state=0, source=(test_x, test_y))
    assert s.part_source.max() < 10000 and s.split == "test"
