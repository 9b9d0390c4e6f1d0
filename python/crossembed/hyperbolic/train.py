"""One trainer for CLIP, MERU, HyCoCLIP, UNCHA and the UNCHA ablations.

The model name picks a :class:`~crossembed.hyperbolic.losses.LossConfig`;
everything else (data, encoders, optimiser, schedule, batches) is shared, so
differences between the rows of the comparison come from the loss terms only.
Checkpoints are atomic and checksummed (:mod:`crossembed._io`) and hold the
model, the AdamW state, the step and the loss history, so a run resumes
exactly where it stopped (batches are drawn from ``seed`` and the step index).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable, Dict, Optional, Protocol, Sequence, Tuple, Union

import numpy as np
import torch
import torch.nn as nn
from tqdm.auto import tqdm

from crossembed._io import CorruptFileError, load_arrays, save_arrays
from crossembed._validation import check_choice, check_int, check_positive
from crossembed.hyperbolic.data import CLASS_NAMES, SceneSet, Vocabulary, make_scenes, part_caption
from crossembed.hyperbolic.losses import Batch, preset, total_loss
from crossembed.hyperbolic.model import CompositionalModel, ImageEncoder, TextEncoder

__all__ = [
    "TrainConfig",
    "TrainResult",
    "train",
    "train_scenes",
    "build_model",
    "save_checkpoint",
    "load_checkpoint",
    "BatchSource",
    "SceneBatches",
    "CHECKPOINT_KIND",
    "CHECKPOINT_VERSION",
    "OptimiserConfig",
    "SceneConfig",
    "EncoderConfig",
]

CHECKPOINT_KIND = "uncha-checkpoint"
CHECKPOINT_NAME = "checkpoint.cemb"
#: Format of the checkpoint's metadata (the stored config holds its three groups).
CHECKPOINT_VERSION = 2
_HISTORY_TERMS = ("loss", "global", "local", "part_whole", "entailment", "calibration")


@dataclass(frozen=True)
class OptimiserConfig:
    """AdamW and its learning-rate schedule.

    Parameters
    ----------
    lr : float
        Peak learning rate, reached after the warm-up; default 5e-4.
    weight_decay : float
        AdamW weight decay of the weights (temperatures, curvature and scales
        get none); default 0.2.
    warmup : int
        Steps of linear warm-up from ``lr / warmup`` to ``lr``; default 25.
    schedule : {"cosine", "constant"}
        The learning rate after the warm-up: ``cosine`` decays to 0 at the
        run's last step, ``constant`` keeps ``lr`` (the learning curve uses it,
        so a point at step ``s`` is not shaped by a decay tied to the curve's
        length); default ``cosine``.
    """

    lr: float = 5e-4
    weight_decay: float = 0.2
    warmup: int = 25
    schedule: str = "cosine"

    def __post_init__(self):
        check_positive(self.lr, "lr", allow_zero=True)
        check_positive(self.weight_decay, "weight_decay", allow_zero=True)
        check_int(self.warmup, "warmup", low=0)
        check_choice(self.schedule, "schedule", ("cosine", "constant"))


@dataclass(frozen=True)
class SceneConfig:
    """The generated training scenes (:func:`~crossembed.hyperbolic.data.make_scenes`).

    Parameters
    ----------
    n_train : int
        Number of training scenes; default 6000.
    canvas : int
        Scene side in pixels; default 48.
    max_items : int
        Most Fashion-MNIST items per scene; default 4.
    """

    n_train: int = 6000
    canvas: int = 48
    max_items: int = 4

    def __post_init__(self):
        for name in ("n_train", "canvas", "max_items"):
            check_int(getattr(self, name), name, low=1)


@dataclass(frozen=True)
class EncoderConfig:
    """Size of the image and text towers.

    Parameters
    ----------
    dim : int
        Embedding dimension; default 64.
    width : int
        Base channel count of the image tower (the text tower's GRU has
        ``2 * width`` units); default 16, small enough that a CPU step is short
        at the learning curve's step counts.
    """

    dim: int = 64
    width: int = 16

    def __post_init__(self):
        check_int(self.dim, "dim", low=1)
        check_int(self.width, "width", low=1)


@dataclass(frozen=True)
class TrainConfig:
    """Everything that defines a training run (stored in the checkpoint).

    Parameters
    ----------
    model : str
        A name of :data:`crossembed.hyperbolic.losses.MODEL_NAMES` (the loss
        preset); default ``"uncha"``.
    steps : int
        Optimisation steps; default 500.
    batch_size : int
        Scenes per batch (at most ``scenes.n_train``); default 64.
    seed : int
        Seeds the scenes, the initialisation and the batches; default 0.
    checkpoint_every : int
        Steps between checkpoints when training writes to a directory; default 250.
    lam : float, optional
        Entailment weight in place of the preset's; default None (the preset's).
    optimiser : OptimiserConfig
    scenes : SceneConfig
    encoder : EncoderConfig
    """

    model: str = "uncha"
    steps: int = 500
    batch_size: int = 64
    seed: int = 0
    checkpoint_every: int = 250
    lam: Optional[float] = None
    optimiser: OptimiserConfig = field(default_factory=OptimiserConfig)
    scenes: SceneConfig = field(default_factory=SceneConfig)
    encoder: EncoderConfig = field(default_factory=EncoderConfig)

    def __post_init__(self):
        preset(self.model)  # validates the name
        for name in ("steps", "batch_size", "checkpoint_every"):
            check_int(getattr(self, name), name, low=1)
        check_int(self.seed, "seed", low=0)
        for name, kind in (("optimiser", OptimiserConfig), ("scenes", SceneConfig), ("encoder", EncoderConfig)):
            if not isinstance(getattr(self, name), kind):
                raise TypeError(f"{name} must be a {kind.__name__}, got {type(getattr(self, name)).__name__}")
        if self.batch_size > self.scenes.n_train:
            raise ValueError(f"batch_size={self.batch_size} exceeds n_train={self.scenes.n_train}")
        if self.lam is not None:
            check_positive(self.lam, "lam", allow_zero=True)

    def get_config(self) -> Dict:
        """A JSON-able dict; :meth:`from_config` rebuilds the same config."""
        return asdict(self)

    @classmethod
    def from_config(cls, config: Dict) -> TrainConfig:
        """The config :meth:`get_config` returned; unknown or missing groups raise TypeError/KeyError."""
        groups = {"optimiser": OptimiserConfig, "scenes": SceneConfig, "encoder": EncoderConfig}
        return cls(**{**config, **{name: kind(**config[name]) for name, kind in groups.items()}})


@dataclass
class TrainResult:
    """What :func:`train` returns: the model (in eval mode), its config, the
    per-step loss terms (NaN where a term is off), throughput over this call's
    steps (scenes and images, parts included, per second of wall time) and
    those steps' wall seconds."""

    model: CompositionalModel
    config: TrainConfig
    history: Dict[str, np.ndarray]
    scenes_per_second: float = float("nan")
    images_per_second: float = float("nan")
    seconds: float = 0.0


