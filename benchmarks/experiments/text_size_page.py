"""The text stream's page for the default (automatic) region size: what each task chose, kept and stored.

Reads the ``results.json`` of ``cl-graft run --stream qnli,agnews,sst2 --strategies graft[,naive,single] --preset
quick`` runs (one per seed, each run's record with it) and writes one Markdown page: per seed and task the size
chosen (the share of the graftable elements), the largest the task could take (its cap), the dev-row evidence
(accuracy lost against the task's trained model, its 95% bound, the trained model's temperature), the free share
after it, the seconds the size search took, the bytes the task added (region, head, feature statistics) and its
final test accuracy beside single-task fine-tuning; then graft against single over the seeds (paired 95%
t-interval), the median size, the bytes stored and, where a run holds ``naive``, graft's wall time over naive's
and where it went (training, size search, finder, feature statistics, evaluation).
``single`` comes from each run when it holds one, else from ``--single`` (earlier runs of the same command, seed
and preset: single-task fine-tuning does not depend on grafting's code)::

    python -m cl_graft.benchmarks.experiments.text_size_page --runs runs/text_s0,runs/text_s1,runs/text_s2 \\
        --single benchmarks/results/text_size/text_quick/single/seed0.json,... --out DIR \\
        --page benchmarks/results/text_size/text_quick/text.md

(``DIR/text.md`` and the run record ``DIR/config.json``; ``--out`` is claimed as a command's folder,
:mod:`.script_out`).
"""
from __future__ import annotations

import statistics
from pathlib import Path

import click
from cl_graft.regions.names import region_elements
from cl_graft.strategies.comparison.metrics import paired_interval
from cl_graft.units import BYTE_UNIT, MB

from .run_records import record_note
from .script_out import ScriptError, claimed, load_results, out_options, write_page
from .timing import SEARCH_SHARE_MEANS, conditions_text, parts, search_share

TESTED, REST = "trained model's test score", "the rest (building, saving)"


def _task_rows(graft: dict, single: dict, tasks: list[str]) -> list[str]:
    final, sizing = graft["summary"]["final"], graft["info"]["sizing"]
    per_task = graft["info"].get("task_bytes") or [{}] * len(tasks)
    rows = []
    for i, task in enumerate(tasks):
        s, b = sizing[i], per_task[i]
        r = s.get("retrain")
        retrained = f"{100 * r['rung_share']:.2f} ({'kept' if r['kept'] else 'not kept'})" if r else "–"
        rows.append(f"| {task} | {100 * s['share']:.2f} | {retrained} | {100 * s['cap_share']:.1f} | "
                    f"{'yes' if s.get('below_cap') else 'no'} | {100 * s['loss']:+.1f} ({100 * s['bound']:.1f})"
                    f"{' met False' if s.get('met') is False else ''} | "
                    f"{s.get('temperature', float('nan')):.2f} | {100 * s['free']:.1f} | {s['search_seconds']:.0f} | "
                    f"{b.get('total', float('nan')) / MB:.2f} | {100 * final[i]:.1f} | "
                    f"{100 * single['summary']['final'][i]:.1f} |")
    return rows


def _single_source(record: dict | None) -> str:
    """Where single came from when another run holds it: its command and revision, marked when incomplete."""
    if record is None:
        return ""
    note = record_note(record)
    return (f" Single from `{record.get('command_line')}` (git {record.get('git_revision')}"
            + (f"; {note}" if note else "") + ").")


def int32_bytes(graft: dict) -> int | None:
    """What graft's run would store with format 1's int32 index per element (the cheaper of that and an owner
    byte per graftable element, as before), for runs whose records split the bytes; None otherwise."""
    info = graft.get("info", {})
    if not isinstance(info.get("bytes"), dict) or "graftable" not in info:
        return None
    owned = sum(region_elements(info))
    regions = min(8 * owned, info["graftable"] + 4 * owned)
    return info["bytes"]["total"] - info["bytes"]["regions"] + regions


def _int32_note(graft: dict) -> str:
    old = int32_bytes(graft)
    return "" if old is None or old == graft["bytes"] else f" ({old / MB:.1f} MB with int32 indices)"


def time_line(graft: dict, naive: dict) -> str:
    """Where graft's wall time went beside naive's (:func:`.timing.parts`), for runs whose records split it
    (``train_seconds``, ``eval_seconds``); '' for older records."""
    if "train_seconds" not in graft.get("info", {}) or "train_seconds" not in naive.get("info", {}):
        return ""
    g, n = parts(graft), parts(naive)
    after = ("the choice after retraining" if any("retrain" in s for s in graft["info"]["sizing"])
             else "finder at the chosen size")
    tested = f"; the trained model's test score {g[TESTED]:.0f}" if g[TESTED] else ""
    return (f"Where the time went (s, graft vs naive): training {g['training']:.0f} vs {n['training']:.0f}; size "
            f"search {g['size search']:.0f} ({100 * search_share(g):.1f}% of graft's training); {after} "
            f"{g['finder at the chosen size']:.0f}; feature statistics {g['feature statistics']:.0f}{tested}; "
            f"evaluation {g['evaluation']:.0f} vs {n['evaluation']:.0f}; the rest (building, saving) "
            f"{g[REST]:.0f} vs {n[REST]:.0f}.")


