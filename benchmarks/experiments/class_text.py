"""The split text streams through ``cl-graft run``, class scenario: every stream on three seeds, one table each.

The split-text preset of :mod:`.seeds` (the driver: one ``cl-graft run`` invocation per benchmark and seed, the
first seed tuned on dev rows with the same grid budget for every strategy, the others with its choices through
``--settings-from``; see its docstring), issue 54's item 6. By default the benchmarks ``split-clinc150:15//class``
(15 experiences of 10 intents) and ``split-banking77:7//class`` (7 of 11), seeds 0, 1, 2, on ``cl-graft run``'s
default model (the bundled all-MiniLM-L6-v2) with the split text family's class-scenario peers
(:data:`.seeds.PEERS`): graft, slda, ranpac, ncm, linear-probe, naive, replay, replay-matched, lwf, der and the
two ceilings, joint (fine-tuning on every class at once) and joint-probe (the frozen encoder with a classifier on
every class at once). EWC, SI, A-GEM, GEM, BiC, iCaRL, PackNet and the task scenario stay off this page (the
digits pages have them). Seed 0 tunes with a budget of :data:`TUNE_BUDGET` grid points; only strategies with a
grid are tuned (graft, slda, ranpac, lwf, der; replay's grid is its memory, which
``--replay-per-class`` :data:`REPLAY_PER_CLASS` fixes for replay and der alike, so replay is not tuned).

The tables (:mod:`.class_text_report`: accuracy after the last experience, average incremental accuracy,
forgetting, rows routed right, kept bytes, whether training rows are kept, wall and CPU seconds, Holm-corrected
paired intervals against graft, whether a strategy that keeps no training rows beats it, the rows the replay
strategies kept, what has not run yet with "–" cells, and a CPU-hour estimate of it from the finished runs) are
written to ``<out>/class_text.md`` and ``<out>/class_text.json``, each invocation's ``results.json`` to
``<out>/runs/<benchmark>/seed<s>/results.json``.

Two invocations at a time, one per stream (the recipe is the ``quick`` preset's unless ``--run-option=--steps=N``
and the like say otherwise, the same for every strategy)::

    OMP_NUM_THREADS=1 nice -n 10 python -m cl_graft.benchmarks.experiments.class_text --out runs/ct_clinc \\
        --benchmarks split-clinc150:15//class --data-dir ../shared/data &
    OMP_NUM_THREADS=1 nice -n 10 python -m cl_graft.benchmarks.experiments.class_text --out runs/ct_banking \\
        --benchmarks split-banking77:7//class --data-dir ../shared/data &

Each seed's invocation writes its ``results.json`` under ``runs/ct_clinc/work/`` (or ``ct_banking``) when it
finishes (seed 0 first: its time is the first measurement); commit each as it finishes and make the page from what
is there (what has not run is marked, with the estimate of its CPU hours; ``--seeds`` is the plan, 0,1,2)::

    mkdir -p benchmarks/results/class_text/runs/split-clinc150-15-class/seed0
    cp runs/ct_clinc/work/split-clinc150-15-class/seed0/results.json \\
        benchmarks/results/class_text/runs/split-clinc150-15-class/seed0/
    python -m cl_graft.benchmarks.experiments.class_text --out runs/ct_page --overwrite \\
        --report-from benchmarks/results/class_text
    cp runs/ct_page/class_text.{md,json} benchmarks/results/class_text/
"""
from __future__ import annotations

from .class_text_report import render, summary
from .seeds import Page, command

REPLAY_PER_CLASS = 10
"""Rows of every class replay and der keep (``--replay-per-class``; 1,500 rows on split-clinc150, 770 on
split-banking77), stated on the page."""
TUNE_BUDGET = 2
"""Grid points each strategy with a grid tries on the first seed."""
PER_CLASS = (f"--replay-per-class={REPLAY_PER_CLASS}",)

PAGE = Page(name="class_text", help=__doc__.splitlines()[0],
            benchmarks="split-clinc150:15//class,split-banking77:7//class", summarize=summary, render=render,
            tune_budget=TUNE_BUDGET, peer_options={"replay": PER_CLASS, "der": PER_CLASS}, planned=True)
main = command(PAGE)


if __name__ == "__main__":
    main()
