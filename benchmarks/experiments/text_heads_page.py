"""Where fine-tuning pays (issue 54, item 4): graft against the closed-form heads of the frozen encoder (``slda``,
``ranpac``, with ``ncm`` beside them) on one task-list stream, with task labels and without, paired by seed.

Reads, per seed, the ``results.json`` of a graft run and of a run of the heads, both made with
``--task-inference features`` (so each holds its accuracy with task labels and without: graft routes each row to a
task by θ_pre's features, a head answers it over every task's (task, class) columns at once); the two must share
stream, seed and data sizes. Without task labels a head's row counts right only when its argmax column is its own
task's and class; graft's run records Avalanche's count (the routed logits' argmax equals the label, so a row sent
to another task counts right where that task's answer has the row's class index). ``--graft-strict`` gives graft's
strict count too: per seed the ``rules.json`` of :mod:`.probes.task_inference_rules` on the graft run (its
``features`` rule re-scores the saved skills; its Avalanche count must equal the run's, which pairs it with its
seed); graft runs that record a strict count (``info["task_inference"]["count"]``) need none. Writes one Markdown
page: per strategy the final average accuracy over the tasks with task labels (mean ±
SD over seeds) and its per-task mean, without task labels and the share of rows answered in their own task, bytes
kept, wall and CPU seconds; graft minus each head, paired by seed, as Holm-corrected intervals
(:func:`.verdicts.holm_intervals`) with task labels and (strict, with ``--graft-strict``) without; each run's
revision and recorded conditions::

    python -m cl_graft.benchmarks.experiments.text_heads_page \\
        --graft benchmarks/results/text_heads/graft/seed0,... --heads benchmarks/results/text_heads/heads/seed0,... \\
        --graft-strict benchmarks/results/text_heads/graft_strict/seed0,... \\
        --out DIR --page benchmarks/results/text_heads/text_heads.md

(``DIR/text_heads.md`` and the run record ``DIR/config.json``; ``--out`` is claimed as a command's folder,
:mod:`.script_out`).
"""
from __future__ import annotations

import statistics
from pathlib import Path

import click
from cl_graft.errors import UserError
from cl_graft.files import read_json
from cl_graft.units import BYTE_UNIT, human_bytes

from .script_out import ScriptError, claimed, load_results, out_options, write_page
from .timing import conditions_text
from .verdicts import VERDICT, holm_intervals, mean_sd, pct, pm

SAME = ("stream", "seed", "preset", "k", "dev_k", "eval_cap", "max_length", "data_sha256")
"""Run-record fields a graft run and its heads run must share."""
HEADS = ("slda", "ranpac", "ncm")
"""The closed-form heads compared with graft, in the page's order (those present in the heads runs)."""
SAME_COUNT = 1e-6
"""How far a re-scored Avalanche count may lie from the run's recorded one (per task) and still be that run's: the
probe keeps float32 shares, one row of 500 is 2e-3."""


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


def strict_graft(pairs: list[tuple[dict, dict]], rescored: list[dict]) -> dict[int, dict]:
    """Graft's strict accuracy without task labels per seed: ``{"accuracy": per task, "run": the re-scoring's run
    record or None}``, from the re-scoring (``{"rules": its rules.json, "run": ...}``, :func:`read_rescoring`) whose
    ``features`` rule counts as Avalanche does (``avalanche``) what that seed's run recorded
    (``info["task_inference"]["accuracy"]``, within :data:`SAME_COUNT`); its ``task_agnostic`` is the strict count.

    Raises:
        ScriptError: a re-scoring of another stream, one that matches no seed's run or two, or a seed without one.
    """
    recorded = {g["run"]["seed"]: g["strategies"]["graft"]["info"]["task_inference"]["accuracy"] for g, _ in pairs}
    tasks = pairs[0][0]["run"]["tasks"]
    strict = {}
    for i, rescoring in enumerate(rescored):
        rules = rescoring["rules"]
        if rules.get("tasks") != tasks or "features" not in rules:
            raise ScriptError(f"--graft-strict {i + 1}: no features rule on the tasks {','.join(tasks)}")
        count = rules["features"]["avalanche"]
        seeds = [s for s, acc in recorded.items() if max(abs(a - b) for a, b in zip(acc, count)) <= SAME_COUNT]
        if len(seeds) != 1 or seeds[0] in strict:
            raise ScriptError(f"--graft-strict {i + 1}: its Avalanche count {[round(c, 4) for c in count]} is not "
                              f"the recorded one of exactly one seed's graft run")
        strict[seeds[0]] = {"accuracy": rules["features"]["task_agnostic"], "run": rescoring["run"]}
    if rescored and sorted(strict) != sorted(recorded):
        raise ScriptError(f"--graft-strict holds seeds {sorted(strict)}, the runs {sorted(recorded)}")
    return strict


