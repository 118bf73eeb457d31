"""Data-parallel runs under torchrun (2 gloo processes on the CPU, a tiny dropout-free BERT): the same region bits
and metrics as one process, rank 0 alone writes, bad input stops every rank with one line."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from click.testing import CliRunner
from safetensors.torch import load_file

from cl_graft import distributed
from cl_graft.cli import main
from cl_graft.errors import UserError

from helpers import save_tiny_model, sentiment_rows, write_task

FAST = ["--preset", "smoke", "--device", "cpu"]
LOCALIZE = ["localize", "--task", "alpha", "--steps", "3", "--n-batches", "2", "--select-rows", "16",
            "--region-size", "0.01", "--methods", "graft", *FAST]
STREAM = ["run", "--stream", "alpha,beta", "--strategies", "graft,naive", "--steps", "6", "--quiet", *FAST]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """A saved tiny BERT without dropout (so 1 and 2 processes compute the same steps) and two toy tasks."""
    root = tmp_path_factory.mktemp("distributed")
    save_tiny_model(root / "model")
    config = json.loads((root / "model" / "config.json").read_text())
    config.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    (root / "model" / "config.json").write_text(json.dumps(config))
    for name, flip in (("alpha", False), ("beta", True)):
        write_task(root / "data" / name, ["negative", "positive"],
                   {"train": sentiment_rows(64, 1 + flip, flip), "test": sentiment_rows(32, 3 + flip, flip)})
    (root / "scratch").mkdir()
    return root


def _args(env, args, out):
    return [*args, "--model", str(env / "model"), "--data-dir", str(env / "data"), "--out", str(out)]


def torchrun(env, nproc: int, args: list[str], out) -> subprocess.CompletedProcess:
    """``torchrun --standalone --nproc_per_node nproc -m cl_graft.cli args`` (scratch copies under env/scratch)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
           "-m", "cl_graft.cli", *_args(env, args, out)]
    run_env = {**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(env / "scratch"), "PYTHONWARNINGS": "ignore"}
    return subprocess.run(cmd, capture_output=True, text=True, env=run_env, timeout=300, check=False)


def _masks(folder) -> dict:
    return load_file(str(next(folder.glob("regions/*/region.safetensors"))))


def test_finetune_and_localize_on_2_processes_match_one_process(env):
    single = CliRunner().invoke(main, _args(env, LOCALIZE, env / "loc1"))
    assert single.exit_code == 0, single.output
    done = torchrun(env, 2, LOCALIZE, env / "loc2")
    assert done.returncode == 0, done.stderr[-3000:]
    one, two = _masks(env / "loc1"), _masks(env / "loc2")
    assert one.keys() == two.keys() and all(torch.equal(one[k], two[k]) for k in one)     # same region bits
    assert sum(int(m.sum()) for m in one.values()) > 0
    rows1 = json.loads((env / "loc1" / "results.json").read_text())["rows"]
    rows2 = json.loads((env / "loc2" / "results.json").read_text())["rows"]
    for a, b in zip(rows1, rows2, strict=True):
        assert a["accuracy"] == pytest.approx(b["accuracy"], abs=1e-6) and a["ece"] == pytest.approx(b["ece"], abs=1e-5)
    record = json.loads((env / "loc2" / "config.json").read_text())
    assert record["processes"] == {"world_size": 2, "backend": "gloo"}
    assert "torch.distributed.run" not in record["command_line"] and "localize" in record["command_line"]
    assert done.stdout.count("-> ") == 1                                   # rank 1 prints nothing
    assert not list((env / "scratch").glob("cl-graft-rank*"))              # rank 1's scratch copy is gone


