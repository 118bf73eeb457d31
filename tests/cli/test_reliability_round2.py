"""Reliability, round 2: one writer per folder, nothing of the user's deleted (on --overwrite, on failure), NaN
outputs never saved, a failed experience undone, a full disk and hand-edited files handled, finetune folders
checked, unsupported devices refused, temporary files cleaned. One test per defect of the round."""
from __future__ import annotations

import copy
import json
import resource
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from cl_graft.artifacts import load_classifier, save_classifier
from cl_graft.cli import main
from cl_graft.errors import UserError
from cl_graft.files import write_json
from cl_graft.outdir import claim_out_dir

FAST = ["--preset", "smoke"]
LOCALIZE_FAST = ["--steps", "2", "--n-batches", "1", "--select-rows", "16", "--methods", "topk",
                 "--region-size", "0.05"]
GRAFT_RUN = ["run", "--stream", "alpha,beta", "--strategies", "graft", "--quiet"]


def cli(root: Path, command: str, *args, data: Path | None = None):
    """``cl-graft command args`` on the tiny model and the root's data, in this process."""
    base = ["--data-dir", data or root / "data"] + (["--model", root / "model", *FAST] if command != "export" else [])
    return CliRunner().invoke(main, [str(a) for a in (command, *args, *base)])


def cli_process(root: Path, command: str, *args, file_size: int | None = None) -> subprocess.CompletedProcess:
    """The same as a separate process; ``file_size``: the largest file it may write, in bytes (``ulimit -f``)."""
    base = ["--data-dir", root / "data"] + (["--model", root / "model", *FAST] if command != "export" else [])

    def limit() -> None:
        if file_size is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    return subprocess.run([sys.executable, "-m", "cl_graft.cli", *map(str, (command, *args, *base))],
                          capture_output=True, text=True, preexec_fn=limit, timeout=600, check=False)


def one_error(res) -> str:
    """The output's only ``error:`` line, its last, with exit code 2 and no traceback."""
    output = res.output if hasattr(res, "output") else res.stdout + res.stderr
    code = res.exit_code if hasattr(res, "exit_code") else res.returncode
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1 and "Traceback" not in output, output
    assert output.rstrip().endswith(errors[0]), output
    return errors[0]


def files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def ft(cli_root, tmp_path_factory) -> Path:
    """A finished ``finetune`` of alpha (seed 1)."""
    out = tmp_path_factory.mktemp("round2") / "ft"
    res = cli(cli_root, "finetune", "--task", "alpha", "--steps", "2", "--seed", "1", "--out", out)
    assert res.exit_code == 0, res.output
    return out


@pytest.fixture(scope="module")
def graft_run(cli_root, tmp_path_factory) -> Path:
    """A finished ``run`` of graft on alpha, beta (skills under graft/state/skills)."""
    out = tmp_path_factory.mktemp("round2") / "run"
    res = cli(cli_root, *GRAFT_RUN, "--out", out)
    assert res.exit_code == 0, res.output
    return out


def copy_of(folder: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(folder, tmp_path / folder.name, symlinks=True))


# ----- 1. one writer per folder ----------------------------------------------------------------------------------
HOLDER = textwrap.dedent("""
    import sys, time
    from cl_graft.outdir import claim_out_dir
    with claim_out_dir(sys.argv[1], "finetune", settings={}):
        print("held", flush=True)
        time.sleep(300)
""")


def test_1_a_second_command_on_a_folder_in_use_fails_at_once_naming_the_holder(cli_root, tmp_path):
    out = tmp_path / "out"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        for args in (["finetune", "--task", "alpha", "--steps", "2"],
                     ["run", "--stream", "alpha,beta", "--strategies", "naive", "--quiet", "--resume"]):
            t0 = time.perf_counter()
            error = one_error(cli(cli_root, *args, "--out", out))
            assert f"is in use by pid {holder.pid} (`" in error and "started " in error, error
            assert time.perf_counter() - t0 < 60
        assert not (out / "config.json").exists() and not (out / "model.safetensors").exists()
    finally:
        holder.kill()                                                   # SIGKILL: the OS drops the lock
        holder.wait()
    res = cli(cli_root, "finetune", "--task", "alpha", "--steps", "2", "--out", out)
    assert res.exit_code == 0, res.output
    assert not (out / ".cl-graft.lock").exists()


