"""The class-incremental text page (issue 54, item 6) from the summaries of :mod:`.seeds_report`: beside the digits
page's columns, per strategy whether it keeps training rows, its average incremental accuracy, the share of test rows
a routing strategy sends to their own experience and its CPU seconds; under each table, plainly, whether a strategy
that keeps no training rows beats graft, the memory the replay strategies kept, what has not run yet (its cells
"–") and a CPU-hour estimate of it from the runs that finished, so the page can be made from a partial ``runs/``."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from cl_graft.strategies.comparison.metrics import average_incremental_accuracy

from .script_out import load_results
from .seeds_report import (
    CEILINGS,
    FORGETTING,
    HOW_TO_READ,
    REFERENCE,
    SETTING,
    STORED,
    WALL,
    Column,
    benchmark_summary,
    page,
    table_lines,
)
from .verdicts import mean_sd, pm

ROW_PARTS = ("memory", "rows", "held_out")
"""The parts of a strategy's kept state (``info["kept"]``, :mod:`cl_graft.strategies.baselines.common`) that are
training rows: a replay memory, every row seen, rows held out to fit a layer."""
MISSING = "–"
"""A cell of what has not run."""
JOINT = ("joint", "joint-probe")
"""The ceilings of this page (:data:`.seeds_report.CEILINGS`): trained on every class at once."""
OFF_PAGE = ("EWC, SI, A-GEM, GEM, BiC, iCaRL, PackNet and the task scenario stay off this page; the digits pages "
            "(`benchmarks/results/digits/`) have them.")


def keeps_rows(info: dict) -> bool:
    """Whether a result's kept state holds training rows (:data:`ROW_PARTS`, more than 0 bytes)."""
    return any(info.get("kept", {}).get(part, 0) > 0 for part in ROW_PARTS)


def text_fields(results: list[dict]) -> dict:
    """A strategy's extra fields (one ``results.json`` entry per seed): ``incremental`` (average incremental
    accuracy, mean ± sd over seeds), ``task_id`` (share of test rows routed to their own experience, mean over
    experiences of ``info["task_id"]``, then over the seeds that route; None where none does), ``keeps_rows``,
    ``cpu`` (``info["cpu_seconds"]``, mean ± sd), ``phase_cpu`` (mean CPU seconds in training and in evaluation,
    ``info["train_cpu_seconds"]`` and ``info["eval_cpu_seconds"]``; None where a seed lacks them),
    ``memory_rows`` (mean rows in its memory at the end, None without one) and ``router`` (per seed, graft's router
    and answer chosen on dev rows with every candidate's dev tallies, ``info["router"]``; None where a seed has
    none)."""
    routed = [float(np.mean(r["info"]["task_id"])) for r in results if r["info"].get("task_id")]
    rows = [r["info"]["memory_rows"] for r in results if r["info"].get("memory_rows") is not None]
    return {"incremental": mean_sd([average_incremental_accuracy(r["matrix"]) for r in results]),
            "task_id": mean_sd(routed), "keeps_rows": any(keeps_rows(r["info"]) for r in results),
            "cpu": mean_sd([r["info"].get("cpu_seconds") for r in results]),
            "phase_cpu": {phase: _mean_of(results, f"{phase}_cpu_seconds") for phase in ("train", "eval")},
            "inner_wall": {part: _mean_of(results, part, total=True)
                           for part in ("train_seconds", "localize_seconds", "feature_seconds")},
            "memory_rows": float(np.mean(rows)) if rows else None,
            "router": [r["info"].get("router") for r in results]}


def _mean_of(results: list[dict], key: str, *, total: bool = False) -> float | None:
    """The mean of ``info[key]`` over the seeds (``total``: of its sum, for per-task lists); None where a seed
    lacks it."""
    values = [r["info"].get(key) for r in results]
    if not values or None in values:
        return None
    return float(np.mean([sum(v or 0 for v in value) if total and isinstance(value, list) else value
                          for value in values]))


def _not_run(plan: dict) -> dict:
    """The summary of a planned benchmark without any finished run."""
    return {"stream": plan["stream"], "model": plan["model"] or "cl-graft run's default", "scenario": plan["scenario"],
            "seeds": [], "rows": {}, "not_run": True,
            "missing": {"seeds": plan["seeds"], "strategies": {}, "cpu_seconds_left": None, "unmeasured": []}}


