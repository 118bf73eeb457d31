"""The long text stream's page: every task of a long stream, graft's region sizes and free share beside the peers.

Reads the ``results.json`` of ``cl-graft run`` invocations over the same stream, seed and sizes that hold
different strategies (a long stream is split over processes: graft with ``replay-matched``, which reads graft's
bytes, in one; single, naive, LwF, PackNet in another) and writes one Markdown page:

- per task: the region size graft chose (share of the graftable elements), its cap, the free share after it,
  the trained and the grafted model's dev accuracy beside chance (the most frequent training class), whether the
  grafted one is surely above chance, its final test accuracy and its share of single-task
  fine-tuning, and every other strategy's final accuracy;
- per strategy: average, forgetting, BWT, bytes stored, wall seconds (each from its own invocation);
- the stream's checks: tasks at ≥ 95% of single, tasks not surely above chance, graft's forgetting, graft minus
  each peer on the average (one seed: a difference, not a verdict), the free share left after the last task::

    python -m cl_graft.benchmarks.experiments.text_long_page --runs runs/long12g,runs/long12b --out DIR \\
        --page benchmarks/results/text_long/text_long.md

(``DIR/text_long.md`` and the run record ``DIR/config.json``; ``--out`` is claimed as a command's folder,
:mod:`.script_out`).
"""
from __future__ import annotations

import statistics
from pathlib import Path

import click
from cl_graft.units import BYTE_UNIT, MB

from .script_out import ScriptError, claimed, load_results, out_options, write_page
from .timing import conditions_text
from .verdicts import pct

SAME = ("stream", "seed", "preset", "k", "eval_cap", "config")
"""Run-record fields every invocation of one page must share."""
KEPT = 0.95
"""A task keeps its single-task score when graft reaches this share of it."""


def merged(runs: list[dict]) -> dict:
    """The strategies of ``runs`` (results.json of one stream) by name.

    Raises:
        ScriptError: the runs differ in a field of :data:`SAME`, or two hold the same strategy.
    """
    first = runs[0]["run"]
    strategies = {}
    for run in runs:
        for key in SAME:
            if run["run"].get(key) != first.get(key):
                raise ScriptError(f"the runs differ in {key!r} ({first.get(key)!r} vs {run['run'].get(key)!r}); "
                                  "a page compares invocations of one stream, seed and size")
        for name, result in run["strategies"].items():
            if name in strategies:
                raise ScriptError(f"strategy {name!r} is in two of the runs; give each strategy once")
            strategies[name] = result
    return strategies


