"""crossembed's research harness: the drivers behind every table, plot and study in docs/.

It lives beside the library, not in it: the wheel does not install it, and it
uses :mod:`crossembed` only through its public API (names in the packages'
``__all__`` and public modules), as a user would; nothing in the library
imports it. Run it from the repository root::

    python -m experiments --help
    python -m experiments COMMAND --help

Commands (each registered by a ``commands_*`` module of ``experiments.__main__``):

* ``uec-eval`` (:mod:`~experiments.uec_eval`, :mod:`~experiments.uec_sts`,
  :mod:`~experiments.uec_languages`, on the tasks of :mod:`~experiments.tasks`)
  - the UEC retrieval tables of docs/uec.md;
  ``uec-perf`` (:mod:`~experiments.uec_perf`) - search throughput, docs/uec_perf.md.
* ``link-table`` (:mod:`~experiments.link_table`, on the corpora of
  :mod:`~experiments.corpora`) - the GEH linking table of docs/linking.md;
  ``link-scale`` (:mod:`~experiments.link_scale`) - fit times on synthetic data of growing size.
* the UNCHA tables and curves (:mod:`~experiments.uncha_table`, :mod:`~experiments.uncha_curve`).

``experiments/studies/`` holds one-off studies, each a script run as
``python -m experiments.studies.NAME``. The user's own measurements (``crossembed bench``,
``crossembed bench serve``) are library commands: :mod:`crossembed.cli.kernel_bench`,
:mod:`crossembed.cli.serve_bench`.
"""

#: How the harness's commands name themselves in errors and in the command lines of generated reports.
PROG = "python -m experiments"