def summary(folders: dict[str, list[Path]], *, root: Path, plan: dict | None = None) -> dict:
    """One benchmark's summary (:func:`.seeds_report.benchmark_summary` with :func:`text_fields` in each row).

    Args:
        folders, root: as :func:`.seeds_report.benchmark_summary` takes them.
        plan: the driver's plan of the benchmark (:func:`.seeds.plan_of`: its seeds and strategies), or None (what
            ran is the plan). A planned strategy that has no result gets a row of :data:`MISSING` cells.

    Adds ``invocations`` (per finished peers' invocation: seed, whether it tuned, its run record's wall and CPU
    seconds, those of its last process when it was resumed, and its strategies' CPU seconds summed),
    ``replay_per_class`` (the ``--replay-per-class`` of the runs, None where unset) and ``missing``:
    ``{"seeds": planned seeds without a run, "strategies": name → seeds it has no result of, "cpu_seconds_left":
    the estimate of those (each at the strategy's mean CPU seconds over the seeds it finished), "unmeasured":
    strategies left to run that have no finished seed to time}``.
    """
    if plan is not None and not folders.get("main"):
        return _not_run(plan)
    s = benchmark_summary(folders, root=root, row_fields=text_fields)
    results = [load_results(f) for f in folders["main"]]
    runs = [r["run"] for r in results]
    s["invocations"] = [{**{k: r["run"].get(k) for k in ("seed", "tune", "wall_seconds", "cpu_seconds")},
                         "strategies_cpu_seconds": sum(e["info"].get("cpu_seconds") or 0
                                                       for e in r["strategies"].values())} for r in results]
    per_class = {(run.get("strategy_settings") or {}).get(n, {}).get("replay_per_class") for run in runs
                 for n in ("replay", "der")} - {None, 0}
    s["replay_per_class"] = per_class.pop() if len(per_class) == 1 else None
    seeds = plan["seeds"] if plan is not None else s["seeds"]
    names = list(dict.fromkeys([*((plan or {}).get("strategies") or []), *s["rows"]]))
    missing = {n: [x for x in seeds if x not in s["rows"].get(n, {}).get("seeds", [])] for n in names}
    missing = {n: x for n, x in missing.items() if x}
    measured = {n: s["rows"][n]["cpu"]["mean"] for n in missing if n in s["rows"]}
    s["missing"] = {"seeds": [x for x in seeds if x not in s["seeds"]], "strategies": missing,
                    "cpu_seconds_left": sum(len(missing[n]) * c for n, c in measured.items() if c is not None),
                    "unmeasured": [n for n in missing if measured.get(n) is None]}
    s["rows"] = {n: s["rows"].get(n, {"missing": True, "seeds": [], "sanity": {}, "sizes": None}) for n in names}
    return s


def _cell(cell):
    """A column's cell function that gives :data:`MISSING` for a strategy with no result."""
    return lambda name, row, s: MISSING if row.get("missing") else cell(name, row, s)


def _name(name: str, row: dict, s: dict) -> str:
    return (f"{name} (ceiling, not a continual method)" if name in JOINT else name) + ("!" if row["sanity"] else "")


def _keeps(name: str, row: dict, s: dict) -> str:
    return "every row, at once" if name in JOINT else "yes" if row["keeps_rows"] else "no"


COLUMNS = [Column(header="strategy", cell=_name), Column(header="keeps training rows", cell=_cell(_keeps)),
           Column(header=SETTING.header, cell=_cell(SETTING.cell)),
           Column(header="after the last experience %", cell=_cell(lambda name, row, s: pm(row))),
           Column(header="average incremental %", cell=_cell(lambda name, row, s: pm(row["incremental"]))),
           Column(header=FORGETTING.header, cell=_cell(FORGETTING.cell)),
           Column(header="rows routed right %", cell=_cell(lambda name, row, s: pm(row["task_id"]))),
           Column(header=STORED.header, cell=_cell(STORED.cell)), Column(header=WALL.header, cell=_cell(WALL.cell)),
           Column(header="CPU s", cell=_cell(lambda name, row, s: pm(row["cpu"], 1.0, ".0f")))]