def _scratch_towers(encoder: EncoderConfig) -> Tuple[nn.Module, nn.Module]:
    return ImageEncoder(encoder.dim, encoder.width), TextEncoder(len(Vocabulary()), encoder.dim, 2 * encoder.width)


def build_model(
    config: TrainConfig, towers: Callable[[EncoderConfig], Tuple[nn.Module, nn.Module]] = _scratch_towers
) -> CompositionalModel:
    """A freshly initialised model of ``config`` (seeds torch with ``config.seed``).

    ``towers`` makes the image and text towers from ``config.encoder`` (after
    seeding); default: the CNN and GRU trained from scratch on the scenes.
    """
    torch.manual_seed(config.seed)
    loss_config = preset(config.model)
    if config.lam is not None:
        loss_config = replace(loss_config, lam=float(config.lam))
    return CompositionalModel(loss_config, *towers(config.encoder), dim=config.encoder.dim)


def train_scenes(config: TrainConfig) -> SceneSet:
    """The training scenes of ``config`` (deterministic in ``config.seed``)."""
    return make_scenes(
        config.scenes.n_train,
        split="train",
        canvas=config.scenes.canvas,
        max_items=config.scenes.max_items,
        random_state=config.seed,
    )


class BatchSource(Protocol):
    """What the trainer draws batches from: ``len`` training examples, and
    ``batch(model, indices)``, the :class:`~crossembed.hyperbolic.losses.Batch`
    of those examples embedded by ``model``."""

    def __len__(self) -> int: ...

    def batch(self, model: CompositionalModel, indices: np.ndarray) -> Batch: ...


