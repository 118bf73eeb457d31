"""Experiment scripts (``python -m cl_graft.benchmarks.experiments.<name> --help``): click commands like the
CLI's, built on ``cl_graft.benchmarks``, the core and ``cl_graft.strategies``. Three rooms:

- here, the benchmarks a user runs and the pages they make: :mod:`.continual_seeds`, the multi-seed driver
  :mod:`.seeds` (tables by :mod:`.seeds_report`) and its presets :mod:`.digits` (page :mod:`.digits_report`) and
  :mod:`.class_text` (split text streams, page :mod:`.class_text_report`), :mod:`.localization`,
  :mod:`.region_sweep` (with ``learned_region_power.sh``), :mod:`.distributed_scaling`, :mod:`.example_avalanche`,
  the text pages :mod:`.text_size_page` and :mod:`.text_long_page`, and ``BENCHMARKS.md``'s
  :mod:`.benchmarks_page` (tables by :mod:`.report_tables`);
- :mod:`.probes`: experiments that each answer one question, their conclusion a committed page (the reliability
  probe among them);
- what every script shares: one output rule (:mod:`.script_out`: ``--out DIR`` claimed as a command's folder,
  scratch in ``DIR/work``, the run record ``DIR/config.json`` written last, ``--page FILE`` for a Markdown page the
  repository keeps elsewhere), one verdict and table-cell module (:mod:`.verdicts`), and the "run record
  incomplete" mark of committed artifacts (:mod:`.run_records`).

The repository commits their results under ``benchmarks/results/``."""
