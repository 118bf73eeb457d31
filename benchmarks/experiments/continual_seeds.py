"""The continual table on several seeds with dev-tuned settings (Panigrahi et al. 2023, Table 4 analogue).

Run: ``python -m cl_graft.benchmarks.experiments.continual_seeds --data-dir ../shared/data --seeds 0,1,2,3,4``
(add ``--k 128 --steps 40`` to size it for 2 CPU cores; the defaults are the quick preset's, a GPU run).

The first seed runs ``cl-graft run --tune``: every strategy with settings of its own tries its grid (the same
budget for each) on dev rows and runs on test rows with the best point. The other seeds run with those choices
(``--settings-from``), so test rows never take part in a choice. Each seed's run goes to ``--work/seed<s>``; its
light files (results, matrices, figures, run record) are copied to ``--results/seed<s>``, and ``--results/summary.json`` /
``summary.md`` get the mean ± std of every strategy's final average accuracy and graft minus each strategy,
paired by seed, with a 95% t-interval (:func:`cl_graft.continual_metrics.paired_interval`). A seed whose
``results.json`` is already in ``--work`` is not run again.
"""
from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from cl_graft.files import write_json
from cl_graft.provenance import run_record

from .report_tables import continual_lines, continual_summary

ROOT = Path(__file__).resolve().parents[2]
LIGHT_FILES = ("results.json", "results.csv", "matrices.csv", "config.json", "figures")
STRATEGIES = "graft,packnet,naive,ewc,lwf,replay,replay-matched"


def run_seed(seed: int, args, extra: list[str], threads: int) -> Path:
    """``cl-graft run`` for one seed into ``args.work/seed<seed>`` (skipped when its results exist)."""
    out = args.work / f"seed{seed}"
    if (out / "results.json").exists():
        return out
    cmd = [sys.executable, "-m", "cl_graft.cli", "run", "--stream", args.stream, "--strategies", args.strategies,
           "--model", args.model, "--preset", args.preset, "--seed", str(seed), "--device", args.device, "--quiet", "--out", str(out),
           *(["--k", str(args.k)] if args.k else []), *(["--steps", str(args.steps)] if args.steps else []),
           *(["--data-dir", args.data_dir] if args.data_dir else []), *extra]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    print("$ cl-graft", shlex.join(cmd[3:]), flush=True)
    with open(args.work / f"seed{seed}.log", "w") as log:
        subprocess.run(cmd, check=True, env=env, stdout=log, stderr=subprocess.STDOUT)
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--stream", default="qnli,agnews,sst2")
    ap.add_argument("--strategies", default=STRATEGIES)
    ap.add_argument("--seeds", default="0,1,2,3,4", help="the first is tuned on dev; the rest reuse its choices")
    ap.add_argument("--model", default="minilm")
    ap.add_argument("--preset", default="quick")
    ap.add_argument("--k", type=int, default=None)
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--jobs", type=int, default=1, help="seeds run at once after the tuned one (threads split)")
    ap.add_argument("--work", type=Path, default=ROOT / "runs" / "continual_tuned")
    ap.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results" / "continual_tuned")
    args = ap.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    if len(seeds) < 2:
        raise SystemExit("--seeds needs at least two seeds (the interval is over seeds)")
    args.work.mkdir(parents=True, exist_ok=True)
    record = run_record(command="benchmarks.continual_seeds", **{k: str(v) for k, v in vars(args).items()})
    threads = max(1, (os.cpu_count() or 1) // args.jobs)
    tuned = run_seed(seeds[0], args, ["--tune"], threads)
    with ThreadPoolExecutor(args.jobs) as pool:
        folders = [tuned, *pool.map(lambda s: run_seed(s, args, ["--settings-from", str(tuned)], threads),
                                    seeds[1:])]
    for folder in folders:
        dest = args.results / folder.name
        dest.mkdir(parents=True, exist_ok=True)
        for name in LIGHT_FILES:
            if (folder / name).is_dir():
                shutil.copytree(folder / name, dest / name, dirs_exist_ok=True)
            elif (folder / name).exists():
                shutil.copy2(folder / name, dest / name)
    summary = continual_summary([args.results / f.name for f in folders], root=ROOT)
    summary["record"] = record
    write_json(args.results / "summary.json", summary)
    text = "\n".join(continual_lines(summary)) + "\n"
    (args.results / "summary.md").write_text(text, encoding="utf-8")
    print(text)
    return summary


if __name__ == "__main__":
    main()
