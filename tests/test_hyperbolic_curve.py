"""The learning curve: constant schedule, step-0 point, evaluation every ``every`` steps, markdown and plot."""

import numpy as np
import pytest
import torch

from crossembed.hyperbolic import data as D
from crossembed.hyperbolic import evaluate as E
from crossembed.hyperbolic.train import EncoderConfig, OptimiserConfig, SceneConfig, TrainConfig, _lr_factor
from experiments import uncha_curve as C
from experiments.uncha_plots import plot_learning_curve

torch.set_num_threads(1)


def test_constant_schedule_stays_flat_after_warmup():
    cos = OptimiserConfig(warmup=10)
    flat = OptimiserConfig(warmup=10, schedule="constant")
    assert _lr_factor(4, flat, 100) == _lr_factor(4, cos, 100) == 0.5
    assert _lr_factor(99, flat, 100) == 1.0 and _lr_factor(99, cos, 100) < 0.01
    with pytest.raises(ValueError, match="schedule"):
        OptimiserConfig(schedule="linear")


def test_learning_curve_rows_and_report(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    src = (rng.integers(0, 256, size=(100, 28, 28)).astype(np.uint8), np.arange(100) % 10)
    real = D.make_scenes

    def scenes(n, **kw):  # synthetic items instead of the Fashion-MNIST files
        kw.pop("source", None)
        return real(n, **kw, source=src)

    monkeypatch.setattr(
        C, "train_scenes", lambda cfg: scenes(cfg.scenes.n_train, canvas=cfg.scenes.canvas, random_state=cfg.seed)
    )
    monkeypatch.setattr(
        C,
        "make_test_set",
        lambda **kw: E.HeldOutSet(scenes(20, canvas=kw["canvas"], random_state=1), src[0][:30], src[1][:30]),
    )
    base = TrainConfig(
        batch_size=8,
        optimiser=OptimiserConfig(warmup=1),
        scenes=SceneConfig(n_train=48, canvas=32),
        encoder=EncoderConfig(dim=8, width=8),
    )
    res = C.learning_curve(models=("clip", "uncha"), steps=5, every=2, base=base, show_progress_bar=False)
    assert res["config"]["optimiser"]["schedule"] == "constant" and res["config"]["steps"] == 5
    got = [(r["model"], r["step"]) for r in res["rows"]]
    assert got == [(m, s) for m in ("clip", "uncha") for s in (0, 2, 4, 5)]
    assert all(0 <= r["zs_part_acc"] <= 1 for r in res["rows"])
    md = C.render_curve(res, plot="c.png")
    assert "| uncha | 5 |" in md and md.endswith("![learning curve](c.png)")
    assert plot_learning_curve(res["rows"], C.CURVE_METRICS, tmp_path / "c.png").stat().st_size > 1000