def counted_strictly(pairs: list[tuple[dict, dict]]) -> dict[int, dict] | None:
    """Graft's strict accuracy without task labels per seed as :func:`strict_graft` gives it, read from the runs
    themselves where every graft run says it counted strictly (``info["task_inference"]["count"]``: graft counts
    so since git bf30ac8, and says so in runs made after the count was recorded); None where one does not."""
    routed = {g["run"]["seed"]: g["strategies"]["graft"]["info"]["task_inference"] for g, _ in pairs}
    if any(r.get("count") != "strict" for r in routed.values()):
        return None
    return {seed: {"accuracy": r["accuracy"], "run": None} for seed, r in routed.items()}


def page_text(pairs: list[tuple[dict, dict]], strict: dict[int, dict] | None = None) -> str:
    """The Markdown page of ``pairs`` (:func:`paired`), with graft's strict count without task labels per seed
    (:func:`strict_graft`) when given, else the runs' own where they counted strictly (:func:`counted_strictly`)."""
    native = strict is None and counted_strictly(pairs) is not None
    strict = counted_strictly(pairs) if native else strict
    first = pairs[0][0]["run"]
    seeds = [g["run"]["seed"] for g, _ in pairs]
    tasks = first["tasks"]
    names = ["graft"] + [n for n in HEADS if all(n in h["strategies"] for _, h in pairs)]

    def result(name: str, g: dict, h: dict) -> dict:
        return (g if name == "graft" else h)["strategies"][name]

    def unlabelled(name: str, g: dict, h: dict) -> float | None:
        """The average accuracy without task labels, counted strictly (None: not measured so)."""
        if name == "graft":
            return statistics.mean(strict[g["run"]["seed"]]["accuracy"]) if strict else None
        agnostic = result(name, g, h)["info"].get("task_inference")
        return statistics.mean(agnostic["accuracy"]) if agnostic else None

    stream = ",".join(first["stream"])
    lines = [f"# Where fine-tuning pays: graft against the frozen encoder's closed-form heads ({stream})",
             "",
             f"`cl-graft run --stream {stream}`, {first['preset']} preset ({first['k']} training rows per "
             f"class, at most {first['eval_cap']} test rows per task), seeds {', '.join(map(str, seeds))}, each "
             "strategy with its defaults (no `--tune`). With task labels: the label picks graft's grafted model "
             "and each head's columns. Without (`--task-inference features`): graft routes each row to a task by "
             "θ_pre's features and answers with that task's model; each head answers over every task's (task, "
             "class) columns at once, the argmax column its answer. Without task labels a row counts right only "
             "when its answer is its own task's and its own class (strict); "
             + ("graft's runs count so too (a row it routes to another task answers in that task's classes and counts "
                "wrong)" if native else "graft's run records Avalanche's count instead (the routed answer's class "
                "index equals the label, so a row sent to another task can count right), given in brackets")
             + (", and its strict count is its saved skills re-scored by `probes/task_inference_rules.py` (the "
                "features rule, whose Avalanche count is the run's)" if strict and not native else "")
             + ". \"answered in their "
             "task\": the share of rows routed to their own task (graft) or whose argmax column is one of their "
             f"task's (heads). Bytes: what each keeps beyond the model it starts from ({BYTE_UNIT}).", "",
             f"| strategy | with task labels (mean ± SD) | {' | '.join(tasks)} | without task labels | answered in "
             "their task | kept | wall s | CPU s (each strategy's own, mean over seeds) |",
             "|---|---|" + "---|" * len(tasks) + "---|---|---|---|---|"]
    for name in names:
        runs = [result(name, g, h) for g, h in pairs]
        per_task = [pct(statistics.mean(r["summary"]["final"][i] for r in runs)) for i in range(len(tasks))]
        routed = [r["info"]["task_inference"] for r in runs if "task_inference" in r["info"]]
        without = "not run"
        if len(routed) == len(runs):
            strict_values = [unlabelled(name, g, h) for g, h in pairs]
            without = pm(mean_sd(strict_values)) if None not in strict_values else "–"
            if name == "graft" and not native:
                without += f" [{pm(mean_sd([statistics.mean(a['accuracy']) for a in routed]))}]"
        identified = pm(mean_sd([statistics.mean(a["task_id"]) for a in routed])) if routed else "–"
        low, high = (human_bytes(f(r["summary"]["bytes"] for r in runs)) for f in (min, max))
        kept = low if low == high else f"{low}–{high}"
        wall = [r["seconds"] for r in runs]
        cpu = [r["info"]["cpu_seconds"] for r in runs]
        lines.append(f"| {name} | {pm(mean_sd([r['summary']['average'] for r in runs]))} | {' | '.join(per_task)} | "
                     f"{without} | {identified} | {kept} | {statistics.mean(wall):.0f} | "
                     f"{statistics.mean(cpu):.0f} |")
    lines += _intervals("with task labels", {n: [result("graft", g, h)["summary"]["average"]
                                                 - result(n, g, h)["summary"]["average"] for g, h in pairs]
                                             for n in names[1:]})
    without = {n: [unlabelled("graft", g, h) - unlabelled(n, g, h) for g, h in pairs] for n in names[1:]
               if strict and all(unlabelled(n, g, h) is not None for g, h in pairs)}
    if strict and without:
        lines += _intervals("without task labels, both counted strictly", without)
    lines += ["", "Runs (the wall seconds of runs made while other work shared the machine are longer than an idle "
              "core's; CPU seconds stand beside them):", ""]
    for g, h in pairs:
        for run in (g, h):
            r = run["run"]
            lines.append(f"- seed {r['seed']}, {', '.join(r['strategies'])}: git {r['git_revision'][:7]} on "
                         f"{r['device_name']}, {conditions_text(r)}; `{r['command_line']}`")
        r = (strict or {}).get(g["run"]["seed"], {}).get("run")
        if r is not None:
            lines.append(f"- seed {g['run']['seed']}, graft re-scored strictly: git {r['git_revision'][:7]} on "
                         f"{r['device_name']}, {conditions_text(r)}; `{r['command_line']}`")
    return "\n".join(lines) + "\n"