def page_text(runs: list[dict]) -> str:
    """The Markdown page of ``runs`` (see the module docstring); ``graft`` and ``single`` must be among them."""
    strategies = merged(runs)
    for need in ("graft", "single"):
        if need not in strategies:
            raise ScriptError(f"no run holds {need!r}; the page compares graft with single-task fine-tuning")
    tasks, rec = runs[0]["tasks"], runs[0]["run"]
    graft, single = strategies["graft"], strategies["single"]
    peers = [n for n in strategies if n not in ("graft", "single")]
    sizing, final, alone = graft["info"]["sizing"], graft["summary"]["final"], single["summary"]["final"]
    lines = [f"# Long text stream: {len(tasks)} tasks, one seed", "",
             (f"Stream {' → '.join(tasks)}; preset {rec['preset']} with {rec['k']} training rows per class, "
              f"{rec['config']['recipe']['steps']} steps per experience, {rec['eval_cap']} test rows per task, seed "
              f"{rec['seed']}; every strategy scores every task after every experience (task labels at test). "
              f"Bytes in {BYTE_UNIT}. Made by `benchmarks/experiments/text_long_page.py` from these invocations:"), ""]
    for run in runs:
        r = run["run"]
        lines.append(f"- `{r['command_line']}` (git {r['git_revision']}; {r['device_name']}, torch {r['torch']}; "
                     f"{r['wall_seconds']:.0f} s; {conditions_text(r)})")
    head = ["task", "graft size %", "cap %", "free after %", "dev: trained → grafted (chance)", "above chance",
            "graft", "single", "% of single", *peers]
    lines += ["", "## Per task (final test accuracy, %)", "", "| " + " | ".join(head) + " |",
              "|" + "---|" * len(head)]
    for i, task in enumerate(tasks):
        s = sizing[i]
        lines.append(f"| {task} | {100 * s['share']:.2f} | {pct(s['cap_share'])} | {pct(s['free'])} | "
                     f"{pct(s['reference'])} → {pct(s['score'])} ({pct(s['chance'])}) | "
                     f"{'yes' if s['above_chance'] else 'no'} | {pct(final[i])} | {pct(alone[i])} | "
                     f"{100 * final[i] / alone[i]:.0f}% | "
                     + " | ".join(pct(strategies[p]["summary"]["final"][i]) for p in peers) + " |")
    lines += ["", "## Per strategy", "", "| strategy | average | forgetting | BWT | stored MB | wall s |",
              "|---|---|---|---|---|---|"]
    for name, res in strategies.items():
        summary = res["summary"]
        lines.append(f"| {name} | {pct(summary['average'])} | {pct(summary.get('forgetting'))} | "
                     f"{pct(summary.get('bwt'))} | {res['bytes'] / MB:.1f} | {res['seconds']:.0f} |")
    kept = [i for i in range(len(tasks)) if final[i] >= KEPT * alone[i]]
    at_chance = [t for t, s in zip(tasks, sizing) if not s["above_chance"]]
    shares = [s["share"] for s in sizing]
    lines += ["", "## Checks", "",
              f"- Tasks at ≥ {100 * KEPT:.0f}% of single: {len(kept)} of {len(tasks)}"
              + (f" (not: {', '.join(t for i, t in enumerate(tasks) if i not in kept)})." if len(kept) < len(tasks)
                 else "."),
              "- Not surely above chance on dev rows (graft's check): " + (", ".join(at_chance) or "none") + ".",
              f"- Graft's forgetting: {pct(graft['summary']['forgetting'])} points.",
              (f"- Each graft region may lose up to {pct(sizing[0]['tolerance'])} points of its trained model's "
               f"dev accuracy at {100 * sizing[0]['confidence']:.0f}% confidence (the size search's tolerance)."),
              (f"- Region sizes: median {100 * statistics.median(shares):.2f}% of the graftable elements, largest "
               f"{100 * max(shares):.2f}%; free share after the last task {pct(sizing[-1]['free'])}%."),
              "- Graft minus each other strategy on the average (points; one seed, so a difference, not a verdict): "
              + ", ".join(f"{p} {100 * (graft['summary']['average'] - strategies[p]['summary']['average']):+.1f}"
                          for p in ["single", *peers]) + ".",
              *memory_lines(strategies),
              *promise_lines(tasks, graft, single)]
    return "\n".join(lines) + "\n"


def memory_lines(strategies: dict) -> list[str]:
    """One line per strategy with a replay memory: its rows and bytes against graft's stored bytes. A memory sized
    to graft's bytes (``replay-matched``) that holds fewer is capped: the stream had no more training rows."""
    graft = strategies["graft"]["bytes"]
    out = []
    for name, res in strategies.items():
        info = res.get("info", {})
        if "memory_bytes" not in info:
            continue
        capped = info["memory_bytes"] < 0.99 * graft
        out.append(f"- {name}: its memory holds {info['memory_rows']:,} rows, {info['memory_bytes']:,} B "
                   f"({info['memory_bytes'] / MB:.2f} MB); "
                   + (f"fewer bytes than graft's {graft / MB:.1f} MB, so it holds every training row of the stream "
                      "(capped at the stream's rows, not matched)" if capped else
                      f"matched to graft's {graft / MB:.2f} MB")
                   + f"; the rest of its {res['bytes'] / MB:.1f} MB is its trained model.")
    return out


def promise_lines(tasks: list[str], graft: dict, single: dict) -> list[str]:
    """The size search's promise read on test rows (:func:`.text_size_page.promise_text`)."""
    from .text_size_page import promise_text

    sizing, final, alone = graft["info"]["sizing"], graft["summary"]["final"], single["summary"]["final"]
    return [f"- {promise_text([(t, sizing[i], final[i], alone[i]) for i, t in enumerate(tasks)])}"]


@click.command()
@click.option("--runs", required=True, help="Comma-separated cl-graft run folders (or results.json files) of one "
                                            "stream, seed and size, each with other strategies.")
@out_options(page=True)
def main(runs: str, out: Path, overwrite: bool, page: Path | None) -> None:
    loaded = [load_results(p) for p in runs.split(",")]
    text = page_text(loaded)                                  # bad runs are refused before --out is claimed
    with claimed("text_long_page", click.get_current_context().params) as run_dir:
        write_page(text, run_dir, "text_long.md", page)
    click.echo(f"wrote {out / 'text_long.md'}" + (f" and {page}" if page else ""))


if __name__ == "__main__":
    main()