def torchrun_of_one(env, args: list[str], out) -> None:
    """``torchrun --nproc_per_node 1 -m cl_graft.cli args`` run in this process: torchrun's environment for one
    rank (a free local port), so the command joins a one-process gloo group as it would under torchrun and leaves
    it when done; no new interpreter."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    torchrun_env = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
                    "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "TMPDIR": str(env / "scratch")}
    with pytest.MonkeyPatch.context() as mp_env:
        for name, value in torchrun_env.items():
            mp_env.setenv(name, value)
        done = CliRunner().invoke(main, _args(env, args, out))
    assert done.exit_code == 0, done.output
    assert not dist.is_initialized()                                       # the command left the group


@pytest.fixture(scope="module")
def streams(env) -> dict:
    """The same 2-task stream (graft, naive) on 1 and on 2 torchrun processes: {n: {strategy: result}}."""
    torchrun_of_one(env, STREAM, env / "stream1")
    done = torchrun(env, 2, STREAM, env / "stream2")
    assert done.returncode == 0, done.stderr[-3000:]
    return {n: {s: json.loads((env / f"stream{n}" / s / "result.json").read_text()) for s in ("graft", "naive")}
            for n in (1, 2)}


def _flat(result: dict) -> list[float]:
    return [v for row in result["matrix"] for v in row]


def test_a_grafting_stream_on_2_processes_matches_one_process(env, streams):
    """Avalanche's distributed mode shards each experience with a DistributedSampler, so the reference is the
    same stream in one torchrun process (same global batches); regions equal, forgetting exactly 0. (Every rank
    held the same owner map: the run checks it after each experience.)"""
    for s in ("graft", "naive"):
        assert _flat(streams[1][s]) == pytest.approx(_flat(streams[2][s]), abs=1e-6)
    assert streams[2]["graft"]["summary"]["forgetting"] == 0.0
    assert streams[1]["graft"]["info"]["region_elements"] == streams[2]["graft"]["info"]["region_elements"]
    skills = [env / f"stream{n}" / "graft" / "state" / "skills" / "skills.json" for n in (1, 2)]
    assert skills[0].read_text() == skills[1].read_text()


def test_an_interrupted_distributed_stream_resumes_to_the_same_results(env, streams):
    """Stopped (SIGTERM to torchrun) once the first experience is saved, then ``--resume`` on 2 processes: the
    same accuracy matrix and regions as the uninterrupted 2-process run."""
    out, args = env / "stopped", ["run", "--stream", "alpha,beta", "--strategies", "graft", "--steps", "6",
                                  "--quiet", *FAST]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "cl_graft.cli",
           *_args(env, args, out)]
    run_env = {**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(env / "scratch"), "PYTHONWARNINGS": "ignore"}
    proc = subprocess.Popen(cmd, env=run_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    progress = out / "graft" / "state" / "progress.json"
    deadline = time.monotonic() + 240
    while not progress.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=120)
    assert not (out / "results.json").exists() and len(json.loads(progress.read_text())["rows"]) == 1
    done = torchrun(env, 2, [*args, "--resume"], out)
    assert done.returncode == 0, done.stderr[-3000:]
    full, resumed = streams[2]["graft"], json.loads((out / "graft" / "result.json").read_text())
    assert _flat(resumed) == pytest.approx(_flat(full), abs=1e-6)
    assert resumed["info"]["region_elements"] == full["info"]["region_elements"]


def test_bad_input_under_torchrun_stops_every_rank_with_one_line(env):
    done = torchrun(env, 2, [*LOCALIZE, "--batch-size", "15"], env / "bad")
    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert errors == ["error: the global localization batch size 15 does not divide by the 2 processes; choose a multiple of 2"]
    assert not (env / "bad").exists()


def test_strategies_whose_plugins_are_not_distributed_are_refused(env, monkeypatch):
    """The run as rank 0 of 2 sees it (world size 2; how an error under torchrun stops every rank with one line
    is the test above's): EWC's plugin does not declare ``supports_distributed``, so the run refuses it before
    training and writes nothing."""
    monkeypatch.setattr(distributed, "world_size", lambda: 2)
    done = CliRunner().invoke(main, _args(env, [*STREAM[:4], "ewc", *STREAM[5:]], env / "ewc"))
    assert done.exit_code == 2, done.output
    assert "error: strategy 'ewc' cannot run under torchrun: Avalanche's EWCPlugin" in done.output
    assert not (env / "ewc" / "results.json").exists()


def test_distributed_flag_without_torchrun_is_one_line_exit_2(tmp_path):
    res = CliRunner().invoke(main, ["--distributed", "localize", "--task", "alpha", "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and res.output.startswith("error: --distributed needs torchrun's environment")
    assert len(res.output.strip().splitlines()) == 1 and not (tmp_path / "o").exists()


def test_shard_takes_this_ranks_contiguous_slice_and_is_identity_alone():
    assert distributed.shard([1, 2, 3]) == [1, 2, 3] and distributed.world_size() == 1
    assert distributed.check_batch(7) == 7


def test_fingerprint_tells_tensor_maps_and_settings_apart():
    owners = {"a": torch.zeros(3, dtype=torch.uint8), "b": torch.ones(2)}
    same = {"b": torch.ones(2), "a": torch.zeros(3, dtype=torch.uint8)}
    assert distributed.fingerprint(owners) == distributed.fingerprint(same)
    assert distributed.fingerprint(owners) != distributed.fingerprint({**owners, "a": torch.tensor([0, 1, 0])})
    assert distributed.fingerprint({"lr": 0.1}) != distributed.fingerprint({"lr": 0.2})


def _worker(rank: int, init: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    try:
        found = {"shard": distributed.shard(list(range(6))),
                 "tensors": [t.tolist() for t in distributed.shard([torch.arange(4), torch.arange(4) * 10])],
                 "mean": distributed.all_mean_(torch.tensor([float(rank), 2.0 * rank])).tolist()}
        distributed.check_same({"a": 1}, "settings")
        try:
            distributed.check_same({"a": rank}, "settings")
            found["mismatch"] = None
        except UserError as e:
            found["mismatch"] = str(e)
        try:
            distributed.shard([1, 2, 3])
        except UserError as e:
            found["odd"] = str(e)
    finally:
        dist.destroy_process_group()
    with open(f"{out}.{rank}", "w") as f:
        json.dump(found, f)


def test_shard_mean_and_agreement_check_on_two_processes(tmp_path):
    mp.spawn(_worker, args=(f"file://{tmp_path / 'store'}", str(tmp_path / "found")), nprocs=2)
    found = [json.loads((tmp_path / f"found.{r}").read_text()) for r in (0, 1)]
    assert [f["shard"] for f in found] == [[0, 1, 2], [3, 4, 5]]
    assert [f["tensors"] for f in found] == [[[0, 1], [0, 10]], [[2, 3], [20, 30]]]
    assert found[0]["mean"] == found[1]["mean"] == [0.5, 1.0]
    assert found[0]["mismatch"] == found[1]["mismatch"] == (
        "the processes disagree on settings (rank 1 differs from rank 0); give every rank the same data, settings "
        "and files")
    assert "does not divide by the 2 processes" in found[0]["odd"]
