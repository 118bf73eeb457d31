"""Tables and files of a continual comparison: results JSON/CSV and PNG figures, from results alone.

``out/`` receives ``results.json`` (run record, tasks, every strategy's matrix and summary), ``results.csv``
(one row per strategy), ``matrices.csv`` (strategy, after, task, accuracy) and ``figures/``: one
accuracy-matrix heatmap per strategy, one curve per task (its accuracy after each experience, one line per
strategy) and the final accuracies side by side. Every table and ``results.json`` carry the sanity flags of
:func:`.metrics.sanity_flags` (a strategy whose matrix equals the plain reference's, or at chance on most
tasks: marked ``!`` in the summary table, one "probably misconfigured" line each).

What a table shows of a strategy beyond the accuracies every strategy has comes from its entry
(:attr:`~..interface.entry.StrategyEntry.report_lines`), and the references every strategy is compared with
are the entries that play them (:data:`~..interface.entry.REFERENCES`): this module names no strategy.
"""
from __future__ import annotations

import csv
import math
import textwrap
from pathlib import Path

import numpy as np

from cl_graft.files import atomic_write, write_json
from cl_graft.plotting import plot_curves, plot_grouped_bars, plot_matrix
from cl_graft.schema import sealed
from cl_graft.task import SCENARIO_MEANING, SCENARIOS
from cl_graft.units import BYTE_UNIT, human_bytes

from .metrics import chance_band, flag_text, sanity_flags
from .registry import find, reference
from .runner import StrategyResult

RESULTS_JSON, RESULTS_CSV, MATRICES_CSV, FIGURES = "results.json", "results.csv", "matrices.csv", "figures"


def _pct(x: float) -> str:
    return "   -  " if x is None or not math.isfinite(x) else f"{100 * x:6.1f}"


def strategy_table(res: StrategyResult) -> str:
    """The accuracy matrix (rows: after each experience; columns: tasks), the strategy's summary, in %, and
    the lines its entry adds (:attr:`~..interface.entry.StrategyEntry.report_lines`)."""
    s = res.summary()
    width = max(len(t) for t in res.tasks) + 8
    lines = [f"== {res.name} ==", " " * width + "".join(f"{t:>9}" for t in res.tasks)]
    labels = [f"after {t}" for t in res.tasks] if len(res.matrix) == len(res.tasks) else ["final"]
    for label, row in zip(labels, res.matrix):
        lines.append(f"{label:<{width}}" + "".join(f"{_pct(v):>9}" for v in row))
    lines.append(f"average {_pct(s['average']).strip()}  forgetting {_pct(s['forgetting']).strip()}  "
                 f"BWT {_pct(s['bwt']).strip()}  stored {human_bytes(res.bytes)}  wall {res.seconds:.0f}s")
    agnostic = res.info.get("task_inference")
    if agnostic:
        lines += [f"{'no task labels':<{width}}" + "".join(f"{_pct(v):>9}" for v in agnostic["accuracy"]),
                  f"{'task identified':<{width}}" + "".join(f"{_pct(v):>9}" for v in agnostic["task_id"])]
    entry = find(res.name)
    lines += entry.report_lines(res.info) if entry is not None and entry.report_lines is not None else []
    return "\n".join(lines + strategy_notes(res))


def strategy_notes(res: StrategyResult) -> list[str]:
    """One line each for what a result adds to its accuracies: the share of test rows a routing strategy sent to
    their task in the class scenario, the scores without task labels (``--task-inference``) and the settings
    tuning chose (``--tune``, ``--settings-from``)."""
    lines = []
    if "task_id" in res.info:
        lines.append(f"routed without task labels: task identified {_pct(np.mean(res.info['task_id'])).strip()}% "
                     f"of the test rows after the last experience")
    agnostic = res.info.get("task_inference")
    if agnostic:
        lines.append(f"task-agnostic ({agnostic['how']}) average {_pct(np.mean(agnostic['accuracy'])).strip()} vs "
                     f"task-aware {_pct(res.summary()['average']).strip()}; task identified "
                     f"{_pct(np.mean(agnostic['task_id'])).strip()}%; eval {agnostic['seconds']:.0f}s")
    tuning = res.info.get("tuning")
    if tuning and "from" in tuning:
        lines.append(f"settings chosen on dev by {tuning['from']}: {tuning['chosen']}")
    elif tuning:
        tried = ", ".join(f"{p} {_pct(v).strip()}" for p, v in zip(tuning["grid"], tuning["dev_average"]))
        lines.append(f"tuned on dev: {tuning['chosen']} (dev average: {tried})")
    return lines


