"""Reliability, round 4, in the Python API (issue 45): ``GraftStrategy.save`` keeps the command line's folder rules
(no link followed, nothing written beside what is not its own in a task folder, one-line errors), and a NaN test
input is refused as a NaN training input is."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

pytest.importorskip("avalanche")

from cl_graft.errors import UserError  # noqa: E402

from test_graft_reliability_round3 import load, mlp, saves, stream, strategy_for  # noqa: E402, F401 (a fixture)


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# ----- 3. GraftStrategy.save follows no link, refuses what is not its own, one line --------------------------------
@pytest.mark.parametrize("link", ["task-01", "task-00"])
def test_3_save_follows_no_link_out_of_its_folder(saves, tmp_path, link):
    folder = Path(shutil.copytree(saves["two"], tmp_path / "run"))
    users = tmp_path / "users-folder"
    shutil.move(folder / link, users)                            # the task folder moved away and linked back
    (folder / link).symlink_to(users, target_is_directory=True)
    before = _files(users)
    with pytest.raises(UserError, match=rf"^{folder}: {link} is a symbolic link to a folder"):
        load(saves["one"]).save(folder)                          # a one-task save would delete task-01
    assert _files(users) == before
    assert load(folder).graft.owners.tasks == ["0", "1"]         # the earlier save still loads


def test_3_save_refuses_a_stray_file_in_a_task_folder_and_a_file_as_folder(saves, tmp_path):
    folder = Path(shutil.copytree(saves["two"], tmp_path / "run"))
    (folder / "task-05").mkdir()
    (folder / "task-05" / "x").write_text("the user's")
    with pytest.raises(UserError, match=r"task-05/x: no earlier save wrote it"):
        load(saves["one"]).save(folder)
    assert (folder / "task-05/x").read_text() == "the user's"
    shutil.rmtree(folder / "task-05")
    assert load(folder).graft.owners.tasks == ["0", "1"]         # nothing of the save was written
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    with pytest.raises(UserError, match="exists and is not a folder"):
        load(saves["one"]).save(a_file)
    with pytest.raises(UserError, match="cannot write there"):
        load(saves["one"]).save(a_file / "sub")
    assert a_file.read_text() == "x"


# ----- 9. a NaN test input is refused, not a silent "Loss nan" --------------------------------------------------------
def test_9_a_nan_test_input_is_refused_naming_the_experience():
    strategy = strategy_for(mlp())
    strategy.train(stream().train_stream[0])
    with pytest.raises(UserError, match=r"^evaluation, experience 1 \(task labels \[1\]\): row \d+ of a test "
                                        r"mini-batch holds NaN"):
        strategy.eval(stream(nan=True).train_stream)             # classes 2, 3 (experience 1) are NaN
    results = strategy.eval(stream().test_stream)
    assert all(v == v for k, v in results.items() if k.startswith("Top1_Acc"))       # finite inputs: no NaN
    assert torch.isfinite(torch.tensor([v for k, v in results.items() if k.startswith("Loss")])).all()
