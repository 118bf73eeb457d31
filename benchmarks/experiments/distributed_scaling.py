"""Data-parallel scaling under torchrun: time per step and throughput, 1 vs N processes.

Real MiniLM and real data. Two workloads, each run as ``torchrun --standalone --nproc_per_node n -m cl_graft.cli``
and ``OMP_NUM_THREADS`` torch threads per process (``--configs``, e.g. ``1x1,1x2,2x1``: 1 process of 1 thread,
1 of 2, 2 of 1), the same global batch (16) and the same number of optimizer steps:

- ``finetune``: ``cl-graft finetune --task sst2 --preset quick --k 64 --steps S``; the time is the command's
  ``train_seconds`` (S steps and one dev evaluation of 128 rows, which every rank runs whole);
- ``stream``: ``cl-graft run --stream sst2,cr --strategies graft --preset smoke --steps S``; the time is the graft
  strategy's ``seconds`` (training, localization, and evaluation after each experience, which every rank runs
  whole: only training and the region search are split).

::

    python -m cl_graft.benchmarks.experiments.distributed_scaling --data-dir ../shared/data --out DIR \\
        --page benchmarks/results/distributed.md
        # -> DIR/distributed.{json,md}, the run record DIR/config.json, the timed runs in DIR/work (script_out)

On a CPU machine the processes share the same cores, so this measures overhead and per-process efficiency, not
extra hardware; on a machine with N GPUs each process gets its own (``--device cuda``).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import click

from cl_graft.files import write_json
from cl_graft.machine import load_average
from cl_graft.provenance import run_record

from .script_out import adopt, claimed, out_options, work_folder, write_page

BATCH = 16


def _torchrun(n: int, args: list[str], threads: int) -> None:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={n}",
           "-m", "cl_graft.cli", *args]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{done.stderr[-2000:]}")


def measure(workload: str, n: int, threads: int, steps: int, data_dir: str, device: str, scratch: Path) -> dict:
    """One timed run of ``workload`` on ``n`` processes of ``threads`` torch threads each."""
    out = scratch / f"{workload}-{n}x{threads}"
    common = ["--data-dir", data_dir, "--device", device, "--out", str(out)]
    if workload == "finetune":
        _torchrun(n, ["finetune", "--task", "sst2", "--preset", "quick", "--k", "64", "--steps", str(steps),
                      *common], threads)
        metrics = json.loads((out / "metrics.json").read_text())
        seconds, score = metrics["train_seconds"], metrics["test"]["accuracy"]
    else:
        _torchrun(n, ["run", "--stream", "sst2,cr", "--strategies", "graft", "--preset", "smoke", "--steps",
                      str(steps), "--quiet", *common], threads)
        result = json.loads((out / "graft" / "result.json").read_text())
        seconds, score = result["seconds"], result["summary"]["average"]
    processes = json.loads((out / "config.json").read_text())["processes"]
    return {"workload": workload, "processes": n, "threads_per_process": threads, "steps": steps,
            "seconds": seconds, "seconds_per_step": round(seconds / steps, 3),
            "examples_per_second": round(steps * BATCH * (1 if workload == "finetune" else 2) / seconds, 1),
            "score": score, "record_processes": processes}


@click.command(help=__doc__.splitlines()[0])
@click.option("--data-dir", default=os.environ.get("CL_GRAFT_DATA", "../shared/data"), show_default=True)
@click.option("--device", default="cpu", show_default=True)
@click.option("--configs", default="1x1,1x2,2x1", show_default=True,
              help="comma-separated PROCESSESxTHREADS (torch threads per process)")
@click.option("--steps", type=int, default=30, show_default=True)
@out_options(page=True)
def main(data_dir, device, configs, steps, out, overwrite, page) -> None:
    params = click.get_current_context().params
    configs = [tuple(int(v) for v in c.split("x")) for c in configs.split(",")]
    with claimed("distributed_scaling", params) as run_dir:
        rows = []
        for workload in ("finetune", "stream"):
            for n, threads in configs:
                rows.append(measure(workload, n, threads, steps, data_dir, device, work_folder(run_dir)))
                print(json.dumps(rows[-1]), flush=True)
        adopt(run_dir, work_folder(run_dir))
        for r in rows:
            first = next(x for x in rows if x["workload"] == r["workload"])
            r["speedup_vs_first"] = round(first["seconds"] / r["seconds"], 2)
        record = run_record(device=device, steps=steps, configs=configs, load_average=load_average())
        write_json(run_dir.path / "distributed.json", {"rows": rows, "config": record})
        lines = ["| workload | processes | threads each | s / step | examples / s | speed-up | score |",
                 "|---|---|---|---|---|---|---|"]
        lines += [f"| {r['workload']} | {r['processes']} | {r['threads_per_process']} | {r['seconds_per_step']} | "
                  f"{r['examples_per_second']} | {r['speedup_vs_first']} | {r['score']:.3f} |" for r in rows]
        table = "\n".join(lines)
        write_page(f"# Data-parallel scaling (torchrun, {device})\n\n```bash\n{record['command_line']}\n```\n\n"
                   f"Device: {record['device_name']}; load average at the end {record['load_average']}; git "
                   f"{record['git_revision']}.\n\n{table}\n", run_dir, "distributed.md", page)
    print(table)


if __name__ == "__main__":
    main()
