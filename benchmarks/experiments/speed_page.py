"""The speed page: graft's wall time beside naive's in the same ``cl-graft run``, before and after a change, with
where graft's time went and each strategy's peak memory.

Reads configurations of runs (folders or ``results.json`` files, one per seed, each holding graft and naive): ``--runs
NAME=A,B,C`` for the README's main job (``cl-graft run --stream qnli,agnews,sst2 --strategies graft,naive --preset
quick``), ``--digits NAME=...`` for a digits stream, repeated per configuration (a revision or a setting), the first
compared with the others. Each run's ratio graft / naive is measured in that run (the two strategies one after the other
in one process); the page states the targets (graft / naive ≤ 1.15 on every seed, the size search ≤ 10% of graft's
training time, graft's average accuracy within 0.3 points of before, on average over the seeds) and whether each was
met::

    python -m cl_graft.benchmarks.experiments.speed_page --runs before=A0,A1,A2 --runs after=B0,B1,B2 \\
        --digits before=C0,C1,C2 --digits after=D0,D1,D2 --out DIR --page benchmarks/results/speed/speed.md

(``DIR/speed.md``, ``DIR/speed.json``, the run record ``DIR/config.json``; ``--out`` is claimed as a command's
folder, :mod:`.script_out`).
"""
from __future__ import annotations

import shlex
import statistics
from pathlib import Path

import click
from cl_graft.files import write_json
from cl_graft.units import BYTE_UNIT, MB, recorded_mb

from .script_out import ScriptError, claimed, load_results, out_options, write_page
from .timing import PARTS, SEARCH_SHARE_MEANS, conditions_text, parts, run_order, search_share

RATIO_TARGET = 1.15
SEARCH_TARGET = 0.10
ACCURACY_TARGET = 0.003


def breakdown(run: dict) -> dict[str, dict[str, float]]:
    """Seconds per part (:data:`.timing.PARTS`) of graft's and naive's wall time in one run."""
    return {name: parts(run["strategies"][name]) for name in ("graft", "naive")}


def figures(run: dict) -> dict:
    """One run's figures: wall seconds, the ratio, graft's accuracy, sizes, search share, peak memory."""
    graft, naive = run["strategies"]["graft"], run["strategies"]["naive"]
    split = breakdown(run)
    size = (run["run"].get("strategy_settings") or {}).get("graft", {}).get("region_size")
    search = {k: size.get(k, "float32" if k == "precision" else None) for k in ("rows", "refine", "precision")} \
        if isinstance(size, dict) else None                                  # precision: float32 before it existed
    sizing = graft["info"].get("sizing", [])
    used = [z.get("precision", "float32") for z in sizing]
    refined = [z for z in sizing if "refined_gain" in z]
    higher = sum(not z.get("refined_same") and z["refined_gain"] > 0 for z in refined)
    record = run["run"]
    return {"seed": record["seed"], "command_line": record["command_line"], "search": search,
            "order": run_order(record), "conditions": conditions_text(record), "started": record.get("started", ""),
            "on_cpu": {n: run["strategies"][n]["info"]["cpu_seconds"] / run["strategies"][n]["seconds"]
                       for n in ("graft", "naive")},
            "bfloat16_tasks": f"{used.count('bfloat16')} of {len(used)}",
            "refined_tasks": f"{higher} of {len(refined)}" if refined else None,
            "git_revision": run["run"]["git_revision"], "device_name": run["run"]["device_name"],
            "graft_seconds": graft["seconds"], "naive_seconds": naive["seconds"],
            "ratio": graft["seconds"] / naive["seconds"],
            "cpu_ratio": graft["info"]["cpu_seconds"] / naive["info"]["cpu_seconds"],
            "graft_average": graft["summary"]["average"],
            "naive_average": naive["summary"]["average"], "graft_forgetting": graft["summary"]["forgetting"],
            "shares": [s["share"] for s in sizing], "graft_bytes": graft["bytes"],
            "search_share": search_share(split["graft"]),
            "peak_rss_mb": {n: recorded_mb(run["strategies"][n]["info"].get("peak_rss_mb"), record)
                            for n in ("graft", "naive")},
            "parts": split}


def _configs(named: list[tuple[str, list[dict]]], what: str) -> list[tuple[str, list[dict]]]:
    """Each configuration's figures, runs sorted by seed; every configuration has the first one's seeds.

    Raises:
        ScriptError: a run without graft or naive, or seeds that do not match.
    """
    out = []
    for name, runs in named:
        for run in runs:
            missing = [n for n in ("graft", "naive") if n not in run["strategies"]]
            if missing:
                raise ScriptError(f"`{run['run'].get('command_line')}`: no {missing[0]}; the page compares graft "
                                  f"with naive in the same run")
        figs = sorted((figures(r) for r in runs), key=lambda f: f["seed"])
        if out and [f["seed"] for f in figs] != [f["seed"] for f in out[0][1]]:
            raise ScriptError(f"{what}: {out[0][0]} has seeds {[f['seed'] for f in out[0][1]]}, {name} "
                              f"{[f['seed'] for f in figs]}")
        out.append((name, figs))
    return out


