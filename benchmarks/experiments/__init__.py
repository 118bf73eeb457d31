"""Experiment scripts (``python -m cl_graft.benchmarks.experiments.<name> --help``): click commands like the
CLI's, built on ``cl_graft.benchmarks``, the core and ``cl_graft.strategies``. Each follows one output rule
(:mod:`.script_out`): ``--out DIR`` claimed as a command's folder, scratch in ``DIR/work``, the run record
``DIR/config.json`` written last, and ``--page FILE`` for a Markdown page the repository keeps elsewhere; the
repository commits their results under ``benchmarks/results/``. The ``BENCHMARKS.md`` page is
:mod:`.benchmarks_page`'s."""
