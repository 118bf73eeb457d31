"""Benchmarks through ``cl-graft run`` on several seeds: every (stream, model, scenario) one table, its peers paired
with graft seed by seed. The page scripts are its presets: :mod:`.digits` (the digits streams) and
:mod:`.class_text` (the split text streams, issue 54); each names its default benchmarks and renders its page, and
may set the default ``--tune-budget``, options its peers' invocations get (class_text: ``--replay-per-class``) and
whether its page marks what has not run (:class:`Page`).

This module keeps no strategy, loader or recipe of its own: every number comes from ``cl-graft run`` invocations
(the harness's entries, the stream families, the preset and ``--tune``), started as their own processes through
the CLI's entry point so that each writes its usual folder and run record (command line, revision, device,
versions).

A benchmark is ``STREAM/MODEL/SCENARIO`` (``split-digits/mlp/class``, ``permuted-digits:20/mlp/task``); an empty
MODEL, ``split-clinc150:15//class``, passes no ``--model``: the invocations run on ``cl-graft run``'s default
model (the bundled all-MiniLM-L6-v2 for text streams; a model elsewhere is given with
``--run-option=--model=PATH``). Per benchmark and seed ``s`` the main invocation runs the scenario's peers
into ``<out>/work/<stream>-<model>-<scenario>/seed<s>``: the first seed with ``--tune`` (each strategy's
settings chosen from its grid on dev rows, the same budget for every strategy), the other seeds with
``--settings-from`` the first seed's folder, so no test row takes part in a choice (``--settings-from DIR``:
every seed reuses the choices of another benchmark's tuned folder, e.g. the 50-task stream those of the 20-task
one). The peers are ``--class-peers`` / ``--task-peers`` when given, else the stream family's
(:data:`PEERS`). ``--seeds`` applies to every benchmark but those given their own with ``--seeds-of``.
``--data-dir`` goes to the invocations of every benchmark whose family reads task folders (not the digits,
:data:`OWN_DATA`), rewritten relative to ``<out>``. ``--run-option`` passes an option to every invocation, except
those the driver sets itself (:data:`OWNED`: the seed, the folder, the stream, the strategies, the tuning plan);
a seed or a benchmark listed twice is refused as well. ``--graft-variants auto,0.01,open`` adds, per benchmark and
seed, one invocation of graft alone for each: a ``--region-size`` (``auto`` or a fixed share; untuned: the size
is the setting) or ``open`` (the automatic size planned without the stream length, ``--plan open``: graft told
no more than the baselines), in ``.../graft-<variant>/seed<s>``, labelled ``graft[variant]`` in the tables. An
invocation whose ``results.json`` exists is not run again; an interrupted one continues with ``--resume``.

The page (``<out>/<page>.md``, its numbers in ``<out>/<page>.json``) is the preset's; each invocation's
``results.json`` (matrices, bytes, settings chosen, sanity flags, run record) is copied to
``<out>/runs/<benchmark>/<folder>/results.json``, the artifacts the tables name. The invocations run with
``<out>`` as the working directory, so their records and ``--settings-from`` name folders relative to it
(``work/...``), never this machine's paths. ``--report-from DIR`` runs nothing: the tables of the ``runs/``
folder in ``DIR`` (e.g. ``benchmarks/results/digits``), copied into ``--out`` (a benchmark it holds no run of is
refused before anything is written).
"""
from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import click

from cl_graft.files import write_json, write_text

from .script_out import ScriptError, adopt, claimed, load_results, out_options, work_folder
from .seed_plan import OWNED, Benchmark, check_run_options, parse_benchmarks, parse_seeds, seeds_of

