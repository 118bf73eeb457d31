"""Where fine-tuning pays (issue 54, item 4): graft against the closed-form heads of the frozen encoder (``slda``,
``ranpac``, with ``ncm`` beside them) on one task-list stream, paired by seed.

Reads, per seed, the ``results.json`` of a graft run made with ``--task-inference features`` (so it holds graft's
accuracy with task labels and, routed by features, without them) and of a run of the heads (a head per task, the
task label picking it); the two must share stream, seed and data sizes. Writes one Markdown page: per strategy the
final average accuracy over the tasks with task labels (mean ± SD over seeds) and its per-task mean, bytes kept,
wall and CPU seconds; graft's accuracy without task labels and the share of rows routed to their own task; graft
minus each head with task labels, paired by seed, as Holm-corrected intervals (:func:`.verdicts.holm_intervals`);
each run's revision and recorded conditions. The heads on a task list answer only with the task label (the
task-list family has the task scenario alone), so the page says so where a comparison without labels would stand::

    python -m cl_graft.benchmarks.experiments.text_heads_page \\
        --graft benchmarks/results/text_heads/graft/seed0,... --heads benchmarks/results/text_heads/heads/seed0,... \\
        --out DIR --page benchmarks/results/text_heads/text_heads.md

(``DIR/text_heads.md`` and the run record ``DIR/config.json``; ``--out`` is claimed as a command's folder,
:mod:`.script_out`).
"""
from __future__ import annotations

import statistics
from pathlib import Path

import click
from cl_graft.units import BYTE_UNIT, human_bytes

from .script_out import ScriptError, claimed, load_results, out_options, write_page
from .timing import conditions_text
from .verdicts import VERDICT, holm_intervals, mean_sd, pct, pm

SAME = ("stream", "seed", "preset", "k", "dev_k", "eval_cap", "max_length", "data_sha256")
"""Run-record fields a graft run and its heads run must share."""
HEADS = ("slda", "ranpac", "ncm")
"""The closed-form heads compared with graft, in the page's order (those present in the heads runs)."""


def paired(graft_runs: list[dict], heads_runs: list[dict]) -> list[tuple[dict, dict]]:
    """The runs paired by seed (one graft run and one heads run each).

    Raises:
        ScriptError: a graft run without graft's routed accuracy, runs that differ in a field of :data:`SAME`,
            a seed given twice, or a seed without its partner.
    """
    def by_seed(runs: list[dict], what: str) -> dict[int, dict]:
        seeds = {}
        for run in runs:
            seed = run["run"]["seed"]
            if seed in seeds:
                raise ScriptError(f"two {what} runs of seed {seed}; give each seed once")
            seeds[seed] = run
        return seeds

    grafts, heads = by_seed(graft_runs, "graft"), by_seed(heads_runs, "heads")
    if sorted(grafts) != sorted(heads):
        raise ScriptError(f"graft runs of seeds {sorted(grafts)} but heads runs of seeds {sorted(heads)}")
    for seed, run in grafts.items():
        info = run["strategies"].get("graft", {}).get("info", {})
        if "task_inference" not in info:
            raise ScriptError(f"the graft run of seed {seed} has no graft scored without task labels: "
                              "make it with --task-inference features")
        for key in SAME:
            if run["run"].get(key) != heads[seed]["run"].get(key):
                raise ScriptError(f"seed {seed}: the graft and heads runs differ in {key!r}")
    return [(grafts[s], heads[s]) for s in sorted(grafts)]


