"""The trainer: every model trains, checkpoints are atomic and resume exactly, evaluation and CLI run."""

import json

import numpy as np
import pytest
import torch

from crossembed._io import CorruptFileError
from crossembed.hyperbolic import data as D
from crossembed.hyperbolic.evaluate import HeldOutSet, evaluate
from crossembed.hyperbolic.losses import MODEL_NAMES
from crossembed.hyperbolic.train import (
    EncoderConfig,
    OptimiserConfig,
    SceneConfig,
    TrainConfig,
    load_checkpoint,
    train,
)

torch.set_num_threads(1)


def _scenes(n=48, seed=0, split="train"):
    rng = np.random.default_rng(seed)
    src = (rng.integers(0, 256, size=(100, 28, 28)).astype(np.uint8), np.arange(100) % 10)
    return D.make_scenes(n, canvas=32, random_state=seed, source=src, split=split), src


def _cfg(model="uncha", steps=3, **kw):
    return TrainConfig(
        model=model,
        steps=steps,
        batch_size=8,
        optimiser=OptimiserConfig(warmup=1),
        scenes=SceneConfig(n_train=48, canvas=32),
        encoder=EncoderConfig(dim=8, width=8),
        **kw,
    )


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_every_model_trains_and_evaluates(name):
    data, src = _scenes()
    res = train(_cfg(name), data=data, show_progress_bar=False)
    assert np.isfinite(res.history["loss"]).all()
    assert res.scenes_per_second > 0
    test_scenes, _ = _scenes(20, seed=1, split="test")
    test = HeldOutSet(test_scenes, src[0][:30], src[1][:30])
    m = evaluate(res.model, test)
    for k in ("zs_part_acc", "zs_scene_acc", "i2t_r1", "i2t_r5", "t2i_r1", "t2i_r5", "p2s_r1", "p2s_r5"):
        assert 0.0 <= m[k] <= 1.0
    assert m["i2t_r1"] <= m["i2t_r5"]
    if name == "clip":
        assert np.isnan(m["spearman_u_rep"]) and np.isnan(m["spearman_r_1mrep"]) and m["backend"] == "torch-cosine"
    else:
        assert m["backend"] == "cpp-lorentz_topk"
        assert 0.1 <= m["curvature"] <= 10
        if np.isfinite(m["spearman_u_rep"]):
            assert m["spearman_u_rep"] == pytest.approx(-m["spearman_u_1mrep"])
            assert -1.0 <= m["spearman_r_1mrep"] <= 1.0


def test_terms_logged_match_the_model():
    data, _ = _scenes()
    clip = train(_cfg("clip", steps=2), data=data, show_progress_bar=False).history
    uncha = train(_cfg("uncha", steps=2), data=data, show_progress_bar=False).history
    assert np.isnan(clip["calibration"]).all() and np.isfinite(clip["global"]).all()
    assert np.isfinite(uncha["calibration"]).all() and np.isfinite(uncha["local"]).all()


def test_resume_is_exact_and_checkpoint_is_checked(tmp_path):
    data, _ = _scenes()
    cfg = _cfg("uncha", steps=4, checkpoint_every=10)
    full = train(cfg, data=data, show_progress_bar=False)
    train(cfg, out=tmp_path, data=data, show_progress_bar=False, max_steps=2)
    _m, _c, step, _h, _meta = load_checkpoint(tmp_path)
    assert step == 2
    resumed = train(cfg, out=tmp_path, data=data, show_progress_bar=False, resume=True)
    for (k, a), b in zip(full.model.state_dict().items(), resumed.model.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=k)
    np.testing.assert_allclose(full.history["loss"], resumed.history["loss"], rtol=1e-5)
    assert not (tmp_path / "loss.png").exists()  # the library writes no plots
    with pytest.raises(ValueError, match="different configuration"):
        train(_cfg("uncha", steps=5), out=tmp_path, data=data, show_progress_bar=False, resume=True)
    ck = tmp_path / "checkpoint.cemb"
    blob = bytearray(ck.read_bytes())
    blob[-10] ^= 0xFF
    ck.write_bytes(bytes(blob))
    with pytest.raises(CorruptFileError):
        load_checkpoint(ck)
    with pytest.raises(FileNotFoundError):
        load_checkpoint(tmp_path / "nothing.cemb")