def _tolerance(runs: list[dict]) -> str:
    """The runs' size tolerance in points (2 where the records do not say), e.g. ``"2"``; several: ``"2 / 4"``."""
    found = sorted({100 * s.get("tolerance", 0.02) for r in runs for s in r["strategies"]["graft"]["info"]["sizing"]})
    return " / ".join(f"{t:g}" for t in found)


def _retrain_note(runs: list[dict]) -> str:
    """What retraining did, for runs whose records hold a ``retrain`` entry ('' otherwise)."""
    if not any("retrain" in s for r in runs for s in r["strategies"]["graft"]["info"]["sizing"]):
        return ""
    return ("; where a task retrained (`cl_graft.strategies.graft.retrain`), that search ran part-way through its "
            "steps, the rest trained a smaller region, and that region was kept where it scored at least as well on "
            "the dev rows (\"size %\" is what the task kept)")


def promise_text(cases: list[tuple[str, dict, float, float]]) -> str:
    """The size search's promise read on test rows, over task runs ``(label, sizing record, graft's final test
    accuracy, single's)``: how often graft ended within the tolerance of single-task fine-tuning and, where the
    records hold it (``trained_test``), of the task's own trained model (what the search vouches for on dev rows);
    and the tasks accepted with ``met`` False (their dev loss above the tolerance, vouched by a bound alone)."""
    tol = cases[0][1].get("tolerance", 0.02)
    below = [f"{label} {100 * (g - s):+.1f}" for label, _, g, s in cases if g < s - tol - 1e-9]
    text = (f"On test rows: graft ended within {100 * tol:g} points (the size search's tolerance) of single-task "
            f"fine-tuning on {len(cases) - len(below)} of {len(cases)} task runs"
            + (f" (more than {100 * tol:g} below on {', '.join(below)})" if below else "") + "; ")
    trained = [(label, r["trained_test"], g) for label, r, g, _ in cases if r.get("trained_test") is not None]
    if trained:
        held = sum(g >= t - tol - 1e-9 for _, t, g in trained)
        text += (f"within {100 * tol:g} points of the task's own trained model (`sizing.trained_test`, what the "
                 f"search vouches for) on {held} of {len(trained)}")
    else:
        text += ("the task's own trained model's test accuracy (`sizing.trained_test`, what the search vouches "
                 "for) is not in these runs' records (recorded by `cl-graft run` from a later revision on)")
    unmet = [f"{label} (dev loss {100 * r['loss']:+.1f}, "
             + ("below its cap: vouched by the label-free bound alone)" if r.get("below_cap") else
                "at its cap: no smaller rung vouched for)") for label, r, _, _ in cases if r.get("met") is False]
    return text + (f". Kept with `met` False (dev loss above the tolerance; each raised a `CapacityWarning`): "
                   f"{', '.join(unmet)}." if unmet else ". No task was kept with `met` False.")


