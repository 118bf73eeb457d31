"""`cl-graft finetune`: bad input gives one line + exit 2 and writes nothing; a real MiniLM run end to end."""
import json
import subprocess
import sys

import pytest
import torch
from click.testing import CliRunner

from cl_graft.cli import main

from helpers import MINILM_FINETUNE


def _run(args, env=None):
    return CliRunner().invoke(main, args, env=env or {})


def _data(tmp_path, lines):
    d = tmp_path / "data" / "toy"
    d.mkdir(parents=True)
    (d / "meta.json").write_text(json.dumps({"task": "toy", "labels": ["neg", "pos"]}))
    (d / "train.jsonl").write_text("\n".join(lines) + "\n")
    (d / "test.jsonl").write_text('{"text": "ok", "label": 1}\n')
    return tmp_path / "data"


@pytest.mark.parametrize("args, message", [
    (["--task", "nosuchtask"], "unknown task 'nosuchtask'"),
    (["--task", "sst2", "--preset", "huge"], "unknown preset 'huge'"),
    (["--task", "sst2", "--k", "0"], "--k must be >= 1"),
    (["--task", "sst2", "--data-dir", "/no/such/folder"], "/no/such/folder"),
])
def test_bad_arguments_exit_2_with_one_line(tmp_path, args, message):
    out = tmp_path / "out"
    res = _run(["finetune", *args, "--out", str(out)])
    assert res.exit_code == 2, res.output
    assert message in res.output and "Traceback" not in res.output
    assert len(res.output.strip().splitlines()) == 1
    assert not out.exists()


def test_malformed_jsonl_names_file_and_line(tmp_path):
    data = _data(tmp_path, ['{"text": "good", "label": 1}', '{"text": "bad", "label": 0', '{"text": "x", "label": 1}'])
    res = _run(["finetune", "--task", "toy", "--data-dir", str(data), "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and "train.jsonl:2" in res.output, res.output


def test_label_outside_task(tmp_path):
    data = _data(tmp_path, ['{"text": "good", "label": 1}', '{"text": "bad", "label": 7}'])
    res = _run(["finetune", "--task", "toy", "--data-dir", str(data), "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and "train.jsonl:2" in res.output and "label 7" in res.output, res.output


def test_unknown_model_exits_2(tmp_path):
    data = _data(tmp_path, ['{"text": "good", "label": 1}', '{"text": "bad", "label": 0}'])
    res = _run(["finetune", "--task", "toy", "--data-dir", str(data), "--model", str(tmp_path / "nomodel"),
                "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and "cannot load model" in res.output, res.output


def test_unknown_device_exits_2_before_writing(tmp_path):
    data = _data(tmp_path, ['{"text": "good", "label": 1}', '{"text": "bad", "label": 0}'])
    res = _run(["finetune", "--task", "toy", "--data-dir", str(data), "--device", "tpu", "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and "unknown device 'tpu'" in res.output, res.output
    assert not (tmp_path / "o").exists()


def test_console_script_exit_code(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "cl_graft.cli", "finetune", "--task", "nope",
                           "--out", str(tmp_path / "x")],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and proc.stderr.strip().startswith("error: unknown task")


@pytest.mark.slow
def test_real_minilm_finetune_on_real_sst2(minilm_sst2):
    out, data, res = minilm_sst2                                 # conftest: `cl-graft finetune`, 6 steps
    assert res.exit_code == 0, res.output
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["test"]["n"] == 200 and 0.0 <= metrics["test"]["ece"] <= 1.0
    assert (out / "model.safetensors").stat().st_size > 50e6
    config = json.loads((out / "config.json").read_text())
    assert config["seed"] == 0 and config["torch"] and config["finetune"]["steps"] == 6
    assert config["device"] == ("cuda" if torch.cuda.is_available() else "cpu")          # --device auto
    before = (out / "metrics.json").read_bytes()
    res = _run([*MINILM_FINETUNE, "--data-dir", str(data), "--out", str(out)])   # a second run must not overwrite
    assert res.exit_code == 2 and "already holds" in res.output
    assert (out / "metrics.json").read_bytes() == before


def test_import_cl_graft_does_not_import_avalanche(fresh_imports):
    assert "avalanche" not in fresh_imports["cl_graft.benchmarks"]   # cl_graft and its benchmarks (conftest)