def _intervals(what: str, diffs: dict[str, list[float]]) -> list[str]:
    """The page's lines of graft minus each head (``diffs``: head → one difference per seed), ``what`` saying how
    they were measured."""
    intervals = holm_intervals(diffs)
    lines = ["", f"Graft minus each head, {what}, paired by seed (points; Holm-corrected t-intervals over the "
             f"{len(intervals)} comparisons, family-wise 95%):", "",
             "| head | graft − head | interval | verdict |", "|---|---|---|---|"]
    for n, d in intervals.items():
        lines.append(f"| {n} | {100 * d['mean']:+.1f} | [{100 * d['low']:+.1f}, {100 * d['high']:+.1f}] | "
                     f"{VERDICT[d['ahead']]} |")
    return lines


@click.command(help=__doc__.splitlines()[0])
@click.option("--graft", "graft_runs", required=True, help="graft's run folders (or results.json), one per seed")
@click.option("--heads", "heads_runs", required=True, help="the heads' run folders (or results.json), one per seed")
@click.option("--graft-strict", "rescored", default=None,
              help="output folders of probes.task_inference_rules on the graft runs (rules.json), one per seed: "
                   "graft's strict count without task labels")
@out_options(page=True)
def main(graft_runs: str, heads_runs: str, rescored: str | None, out: Path, overwrite: bool,
         page: Path | None) -> None:
    pairs = paired([load_results(p) for p in graft_runs.split(",")], [load_results(p) for p in heads_runs.split(",")])
    strict = strict_graft(pairs, [read_rescoring(p) for p in rescored.split(",")]) if rescored else None
    text = page_text(pairs, strict)                           # bad runs are refused before --out is claimed
    with claimed("text_heads_page", click.get_current_context().params) as run_dir:
        write_page(text, run_dir, "text_heads.md", page)
    click.echo(f"wrote {out / 'text_heads.md'}" + (f" and {page}" if page else ""))


def read_rescoring(folder: str | Path) -> dict:
    """A :mod:`.probes.task_inference_rules` output folder: ``{"rules": its rules.json, "run": its run record
    config.json, or None where there is none}``.

    Raises:
        ScriptError: no rules.json, or a file that is not JSON (one line).
    """
    path = Path(folder)
    try:
        record = read_json(path / "config.json") if (path / "config.json").is_file() else None
        return {"rules": read_json(path / "rules.json"), "run": record}
    except UserError as e:
        raise ScriptError(f"--graft-strict: {e}") from None


if __name__ == "__main__":
    main()