PEERS = {
    "digits": {"class": "graft,naive,replay,replay-matched,gem,agem,er-ace,der,icarl,cumulative",
               "task": "graft,naive,ewc,si,lwf,replay,gem,agem,packnet,replay-matched,cumulative"},
    "split text": {"class": "graft,slda,ranpac,ncm,linear-probe,naive,replay,replay-matched,lwf,der,joint,"
                            "joint-probe",
                   "task": "graft,naive,lwf,packnet,replay-matched,linear-probe"},
}
"""Stream family → scenario → the default peers. Split text, class scenario: issue 54's (item 6): graft, the frozen
encoder's heads (slda, ranpac, ncm, linear-probe), naive, replay, replay-matched, lwf, der and the two ceilings (joint,
joint-probe); EWC, SI, A-GEM, GEM, BiC, iCaRL and PackNet stay on the digits pages (``bic`` refuses text rows,
``icarl`` needs a single-head ``nn.Sequential`` model). Task scenario: issue 43's six beside graft."""
OWN_DATA = ("digits",)
"""Stream families whose rows come with a library: their invocations get no ``--data-dir``."""
RUNS = "runs"


def invocation(bench: Benchmark, seed: int, folder: Path, *, strategies: str, extra: list[str]) -> list[str]:
    """The ``cl-graft run`` arguments of one invocation (``extra``: tuning or fixed-size options and the
    script's pass-through options)."""
    model = ["--model", bench.model] if bench.model else []
    return ["run", "--stream", bench.stream, *model, "--scenario", bench.scenario,
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
                  passed: list[str], tune_budget: int | None = None, settings_from: str | None = None,
                  peer_options: list[str] | None = None) -> dict[str, list[Path]]:
    """Every invocation of one benchmark; returns label → the folders of its seeds (``main`` for the peers'
    invocation, ``graft[variant]`` for each graft variant). With ``settings_from`` (a tuned folder, relative to
    the working directory) every seed reuses its choices and none is tuned. ``peer_options`` go to the peers'
    invocations before ``passed`` (a ``--run-option`` giving the same option wins)."""
    root = work / bench.folder
    folders: dict[str, list[Path]] = {"main": []}
    for i, seed in enumerate(seeds):
        folder = root / f"seed{seed}"
        budget = [] if tune_budget is None else ["--tune-budget", str(tune_budget)]
        if settings_from is not None:
            tuning = ["--settings-from", settings_from]
        else:
            tuning = ["--tune", *budget] if i == 0 else ["--settings-from", str(root / f"seed{seeds[0]}")]
        run_cl_graft(invocation(bench, seed, folder, strategies=peers,
                                extra=[*tuning, *(peer_options or []), *passed]), folder)
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


def check_report_from(report_from: Path, benches: list[Benchmark], *, partial: bool = False) -> None:
    """Refuses a ``--report-from`` folder without a ``runs/`` folder, whose ``runs/`` holds no run of one of
    ``benches`` (with ``partial``: of any of them; a page that marks what has not run shows the others as not run
    yet), or a ``results.json`` there that fails :func:`.script_out.load_results` (before anything is written: a
    page that fails after the copy would leave it in ``--out``).

    Raises:
        ScriptError: one line naming the folder and the missing benchmark, or the file and its field.
    """
    runs = report_from / RUNS
    if not runs.is_dir():
        raise ScriptError(f"--report-from {report_from}: no {RUNS}/ folder (the folder --out of an earlier run "
                          f"of this script)")
    for bench in benches:
        for folder in (f for folders in kept_folders(bench, runs).values() for f in folders):
            load_results(folder)
    without = [b for b in benches if "main" not in kept_folders(b, runs)]
    if without and (not partial or len(without) == len(benches)):
        held = sorted(p.name for p in runs.iterdir() if p.is_dir())
        raise ScriptError(f"--report-from {report_from}: {RUNS}/ holds no run of benchmark {without[0].name} (no "
                          f"{RUNS}/{without[0].folder}/seed*/results.json; it holds {', '.join(held) or 'none'}); "
                          f"name its benchmarks with --benchmarks")


