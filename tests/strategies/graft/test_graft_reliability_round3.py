"""Reliability, round 3, in the Python API: saved runs cross-checked on load, every file of a save schema-checked,
GraftStrategy.save's folder policy, finite tensors on load, labels and validation rows checked before training, a
task's patch written once, and a failed experience named. One test per defect of the round (issue 31); round 4's
(issue 45) at the end: ``GraftStrategy.save`` keeps the command line's folder rules (no link followed, nothing
saved beside what is not its own in a task folder, one-line errors), and a NaN test input is refused."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from torch import nn

pytest.importorskip("avalanche")

from avalanche.benchmarks import nc_benchmark  # noqa: E402
from avalanche.models import MTSimpleMLP  # noqa: E402
from avalanche.training.plugins import EvaluationPlugin  # noqa: E402
from torch.utils.data import TensorDataset  # noqa: E402

from cl_graft.errors import UserError  # noqa: E402
from cl_graft.folder_lock import FolderLock  # noqa: E402
from cl_graft.regions.config import LocalizeConfig  # noqa: E402
from cl_graft.regions.region import Region  # noqa: E402
from cl_graft.strategies import GraftStrategy, LocalizeFinder, OwnerMap  # noqa: E402
from cl_graft.strategies.routing.feature_store import load_stats, save_stats  # noqa: E402
from cl_graft.strategies.routing.features import FeatureStats  # noqa: E402

DIM, CLASSES = 8, 4


def blobs(n: int, seed: int, *, relabel: int | None = None, nan: bool = False) -> TensorDataset:
    """Four Gaussian blobs (class c around a fixed centre); ``relabel`` renames class 3, ``nan`` puts NaN into
    the inputs of classes 2 and 3."""
    centres = torch.randn(CLASSES, DIM, generator=torch.Generator().manual_seed(0)) * 3
    y = torch.arange(CLASSES).repeat(n // CLASSES)
    x = centres[y] + torch.randn(len(y), DIM, generator=torch.Generator().manual_seed(seed))
    if nan:
        x[y >= 2] = float("nan")
    if relabel is not None:
        y[y == 3] = relabel
    ds = TensorDataset(x, y)
    ds.targets = y.tolist()
    return ds


def stream(*, relabel: int | None = None, nan: bool = False, task_labels: bool = True, seed: int = 1):
    """Two experiences (classes 0, 1 and 2, 3) of :func:`blobs`."""
    order = [0, 1, 2, 3 if relabel is None else relabel]
    return nc_benchmark(blobs(64, seed, relabel=relabel, nan=nan), blobs(32, seed + 1, relabel=relabel),
                        n_experiences=2, task_labels=task_labels, seed=0, fixed_class_order=order)


def strategy_for(model: nn.Module, **kw) -> GraftStrategy:
    return GraftStrategy(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), train_mb_size=16,
                         finder=LocalizeFinder("graft", LocalizeConfig(region_size=0.3, steps=2, select_rows=32)),
                         evaluator=EvaluationPlugin(loggers=[]), **kw)


def mlp(seed: int = 0) -> MTSimpleMLP:
    torch.manual_seed(seed)
    return MTSimpleMLP(input_size=DIM, hidden_size=16)


@pytest.fixture(scope="module")
def saves(tmp_path_factory) -> dict[str, Path]:
    """A two-task run saved after its first task (``one``) and after both (``two``)."""
    root = tmp_path_factory.mktemp("round3-saves")
    strategy = strategy_for(mlp())
    bm = stream()
    strategy.train(bm.train_stream[0])
    strategy.save(root / "one")
    strategy.train(bm.train_stream[1])
    strategy.save(root / "two")
    return {"one": root / "one", "two": root / "two"}


def load(folder: Path) -> GraftStrategy:
    model = mlp(seed=9)
    return GraftStrategy.load(folder, model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                              evaluator=EvaluationPlugin(loggers=[]))


def edit_json(path: Path, change) -> None:
    path.write_text(json.dumps(change(json.loads(path.read_text()))))


def unhashed(folder: Path) -> None:
    """Drops the files' sha256 from graft_run.json (a save of before this round), so the edits below reach the
    checks of each file's fields."""
    edit_json(folder / "graft_run.json", lambda d: {k: v for k, v in d.items() if k != "files"})