class SceneBatches:
    """The Fashion-MNIST scenes as a :class:`BatchSource`: a batch is the scenes, their parts and
    the distinct part captions, encoded by the model (captions tokenised once)."""

    def __init__(self, data: SceneSet):
        self.data = data
        vocab = Vocabulary()
        self.scene_tokens = vocab.encode(data.captions)
        self.part_tokens = vocab.encode([part_caption(k) for k in range(len(CLASS_NAMES))])

    def __len__(self) -> int:
        return len(self.data)

    def batch(self, model: CompositionalModel, indices: Sequence[int]) -> Batch:
        data, scenes = self.data, np.asarray(indices)
        batch = Batch(
            model.encode_image(torch.from_numpy(data.scenes[scenes])),
            model.encode_text(self.scene_tokens[scenes]),
            scene_caption=torch.from_numpy(data.caption_ids[scenes]),
        )
        if not model.config.uses_parts:
            return batch
        pidx = data.parts_of(scenes)
        uniq, part_text = np.unique(data.part_labels[pidx], return_inverse=True)
        where = {int(s): i for i, s in enumerate(scenes)}
        part_scene = np.array([where[int(s)] for s in data.part_scene[pidx]], np.int64)
        has = (data.scene_labels[scenes][:, :, None] == uniq[None, None, :]).any(1)
        batch.image_part = model.encode_image(torch.from_numpy(data.parts[pidx]))
        batch.text_part = model.encode_text(self.part_tokens[torch.from_numpy(uniq)])
        batch.part_text = torch.from_numpy(part_text.astype(np.int64))
        batch.part_scene = torch.from_numpy(part_scene)
        batch.scene_has = torch.from_numpy(has)
        return batch


def _optimizer(model: CompositionalModel, config: OptimiserConfig) -> torch.optim.AdamW:
    no_decay = {id(p) for p in model.no_decay_parameters()}
    decay = [p for p in model.parameters() if id(p) not in no_decay]
    return torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": config.weight_decay},
            {"params": model.no_decay_parameters(), "weight_decay": 0.0},
        ],
        lr=config.lr,
    )


def _lr_factor(step: int, config: OptimiserConfig, steps: int) -> float:
    """Multiplier of ``config.lr`` at ``step`` of a ``steps``-long run."""
    if step < config.warmup:
        return (step + 1) / config.warmup
    if config.schedule == "constant":
        return 1.0
    t = (step - config.warmup) / max(1, steps - config.warmup)
    return 0.5 * (1 + math.cos(math.pi * min(1.0, t)))


def save_checkpoint(
    path: Union[str, Path],
    model: CompositionalModel,
    config: TrainConfig,
    step: int,
    history: Dict[str, np.ndarray],
    optimizer: Optional[torch.optim.Optimizer] = None,
    extra: Optional[Dict] = None,
) -> Path:
    """Atomically write model (+ optimiser) state, step and history (checkpoint format :data:`CHECKPOINT_VERSION`)."""
    arrays = {f"model/{k}": v.detach().cpu().numpy() for k, v in model.state_dict().items()}
    arrays.update({f"history/{k}": v for k, v in history.items()})
    if optimizer is not None:
        for i, st in optimizer.state_dict()["state"].items():
            for name, v in st.items():
                arrays[f"opt/{i}/{name}"] = torch.as_tensor(v).detach().cpu().numpy()
    meta = {
        "format_version": CHECKPOINT_VERSION,
        "config": config.get_config(),
        "step": int(step),
        "loss_config": model.config.to_dict(),
        "extra": extra or {},
    }
    return save_arrays(path, CHECKPOINT_KIND, arrays, meta)


def load_checkpoint(path: Union[str, Path], *, optimizer: bool = False):
    """Read a checkpoint: ``(model, config, step, history, meta[, optimizer])``.

    Raises FileNotFoundError for a missing file, ValueError for a checkpoint of
    another format version (retrain it with this crossembed) and
    :class:`crossembed._io.CorruptFileError` for a damaged one.
    """
    path = Path(path)
    if path.is_dir():
        path = path / CHECKPOINT_NAME
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {str(path)!r} does not exist")
    arrays, meta = load_arrays(path, CHECKPOINT_KIND)
    # checkpoints without the field are those of crossembed 0.1.0's first format
    found = meta.get("format_version", 1)
    if found != CHECKPOINT_VERSION:
        raise ValueError(
            f"{path}: UNCHA checkpoint format version {found}, expected {CHECKPOINT_VERSION}; "
            "train it again with this crossembed"
        )
    try:
        config = TrainConfig.from_config(meta["config"])
        step = int(meta["step"])
        model = build_model(config)
        state = {k[len("model/") :]: torch.from_numpy(v) for k, v in arrays.items() if k.startswith("model/")}
        model.load_state_dict(state)
    except (KeyError, TypeError, AttributeError, RuntimeError) as exc:
        raise CorruptFileError(f"{path}: incomplete checkpoint ({type(exc).__name__}: {exc})") from None
    history = {k[len("history/") :]: v for k, v in arrays.items() if k.startswith("history/")}
    out = [model, config, step, history, meta]
    if optimizer:
        opt = _optimizer(model, config.optimiser)
        sd = opt.state_dict()
        for key, v in arrays.items():
            if key.startswith("opt/"):
                _, i, name = key.split("/")
                sd["state"].setdefault(int(i), {})[name] = torch.from_numpy(np.array(v))
        opt.load_state_dict(sd)
        out.append(opt)
    return tuple(out)