def test_config_round_trip_and_old_checkpoint_versions_are_refused(tmp_path):
    from crossembed._io import load_arrays, save_arrays
    from crossembed.hyperbolic.train import CHECKPOINT_KIND, CHECKPOINT_VERSION

    cfg = _cfg("meru", steps=2, lam=0.5)
    assert TrainConfig.from_config(json.loads(json.dumps(cfg.get_config()))) == cfg
    data, _ = _scenes()
    train(cfg, out=tmp_path, data=data, show_progress_bar=False)
    _m, loaded, step, _h, meta = load_checkpoint(tmp_path)
    assert loaded == cfg and step == 2 and meta["format_version"] == CHECKPOINT_VERSION
    arrays, meta = load_arrays(tmp_path / "checkpoint.cemb", CHECKPOINT_KIND)
    flat = {k: v for group in ("optimiser", "scenes", "encoder") for k, v in meta["config"][group].items()}
    old = {**meta, "config": {**{k: v for k, v in meta["config"].items() if not isinstance(v, dict)}, **flat}}
    del old["format_version"]  # a 0.1.0 checkpoint: flat config, no version field
    save_arrays(tmp_path / "old.cemb", CHECKPOINT_KIND, arrays, old)
    with pytest.raises(ValueError, match=f"format version 1, expected {CHECKPOINT_VERSION}"):
        load_checkpoint(tmp_path / "old.cemb")
    save_arrays(tmp_path / "future.cemb", CHECKPOINT_KIND, arrays, {**meta, "format_version": 99})
    with pytest.raises(ValueError, match="format version 99"):
        load_checkpoint(tmp_path / "future.cemb")


def test_config_validation():
    with pytest.raises(ValueError, match="model must be"):
        TrainConfig(model="bert")
    with pytest.raises(ValueError, match="steps"):
        TrainConfig(steps=0)
    with pytest.raises(ValueError, match="batch_size"):
        TrainConfig(batch_size=100, scenes=SceneConfig(n_train=50))
    with pytest.raises(ValueError, match="warmup"):
        OptimiserConfig(warmup=-1)
    with pytest.raises(ValueError, match="canvas"):
        SceneConfig(canvas=0)
    with pytest.raises(ValueError, match="width"):
        EncoderConfig(width=0)
    with pytest.raises(TypeError, match="optimiser must be a OptimiserConfig"):
        TrainConfig(optimiser={"lr": 1e-3})
    with pytest.raises(ValueError, match="lam"):
        TrainConfig(lam=-1.0)
    from crossembed.hyperbolic.train import build_model

    assert build_model(_cfg()).config.lam == 0.2
    assert build_model(_cfg(lam=1.5)).config.lam == 1.5


def test_weight_decay_skips_temperatures_curvature_and_scalers():
    from crossembed.hyperbolic.train import _optimizer, build_model

    m = build_model(_cfg())
    groups = _optimizer(m, _cfg().optimiser).param_groups
    nd = {id(p) for p in groups[1]["params"]}
    assert groups[0]["weight_decay"] == 0.2 and groups[1]["weight_decay"] == 0.0
    assert nd == {id(p) for p in m.no_decay_parameters()} and len(nd) == 6
    t = m.temperatures()
    assert t["tau_g"].item() == pytest.approx(0.07) and t["tau_l"].item() == pytest.approx(0.05)
    assert m.curvature().item() == pytest.approx(1.0)
    with torch.no_grad():
        m.log_curvature.fill_(5.0)
        m.log_tau_g.fill_(-10.0)
    assert m.curvature().item() == pytest.approx(10.0) and m.temperatures()["tau_g"].item() == pytest.approx(0.01)


def test_cli_errors_exit_2(tmp_path, capsys):
    from crossembed.cli import main

    assert main(["eval-uncha", str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["eval-uncha", str(tmp_path), "--num-threads", "0"]) == 2
    assert "num_threads must be >= 1" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="2"):  # the old spelling is gone
        main(["embed-wordnet", "--threads", "2"])
    assert not list(tmp_path.iterdir())  # nothing written on an error


def test_cli_spellings():
    from crossembed.cli import build_parser

    parser = build_parser()
    for argv in (
        ["train-uncha", "--out", "x"],
        ["eval-uncha", "x"],
        ["embed-wordnet"],
    ):
        args = parser.parse_args(argv + ["--quiet", "--json", "--num-threads", "2"])
        assert args.quiet and args.json and args.num_threads == 2
        assert parser.parse_args(argv).num_threads == 1  # reproducible timings (see the epilog)
    assert parser.parse_args(["embed-wordnet", "--seed", "3"]).seed == 3


@pytest.mark.slow
def test_cli_train_and_eval_on_real_fashion_mnist(tmp_path, capsys, request):
    if "slow" not in (request.config.getoption("-m") or ""):
        pytest.skip("real-data training: run with `pytest -m slow`")
    from crossembed.cli import main

    rc = main(
        [
            "train-uncha",
            "--model",
            "uncha",
            "--seed",
            "0",
            "--out",
            str(tmp_path),
            "--steps",
            "20",
            "--n-train",
            "300",
            "--quiet",
            "--json",
        ]
    )
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["scenes_per_second"] > 0
    assert main(["eval-uncha", str(tmp_path), "--n-test", "100", "--n-items", "200", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["zs_part_acc"] > 0.1  # above chance after 20 steps