# ----- 1. saved skills are cross-checked on load -------------------------------------------------------------------
@pytest.mark.parametrize("tamper, message", [
    ("tasks reordered", r"task-00/patch_config.json: field 'meta.task' is '0' but skills.json lists '1'"),
    ("task folders swapped", r"task-00/patch_config.json: field 'meta.task' is '1' but skills.json lists '0'"),
    ("a task renamed ../../x", r"skills.json: field 'tasks\[1\]': '../../x' cannot name a task"),
    ("task-02 of a larger save left", r"task-02: a task folder skills.json does not list"),
])
def test_1_tampered_skills_are_refused_naming_file_and_field(saves, tmp_path, tamper, message):
    folder = Path(shutil.copytree(saves["two"], tmp_path / "run"))
    unhashed(folder)
    skills = folder / "skills.json"
    if tamper == "tasks reordered":
        edit_json(skills, lambda d: {**d, "tasks": d["tasks"][::-1]})
    elif tamper == "task folders swapped":
        (folder / "task-00").rename(folder / "swap")
        (folder / "task-01").rename(folder / "task-00")
        (folder / "swap").rename(folder / "task-01")
    elif tamper == "a task renamed ../../x":
        edit_json(skills, lambda d: {**d, "tasks": [d["tasks"][0], "../../x"]})
    else:
        shutil.copytree(folder / "task-01", folder / "task-02")
    with pytest.raises(UserError, match=message):
        load(folder)
    hashed = Path(shutil.copytree(saves["two"], tmp_path / "hashed"))         # a save of this round: its hashes
    edit_json(hashed / "skills.json", lambda d: {**d, "tasks": d["tasks"][::-1]})
    with pytest.raises(UserError, match=r"skills.json: differs from the save graft_run.json records"):
        load(hashed)


# ----- 4. every field of a save's JSON files is checked ------------------------------------------------------------
@pytest.mark.parametrize("edit, message", [
    ("settings a list", "graft_run.json: field 'settings' must be a JSON object, got []"),
    ("region_size.bogus", "graft_run.json: field 'settings.region_size' is not valid"),
    ("old size.bogus", "graft_run.json: field 'settings.size' is not valid"),
    ('region_size "abc"', "graft_run.json: field 'settings.region_size' must be a JSON object, got \"abc\""),
    ('finder "abc"', "graft_run.json: field 'settings.finder' must be a JSON object, got \"abc\""),
    ('mode "abc"', "graft_run.json: field 'settings.mode' must be one of"),
    ('adaptations "abc"', "skills.json: field 'adaptations' must be a list, got \"abc\""),
    ("an adaptation without classes", "skills.json: field 'adaptations[0].classes' is missing"),
    ("task_meta [1]", "skills.json: field 'task_meta' must be a JSON object, got [1]"),
    ("skills.json a folder", "skills.json: a folder, not a JSON file"),
])
def test_4_edited_save_files_are_one_line_naming_file_and_field(saves, tmp_path, edit, message):
    folder = Path(shutil.copytree(saves["two"], tmp_path / "run"))
    unhashed(folder)
    run, skills = folder / "graft_run.json", folder / "skills.json"
    change = {"settings a list": (run, lambda d: {**d, "settings": []}),
              "region_size.bogus": (run, lambda d: {**d, "settings": {**d["settings"], "region_size": {"bogus": 1}}}),
              "old size.bogus": (run, lambda d: {**d, "settings": {**{k: v for k, v in d["settings"].items()
                                                                       if k != "region_size"}, "size": {"bogus": 1}}}),
              'region_size "abc"': (run, lambda d: {**d, "settings": {**d["settings"], "region_size": "abc"}}),
              'finder "abc"': (run, lambda d: {**d, "settings": {**d["settings"], "finder": "abc"}}),
              'mode "abc"': (run, lambda d: {**d, "settings": {**d["settings"], "mode": "abc"}}),
              'adaptations "abc"': (skills, lambda d: {**d, "adaptations": "abc"}),
              "an adaptation without classes": (skills, lambda d: {**d, "adaptations": [
                  {k: v for k, v in d["adaptations"][0].items() if k != "classes"}]}),
              "task_meta [1]": (skills, lambda d: {**d, "task_meta": [1]})}
    if edit == "skills.json a folder":
        skills.unlink()
        skills.mkdir()
    else:
        edit_json(*change[edit])
    with pytest.raises(UserError) as error:
        load(folder)
    assert message in str(error.value) and "\n" not in str(error.value)


# ----- 5. GraftStrategy.save: a lock, the whole save staged, only its own files replaced ------------------------
def test_5_save_keeps_the_users_files_drops_its_own_leftovers_and_has_one_writer(saves, tmp_path):
    folder = Path(shutil.copytree(saves["two"], tmp_path / "run"))
    strategy = load(saves["one"])                                 # one task, saved over a two-task save
    (folder / "NOTES.txt").write_text("the user's")
    strategy.save(folder)
    assert not (folder / "task-01").exists() and (folder / "NOTES.txt").read_text() == "the user's"
    assert load(folder).graft.owners.tasks == ["0"]
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "pre.safetensors").write_bytes(b"the user's own file")
    strategy.save(mine, pre=False)                                # writes no pre.safetensors: the user's stays
    assert (mine / "pre.safetensors").read_bytes() == b"the user's own file"
    with pytest.raises(UserError, match="no earlier save wrote it"):
        strategy.save(mine, pre=True)                             # would replace it: refused, nothing written
    assert (mine / "pre.safetensors").read_bytes() == b"the user's own file"
    lock = FolderLock(folder, "another save").acquire()           # a second saver fails at once, naming the first
    try:
        with pytest.raises(UserError, match="is in use by pid"):
            strategy.save(folder)
    finally:
        lock.release()
    assert load(folder).graft.owners.tasks == ["0"] and not list(folder.rglob("*.tmp"))


