"""Experiment scripts (``python -m cl_graft.benchmarks.experiments.<name> --help``): click commands like the
CLI's, built on ``cl_graft.benchmarks``, the core and ``cl_graft.strategies``. They print figures and write
JSON and Markdown where ``--out`` says (never inside the installed package); the repository commits theirs
under ``benchmarks/results/``. The ``BENCHMARKS.md`` page is :mod:`.benchmarks_page`'s."""
