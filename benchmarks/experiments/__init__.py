"""Experiment scripts (``python -m cl_graft.benchmarks.experiments.<name>``): they use the library in
``cl_graft.benchmarks`` and the core, print figures and write JSON under ``benchmarks/results/``."""
