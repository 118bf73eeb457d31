"""The continual table on several seeds with dev-tuned settings (Panigrahi et al. 2023, Table 4 analogue).

Run: ``python -m cl_graft.benchmarks.experiments.continual_seeds --data-dir ../shared/data --seeds 0,1,2,3,4
--out DIR`` (add ``--k 128 --steps 40`` to size it for 2 CPU cores; the defaults are the quick preset's, a GPU run).

The first seed runs ``cl-graft run --tune``: every strategy with settings of its own tries its grid (the same
budget for each) on dev rows and runs on test rows with the best point. The other seeds run with those choices
(``--settings-from``), so test rows never take part in a choice. ``--out DIR`` is claimed as a command's folder
(:mod:`.script_out`): each seed's run goes to ``DIR/work/seed<s>`` (its log beside it); its light files (results,
matrices, figures, run record) are copied to ``DIR/seed<s>``, and ``DIR/summary.json`` / ``summary.md`` get the
mean ± std of every strategy's final average accuracy and graft minus each strategy, paired by seed, with a 95%
t-interval (:func:`cl_graft.strategies.comparison.metrics.paired_interval`); ``DIR/config.json`` is the run
record. With ``--resume`` a seed whose ``results.json`` is already in ``DIR/work`` is not run again. Paths in the
summary are relative to the current directory. The repository keeps ``DIR`` less ``work/`` as
``benchmarks/results/continual_tuned``.
"""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import click

from cl_graft.files import write_json, write_text
from cl_graft.provenance import run_record

from .report_tables import continual_lines, continual_summary
from .script_out import adopt, claimed, out_options, settings_of, work_folder
from .seed_plan import parse_seeds

LIGHT_FILES = ("results.json", "results.csv", "matrices.csv", "config.json", "figures")
STRATEGIES = "graft,packnet,naive,ewc,lwf,replay,replay-matched"


def run_seed(seed: int, work: Path, options: dict, extra: list[str], threads: int) -> Path:
    """``cl-graft run`` for one seed into ``<work>/seed<seed>`` (skipped when its results exist); ``options``
    are the script's."""
    stream, strategies, model, preset, device, k, steps, data_dir = (options[name] for name in (
        "stream", "strategies", "model", "preset", "device", "k", "steps", "data_dir"))
    out = work / f"seed{seed}"
    if (out / "results.json").exists():
        return out
    cmd = [sys.executable, "-m", "cl_graft.cli", "run", "--stream", stream, "--strategies", strategies,
           "--model", model, "--preset", preset, "--seed", str(seed), "--device", device, "--quiet", "--out", str(out),
           *(["--k", str(k)] if k else []), *(["--steps", str(steps)] if steps else []),
           *(["--data-dir", data_dir] if data_dir else []), *extra]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    print("$ cl-graft", shlex.join(cmd[3:]), flush=True)
    with open(work / f"seed{seed}.log", "w") as log:
        subprocess.run(cmd, check=True, env=env, stdout=log, stderr=subprocess.STDOUT)
    return out


@click.command(help=__doc__.splitlines()[0])
@click.option("--data-dir", default=None)
@click.option("--stream", default="qnli,agnews,sst2", show_default=True)
@click.option("--strategies", default=STRATEGIES, show_default=True)
@click.option("--seeds", default="0,1,2,3,4", show_default=True,
              help="the first is tuned on dev; the rest reuse its choices")
@click.option("--model", default="minilm", show_default=True)
@click.option("--preset", default="quick", show_default=True)
@click.option("--k", type=int, default=None)
@click.option("--steps", type=int, default=None)
@click.option("--device", default="auto", show_default=True)
@click.option("--jobs", type=int, default=1, show_default=True,
              help="seeds run at once after the tuned one (threads split)")
@out_options(resume=True)
def main(data_dir, stream, strategies, seeds, model, preset, k, steps, device, jobs, out, overwrite, resume) -> dict:
    seeds = parse_seeds(seeds, "--seeds")
    options = click.get_current_context().params
    settings = {name: v for name, v in settings_of(options).items() if name != "jobs"}   # jobs change no number
    with claimed("continual_seeds", options, settings=settings) as run_dir:
        work = work_folder(run_dir)
        threads = max(1, (os.cpu_count() or 1) // jobs)
        tuned = run_seed(seeds[0], work, options, ["--tune"], threads)
        with ThreadPoolExecutor(jobs) as pool:
            folders = [tuned, *pool.map(lambda s: run_seed(s, work, options, ["--settings-from", str(tuned)],
                                                           threads), seeds[1:])]
        adopt(run_dir, work)
        for folder in folders:
            dest = run_dir.path / folder.name
            dest.mkdir(parents=True, exist_ok=True)
            for name in LIGHT_FILES:
                if (folder / name).is_dir():
                    shutil.copytree(folder / name, dest / name, dirs_exist_ok=True)
                elif (folder / name).exists():
                    shutil.copy2(folder / name, dest / name)
            adopt(run_dir, dest)
        summary = continual_summary([run_dir.path / f.name for f in folders], root=Path.cwd())
        summary["record"] = run_record(command="benchmarks.continual_seeds", **settings)
        write_json(run_dir.path / "summary.json", summary)
        text = "\n".join(continual_lines(summary)) + "\n"
        write_text(run_dir.path / "summary.md", text)
    print(text)
    return summary


if __name__ == "__main__":
    main()