def page_text(runs: list[dict], singles: list[dict], single_records: list[dict | None] | None = None) -> str:
    """The Markdown page of ``runs`` (results.json of graft runs, one per seed) and their ``singles``
    (``single_records``: the run records of singles read from other runs, None where a run holds its own)."""
    tasks = runs[0]["tasks"]
    lines = ["# Text stream with the default (automatic) region size, quick preset", "",
             ("Sizes are chosen per task on its dev rows (never test rows): the smallest rung that the dev rows "
             "(paired hits) or the trained model's temperature-scaled probabilities on the dev rows and a sample "
             f"of the training inputs (label-free) vouch loses at most {_tolerance(runs)} points of the task's "
             "trained accuracy with 95% confidence (`cl_graft.strategies.graft.sizing`)" + _retrain_note(runs)
             + f". The size search's share is {SEARCH_SHARE_MEANS}; bytes in {BYTE_UNIT}. Made by "
             "`benchmarks/experiments/text_size_page.py` from the runs below."), ""]
    shares, graft_avg, single_avg = [], [], []
    for run, single, other in zip(runs, singles, single_records or [None] * len(runs)):
        rec, graft = run["run"], run["strategies"]["graft"]
        shares += [s["share"] for s in graft["info"]["sizing"]]
        graft_avg.append(graft["summary"]["average"])
        single_avg.append(single["summary"]["average"])
        lines += [f"## Seed {rec['seed']}", "",
                  (f"Command: `{rec['command_line']}` (git {rec['git_revision']}; {rec['device_name']}, torch "
                  f"{rec['torch']}; {conditions_text(rec)})." + _single_source(other)), "",
                  ("| task | size % | vouched % (retrained region) | cap % | below cap | dev loss, points (95% bound) "
                   "| T | free after % | search s | bytes added MB | final graft | single |"),
                  "|---|---|---|---|---|---|---|---|---|---|---|---|",
                  *_task_rows(graft, single, tasks), ""]
        text = (f"graft: average {100 * graft_avg[-1]:.1f}, forgetting {100 * graft['summary']['forgetting']:.1f}, "
                f"stored {graft['bytes'] / MB:.1f} MB{_int32_note(graft)}, wall {graft['seconds']:.0f} s; "
                f"single: average "
                f"{100 * single_avg[-1]:.1f} → graft keeps {100 * graft_avg[-1] / single_avg[-1]:.1f}% of it")
        if "naive" in run["strategies"]:
            naive = run["strategies"]["naive"]
            text += (f"; naive: average {100 * naive['summary']['average']:.1f}, wall {naive['seconds']:.0f} s → "
                     f"graft / naive wall time {graft['seconds'] / naive['seconds']:.2f}")
        lines += [text + ".", ""]
        went = time_line(graft, run["strategies"]["naive"]) if "naive" in run["strategies"] else ""
        lines += [went, ""] if went else []
    kept = [g / s for g, s in zip(graft_avg, single_avg)]
    lines += ["## Over the seeds", "",
              (f"graft keeps {100 * statistics.mean(kept):.1f}% of single-task fine-tuning on average "
              f"({', '.join(f'{100 * k:.1f}%' for k in kept)}); median size chosen "
              f"{100 * statistics.median(shares):.2f}% of the graftable elements, largest {100 * max(shares):.2f}%.")]
    if len(runs) > 1:
        pi = paired_interval([100 * g for g in graft_avg], [100 * s for s in single_avg])
        lines[-1] += (f" graft − single, paired by seed: {pi['mean']:+.1f} points, 95% t-interval "
                      f"[{pi['low']:+.1f}, {pi['high']:+.1f}].")
    cases = [(f"seed {run['run']['seed']} {task}", record, final, alone)
             for run, single in zip(runs, singles)
             for task, record, final, alone in zip(tasks, run["strategies"]["graft"]["info"]["sizing"],
                                                    run["strategies"]["graft"]["summary"]["final"],
                                                    single["summary"]["final"])]
    lines += ["", promise_text(cases)]
    return "\n".join(lines) + "\n"


def _singles(runs: list[dict], others: list[dict]) -> list[dict]:
    """Each run's ``single`` (its own, else that of ``others`` of its seed), checking that each run holds graft with
    the automatic size.

    Raises:
        ScriptError: a run without graft, with a fixed region size, or without single for its seed.
    """
    by_seed = {o["run"].get("seed"): o["strategies"]["single"] for o in others if "single" in o["strategies"]}
    out = []
    for run in runs:
        rec, held = run["run"], run["strategies"]
        if "graft" not in held or any("cap_share" not in s for s in held["graft"]["info"].get("sizing", [{}])):
            raise ScriptError(f"`{rec.get('command_line')}`: no graft with the automatic region size; the page "
                              f"reports what that size chose")
        single = held.get("single") or by_seed.get(rec.get("seed"))
        if single is None:
            raise ScriptError(f"`{rec.get('command_line')}`: no single for seed {rec.get('seed')}; run it with "
                              f"--strategies graft,single or give --single")
        out.append(single)
    return out


@click.command()
@click.option("--runs", required=True, help="Comma-separated cl-graft run folders (or results.json files), one "
                                            "per seed.")
@click.option("--single", default=None, help="Comma-separated results.json holding single for the same seeds, "
                                             "for runs without it.")
@out_options(page=True)
def main(runs: str, single: str | None, out: Path, overwrite: bool, page: Path | None) -> None:
    loaded = [load_results(p) for p in runs.split(",")]             # bad input is refused before --out is claimed
    others = [load_results(p) for p in single.split(",")] if single else []
    singles = _singles(loaded, others)
    by_seed = {o["run"]["seed"]: o for o in others}
    records = [None if "single" in r["strategies"] else by_seed[r["run"]["seed"]]["run"] for r in loaded]
    with claimed("text_size_page", click.get_current_context().params) as run_dir:
        write_page(page_text(loaded, singles, records), run_dir, "text.md", page)
    click.echo(f"wrote {out / 'text.md'}" + (f" and {page}" if page else ""))


if __name__ == "__main__":
    main()