def data_options(data_dir: Path | None, out: Path) -> list[str]:
    """``--data-dir`` as the invocations (working directory ``out``) must read it: a relative folder rewritten
    relative to ``out``, an absolute one as given."""
    if data_dir is None:
        return []
    path = data_dir if data_dir.is_absolute() else Path(os.path.relpath(data_dir.absolute(), out.absolute()))
    return ["--data-dir", path.as_posix()]


@dataclass(frozen=True, kw_only=True)
class Page:
    """A preset of this driver: the page a script makes.

    Attributes:
        name: the script (its run record's command is ``experiments.<name>``) and the page's files
            ``<name>.md`` and ``<name>.json``.
        help: the script's one-line help.
        benchmarks: the default ``--benchmarks``.
        summarize: ``summarize(folders, root=root) -> summary`` of one benchmark (``folders`` as
            :func:`kept_folders` gives them; artifact paths relative to ``root``).
        render: ``render(summaries) -> Markdown`` of the page.
        tune_budget: the default ``--tune-budget`` (None: ``cl-graft run``'s).
        peer_options: strategy → ``cl-graft run`` options the peers' invocations get when it is among the peers
            (each option once), before the ``--run-option`` values.
        planned: ``summarize`` also takes ``plan=`` (:func:`plan_of`: the benchmark, its seeds and peers), so the page
            marks what has not run yet; ``--report-from`` then takes a ``runs/`` folder holding some of the
            benchmarks.
    """

    name: str
    help: str
    benchmarks: str
    summarize: Callable[..., dict]
    render: Callable[[list[dict]], str]
    tune_budget: int | None = None
    peer_options: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    planned: bool = False

    def options_of(self, peers: str) -> list[str]:
        """The :attr:`peer_options` of the strategies in ``peers`` (comma-separated), each option once, in order."""
        return list(dict.fromkeys(o for name in peers.split(",") for o in self.peer_options.get(name, ())))


def plan_of(bench: Benchmark, seeds: list[int], peers: str | None) -> dict:
    """What a planned page (:attr:`Page.planned`) is told of one benchmark: ``{"benchmark", "stream", "model",
    "scenario", "seeds", "strategies"}`` (``strategies``: the peers, None where the driver does not know them)."""
    return {"benchmark": bench.name, "stream": bench.stream, "model": bench.model, "scenario": bench.scenario,
            "seeds": list(seeds), "strategies": peers.split(",") if peers else None}


def _peers(bench: Benchmark, family: str, given: dict[str, str | None]) -> str:
    """The strategies of ``bench``'s main invocations: the scenario's ``--class-peers``/``--task-peers`` when
    given, else its family's (:data:`PEERS`).

    Raises:
        ScriptError: neither (a family without default peers).
    """
    peers = given[bench.scenario] or PEERS.get(family, {}).get(bench.scenario)
    if peers is None:
        raise ScriptError(f"--benchmarks {bench.name}: {family} streams have no default peers; give "
                          f"--{bench.scenario}-peers")
    return peers


