"""Reliability, round 3, on the command line: skills cross-checked by export, no write through a symbolic link out
of --out, the safetensors library's temporary files cleaned, export never inside a running command's folder nor
of an unfinished task, finetune's lock before its model. One test per defect of the round (issue 31); the API's
are in tests/strategies/graft/test_graft_reliability_round3.py."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("avalanche")

from click.testing import CliRunner  # noqa: E402

from cl_graft.cli import main  # noqa: E402
from cl_graft.files import read_safetensors, write_safetensors  # noqa: E402
from cl_graft.folder_lock import FolderLock  # noqa: E402
from cl_graft.outdir import claim_out_dir  # noqa: E402

GRAFT_RUN = ["run", "--stream", "alpha,beta", "--strategies", "graft", "--quiet"]


def cli(root: Path, command: str, *args):
    """``cl-graft command args`` on the tiny model and the root's data, in this process."""
    base = ["--data-dir", root / "data"] + (["--model", root / "model", "--preset", "smoke"]
                                            if command != "export" else [])
    return CliRunner().invoke(main, [str(a) for a in (command, *args, *base)])


def one_error(res) -> str:
    """The output's only ``error:`` line, its last, with exit code 2 and no traceback."""
    errors = [line for line in res.output.splitlines() if line.startswith("error:")]
    assert res.exit_code == 2 and len(errors) == 1 and "Traceback" not in res.output, res.output
    assert res.output.rstrip().endswith(errors[0]), res.output
    return errors[0]


@pytest.fixture(scope="module")
def graft_run(cli_root, tmp_path_factory) -> Path:
    """A finished ``run`` of graft on alpha, beta (skills under graft/state/skills, with feature statistics:
    ``--task-inference features``)."""
    out = tmp_path_factory.mktemp("round3") / "run"
    res = cli(cli_root, *GRAFT_RUN, "--task-inference", "features", "--out", out)
    assert res.exit_code == 0, res.output
    return out


def copy_of(folder: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(folder, tmp_path / folder.name, symlinks=True))


def export(root: Path, run: Path, task: str, out: Path):
    return cli(root, "export", "--skills", run / "graft/state/skills", "--task", task, "--out", out)


def edit_json(path: Path, change) -> None:
    path.write_text(json.dumps(change(json.loads(path.read_text()))))


# ----- 1. export cross-checks the skills --------------------------------------------------------------------------
def test_1_export_refuses_skills_whose_files_disagree(cli_root, graft_run, tmp_path):
    run = copy_of(graft_run, tmp_path)
    edit_json(run / "graft/state/skills/skills.json", lambda d: {**d, "tasks": d["tasks"][::-1]})
    error = one_error(export(cli_root, run, "alpha", tmp_path / "exp"))
    assert "task-00/patch_config.json: field 'meta.task' is 'alpha' but skills.json lists 'beta'" in error, error
    assert not (tmp_path / "exp").exists()


# ----- 2. nothing written or deleted through a symbolic link out of --out ------------------------------------------
@pytest.mark.parametrize("link", ["graft/state/skills/task-00", "graft/state"])
def test_2_a_link_out_of_out_is_refused_and_the_users_files_kept(cli_root, graft_run, tmp_path, link):
    run = copy_of(graft_run, tmp_path)
    user = Path(shutil.copytree(run / link, tmp_path / "users-folder"))    # the user's files, outside --out
    before = {p.relative_to(user).as_posix(): p.read_bytes() for p in user.rglob("*") if p.is_file()}
    shutil.rmtree(run / link)
    (run / link).symlink_to(user, target_is_directory=True)
    error = one_error(cli(cli_root, *GRAFT_RUN, "--out", run, "--overwrite"))
    assert f"{link} is a symbolic link" in error and "writes nothing through links" in error, error
    assert {p.relative_to(user).as_posix(): p.read_bytes() for p in user.rglob("*") if p.is_file()} == before
    assert (run / "config.json").is_file()                                   # the earlier results are kept


