"""``cl-graft export`` of a split text run, in both scenarios: a task exports as a transformers folder (the class
scenario's head over every class seen up to the task, stated in ``cl_graft_task.json``; the task scenario's its
group's own, scoring what the run scored), and data other than the run's is refused in one line."""
from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner

avalanche = pytest.importorskip("avalanche")

from cl_graft.cli import main

from helpers import cli, intents_env

SPLIT = ["--stream", "split-intents:3", "--class-order", "5,4,3,2,1,0", "--strategies", "graft", "--steps", "2",
         "--quiet"]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    return intents_env(tmp_path_factory.mktemp("export-split"))


def _export(env, run, out, data=None):
    return CliRunner().invoke(main, ["export", "--skills", str(run / "graft/state/skills"), "--task", "intents-1",
                                     "--data-dir", str(data or env / "data"), "--out", str(out)])


@pytest.mark.parametrize("scenario", ["class", "task"])
def test_a_split_text_task_exports_as_a_transformers_folder(env, tmp_path, scenario):
    from transformers import AutoModel

    from cl_graft.benchmarks.families import recorded_setup
    from cl_graft.strategies.graft.export import load_task_model
    from cl_graft.training.evaluate import evaluate

    run, out = tmp_path / "run", tmp_path / "exported"
    assert cli(env, *SPLIT, "--scenario", scenario, "--out", str(run)).exit_code == 0
    result = _export(env, run, out)
    assert result.exit_code == 0, result.output
    labels = AutoModel.from_pretrained(out).config.id2label
    stated = json.loads((out / "cl_graft_task.json").read_text()).get("head_classes")
    if scenario == "class":                         # groups [5, 4], [3, 2]: every class seen up to intents-1
        assert labels == {0: "c2", 1: "c3", 2: "c4", 3: "c5"}
        assert stated["head"] == "intents" and stated["ids"] == [2, 3, 4, 5] and "every class seen" in stated["rule"]
    else:                                           # its group's head, as the run scored it
        assert labels == {0: "c3", 1: "c2"} and stated is None
        record = json.loads((run / "config.json").read_text())
        rows = recorded_setup(record, str(env / "data")).make()[0].splits[1].test     # the run's own test rows
        matrix = json.loads((run / "results.json").read_text())["strategies"]["graft"]["matrix"]
        assert evaluate(load_task_model(out), rows, "intents-1")[0]["accuracy"] == pytest.approx(matrix[-1][1])
    other = shutil.copytree(env / "data", tmp_path / "other")
    with open(other / "intents" / "train.jsonl", "a") as f:
        f.write(json.dumps({"text": "great good", "label": 0}) + "\n")
    refused = _export(env, run, tmp_path / "from-other", data=other)
    assert refused.exit_code == 2 and "data differs from the run's" in refused.output, refused.output
    assert not (tmp_path / "from-other").exists()