def chance_bands(test_stream) -> list[tuple[float, float]]:
    """Each test experience's chance band (:func:`.metrics.chance_band`) from the labels of its rows (the
    classes present and the majority class share)."""
    bands = []
    for exp in test_stream:
        _, counts = np.unique(np.asarray(list(exp.dataset.targets)), return_counts=True)
        bands.append(chance_band(len(counts), float(counts.max() / counts.sum())))
    return bands


def result_flags(results: dict[str, StrategyResult], bands=None) -> dict[str, list[dict]]:
    """Each flagged strategy's :func:`.metrics.sanity_flags` (compared with the plain reference when it ran,
    :data:`~..interface.entry.REFERENCES`; at chance when ``bands`` are given)."""
    plain = reference("plain", results)
    matrix = results[plain].matrix if plain is not None else None
    flags = {name: sanity_flags(res.matrix, plain=None if name == plain else matrix, bands=bands)
             for name, res in results.items()}
    return {name: f for name, f in flags.items() if f}


def flag_lines(flags: dict[str, list[dict]]) -> list[str]:
    """The lines under a table for :func:`result_flags` (``!`` marks the strategy in the table)."""
    return [f"! {name} probably misconfigured: {flag_text(f)}" for name, fs in flags.items() for f in fs]


def summary_table(results: dict[str, StrategyResult], *, bands=None) -> str:
    """One line per strategy: final accuracy per task, average, forgetting, BWT, bytes, wall time, and the
    average as a share of the "alone" reference's and the time as a multiple of the "plain" one's when they
    ran (:data:`~..interface.entry.REFERENCES`; the columns are named after them); ``!`` after a strategy's
    name and a line under the table where :func:`result_flags` flags it (``bands``: each task's chance band,
    :func:`chance_bands`)."""
    flags = result_flags(results, bands)
    tasks = next(iter(results.values())).tasks
    alone, plain = reference("alone", results), reference("plain", results)
    alone_average = results[alone].summary()["average"] if alone is not None else None
    plain_seconds = results[plain].seconds if plain is not None else None
    width = max(12, 2 + max(len(name) for name in results))      # a flagged name gets '!'
    cols = [max(9, len(t) + 1) for t in tasks]
    head = (f"{'strategy':<{width}}" + "".join(f"{t:>{c}}" for t, c in zip(tasks, cols))
            + f"{'average':>9}{'forget':>8}{'BWT':>8}{'stored*':>11}{'wall s':>8}{'cpu s':>8}")
    head += f"{'%' + alone:>9}" if alone_average else ""
    head += f"{'×' + plain:>8}" if plain_seconds else ""
    lines = [head]
    for name, res in results.items():
        s = res.summary()
        label = f"{name}!" if name in flags else name
        line = (f"{label:<{width}}" + "".join(f"{_pct(v):>{c}}" for v, c in zip(s["final"], cols)) + f"{_pct(s['average']):>9}"
                f"{_pct(s['forgetting']):>8}{_pct(s['bwt']):>8}{human_bytes(res.bytes):>11}{res.seconds:>8.0f}"
                f"{res.info.get('cpu_seconds', float('nan')):>8.0f}")
        line += f"{_pct(s['average'] / alone_average):>9}" if alone_average else ""
        line += f"{res.seconds / plain_seconds:>8.2f}" if plain_seconds else ""
        lines.append(line)
    return "\n".join(lines + [stored_note(results)] + flag_lines(flags))