# ----- 2. NaN outputs from finite weights --------------------------------------------------------------------------
def test_2_nan_outputs_are_never_saved_nor_loaded_nor_scored(cli_root, ft, tmp_path):
    out = tmp_path / "nan"
    error = one_error(cli(cli_root, "finetune", "--task", "alpha", "--steps", "1", "--lr", "1e30", "--out", out))
    assert "finetune alpha step 1: the model's outputs hold NaN" in error and not out.exists()
    broken = load_classifier(ft)                       # finite weights whose every output is NaN
    with torch.no_grad():
        dict(broken.named_parameters())["backbone.encoder.layer.0.output.dense.weight"].fill_(3e38)
    assert all(bool(torch.isfinite(p).all()) for p in broken.parameters())
    save_classifier(broken, tmp_path / "broken")
    with pytest.raises(UserError, match="outputs hold NaN or infinite values"):
        load_classifier(tmp_path / "broken")
    from cl_graft.training.evaluate import evaluate

    with pytest.raises(UserError, match="no metric computed"):
        evaluate(broken, [{"text": "it was great", "label": 1}], "alpha")


# ----- 3. --overwrite removes exactly the files the earlier run's record lists -------------------------------------
def test_3_overwrite_keeps_the_users_files_at_every_depth(cli_root, graft_run, tmp_path):
    out = copy_of(graft_run, tmp_path)
    mine = {"graft/state/NOTES.txt": b"notes", "graft/state/backup/skills.json": b"{}", "NOTES.txt": b"top"}
    for name, data in mine.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_bytes(data)
    res = cli(cli_root, *GRAFT_RUN, "--out", out, "--overwrite")
    assert res.exit_code == 0, res.output
    assert {n: (out / n).read_bytes() for n in mine if (out / n).is_file()} == mine
    listed = json.loads((out / "config.json").read_text())["files"]
    assert not set(listed) & set(mine) and "graft/state/progress.json" in listed


