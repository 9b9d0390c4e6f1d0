"""The research harness: experiment drivers that write tables, plots and docs.

Everything here sits on top of the library packages (:mod:`crossembed.uec`,
:mod:`crossembed.linking`, :mod:`crossembed.hyperbolic`) and is driven by the
CLI; nothing in the library imports it.

* :mod:`~experiments.tasks`, :mod:`~experiments.corpora`
  - the real retrieval tasks and gloss corpora the evaluations use.
* :mod:`~experiments.uec_eval`, :mod:`~experiments.uec_perf`
  - ``crossembed uec-eval`` / ``uec-perf``.
* :mod:`~experiments.link_table`, :mod:`~experiments.link_scale`
  - ``crossembed link-table`` / ``link-scale``.
* :mod:`~experiments.uncha_table`, :mod:`~experiments.uncha_plots`,
  :mod:`~experiments.uncha_speed` - ``crossembed uncha-table``.
* :mod:`~experiments.kernel_bench` - ``crossembed bench``.
"""