def stored_note(results: dict[str, StrategyResult]) -> str:
    """The summary table's footnote: what each strategy's ``stored`` bytes are, in its entry's words
    (:attr:`~..interface.entry.StrategyEntry.stores`; strategies that store alike share a clause)."""
    texts: dict[str, list[str]] = {}
    for name in results:
        entry = find(name)
        texts.setdefault(entry.stores if entry is not None else "not recorded", []).append(name)
    parts = [f"{', '.join(names)}: {text}" for text, names in texts.items()]
    return textwrap.fill("* stored: what a strategy keeps beside the model it starts from (results.json: info.kept "
                         "by part; " + BYTE_UNIT + "); " + "; ".join(parts) + ".", width=110, subsequent_indent="  ")


def _write_csv(path: str, rows: list[list]) -> None:
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows(rows)




def scenario_line(scenario: str) -> str:
    """The line that says which scenario a table's accuracies come from (:data:`cl_graft.task.SCENARIOS`)."""
    return f"scenario: {SCENARIOS[scenario]}: {SCENARIO_MEANING[scenario]}"


def write_results(out: Path, results: dict[str, StrategyResult], *, record: dict, scenario: str = "task",
                  bands=None) -> list[Path]:
    """Writes the JSON (with the ``scenario`` of every accuracy in it, each task's ``chance`` band, the
    ``sanity`` flags of :func:`result_flags` and the sha256 of its content, :func:`cl_graft.schema.sealed`), CSVs
    and figures; returns the paths written."""
    tasks = next(iter(results.values())).tasks
    paths = [out / RESULTS_JSON, out / RESULTS_CSV, out / MATRICES_CSV]
    write_json(paths[0], sealed({"run": record, "scenario": scenario, "tasks": tasks,
                                 "chance": None if bands is None else [list(b) for b in bands],
                                 "sanity": result_flags(results, bands),
                                 "strategies": {n: r.to_json() for n, r in results.items()}}))
    summary_rows = [["strategy", *[f"final_{t}" for t in tasks], "average", "forgetting", "bwt", "bytes", "seconds"]]
    for name, res in results.items():
        s = res.summary()
        summary_rows.append([name, *s["final"], s["average"], s["forgetting"], s["bwt"], res.bytes, res.seconds])
    matrix_rows = [["strategy", "after", "task", "accuracy"]]
    for name, res in results.items():
        after = tasks if len(res.matrix) == len(tasks) else ["final"]
        matrix_rows += [[name, a, t, v] for a, row in zip(after, res.matrix) for t, v in zip(tasks, row)]
    for path, rows in ((paths[1], summary_rows), (paths[2], matrix_rows)):
        atomic_write(path, lambda tmp, rows=rows: _write_csv(tmp, rows))
    figures = out / FIGURES
    for name, res in results.items():
        rows = [f"after {t}" for t in tasks] if len(res.matrix) == len(tasks) else ["final"]
        paths.append(plot_matrix(np.array(res.matrix), figures / f"matrix_{name}.png", rows=rows, cols=tasks,
                                 title=f"{name}: test accuracy", xlabel="task", ylabel="after experience",
                                 vmin=0.0, vmax=1.0))
    stream = {n: r for n, r in results.items() if len(r.matrix) == len(tasks)}
    for j, t in enumerate(tasks):
        if stream:
            paths.append(plot_curves({n: [row[j] for row in r.matrix] for n, r in stream.items()},
                                     figures / f"curve_{t}.png", x=tasks, title=f"accuracy on {t}",
                                     xlabel="after experience", ylabel="accuracy"))
    paths.append(plot_grouped_bars({n: r.summary()["final"] for n, r in results.items()}, figures / "final.png",
                                   labels=tasks, title="final accuracy", ylabel="accuracy"))
    return paths