def rowless_line(s: dict) -> list[str]:
    """Whether a strategy that keeps no training rows (the ceilings apart) beats graft (its Holm verdict ``graft
    behind``), said plainly, and which of them score higher than graft on average without being separable: one
    line, none where graft is the only such strategy."""
    minus = s["graft_minus"]
    rowless = [n for n, row in s["rows"].items() if n in minus and n not in CEILINGS and not row["keeps_rows"]]
    if not rowless:
        return []
    beat = [n for n in rowless if minus[n]["ahead"] == -1]
    higher = [n for n in rowless if n not in beat and minus[n]["mean"] < 0]
    if beat:
        line = ("**Beaten by a strategy that keeps no training rows:** " + ", ".join(
            f"{n} is ahead of graft by {-100 * minus[n]['mean']:.1f} points" for n in beat)
                + " (Holm interval excludes 0)")
    else:
        line = (f"No strategy that keeps no training rows ({', '.join(rowless)}) beats {REFERENCE} by its Holm "
                "interval")
    if higher:
        line += (f"; {', '.join(higher)} {'scores' if len(higher) == 1 else 'score'} higher than graft on average, "
                 "not separable")
    return [line + "."]


def memory_line(s: dict) -> list[str]:
    """The rows the replay strategies kept (mean over seeds, at the end), and ``--replay-per-class`` where set."""
    kept = [f"{n} {row['memory_rows']:.0f}" for n, row in s["rows"].items() if row.get("memory_rows") is not None]
    if not kept:
        return []
    k = s.get("replay_per_class")
    how = (f"replay and der keep {k} rows of every class seen (`--replay-per-class {k}`); " if k else "")
    return [f"Memory: {how}rows kept at the end, mean over seeds: {', '.join(kept)} (replay-matched: as many bytes "
            "as graft keeps in the same run)."]


def router_line(s: dict) -> list[str]:
    """Graft's router and answer, chosen on dev rows per seed, with the dev rows behind each choice: the share
    each candidate sent to their own experience, and for the chosen one the share its head and the routed grafted
    models answered right; none where no seed of graft records a router."""
    graft = s["rows"].get("graft", {})
    per_seed = [(seed, r) for seed, r in zip(graft.get("seeds", []), graft.get("router") or []) if r]
    if not per_seed:
        return []

    def share(tally: dict, count: str) -> str:
        return f"{100 * tally[count] / tally['rows']:.1f}%"

    parts = []
    for seed, r in per_seed:
        tally = r["tally"]
        sent = ", ".join(f"{name} {share(t, 'task')}" for name, t in tally.items() if t["rows"])
        chosen = tally.get(r["router"])
        answered = (f"; answered right by its head {share(chosen, 'head')}, by the routed grafted models "
                    f"{share(chosen, 'routed')}" if chosen and chosen["rows"] else "")
        parts.append(f"seed {seed}: router {r['router']}, answer {r['answer']} (dev rows sent to their experience: "
                     f"{sent}{answered})")
    given = per_seed[0][1].get("setting", {})
    flags = f" (`--router {given['router']} --answer {given['answer']}`)" if given else ""
    return [f"Graft's router and answer, chosen on dev rows{flags}: " + "; ".join(parts) + "."]


COST_TARGET = 1.3
"""Issue 54's bound on graft's CPU seconds over naive's (split-clinc150:15, class scenario)."""


def cost_line(s: dict) -> list[str]:
    """Graft's CPU seconds over naive's, in all and per phase (training, evaluation), each the mean over its
    finished seeds, against :data:`COST_TARGET`; none without both."""
    graft, naive = s["rows"].get("graft", {}), s["rows"].get("naive", {})
    if any(not row or row.get("missing") or not row["cpu"]["mean"] for row in (graft, naive)):
        return []
    ratio = graft["cpu"]["mean"] / naive["cpu"]["mean"]
    phases = [f"{label} {g / n:.2f}× ({g:.0f} s against {n:.0f} s)"
              for label, phase in (("training", "train"), ("evaluation", "eval"))
              if (g := graft["phase_cpu"][phase]) and (n := naive["phase_cpu"][phase])]
    inner = graft["inner_wall"]
    if inner["train_seconds"] and inner["localize_seconds"] is not None and inner["feature_seconds"] is not None:
        phases.append(f"of graft's {inner['train_seconds']:.0f} wall seconds of training, region search "
                      f"{inner['localize_seconds']:.0f} s and feature passes {inner['feature_seconds']:.0f} s")
    verdict = "within" if ratio <= COST_TARGET else "above"
    return [f"Cost: graft's CPU seconds are {ratio:.2f}× naive's ({verdict} the {COST_TARGET}× target)"
            + "".join(f"; {p}" for p in phases)
            + "; measured beside another invocation (one thread each, two at once), not on a quiet machine (graft "
              "and naive alone, split-clinc150:15 seed 0: `README.md`, \"Graft against naive on a quiet machine\")."]


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} CPU-hours"


def _seeds(seeds: list[int]) -> str:
    return f"seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}"


