"""The digits benchmarks through ``cl-graft run``: every (stream, model, scenario) on several seeds, one table each.

This script keeps no strategy, loader or recipe of its own: every number comes from ``cl-graft run`` invocations
(the harness's entries, digits streams, preset and ``--tune``), started in this process through the CLI's own
entry point so that each writes its usual folder and run record (command line, revision, device, versions).

Per benchmark ``STREAM/MODEL/SCENARIO`` (e.g. ``split-digits/mlp/class``, ``permuted-digits:20/mlp/task``) and seed
``s`` the main invocation runs the scenario's peers (``--class-peers`` / ``--task-peers``) into
``<out>/work/<stream>-<model>-<scenario>/seed<s>``: the first seed with ``--tune`` (each strategy's settings chosen
from its grid on dev rows, the same budget for every strategy), the other seeds with ``--settings-from`` the first
seed's folder, so no test row takes part in a choice (``--settings-from DIR``: every seed reuses the choices of
another benchmark's tuned folder, e.g. the 50-task stream those of the 20-task one). ``--graft-variants
auto,0.01,open`` adds, per benchmark and seed, one invocation of graft alone for each: a ``--region-size``
(``auto`` or a fixed share; untuned: the size is the setting; the region-size experiment) or ``open`` (the
automatic size planned without the stream length, ``--plan open``: graft told no more than the baselines), in
``.../graft-<variant>/seed<s>``, labelled ``graft[variant]`` in the tables. An invocation whose ``results.json``
exists is not run again; an interrupted one continues with ``--resume``.

The tables (:mod:`.digits_report`) are written to ``<out>/digits.md`` and ``<out>/digits.json``; each
invocation's ``results.json`` (matrices, bytes, settings chosen, sanity flags, run record) is copied to
``<out>/runs/<benchmark>/<folder>/results.json``, the artifacts the tables name. Run::

    nice -n 10 python -m cl_graft.benchmarks.experiments.digits --out runs/digits \\
        --benchmarks split-digits/mlp/class,split-digits/mtmlp/task --seeds 0,1,2
    cp -r runs/digits/{digits.md,digits.json,runs} benchmarks/results/digits/

The invocations run with ``<out>`` as the working directory, so their records and ``--settings-from`` name
folders relative to it (``work/...``), never this machine's paths. ``--report-from DIR`` runs nothing: the tables
of the ``runs/`` folder in ``DIR`` (e.g. ``benchmarks/results/digits``), copied into ``--out``.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import click

from cl_graft.files import write_json, write_text

from .digits_report import benchmark_summary, render
from .script_out import ScriptError, adopt, claimed, out_options, work_folder

CLASS_PEERS = "graft,naive,replay,replay-matched,gem,agem,er-ace,der,icarl,cumulative"
TASK_PEERS = "graft,naive,ewc,si,lwf,replay,gem,agem,packnet,replay-matched,cumulative"
BENCHMARKS = "split-digits/mlp/class,split-digits/mtmlp/task"
RUNS = "runs"


@dataclass(frozen=True)
class Benchmark:
    """One table: a digits stream, the model every strategy starts from and the scenario."""

    stream: str
    model: str
    scenario: str

    @classmethod
    def parse(cls, text: str) -> Benchmark:
        parts = text.split("/")
        if len(parts) != 3 or parts[2] not in ("task", "class"):
            raise ScriptError(f"a benchmark is STREAM/MODEL/SCENARIO (e.g. split-digits/mlp/class), got {text!r}")
        return cls(*parts)

    @property
    def folder(self) -> str:
        return f"{self.stream.replace(':', '-')}-{self.model}-{self.scenario}"


def invocation(bench: Benchmark, seed: int, folder: Path, *, strategies: str, extra: list[str]) -> list[str]:
    """The ``cl-graft run`` arguments of one invocation (``extra``: tuning or fixed-size options and the
    script's pass-through options)."""
    return ["run", "--stream", bench.stream, "--model", bench.model, "--scenario", bench.scenario,
            "--strategies", strategies, "--seed", str(seed), "--quiet", "--out", str(folder), *extra]


def run_cl_graft(args: list[str], folder: Path) -> None:
    """``cl-graft <args>`` as its own process (``python -m cl_graft.cli``: the experiments sit below the CLI and
    start it as a user would), skipped when ``folder`` holds a ``results.json``, resumed when it holds an
    unfinished run.

    Raises:
        ScriptError: the command failed (its one-line error went to stderr).
    """
    if (folder / "results.json").exists():
        return
    args = [*args, "--resume"] if folder.exists() else args
    click.echo("$ cl-graft " + " ".join(args), err=True)
    code = subprocess.run([sys.executable, "-m", "cl_graft.cli", *args], check=False).returncode
    if code:
        raise ScriptError(f"cl-graft {' '.join(args[:9])} ... exited with {code}")


def variant_options(variant: str) -> list[str]:
    """The ``cl-graft run`` options of a graft variant: ``open`` (automatic size, no stream length) or a
    ``--region-size`` value."""
    return ["--plan", "open"] if variant == "open" else ["--region-size", variant]


def run_benchmark(bench: Benchmark, seeds: list[int], work: Path, *, peers: str, variants: list[str],
                  passed: list[str], tune_budget: int | None = None, settings_from: str | None = None
                  ) -> dict[str, list[Path]]:
    """Every invocation of one benchmark; returns label → the folders of its seeds (``main`` for the peers'
    invocation, ``graft[variant]`` for each graft variant). With ``settings_from`` (a tuned folder, relative to
    the working directory) every seed reuses its choices and none is tuned."""
    root = work / bench.folder
    folders: dict[str, list[Path]] = {"main": []}
    for i, seed in enumerate(seeds):
        folder = root / f"seed{seed}"
        budget = [] if tune_budget is None else ["--tune-budget", str(tune_budget)]
        if settings_from is not None:
            tuning = ["--settings-from", settings_from]
        else:
            tuning = ["--tune", *budget] if i == 0 else ["--settings-from", str(root / f"seed{seeds[0]}")]
        run_cl_graft(invocation(bench, seed, folder, strategies=peers, extra=[*tuning, *passed]), folder)
        folders["main"].append(folder)
        for variant in variants:
            folder = root / f"graft-{variant}" / f"seed{seed}"
            run_cl_graft(invocation(bench, seed, folder, strategies="graft",
                                    extra=[*variant_options(variant), *passed]), folder)
            folders.setdefault(f"graft[{variant}]", []).append(folder)
    return folders


@contextlib.contextmanager
def _inside(folder: Path):
    """The working directory is ``folder`` while the block runs."""
    before = Path.cwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


def keep_results(folders: dict[str, list[Path]], out: Path, runs: Path) -> None:
    """Copies each invocation's ``results.json`` (``folders``: relative to ``out``, under ``work/``) to the same
    place under ``runs`` (the committed artifacts)."""
    for paths in folders.values():
        for folder in paths:
            target = runs / folder.relative_to("work") / "results.json"
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(out / folder / "results.json", target)


def kept_folders(bench: Benchmark, runs: Path) -> dict[str, list[Path]]:
    """The folders of ``runs/<benchmark>`` holding a ``results.json``, labelled as :func:`run_benchmark` does."""
    root = runs / bench.folder
    folders: dict[str, list[Path]] = {}
    for path in sorted(root.glob("**/results.json")):
        rel = path.parent.relative_to(root)
        label = "main" if len(rel.parts) == 1 else f"graft[{rel.parts[0].removeprefix('graft-')}]"
        folders.setdefault(label, []).append(path.parent)
    return folders


@click.command(help=__doc__.splitlines()[0])
@click.option("--benchmarks", default=BENCHMARKS, show_default=True,
              help="Comma-separated STREAM/MODEL/SCENARIO, e.g. permuted-digits:20/mlp/task.")
@click.option("--seeds", default="0,1,2", show_default=True, help="The first is tuned; the rest reuse its choices.")
@click.option("--class-peers", default=CLASS_PEERS, show_default=True, help="Strategies of a class scenario.")
@click.option("--task-peers", default=TASK_PEERS, show_default=True, help="Strategies of a task scenario.")
@click.option("--graft-variants", default="", help="Comma-separated graft variants run alone, untuned, per benchmark "
              "and seed: --region-size values (auto, 0.01, ...) or open (auto without the stream length).")
@click.option("--tune-budget", type=int, default=None, help="Grid points each strategy tries on the tuned seed "
                                                                "(default: cl-graft run's).")
@click.option("--settings-from", default=None, help="Tune nothing: every seed reuses the choices of this tuned "
              "invocation folder of an earlier benchmark (relative to --out, e.g. "
              "../digits20/work/permuted-digits-20-mlp-task/seed0).")
@click.option("--run-option", "run_options", multiple=True,
              help="Passed to every invocation, e.g. --run-option=--steps=50 or --run-option=--preset=smoke.")
@click.option("--report-from", type=click.Path(file_okay=False, exists=True, path_type=Path), default=None,
              help="Run nothing: the tables of the runs/ folder in this folder (copied into --out).")
@out_options(resume=True)
def main(benchmarks, seeds, class_peers, task_peers, graft_variants, tune_budget, settings_from, run_options,
         report_from, out, overwrite, resume) -> None:
    benches = [Benchmark.parse(b) for b in benchmarks.split(",")]
    if not all(s.strip().isdigit() for s in seeds.split(",")):
        raise ScriptError(f"--seeds is comma-separated whole numbers >= 0, e.g. 0,1,2; got {seeds!r}")
    seeds = [int(s) for s in seeds.split(",")]
    if len(seeds) < 2:
        raise ScriptError("--seeds needs at least two seeds (the intervals are over seeds)")
    if report_from is not None and not (report_from / RUNS).is_dir():
        raise ScriptError(f"--report-from {report_from}: no {RUNS}/ folder (the folder --out of an earlier run of "
                          f"this script)")
    variants = [v for v in graft_variants.split(",") if v]
    params = click.get_current_context().params
    with claimed("digits", params) as run_dir:
        runs = run_dir.path / RUNS
        summaries = []
        if report_from is not None:
            shutil.copytree(report_from / RUNS, runs)
            adopt(run_dir, runs)
        for bench in benches:
            if report_from is None:
                work_folder(run_dir)
                peers = class_peers if bench.scenario == "class" else task_peers
                with _inside(run_dir.path):
                    folders = run_benchmark(bench, seeds, Path("work"), peers=peers, variants=variants,
                                            passed=list(run_options), tune_budget=tune_budget,
                                            settings_from=settings_from)
                adopt(run_dir, run_dir.path / "work")
                keep_results(folders, run_dir.path, runs)
                adopt(run_dir, runs)
            summaries.append(benchmark_summary(kept_folders(bench, runs), root=run_dir.path))
        write_json(run_dir.path / "digits.json", {"benchmarks": summaries})
        write_text(run_dir.path / "digits.md", render(summaries))


if __name__ == "__main__":
    main()