# ----- 3. the safetensors library's own temporary file -------------------------------------------------------------
KILLED_WRITE = textwrap.dedent("""
    import os, signal, sys
    from pathlib import Path
    import torch
    import cl_graft.files
    from cl_graft.outdir import claim_out_dir

    def killed(tensors, filename, metadata=None):             # as the library does: its own .tmpXXXXXX beside it
        Path(filename).with_name(".tmpK1LL3D").write_bytes(b"half a file")
        os.kill(os.getpid(), signal.SIGKILL)

    cl_graft.files.save_file = killed
    with claim_out_dir(sys.argv[1], "finetune", settings={}, keep_on_error=True) as run_dir:
        cl_graft.files.write_safetensors(run_dir.path / "model.safetensors", {"w": torch.zeros(2)})
""")


def test_3_temporary_files_of_a_killed_library_write_are_removed_and_never_listed(tmp_path):
    out = tmp_path / "out"
    killed = subprocess.run([sys.executable, "-c", KILLED_WRITE, str(out)], capture_output=True, timeout=120,
                            check=False)
    assert killed.returncode == -9, killed.stderr
    with claim_out_dir(out, "finetune", settings={}, resume=True) as run_dir:
        (run_dir.path / "metrics.json").write_text("{}")
        run_dir.finish({"command": "finetune"})
    assert json.loads((out / "config.json").read_text())["files"] == ["config.json"]
    assert sorted(p.name for p in out.rglob("*")) == [".cl-graft.json", "config.json", "metrics.json"]


# ----- 10. export never inside a running command's --out -----------------------------------------------------------
def test_10_export_into_a_folder_inside_a_running_commands_out_is_refused(cli_root, graft_run, tmp_path):
    busy = tmp_path / "busy"
    with claim_out_dir(busy, "run", settings={}):                           # a command writing busy/
        inside = busy / "graft/state/skills/exp"
        error = one_error(export(cli_root, graft_run, "alpha", inside))
        assert f"is inside {busy}" in error and "which is running" in error, error
        assert not (busy / "graft").exists()


# ----- 11. export of an unfinished run -----------------------------------------------------------------------------
def test_11_export_of_an_unfinished_run_exports_finished_tasks_and_says_how_to_resume(cli_root, graft_run, tmp_path):
    run = copy_of(graft_run, tmp_path)
    for name in ("config.json", "results.json", "graft/result.json"):
        (run / name).unlink()
    skills = run / "graft/state/skills"
    shutil.rmtree(skills / "task-01")                                       # killed before beta was learned
    edit_json(skills / "skills.json", lambda d: {**d, "tasks": d["tasks"][:1], "sizes": d["sizes"][:1],
                                                 "features": (d.get("features") or [None])[:1],
                                                 "task_meta": {k: v for k, v in d.get("task_meta", {}).items()
                                                               if k == "alpha"}})
    stats = read_safetensors(skills / "features.safetensors")              # beta's statistics were never fitted
    write_safetensors(skills / "features.safetensors", {k: t for k, t in stats.items() if k.startswith("0.")})
    error = one_error(export(cli_root, run, "beta", tmp_path / "beta"))
    assert "unfinished run" in error and "--resume" in error and "export a finished task (alpha)" in error, error
    res = export(cli_root, run, "alpha", tmp_path / "alpha")
    assert res.exit_code == 0, res.output
    assert (tmp_path / "alpha" / "model.safetensors").is_file()


# ----- 12. finetune checks the folder's lock before it loads the model ---------------------------------------------
def test_12_finetune_on_a_busy_folder_fails_before_loading_the_model(cli_root, tmp_path, monkeypatch):
    import cl_graft.training.models as models

    loaded = []
    real = models.build_classifier
    monkeypatch.setattr(models, "build_classifier", lambda *a, **k: loaded.append(a) or real(*a, **k))
    out = tmp_path / "out"
    out.mkdir()
    lock = FolderLock(out, "another command").acquire()
    try:
        error = one_error(cli(cli_root, "finetune", "--task", "alpha", "--steps", "2", "--out", out))
    finally:
        lock.release()
    assert "is in use by pid" in error and not loaded