def _pct(shares: list[float]) -> str:
    """Each task's size in percent (3 digits), or for a long stream the median and the range."""
    if len(shares) <= 5:
        return ", ".join(f"{100 * s:.3g}" for s in shares)
    return f"median {100 * statistics.median(shares):.3g} ({100 * min(shares):.3g}–{100 * max(shares):.3g})"


def _mb(value) -> str:
    return "–" if value is None else f"{value:.0f}"


def _section(title: str, configs: list[tuple[str, list[dict]]]) -> list[str]:
    lines = [f"## {title}", ""]
    for name, figs in configs:
        for fig in figs:
            settings = "" if fig["search"] is None else "; size search: " + ", ".join(
                f"{k} {str(v).lower()}" for k, v in fig["search"].items()) + \
                f" (bfloat16 in {fig['bfloat16_tasks']} tasks)"
            if fig["refined_tasks"] is not None:
                settings += f"; the finder's region scored higher than the rung's in {fig['refined_tasks']} tasks"
            lines.append(f"- {name}, seed {fig['seed']}: `{fig['command_line']}` (git {fig['git_revision']}, "
                         f"{fig['device_name']}{settings}; {fig['order']}; {fig['conditions']}; CPU s / wall s "
                         f"graft {fig['on_cpu']['graft']:.2f}, naive {fig['on_cpu']['naive']:.2f})")
    base = configs[0][1]
    lines += ["", "| seed | configuration | graft s | naive s | graft / naive | CPU s graft / naive | size search s (% of "
                  f"graft's training) | graft average (vs {configs[0][0]}) | sizes % | graft MB | peak RSS MB graft / "
                  "naive |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for i, ref in enumerate(base):
        for name, figs in configs:
            f = figs[i]
            lines.append(
                f"| {f['seed']} | {name} | {f['graft_seconds']:.0f} | {f['naive_seconds']:.0f} | **{f['ratio']:.2f}** | "
                f"{f['cpu_ratio']:.2f} | "
                f"{f['parts']['graft']['size search']:.0f} ({100 * f['search_share']:.1f}) | "
                f"{100 * f['graft_average']:.1f} ({100 * (f['graft_average'] - ref['graft_average']):+.1f}) | "
                f"{_pct(f['shares'])} | {f['graft_bytes'] / MB:.1f} | {_mb(f['peak_rss_mb']['graft'])} / "
                f"{_mb(f['peak_rss_mb']['naive'])} |")
    lines += ["", "Where the time went (s, mean over the seeds; graft in each configuration, then naive in the last):",
              "", "| part | " + " | ".join(f"graft, {name}" for name, _ in configs) + f" | naive, {configs[-1][0]} |",
              "|---|" + "---|" * (len(configs) + 1)]
    for part in PARTS:
        cells = [f"{statistics.mean(f['parts']['graft'][part] for f in figs):.0f}" for _, figs in configs]
        naive = statistics.mean(f["parts"]["naive"][part] for f in configs[-1][1])
        lines.append(f"| {part} | " + " | ".join(cells) + f" | {naive:.0f} |")
    lines.append("")
    return lines


def verdicts(base: list[dict], figs: list[dict]) -> dict:
    """The targets over the seeds of one configuration against ``base`` (the same seeds): every ratio ≤
    :data:`RATIO_TARGET`, every search share ≤ :data:`SEARCH_TARGET`, graft's mean accuracy change ≥
    −:data:`ACCURACY_TARGET`."""
    change = statistics.mean(f["graft_average"] - b["graft_average"] for b, f in zip(base, figs))
    return {"ratios": [f["ratio"] for f in figs], "ratio_met": all(f["ratio"] <= RATIO_TARGET for f in figs),
            "search_shares": [f["search_share"] for f in figs],
            "search_met": all(f["search_share"] <= SEARCH_TARGET for f in figs),
            "accuracy_change": change, "accuracy_met": change >= -ACCURACY_TARGET}


def _verdict_line(stream: str, name: str, v: dict, base: str) -> str:
    yes = {True: "met", False: "**not met**"}
    return (f"- {stream}, {name}: graft / naive {', '.join(f'{r:.2f}' for r in v['ratios'])} (target ≤ "
            f"{RATIO_TARGET}: {yes[v['ratio_met']]}); size search "
            f"{', '.join(f'{100 * s:.1f}%' for s in v['search_shares'])} of graft's training (target ≤ "
            f"{100 * SEARCH_TARGET:g}%: {yes[v['search_met']]}); graft's average accuracy "
            f"{100 * v['accuracy_change']:+.2f} points against {base}, mean over the seeds (target ≥ "
            f"{-100 * ACCURACY_TARGET:g}: {yes[v['accuracy_met']]}).")


def latest(configs: list[tuple[str, list[dict]]]) -> list[dict]:
    """The figures of the configuration whose runs started last (their records' ``started``)."""
    return max(configs, key=lambda config: max(f["started"] for f in config[1]))[1]


def alternating_commands(figs: list[dict]) -> list[str]:
    """Each seed's recorded command with ``--strategies graft,naive`` on even seed positions and ``naive,graft`` on
    odd ones, and ``--out runs/speed/<its folder's name>`` (a fresh folder)."""
    out = []
    for i, fig in enumerate(figs):
        words = shlex.split(fig["command_line"])
        for flag, value in (("--strategies", "graft,naive" if i % 2 == 0 else "naive,graft"), ("--out", None)):
            if flag in words:
                at = words.index(flag) + 1
                words[at] = value or f"runs/speed/{Path(words[at]).parent.name}/{Path(words[at]).name}"
        out.append(shlex.join(words))
    return out


def page_text(text: list[tuple[str, list[dict]]], digits: list[tuple[str, list[dict]]]) -> tuple[str, dict]:
    """The page and its figures: ``text`` and ``digits`` are (configuration, figures per seed) lists, the first
    configuration the one the others are compared with."""
    found = {stream: {name: verdicts(configs[0][1], figs) for name, figs in configs[1:]}
             for stream, configs in (("text", text), ("digits", digits))}
    lines = ["# Speed: graft's wall time beside naive's", "",
             "Each ratio is graft's wall time over naive's in the same `cl-graft run` (one process, one after the "
             "other), so both run under the machine's load of that time (other work that starts or stops during a "
             "run moves it: the CPU-time ratio beside it does not move with the load); the configurations are runs "
             "of the same command and seed at other revisions or settings. Each run names the order its strategies "
             "ran in and the conditions its record kept (torch threads, `OMP_NUM_THREADS`, the 1-minute load "
             "average at start and end, whether the CPU multiplies bfloat16 natively: the size search's precision "
             "follows it; runs made before records kept them say \"conditions not recorded\"), and each "
             "strategy's CPU seconds over its wall seconds (below 1 per thread: it waited for a contended CPU). "
             "The size search's "
             f"share is {SEARCH_SHARE_MEANS}; bytes and memory in {BYTE_UNIT}. Made by "
             "`benchmarks/experiments/speed_page.py` from the runs listed below.", "",
             *(_verdict_line("The README's main job", n, v, text[0][0]) for n, v in found["text"].items()),
             *(_verdict_line("The digits stream", n, v, digits[0][0]) for n, v in found["digits"].items()), "",
             *_section("The README's main job: qnli → agnews → sst2, quick preset", text),
             *_section("A digits stream", digits),
             "## Commands for the next runs", "",
             "The commands of the configuration run last (the latest start) with graft and naive taking turns to run "
             "first across seeds (so that what the machine does early or late in a run does not always fall on the "
             "same strategy):", "",
             *(f"- `{c}`" for configs in (text, digits) for c in alternating_commands(latest(configs)))]
    return "\n".join(lines), {"text": dict(text), "digits": dict(digits), "verdicts": found}


def _named(specs: tuple[str, ...], option: str) -> list[tuple[str, list[dict]]]:
    """``NAME=A,B,C`` specs → (name, loaded runs).

    Raises:
        ScriptError: a spec without a name.
    """
    out = []
    for spec in specs:
        name, sep, paths = spec.partition("=")
        if not sep or not name or not paths:
            raise ScriptError(f"{option} takes NAME=RUN,RUN,..., got {spec!r}")
        out.append((name, [load_results(p) for p in paths.split(",")]))
    return out


@click.command()
@click.option("--runs", "runs", multiple=True, required=True,
              help="NAME=RUN,RUN,... (one run per seed) of the main job; repeat per configuration, the first is "
                   "the one the others are compared with.")
@click.option("--digits", "digits", multiple=True, required=True,
              help="NAME=RUN,RUN,... of a digits stream, the same way.")
@out_options(page=True)
def main(runs: tuple[str, ...], digits: tuple[str, ...], out: Path, overwrite: bool, page: Path | None) -> None:
    text = _configs(_named(runs, "--runs"), "the main job")          # bad input is refused before --out is claimed
    digit = _configs(_named(digits, "--digits"), "the digits stream")
    body, data = page_text(text, digit)
    with claimed("speed_page", click.get_current_context().params) as run_dir:
        write_json(run_dir.path / "speed.json", data)
        write_page(body, run_dir, "speed.md", page)
        if page is not None:
            write_json(page.with_suffix(".json"), data)
    click.echo(f"wrote {out / 'speed.md'}" + (f" and {page}" if page else ""))


if __name__ == "__main__":
    main()