def command(page: Page) -> click.Command:
    """The click command of the preset ``page``."""
    @click.command(name=page.name, help=page.help)
    @click.option("--benchmarks", default=page.benchmarks, show_default=True,
                  help="Comma-separated STREAM/MODEL/SCENARIO, e.g. permuted-digits:20/mlp/task or "
                       "split-clinc150:15//class (empty MODEL: cl-graft run's default model).")
    @click.option("--seeds", default="0,1,2", show_default=True,
                  help="The first is tuned; the rest reuse its choices.")
    @click.option("--seeds-of", "seeds_given", multiple=True,
                  help="BENCHMARK=SEEDS: one benchmark's own seeds, e.g. split-banking77:7//class=0,1,2.")
    @click.option("--class-peers", default=None, help="Strategies of a class scenario (default: the stream "
                  "family's: " + "; ".join(f"{f}: {p['class']}" for f, p in PEERS.items()) + ").")
    @click.option("--task-peers", default=None, help="Strategies of a task scenario (default: the stream "
                  "family's: " + "; ".join(f"{f}: {p['task']}" for f, p in PEERS.items()) + ").")
    @click.option("--graft-variants", default="", help="Comma-separated graft variants run alone, untuned, per "
                  "benchmark and seed: --region-size values (auto, 0.01, ...) or open (auto without the stream "
                  "length).")
    @click.option("--tune-budget", type=int, default=page.tune_budget,
                  help="Grid points each strategy with a grid tries on the tuned seed (default: "
                       + ("cl-graft run's" if page.tune_budget is None else str(page.tune_budget)) + ").")
    @click.option("--settings-from", default=None, help="Tune nothing: every seed reuses the choices of this "
                  "tuned invocation folder of an earlier benchmark (relative to --out, e.g. "
                  "../digits20/work/permuted-digits-20-mlp-task/seed0).")
    @click.option("--data-dir", type=click.Path(file_okay=False, exists=True, path_type=Path), default=None,
                  help="Folder of the text streams' tasks, passed to their invocations (not to the digits').")
    @click.option("--run-option", "run_options", multiple=True,
                  help="Passed to every invocation, e.g. --run-option=--steps=50 or --run-option=--preset=smoke "
                       "(not an option the driver sets: " + ", ".join(OWNED) + ").")
    @click.option("--report-from", type=click.Path(file_okay=False, exists=True, path_type=Path), default=None,
                  help="Run nothing: the tables of the runs/ folder in this folder (copied into --out).")
    @out_options(resume=True)
    def main(benchmarks, seeds, seeds_given, class_peers, task_peers, graft_variants, tune_budget, settings_from,
             data_dir, run_options, report_from, out, overwrite, resume) -> None:
        benches = parse_benchmarks(benchmarks)
        plan = seeds_of(benches, parse_seeds(seeds, "--seeds"), seeds_given)
        check_run_options(run_options, benches)
        families = {bench: bench.family() for bench in benches}
        given = {"class": class_peers, "task": task_peers}
        peers = {bench: _peers(bench, families[bench], given) if report_from is None else
                 given[bench.scenario] or PEERS.get(families[bench], {}).get(bench.scenario) for bench in benches}
        if report_from is not None:
            check_report_from(report_from, benches, partial=page.planned)
        variants = [v for v in graft_variants.split(",") if v]
        with claimed(page.name, click.get_current_context().params) as run_dir:
            runs = run_dir.path / RUNS
            summaries = []
            if report_from is not None:
                shutil.copytree(report_from / RUNS, runs)
                adopt(run_dir, runs)
            for bench in benches:
                if report_from is None:
                    work_folder(run_dir)
                    data = [] if families[bench] in OWN_DATA else data_options(data_dir, run_dir.path)
                    with _inside(run_dir.path):
                        folders = run_benchmark(bench, plan[bench], Path("work"), peers=peers[bench],
                                                variants=variants, passed=[*data, *run_options],
                                                tune_budget=tune_budget, settings_from=settings_from,
                                                peer_options=page.options_of(peers[bench]))
                    adopt(run_dir, run_dir.path / "work")
                    keep_results(folders, run_dir.path, runs)
                    adopt(run_dir, runs)
                planned = {"plan": plan_of(bench, plan[bench], peers[bench])} if page.planned else {}
                summaries.append(page.summarize(kept_folders(bench, runs), root=run_dir.path, **planned))
            write_json(run_dir.path / f"{page.name}.json", {"benchmarks": summaries})
            write_text(run_dir.path / f"{page.name}.md", page.render(summaries))

    return main


if __name__ == "__main__":          # the driver has no page of its own: say which scripts are its presets
    ScriptError("seeds is the driver of the multi-seed pages, not a page: run one of its presets, python -m "
                "cl_graft.benchmarks.experiments.class_text or .digits (--help for their options)").show()
    sys.exit(ScriptError.exit_code)
