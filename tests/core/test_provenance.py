"""Run records: what made a result (command line, device, versions, revision) and what it cost."""
from __future__ import annotations

import json
import subprocess
import sys
import types
from importlib import metadata

import torch
from click.testing import CliRunner

from cl_graft.cli import main
from cl_graft.provenance import (
    COMMAND_LINE,
    finish_record,
    git_revision,
    portable_command,
    portable_path,
    run_record,
)

from helpers import REPO_ROOT

ROOT = REPO_ROOT


def test_run_record_fields_are_correct(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["/somewhere/script.py", "--out", "a b"])
    monkeypatch.setitem(sys.modules, "__main__", types.SimpleNamespace(__spec__=None))
    record = run_record(command="x", device="cpu", seed=3)
    assert record["command_line"] == "/somewhere/script.py --out 'a b'" and record["seed"] == 3
    spec = types.SimpleNamespace(name="cl_graft.benchmarks.experiments.benchmarks_page")       # run with python -m
    monkeypatch.setitem(sys.modules, "__main__", types.SimpleNamespace(__spec__=spec))
    assert run_record()["command_line"] == "python -m cl_graft.benchmarks.experiments.benchmarks_page --out 'a b'"
    assert record["torch"] == torch.__version__
    assert record["transformers"] == metadata.version("transformers")
    assert record["avalanche"] == metadata.version("avalanche-lib")
    assert "cores)" in record["device_name"] and record["started"].endswith("+00:00")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False)
    if head.returncode == 0:                                          # a clone or an editable install
        assert record["git_revision"].split("+")[0] == head.stdout.strip() == git_revision().split("+")[0]
    done = finish_record(record)
    assert done["wall_seconds"] >= 0 and done["cpu_seconds"] > 0 and done["peak_rss_mb"] > 50
    token = COMMAND_LINE.set("cl-graft run --stream a,b")
    try:
        assert run_record()["command_line"] == "cl-graft run --stream a,b"
    finally:
        COMMAND_LINE.reset(token)


def test_cli_sets_the_full_command_line(monkeypatch):
    seen = []
    monkeypatch.setattr("cl_graft.cli.plot.plot.callback", lambda **kw: seen.append(run_record()["command_line"]))
    result = CliRunner().invoke(main, ["plot", "somewhere", "--out", "x y"])
    assert result.exit_code == 0, result.output
    assert seen == ["cl-graft plot somewhere --out 'x y'"] and COMMAND_LINE.get() is None


def test_records_name_paths_relative_to_the_working_directory(tmp_path, monkeypatch):
    work = tmp_path / "clone"
    work.mkdir()
    monkeypatch.chdir(work)
    data, out = tmp_path / "shared" / "data", work / "runs" / "x"
    assert portable_path(data) == "../shared/data" and portable_path(str(out)) == "runs/x"
    assert portable_path(f"qnli={out},sst2={data}") == "qnli=runs/x,sst2=../shared/data"
    assert portable_path("runs/x") == "runs/x" and portable_path("sst2,cr") == "sst2,cr"
    assert portable_path("/nonexistent-top/x") == "/nonexistent-top/x"           # not a folder of this machine
    assert portable_command(f"cl-graft run --data-dir {data} --out={out} --note 'a b'") == \
        "cl-graft run --data-dir ../shared/data --out=runs/x --note 'a b'"
    assert portable_command("cl-graft run --out 'unclosed") == "cl-graft run --out 'unclosed"
    token = COMMAND_LINE.set(f"cl-graft run --out {out}")
    try:
        record = run_record(data=str(data), settings={"folders": [str(out), "sst2"]}, load=(1.0, 2.0))
    finally:
        COMMAND_LINE.reset(token)
    assert record["command_line"] == "cl-graft run --out runs/x" and record["data"] == "../shared/data"
    assert record["settings"] == {"folders": ["runs/x", "sst2"]} and record["load"] == [1.0, 2.0]
    assert str(tmp_path) not in json.dumps(record)


def test_memory_peak_starts_afresh_for_each_part_of_a_run():
    """One process, two parts: the second part's peak does not include the first's larger one (Linux)."""
    import sys

    from cl_graft.provenance import MemoryPeak

    first = MemoryPeak()
    block = torch.ones(400 * 2 ** 20 // 4)                                      # 400 MB touched
    big = first.mb()
    del block
    second = MemoryPeak()
    if not sys.platform.startswith("linux"):
        assert big is None and second.mb() is None
        return
    assert big >= 400 and second.mb() < big - 300


def test_run_record_keeps_the_conditions_its_times_ran_under(monkeypatch):
    """Threads, OMP_NUM_THREADS, the load at start and end, native bfloat16: beside every time."""
    import os

    from cl_graft import machine

    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    loads = iter([(0.5, 0.25, 0.125), (2.0, 1.0, 0.5)])
    monkeypatch.setattr(os, "getloadavg", lambda: next(loads))
    monkeypatch.setattr(machine, "native_bfloat16", lambda device: device.type == "cpu")
    record = run_record(device="cpu")
    assert record["conditions"] == {"torch_threads": torch.get_num_threads(), "omp_num_threads": "3",
                                    "load_average_start": [0.5, 0.25, 0.12], "bfloat16_native": True}
    done = finish_record(record)
    assert done["conditions"]["load_average_end"] == [2.0, 1.0, 0.5]
    assert done["conditions"]["load_average_start"] == [0.5, 0.25, 0.12] and "load_average_end" not in \
        record["conditions"]                                                   # the caller's record is not changed
    assert done["byte_unit"] == "MB = 10^6 bytes"


def test_peak_memory_is_counted_in_mb_of_a_million_bytes(monkeypatch):
    """ru_maxrss counts KiB: 1,000,000 KiB is 1024 MB (10^6 bytes), not 977 (MiB)."""
    import resource

    usage = types.SimpleNamespace(ru_utime=1.0, ru_stime=0.0, ru_maxrss=1_000_000)
    monkeypatch.setattr(resource, "getrusage", lambda who: usage)
    assert finish_record(run_record())["peak_rss_mb"] == 1024
