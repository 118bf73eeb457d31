"""The split text streams through ``cl-graft run``: every (stream, scenario) on several seeds, one table each.

The split-text preset of :mod:`.seeds` (the driver: one ``cl-graft run`` invocation per benchmark and seed, the
first seed tuned on dev rows with the same grid budget for every strategy, the others with its choices through
``--settings-from``; see its docstring). By default the benchmarks
``split-clinc150:15//class`` (15 experiences of 10 intents), ``split-banking77:7//class`` (7 of 11) and
``split-clinc150:15//task``, each on ``cl-graft run``'s default model (the bundled all-MiniLM-L6-v2) with the
split text family's peers (:data:`.seeds.PEERS`: class scenario graft, naive, ewc, si, lwf, replay,
replay-matched, er-ace, agem, packnet, cumulative, linear-probe and ncm; task scenario graft, naive, lwf, packnet,
replay-matched and linear-probe). The tables (:mod:`.class_text_report`: accuracy after the last experience,
average incremental accuracy, forgetting, task identification of the routing strategies, kept bytes, wall
seconds, Holm-corrected paired intervals against graft and whether a strategy that keeps no training rows beats
it) are written to ``<out>/class_text.md`` and ``<out>/class_text.json``, each invocation's ``results.json`` to
``<out>/runs/<benchmark>/seed<s>/results.json``.

Issue 43's page (five seeds on split-clinc150, three on the others; the recipe is the ``quick`` preset's unless
``--run-option=--steps=N`` and the like say otherwise, the same for every strategy)::

    OMP_NUM_THREADS=1 nice -n 10 python -m cl_graft.benchmarks.experiments.class_text --out runs/class_text \\
        --data-dir ../shared/data --seeds 0,1,2,3,4 \\
        --seeds-of split-banking77:7//class=0,1,2 --seeds-of split-clinc150:15//task=0,1,2
    cp -r runs/class_text/{class_text.md,class_text.json,runs} benchmarks/results/class_text/

The same in two processes at once, then one page from both ``runs/`` folders (``--report-from`` runs nothing)::

    OMP_NUM_THREADS=1 python -m cl_graft.benchmarks.experiments.class_text --out runs/ct_clinc \\
        --benchmarks split-clinc150:15//class --seeds 0,1,2,3,4 --data-dir ../shared/data &
    OMP_NUM_THREADS=1 python -m cl_graft.benchmarks.experiments.class_text --out runs/ct_rest \\
        --benchmarks split-banking77:7//class,split-clinc150:15//task --seeds 0,1,2 --data-dir ../shared/data
    mkdir -p benchmarks/results/class_text/runs
    cp -r runs/ct_clinc/runs/* runs/ct_rest/runs/* benchmarks/results/class_text/runs/
    python -m cl_graft.benchmarks.experiments.class_text --out runs/ct_page \\
        --report-from benchmarks/results/class_text
    cp runs/ct_page/class_text.{md,json} benchmarks/results/class_text/
"""
from __future__ import annotations

from .class_text_report import render, summary
from .seeds import Page, command

PAGE = Page(name="class_text", help=__doc__.splitlines()[0],
            benchmarks="split-clinc150:15//class,split-banking77:7//class,split-clinc150:15//task",
            summarize=summary, render=render)
main = command(PAGE)


if __name__ == "__main__":
    main()