def missing_lines(s: dict) -> list[str]:
    """What has not run yet (its cells :data:`MISSING`) and the CPU-hour estimate of it, labelled as an estimate
    from the runs that finished; none when everything planned ran."""
    m = s["missing"]
    if not m["strategies"]:
        return []
    parts = [f"{_seeds(m['seeds'])} (every strategy)"] if m["seeds"] else []
    parts += [f"{n} on {_seeds(left)}" for n, x in m["strategies"].items()
              if (left := [seed for seed in x if seed not in m["seeds"]])]
    done = [i["strategies_cpu_seconds"] for i in s["invocations"]]
    whose = "invocations'" if len(done) > 1 else "invocation's"
    spent = (f" The {len(done)} finished {whose} strategies took {_hours(sum(done))} (each strategy's CPU seconds "
             "summed; tuning runs and runs lost when an invocation stopped are not in it, nor in a resumed "
             "invocation's run record, which times its last process)." if done else "")
    unmeasured = (f"; {', '.join(m['unmeasured'])} not timed yet (no finished seed), not in it" if m["unmeasured"]
                  else "")
    return [f"Not run yet ({MISSING} in the table): {'; '.join(parts)}.{spent} Estimate from the finished runs (not a "
            f"measurement): {_hours(m['cpu_seconds_left'])} left, each missing strategy and seed at that strategy's "
            f"mean CPU seconds over the seeds it finished, tuning not included{unmeasured}."]


def _not_run_section(s: dict) -> list[str]:
    seeds = ", ".join(map(str, s["missing"]["seeds"]))
    return [f"## {s['stream']}, model {s['model']}, {s['scenario']}-incremental: not run yet", "",
            f"No finished run; seeds {seeds} planned."]


def estimate_line(summaries: list[dict]) -> str:
    """The page's CPU-hour estimate of what has not run, over its benchmarks (one line)."""
    left = sum(s["missing"]["cpu_seconds_left"] or 0 for s in summaries)
    unmeasured = [f"{s['stream']}: {', '.join(s['missing']['unmeasured'])}" for s in summaries
                  if s["missing"]["unmeasured"] and not s.get("not_run")]
    not_run = [s["stream"] for s in summaries if s.get("not_run")]
    if not left and not unmeasured and not not_run:
        return "Every planned run finished."
    return (f"CPU-hour estimate of what has not run, from the finished runs (not a measurement): {_hours(left)}"
            + (f"; not timed yet: {'; '.join(unmeasured)}" if unmeasured else "")
            + (f"; no run yet of {', '.join(not_run)}, not in it" if not_run else "") + ".")


def render(summaries: list[dict]) -> str:
    """The page: one section per benchmark (:func:`.seeds_report.table_lines`, then :func:`rowless_line`,
    :func:`router_line`, :func:`cost_line`, :func:`memory_line` and :func:`missing_lines` under its verdicts)
    under a header that says how to read them and what has not run."""
    return page("Class-incremental text through `cl-graft run`", (
        "Made by `benchmarks/experiments/class_text.py` (every number from `cl-graft run` invocations; tables by "
        "`benchmarks/experiments/class_text_report.py`, data: `class_text.json`; artifact paths relative to this "
        f"folder). {OFF_PAGE} Per strategy, mean ± sample sd over seeds (%): accuracy after the last experience "
        "(the mean over experiences of the accuracy matrix's last row), average incremental accuracy (after each "
        "experience the mean accuracy over the experiences seen so far, averaged over the experiences), forgetting, "
        "and for the strategies that route a test row to one of their tasks the share of test rows sent to their "
        "own experience (\"rows routed right\", `info.task_id` of the last evaluation, averaged over experiences). "
        "\"keeps training rows\": its kept state holds rows of the stream (a replay memory, every row seen, "
        "held-out rows; `info.kept`); the ceilings (joint: fine-tuning on every class at once; joint-probe: the "
        "frozen encoder with a classifier on every class at once) see every row at once and are no continual "
        "method. Stored bytes as each strategy's entry counts them (mean over seeds; a baseline's trained weights "
        "and what its method keeps, graft's regions, heads and feature statistics beside the starting model), wall "
        "and CPU seconds per strategy (`info.cpu_seconds`, the process's CPU time while it ran, tuning runs not "
        "included; CPU timings beside other work are noisy). " + HOW_TO_READ + " " + estimate_line(summaries)),
        (_not_run_section(s) if s.get("not_run") else
         table_lines(s, COLUMNS,
                     [*rowless_line(s), *router_line(s), *cost_line(s), *memory_line(s), *missing_lines(s)])
         for s in summaries))