def _empty_history(config: TrainConfig) -> Dict[str, np.ndarray]:
    return {k: np.full(config.steps, np.nan) for k in _HISTORY_TERMS}


def _start(config: TrainConfig, ckpt: Optional[Path], resume: bool):
    """``(model, optimiser, history, first step)``: fresh, or from ``ckpt`` when resuming."""
    history = _empty_history(config)
    if resume and ckpt is not None and ckpt.exists():
        model, old_cfg, start, old_hist, _meta, opt = load_checkpoint(ckpt, optimizer=True)
        if old_cfg != config:
            raise ValueError(f"{ckpt} was written with a different configuration; use another --out or drop --resume")
        for k, v in old_hist.items():
            history[k][: len(v)] = v
        return model, opt, history, start
    model = build_model(config)
    return model, _optimizer(model, config.optimiser), history, 0


def _step(model, opt, config: TrainConfig, source: BatchSource, step: int):
    """One optimisation step; returns the loss terms and the batch."""
    rng = np.random.default_rng([config.seed, step])  # batches depend on (seed, step) only: exact resume
    idx = np.sort(rng.choice(len(source), config.batch_size, replace=False))
    for g in opt.param_groups:
        g["lr"] = config.optimiser.lr * _lr_factor(step, config.optimiser, config.steps)
    batch = source.batch(model, idx)
    terms = total_loss(batch, model.config, manifold=model.manifold(), **model.temperatures())
    opt.zero_grad(set_to_none=True)
    terms["loss"].backward()
    opt.step()
    return terms, batch


def train(
    config: TrainConfig,
    *,
    out: Optional[Union[str, Path]] = None,
    resume: bool = False,
    data: Optional[Union[SceneSet, BatchSource]] = None,
    show_progress_bar: bool = True,
    max_steps: Optional[int] = None,
    model: Optional[CompositionalModel] = None,
) -> TrainResult:
    """Train one model.

    Parameters
    ----------
    config : TrainConfig
        The run: model preset, steps, batches, optimiser, scenes, tower sizes.
    out : path, optional
        Directory for ``checkpoint.cemb`` (written every ``checkpoint_every``
        steps and at the end).
    resume : bool
        Continue from ``out/checkpoint.cemb`` when it exists (its config must match).
    data : SceneSet or BatchSource, optional
        Training scenes (default: :func:`train_scenes` of ``config``; passing
        them lets several models share one generated set), or any other
        :class:`BatchSource` (e.g. frozen features,
        :class:`crossembed.hyperbolic.heads.FeatureBatches`).
    show_progress_bar : bool
        Show a tqdm bar.
    max_steps : int, optional
        Stop (with a checkpoint) after this many steps in this call; a later
        call with ``resume=True`` continues. For time-sliced training.
    model : CompositionalModel, optional
        The model to train (default :func:`build_model` of ``config``), e.g.
        one with :class:`~crossembed.hyperbolic.model.FeatureHead` towers.
        Checkpoints rebuild the default model, so it needs ``out=None``.
    """
    if model is not None and out is not None:
        raise ValueError("out needs the default model (a checkpoint rebuilds it from config); pass out=None")
    out = Path(out) if out is not None else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    ckpt = out / CHECKPOINT_NAME if out is not None else None
    if model is None:
        model, opt, history, start = _start(config, ckpt, resume)
    else:
        opt, history, start = _optimizer(model, config.optimiser), _empty_history(config), 0
    data = data if data is not None else train_scenes(config)
    source = SceneBatches(data) if isinstance(data, SceneSet) else data
    if len(source) < config.batch_size:
        raise ValueError(f"the training set has {len(source)} examples, fewer than batch_size={config.batch_size}")
    model.train()
    n_scenes = n_images = 0
    t0 = time.perf_counter()
    stop = config.steps if max_steps is None else min(config.steps, start + max_steps)
    bar = tqdm(range(start, stop), desc=f"train {config.model}", disable=not show_progress_bar, leave=False)
    for step in bar:
        terms, batch = _step(model, opt, config, source, step)
        for k in _HISTORY_TERMS:
            if k in terms:
                history[k][step] = float(terms[k].detach())
        n_scenes += config.batch_size
        n_images += config.batch_size + (0 if batch.image_part is None else batch.image_part.shape[0])
        if show_progress_bar and step % 10 == 0:
            bar.set_postfix(loss=f"{history['loss'][step]:.3f}", c=f"{float(model.curvature().detach()):.2f}")
        if ckpt is not None and ((step + 1) % config.checkpoint_every == 0 or step + 1 == stop):
            save_checkpoint(ckpt, model, config, step + 1, history, opt)
    seconds = time.perf_counter() - t0
    model.eval()
    return TrainResult(model, config, history, n_scenes / max(seconds, 1e-9), n_images / max(seconds, 1e-9), seconds)