def page_text(pairs: list[tuple[dict, dict]]) -> str:
    """The Markdown page of ``pairs`` (:func:`paired`)."""
    first = pairs[0][0]["run"]
    seeds = [g["run"]["seed"] for g, _ in pairs]
    tasks = first["tasks"]
    names = ["graft"] + [n for n in HEADS if all(n in h["strategies"] for _, h in pairs)]

    def result(name: str, g: dict, h: dict) -> dict:
        return (g if name == "graft" else h)["strategies"][name]

    stream = ",".join(first["stream"])
    lines = [f"# Where fine-tuning pays: graft against the frozen encoder's closed-form heads ({stream})",
             "",
             f"`cl-graft run --stream {stream}`, {first['preset']} preset ({first['k']} training rows per "
             f"class, at most {first['eval_cap']} test rows per task), seeds {', '.join(map(str, seeds))}, each "
             "strategy with its defaults (no `--tune`). With task labels: the label picks graft's grafted model "
             "and each head's columns. Without: graft routes each row by θ_pre's features (`--task-inference "
             "features`); the heads were not run without labels (the task-list family has the task scenario "
             f"only). Bytes: what each keeps beyond the model it starts from ({BYTE_UNIT}).", "",
             f"| strategy | with task labels (mean ± SD) | {' | '.join(tasks)} | without task labels | rows routed "
             "to their task | kept | wall s | CPU s (each strategy's own, mean over seeds) |",
             "|---|---|" + "---|" * len(tasks) + "---|---|---|---|---|"]
    for name in names:
        runs = [result(name, g, h) for g, h in pairs]
        per_task = [pct(statistics.mean(r["summary"]["final"][i] for r in runs)) for i in range(len(tasks))]
        if name == "graft":
            routed = [statistics.mean(r["info"]["task_inference"]["accuracy"]) for r in runs]
            task_id = [statistics.mean(r["info"]["task_inference"]["task_id"]) for r in runs]
            unlabelled, identified = pm(mean_sd(routed)), pm(mean_sd(task_id))
        else:
            unlabelled, identified = "not run", "–"
        low, high = (human_bytes(f(r["summary"]["bytes"] for r in runs)) for f in (min, max))
        kept = low if low == high else f"{low}–{high}"
        wall = [r["seconds"] for r in runs]
        cpu = [r["info"]["cpu_seconds"] for r in runs]
        lines.append(f"| {name} | {pm(mean_sd([r['summary']['average'] for r in runs]))} | {' | '.join(per_task)} | "
                     f"{unlabelled} | {identified} | {kept} | {statistics.mean(wall):.0f} | "
                     f"{statistics.mean(cpu):.0f} |")
    diffs = {n: [result("graft", g, h)["summary"]["average"] - result(n, g, h)["summary"]["average"]
                 for g, h in pairs] for n in names[1:]}
    intervals = holm_intervals(diffs)
    lines += ["", "Graft minus each head, with task labels, paired by seed (points; Holm-corrected t-intervals over "
              f"the {len(intervals)} comparisons, family-wise 95%):", "",
              "| head | graft − head | interval | verdict |", "|---|---|---|---|"]
    for n, d in intervals.items():
        lines.append(f"| {n} | {100 * d['mean']:+.1f} | [{100 * d['low']:+.1f}, {100 * d['high']:+.1f}] | "
                     f"{VERDICT[d['ahead']]} |")
    lines += ["", "Runs (the wall seconds of runs made while other work shared the machine are longer than an idle "
              "core's; CPU seconds stand beside them):", ""]
    for g, h in pairs:
        for run in (g, h):
            r = run["run"]
            lines.append(f"- seed {r['seed']}, {', '.join(r['strategies'])}: git {r['git_revision'][:7]} on "
                         f"{r['device_name']}, {conditions_text(r)}; `{r['command_line']}`")
    return "\n".join(lines) + "\n"


@click.command(help=__doc__.splitlines()[0])
@click.option("--graft", "graft_runs", required=True, help="graft's run folders (or results.json), one per seed")
@click.option("--heads", "heads_runs", required=True, help="the heads' run folders (or results.json), one per seed")
@out_options(page=True)
def main(graft_runs: str, heads_runs: str, out: Path, overwrite: bool, page: Path | None) -> None:
    pairs = paired([load_results(p) for p in graft_runs.split(",")], [load_results(p) for p in heads_runs.split(",")])
    text = page_text(pairs)                                   # bad runs are refused before --out is claimed
    with claimed("text_heads_page", click.get_current_context().params) as run_dir:
        write_page(text, run_dir, "text_heads.md", page)
    click.echo(f"wrote {out / 'text_heads.md'}" + (f" and {page}" if page else ""))


if __name__ == "__main__":
    main()