# ----- 4. a failing command removes only what it wrote -------------------------------------------------------------
def test_4_failure_removes_only_the_commands_own_files(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(UserError, match="boom"), claim_out_dir(out, "finetune", settings={}) as run_dir:
        (run_dir.path / "sub").mkdir()
        write_json(run_dir.path / "sub" / "metrics.json", {})
        (out / "my_notes.txt").write_text("the user's")                 # put there while the command runs
        raise UserError("boom")
    assert files(out) == {"my_notes.txt": b"the user's", ".cl-graft.json": (out / ".cl-graft.json").read_bytes()}
    with claim_out_dir(out, "finetune", settings={}) as run_dir:      # the next run keeps the file too
        write_json(run_dir.path / "metrics.json", {})
        (out / "later.txt").write_text("also the user's")
        run_dir.finish({"command": "finetune"})
    assert json.loads((out / "config.json").read_text())["files"] == ["config.json", "metrics.json"]


# ----- 5. Python API: a failed experience is undone ----------------------------------------------------------------
def test_5_a_failed_experience_restores_model_optimizer_and_owner_map():
    pytest.importorskip("avalanche")
    from avalanche.benchmarks import nc_benchmark
    from avalanche.evaluation.metrics import accuracy_metrics
    from avalanche.models import MTSimpleMLP
    from avalanche.training.plugins import EvaluationPlugin
    from torch.utils.data import TensorDataset

    from cl_graft.regions.config import LocalizeConfig
    from cl_graft.strategies import GraftStrategy, LocalizeFinder

    def blobs(n: int, seed: int, nan: bool = False) -> TensorDataset:
        centres = torch.randn(4, 16, generator=torch.Generator().manual_seed(0)) * 2
        y = torch.arange(4).repeat(n // 4)
        x = centres[y] + torch.randn(len(y), 16, generator=torch.Generator().manual_seed(seed))
        if nan:
            x[y >= 2] = float("nan")                                  # the second experience's inputs
        ds = TensorDataset(x, y)
        ds.targets = y.tolist()
        return ds

    def stream(nan: bool):
        return nc_benchmark(blobs(128, 1, nan), blobs(64, 2), n_experiences=2, task_labels=True, seed=0,
                            fixed_class_order=[0, 1, 2, 3])

    clean, broken = stream(False), stream(True)
    torch.manual_seed(0)
    model = MTSimpleMLP(input_size=16, hidden_size=32)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=0.01)
    strategy = GraftStrategy(model=model, optimizer=opt, train_mb_size=16, train_epochs=2,
                             finder=LocalizeFinder("graft", LocalizeConfig(region_size=0.3, steps=4, select_rows=64)),
                             evaluator=EvaluationPlugin(accuracy_metrics(experience=True), loggers=[]))
    strategy.train(clean.train_stream[0])
    acc0 = strategy.eval([clean.test_stream[0]])

    def state() -> tuple[dict, dict, list]:
        """Every tensor, the optimizer's state per parameter and its hyper-parameters (Avalanche adds the next
        task's head when an experience starts; what existed before must come back bit-exactly)."""
        params = dict(model.named_parameters())
        hyper = [{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups]
        return ({k: v.clone() for k, v in model.state_dict().items()},
                {n: {k: v.clone() for k, v in opt.state[p].items()} for n, p in params.items() if p in opt.state},
                hyper)

    tensors, moments, hyper = state()
    with pytest.raises(UserError, match="diverged"):
        strategy.train(broken.train_stream[1])
    after = state()
    assert all(torch.equal(v, after[0][k]) for k, v in tensors.items())
    assert all(torch.equal(v, after[1][n][k]) for n, m in moments.items() for k, v in m.items())
    assert after[2] == hyper
    assert len(strategy.graft.owners.tasks) == 1
    assert strategy.eval([clean.test_stream[0]]) == acc0
    strategy.train(clean.train_stream[1])                             # it goes on
    assert len(strategy.graft.owners.tasks) == 2


# ----- 6. a full disk --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("command", ["finetune", "export"])
def test_6_full_disk_is_one_line_and_leaves_nothing_a_later_command_trusts(cli_root, graft_run, tmp_path, command):
    out = tmp_path / "out"
    if command == "finetune":
        args = ["finetune", "--task", "alpha", "--steps", "2"]
    else:
        args = ["export", "--skills", graft_run / "graft/state/skills", "--task", "alpha"]
    res = cli_process(cli_root, *args, "--out", out, file_size=8192)
    error = one_error(res)
    assert "File too large" in error and ".safetensors" in error, error
    assert not out.exists()


# ----- 7. hand-edited but valid JSON ------------------------------------------------------------------------------
def _edit(path: Path, change) -> None:
    path.write_text(json.dumps(change(json.loads(path.read_text()))))


def _unfinished(out: Path) -> None:
    for name in ("config.json", "results.json", "graft/result.json"):
        (out / name).unlink()


@pytest.mark.parametrize("case, message", [
    ("skills.json without shapes", "skills.json: field 'shapes' is missing"),
    ("skills.json tasks a string", "skills.json: field 'tasks' must be a list, got \"alpha\""),
    ("run config.json without seed", "config.json: field 'seed' is missing"),
    ("graft/result.json {}", "result.json: field 'name' is missing"),
    ("progress.json seconds abc", "progress.json: field 'seconds' must be a number, got \"abc\""),
    ("progress.json without rows", "progress.json: field 'rows' is missing"),
    ("progress.json a list", "progress.json: the file must be a JSON object, got []"),
])
def test_7_edited_files_are_one_line_naming_file_and_field(cli_root, graft_run, tmp_path, case, message):
    out = copy_of(graft_run, tmp_path)
    skills, progress = out / "graft/state/skills/skills.json", out / "graft/state/progress.json"
    export = ["export", "--skills", out / "graft/state/skills", "--task", "alpha", "--out", tmp_path / "exp"]
    resume = [*GRAFT_RUN, "--out", out, "--resume"]
    if case == "skills.json without shapes":
        _edit(skills, lambda d: {k: v for k, v in d.items() if k != "shapes"})
    elif case == "skills.json tasks a string":
        _edit(skills, lambda d: {**d, "tasks": "alpha"})
    elif case == "run config.json without seed":
        _edit(out / "config.json", lambda d: {k: v for k, v in d.items() if k != "seed"})
    elif case == "graft/result.json {}":
        (out / "graft/result.json").write_text("{}")
        export = resume
    else:
        _unfinished(out)
        _edit(progress, {"progress.json seconds abc": lambda d: {**d, "seconds": "abc"},
                         "progress.json without rows": lambda d: {k: v for k, v in d.items() if k != "rows"},
                         "progress.json a list": lambda d: []}[case])
        export = resume
    assert message in one_error(cli(cli_root, *export))
    assert not (tmp_path / "exp").exists()


# ----- 8. surgical --finetuned: same preset and seed ---------------------------------------------------------------
def test_8_surgical_refuses_a_finetune_of_another_seed(cli_root, ft, tmp_path):
    args = ["surgical", "--task", "alpha", "--finetuned", ft, "--top-layers", "1", "--random-layers", "",
            "--no-graft", "--no-stability", "--fisher-rows", "8"]
    error = one_error(cli(cli_root, *args, "--seed", "0", "--out", tmp_path / "s"))
    assert "seed 1" in error and "seed 0" in error and not (tmp_path / "s").exists()


# ----- 9. devices torch knows but cl-graft cannot run on -----------------------------------------------------------
@pytest.mark.parametrize("device", ["meta", "xpu"])
@pytest.mark.parametrize("command", [["finetune", "--task", "alpha"], ["run", "--stream", "alpha,beta"],
                                     ["localize", "--task", "alpha"], ["multitask", "--tasks", "alpha,beta"]])
def test_9_unsupported_device_is_one_line_and_writes_nothing(cli_root, tmp_path, command, device):
    error = one_error(cli(cli_root, *command, "--device", device, "--out", tmp_path / "o"))
    assert f"device {device!r}" in error and not (tmp_path / "o").exists()


# ----- 10. smaller -----------------------------------------------------------------------------------------------
def test_10a_temporary_files_of_a_killed_run_are_removed_and_never_listed(cli_root, graft_run, tmp_path):
    out = copy_of(graft_run, tmp_path)
    _unfinished(out)
    stale = ["graft/state/skills/.skills.json.x1y2.tmp", "graft/state/.progress.json.a8b9.tmp",
             "graft/state/skills/.task-01.q.tmp/model.safetensors"]
    for name in stale:
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_bytes(b"half")
    res = cli(cli_root, *GRAFT_RUN, "--out", out, "--resume")
    assert res.exit_code == 0, res.output
    assert not [p for p in out.rglob("*.tmp")]
    assert not [f for f in json.loads((out / "config.json").read_text())["files"] if ".tmp" in f]


def test_10b_localize_refuses_an_unfinished_finetune_folder(cli_root, ft, tmp_path):
    unfinished = copy_of(ft, tmp_path)
    (unfinished / "config.json").unlink()
    args = ["localize", "--task", "alpha", "--finetuned", unfinished, *LOCALIZE_FAST, "--out", tmp_path / "loc"]
    assert "unfinished run of cl-graft finetune" in one_error(cli(cli_root, *args))
    assert not (tmp_path / "loc").exists()


def test_10c_interrupted_model_save_leaves_no_temporary_file(ft, tmp_path, monkeypatch):
    import safetensors.torch

    def interrupted(tensors, filename, metadata=None):
        Path(filename).write_bytes(b"half a model")
        raise KeyboardInterrupt

    model = load_classifier(ft)
    monkeypatch.setattr(safetensors.torch, "save_file", interrupted)
    with pytest.raises(KeyboardInterrupt):
        save_classifier(model, tmp_path / "model")
    assert not [p for p in (tmp_path / "model").rglob("*") if p.name.endswith(".tmp")]
    assert not (tmp_path / "model" / "model.safetensors").exists()


def test_10d_an_empty_experience_is_one_line_naming_it():
    pytest.importorskip("avalanche")
    from avalanche.benchmarks import nc_benchmark
    from avalanche.models import MTSimpleMLP
    from torch.utils.data import TensorDataset

    from cl_graft.strategies import GraftStrategy

    x, y = torch.randn(64, 8), torch.arange(4).repeat(16)
    data = TensorDataset(x, y)
    data.targets = y.tolist()
    bm = nc_benchmark(data, data, n_experiences=2, task_labels=True, seed=0, fixed_class_order=[0, 1, 2, 3])
    empty = copy.copy(bm.train_stream[1])
    empty.dataset = empty.dataset.subset([])
    model = MTSimpleMLP(input_size=8, hidden_size=16)
    strategy = GraftStrategy(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), train_mb_size=8)
    with pytest.raises(UserError, match=r"^experience 1 \(task labels \[1\]\) has no examples"):
        strategy.train(empty)
    assert strategy.graft.owners is None                             # refused before anything ran
