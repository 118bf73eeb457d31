"""The digits benchmarks through ``cl-graft run``: every (stream, model, scenario) on several seeds, one table each.

The digits preset of :mod:`.seeds` (the driver: one ``cl-graft run`` invocation per benchmark, seed and graft
variant, the first seed tuned on dev rows, the others with its choices; see its docstring): by default the
benchmarks ``split-digits/mlp/class`` and ``split-digits/mtmlp/task`` with the digits family's peers; the tables
(:mod:`.digits_report`) are written to ``<out>/digits.md`` and ``<out>/digits.json``, each invocation's
``results.json`` to ``<out>/runs/<benchmark>/<folder>/results.json``. Run::

    nice -n 10 python -m cl_graft.benchmarks.experiments.digits --out runs/digits \\
        --benchmarks split-digits/mlp/class,split-digits/mtmlp/task --seeds 0,1,2
    cp -r runs/digits/{digits.md,digits.json,runs} benchmarks/results/digits/

``--report-from DIR`` runs nothing: the tables of the ``runs/`` folder in ``DIR`` (e.g.
``benchmarks/results/digits``), copied into ``--out``.
"""
from __future__ import annotations

from .digits_report import render
from .seeds import Page, command
from .seeds_report import benchmark_summary

PAGE = Page(name="digits", help=__doc__.splitlines()[0], benchmarks="split-digits/mlp/class,split-digits/mtmlp/task",
            summarize=benchmark_summary, render=render)
main = command(PAGE)


if __name__ == "__main__":
    main()
