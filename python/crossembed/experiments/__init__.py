"""The research harness: experiment drivers that write tables, plots and docs.

Everything here sits on top of the library packages (:mod:`crossembed.uec`,
:mod:`crossembed.linking`, :mod:`crossembed.hyperbolic`) and is driven by the
CLI; nothing in the library imports it.

* :mod:`~crossembed.experiments.tasks`, :mod:`~crossembed.experiments.corpora`
  - the real retrieval tasks and gloss corpora the evaluations use.
* :mod:`~crossembed.experiments.uec_eval`, :mod:`~crossembed.experiments.uec_perf`
  - ``crossembed uec-eval`` / ``uec-perf``.
* :mod:`~crossembed.experiments.link_table`, :mod:`~crossembed.experiments.link_scale`
  - ``crossembed link-table`` / ``link-scale``.
* :mod:`~crossembed.experiments.uncha_table`, :mod:`~crossembed.experiments.uncha_plots`,
  :mod:`~crossembed.experiments.uncha_speed` - ``crossembed uncha-table``.
* :mod:`~crossembed.experiments.kernel_bench` - ``crossembed bench``.
"""