# ----- 6. finite checks on every loaded tensor ---------------------------------------------------------------------
def test_6_nan_feature_statistics_are_refused_at_load(tmp_path):
    d = 4
    stats = FeatureStats(torch.zeros(d), torch.eye(d), 10)
    counts = save_stats(tmp_path, [stats])
    assert load_stats(tmp_path, counts)[0] is not None
    stats.mean[1] = float("nan")
    save_stats(tmp_path, [stats])
    with pytest.raises(UserError, match=r"features.safetensors: tensor '0.mean' holds NaN or infinite values"):
        load_stats(tmp_path, counts)


# ----- 8. labels and validation rows checked before training -------------------------------------------------------
def test_8_bad_labels_and_nan_validation_rows_are_one_line_naming_the_experience():
    single_head = nn.Sequential(nn.Linear(DIM, 16), nn.ReLU(), nn.Linear(16, CLASSES))
    strategy = strategy_for(single_head)
    with pytest.raises(UserError, match=r"^experience 1 \(task labels \[0\]\): label 50 is not a class of the "
                                        r"model's 4 outputs"):
        strategy.train(stream(relabel=50, task_labels=False).train_stream[1])
    clean = stream()
    for held_out, what in ((stream(relabel=50, seed=3), "label 50 is not a class"),
                           (stream(nan=True, seed=3), "input holds NaN or infinite values")):
        strategy = strategy_for(mlp(), valid_stream=held_out.train_stream)     # task labels 0, 1 as the stream's
        with pytest.raises(UserError, match=rf"^experience 1 \(task labels \[1\]\): its valid_stream experience: "
                                            rf".*{what}"):
            strategy.train(clean.train_stream[1])
        assert strategy.graft.owners is None or not strategy.graft.owners.tasks


# ----- 9. a task's patch is written once ---------------------------------------------------------------------------
def test_9_progress_saves_write_each_tasks_patch_once(tmp_path, monkeypatch):
    import cl_graft.files

    written = []
    real = cl_graft.files.atomic_write
    monkeypatch.setattr(cl_graft.files, "atomic_write", lambda path, write: written.append(Path(path).name) or
                        real(path, write))
    layer = nn.Linear(10, 5)
    owners = OwnerMap({"weight": layer.weight})
    for k in range(5):                                            # a 5-task stream, saved after every task
        mask = torch.zeros(5, 10, dtype=torch.bool)
        mask[k] = True
        owners.add_(layer, f"t{k}", Region({"weight": mask}))
        owners.save(tmp_path / "skills")
    assert written.count("patch.safetensors") == 5 and written.count("patch_config.json") == 5
    assert written.count("skills.json") == 5
    assert OwnerMap.load(tmp_path / "skills", layer).tasks == [f"t{k}" for k in range(5)]


# ----- 12. a NaN experience names the experience -------------------------------------------------------------------
def test_12_an_experience_with_nan_inputs_is_named_and_the_learning_rate_not_blamed():
    strategy = strategy_for(mlp())
    bm = stream(nan=True)
    strategy.train(bm.train_stream[0])
    with pytest.raises(UserError) as error:
        strategy.train(bm.train_stream[1])
    message = str(error.value)
    assert message.startswith("experience 1 (task labels [1]): row ") and "NaN" in message, message
    assert "learning rate" not in message


# ===== round 4 (issue 45) =====================================================================
def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# ----- 3. GraftStrategy.save follows no link, refuses what is not its own, one line --------------------------------
@pytest.mark.parametrize("link", ["task-01", "task-00"])
def test_r4_3_save_follows_no_link_out_of_its_folder(saves, tmp_path, link):
    folder = Path(shutil.copytree(saves["two"], tmp_path / "run"))
    users = tmp_path / "users-folder"
    shutil.move(folder / link, users)                            # the task folder moved away and linked back
    (folder / link).symlink_to(users, target_is_directory=True)
    before = _files(users)
    with pytest.raises(UserError, match=rf"^{folder}: {link} is a symbolic link to a folder"):
        load(saves["one"]).save(folder)                          # a one-task save would delete task-01
    assert _files(users) == before
    assert load(folder).graft.owners.tasks == ["0", "1"]         # the earlier save still loads


def test_r4_3_save_refuses_a_stray_file_in_a_task_folder_and_a_file_as_folder(saves, tmp_path):
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
def test_r4_9_a_nan_test_input_is_refused_naming_the_experience():
    strategy = strategy_for(mlp())
    strategy.train(stream().train_stream[0])
    with pytest.raises(UserError, match=r"^evaluation, experience 1 \(task labels \[1\]\): row \d+ of a test "
                                        r"mini-batch holds NaN"):
        strategy.eval(stream(nan=True).train_stream)             # classes 2, 3 (experience 1) are NaN
    results = strategy.eval(stream().test_stream)
    assert all(v == v for k, v in results.items() if k.startswith("Top1_Acc"))       # finite inputs: no NaN
    assert torch.isfinite(torch.tensor([v for k, v in results.items() if k.startswith("Loss")])).all()
