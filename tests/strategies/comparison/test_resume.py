"""Resuming a stream from a strategy's state: the runner's progress file is the commit point, and graft's state
(``strategies/graft/run_state.py``) handles what a save torn before that file leaves: its skills listed one task
ahead are kept (only the row is measured again), the next task's folder written before ``skills.json`` is removed,
anything else beyond the progress file is refused with one line and deleted nowhere."""
from __future__ import annotations

import itertools
import json
import shutil
import time

import pytest

from cl_graft.errors import UserError
from cl_graft.files import read_safetensors, write_safetensors

avalanche = pytest.importorskip("avalanche")

from cl_graft.benchmarks.streams import Stream
from cl_graft.strategies.comparison import runner
from cl_graft.strategies.comparison.registry import strategy_settings
from cl_graft.strategies.interface.config import continual_setup

from helpers import training_calls
from helpers.toy_streams import build_model, stream_rows

DATA, CFG = continual_setup("smoke", seed=0)
SETTINGS = strategy_settings("graft", DATA, seed=0, given={"region_size": 0.05})


def _run(state_dir):
    """graft on the toy stream, its state in ``state_dir``; with feature statistics (``--task-inference features``),
    so their file is saved and resumed too."""
    return runner.run_strategy("graft", build_model(), Stream.make(stream_rows(), build_model()), CFG, SETTINGS,
                               state_dir=state_dir, task_inference="features")


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    state = tmp_path_factory.mktemp("full") / "state"
    result = _run(state)
    result.info["state_dir"] = state
    return result


def full_state(result):
    return result.info["state_dir"]


def _interrupt_training(monkeypatch, state_dir) -> None:
    """Runs the stream until the second experience's training, which is killed (its task is never saved)."""
    with monkeypatch.context() as m:
        training_calls(m, experience=1)
        with pytest.raises(KeyboardInterrupt):
            _run(state_dir)


def test_skills_saved_but_not_committed_are_kept_and_only_their_row_measured(full, tmp_path, monkeypatch):
    state_dir, save, calls = tmp_path / "state", runner._save_progress, []

    def killed_before_commit(*args, **kwargs):                  # the state's save has run (an argument of this call)
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        save(*args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(runner, "_save_progress", killed_before_commit)
        with pytest.raises(KeyboardInterrupt):
            _run(state_dir)
    assert len(json.loads((state_dir / "skills" / "skills.json").read_text())["tasks"]) == 2
    assert len(json.loads((state_dir / "progress.json").read_text())["rows"]) == 1
    trained = training_calls(monkeypatch)
    resumed = _run(state_dir)
    assert trained == [] and resumed.matrix == full.matrix and resumed.bytes == full.bytes


def test_what_a_save_torn_before_skills_json_wrote_of_the_next_task_is_dropped(full, tmp_path, monkeypatch):
    state_dir = tmp_path / "state"
    _interrupt_training(monkeypatch, state_dir)
    skills = state_dir / "skills"
    shutil.copytree(skills / "task-00", skills / "task-01")             # a patch's files, then a temporary name
    (skills / "task-01" / ".patch.safetensors.x1y2.tmp").write_bytes(b"torn")
    stats = read_safetensors(skills / "features.safetensors")           # and the next task's statistics
    assert stats and all(k.startswith("0.") for k in stats)
    write_safetensors(skills / "features.safetensors", {**stats, **{"1." + k[2:]: t.clone() for k, t in stats.items()}})
    resumed = _run(state_dir)
    assert resumed.matrix == full.matrix and resumed.bytes == full.bytes
    assert sorted(p.name for p in (skills / "task-01").iterdir()) == ["patch.safetensors", "patch_config.json"]
    assert read_safetensors(skills / "features.safetensors").keys() == \
        read_safetensors(full_state(full) / "skills" / "features.safetensors").keys()


def test_a_resumed_run_counts_what_the_earlier_process_spent(full, tmp_path, monkeypatch):
    state_dir, ticks = tmp_path / "state", itertools.count()
    with monkeypatch.context() as m:                              # the first process: 1000 CPU seconds per reading
        m.setattr(time, "process_time", lambda: 1000.0 * next(ticks))
        _interrupt_training(m, state_dir)
    spent = json.loads((state_dir / "progress.json").read_text())["spent"]
    assert min(spent[k] for k in ("cpu_seconds", "train_cpu_seconds", "eval_cpu_seconds")) >= 1000
    resumed = _run(state_dir)                                     # the real clock: a few seconds
    assert resumed.matrix == full.matrix and resumed.info["resumed_after"] == 1 and "resumed_after" not in full.info
    for k in ("cpu_seconds", "train_cpu_seconds", "eval_cpu_seconds", "train_seconds", "eval_seconds"):
        assert resumed.info[k] >= spent[k], k


TORN = "not one a torn save of this run leaves"


@pytest.mark.parametrize("make, named, says", [
    (lambda s: (shutil.copytree(s / "task-00", s / "task-01"), (s / "task-01" / "notes.txt").write_text("mine")),
     "task-01", TORN),
    (lambda s: shutil.copytree(s / "task-00", s / "task-02"), "task-02", TORN),
    (lambda s: (shutil.copytree(s / "task-00", s / "task-01"), shutil.copytree(s / "task-00", s / "task-02")),
     "task-02", TORN),
    (lambda s: (s / "task-01").symlink_to(s / "task-00"), "task-01", TORN),
    (lambda s: ((s / "features.safetensors").rename(s / "f"), (s / "features.safetensors").symlink_to(s / "f")),
     "features.safetensors", "writes nothing through links"),
])
def test_anything_else_beyond_the_progress_file_is_refused_and_kept(tmp_path, monkeypatch, make, named, says):
    state_dir = tmp_path / "state"
    _interrupt_training(monkeypatch, state_dir)
    skills = state_dir / "skills"
    make(skills)
    before = sorted(str(p.relative_to(skills)) for p in skills.rglob("*"))
    with pytest.raises(UserError) as error:
        _run(state_dir)
    message = str(error.value)
    assert "\n" not in message and message.startswith(f"{skills / named}:")
    assert says in message
    assert sorted(str(p.relative_to(skills)) for p in skills.rglob("*")) == before
