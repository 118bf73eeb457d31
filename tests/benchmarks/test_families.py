"""Streams as entries: one module per family, found by the CLI; a toy family in a temporary module runs end to
end; split text streams in both scenarios, and from the Hub (a fake ``datasets.load_dataset``) without a data
folder; the two pre-trained-encoder baselines (linear-probe, ncm)."""
from __future__ import annotations

import importlib
import json
import sys

import pytest
from click.testing import CliRunner

from cl_graft.benchmarks.families import families, find_family
from cl_graft.benchmarks.families.split_text import class_order, groups
from cl_graft.cli import main
from cl_graft.errors import UserError

from helpers import cli, entry_point_module, hub_dataset, intents_env, training_calls

avalanche = pytest.importorskip("avalanche")


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    return intents_env(tmp_path_factory.mktemp("families"))


def test_each_spec_finds_its_family():
    assert {"digits", "split text", "task-list"} <= set(families())
    assert find_family("split-digits").name == "digits"
    assert find_family("permuted-digits:3").name == "digits"
    assert find_family("split-clinc150:15").name == "split text"
    assert find_family("qnli,agnews,sst2").name == "task-list"


def test_class_order_is_seeded_or_given_and_groups_are_even():
    assert class_order(None, 10, 3) == class_order(None, 10, 3) != class_order(None, 10, 4)
    assert sorted(class_order(None, 10, 3)) == list(range(10))
    assert class_order("2,0,1", 3, 0) == [2, 0, 1]
    with pytest.raises(UserError, match="--class-order"):
        class_order("0,0,1", 3, 0)
    parts = groups(list(range(11)), 3)
    assert [len(p) for p in parts] == [4, 4, 3] and sum(parts, []) == list(range(11))


@pytest.mark.parametrize("scenario", ["class", "task"])
def test_split_stream_runs_in_both_scenarios(env, tmp_path, scenario):
    out = tmp_path / scenario
    res = cli(env, "--stream", "split-intents:3", "--scenario", scenario, "--strategies",
              "graft,naive,ncm,linear-probe", "--class-order", "5,4,3,2,1,0", "--out", str(out))
    assert res.exit_code == 0, res.output
    data = json.loads((out / "results.json").read_text())
    config = json.loads((out / "config.json").read_text())
    assert data["tasks"] == ["intents-0", "intents-1", "intents-2"]
    assert config["scenario"] == scenario and config["class_order"] == [5, 4, 3, 2, 1, 0]
    assert config["groups"] == [[5, 4], [3, 2], [1, 0]]
    graft = data["strategies"]["graft"]
    if scenario == "task":
        assert graft["summary"]["forgetting"] == 0.0
    else:
        assert len(graft["info"]["task_id"]) == 3 and "task identified" in res.output
        assert graft["info"]["task_aware"] == "none (single head)"
    ncm = data["strategies"]["ncm"]
    assert ncm["summary"]["average"] > 0.8, ncm["matrix"]               # the words mark the classes
    assert ncm["bytes"] == data["strategies"]["linear-probe"]["bytes"] > 0


def test_linear_probe_trains_only_the_head_and_ncm_sets_class_means(env, tmp_path):
    from cl_graft.benchmarks.families import StreamRequest
    from cl_graft.strategies.comparison.registry import STRATEGIES, strategy_settings
    from cl_graft.strategies.comparison.clock import train_experience
    from cl_graft.strategies.comparison.runner import _build, fresh_model
    from cl_graft.strategies.interface.config import continual_setup

    data, cfg = continual_setup("smoke", seed=0)
    setup = find_family("split-intents:3").setup(StreamRequest(
        spec="split-intents:3", scenario="class", data=data, seed=0, model=str(env / "model"),
        data_dir=str(env / "data")))
    stream, _ = setup.make()
    before = {n: p.detach().clone() for n, p in setup.base.named_parameters()}
    for name in ("linear-probe", "ncm"):
        model, _ = fresh_model(setup.base, stream, 0)
        strategy = _build(STRATEGIES[name], model, cfg, strategy_settings(name, data, seed=0), 3, stream=stream,
                          report=None)
        train_experience(strategy, stream.benchmark.train_stream[0], 0)
        moved = {n for n, p in model.clf.named_parameters() if not p.detach().equal(before[n])}
        assert moved and all(n.startswith("heads.") for n in moved), (name, moved)
    head = model.clf.heads["intents"]
    seen = sorted(stream.benchmark.train_stream[0].classes_in_this_experience)
    weight, bias = head.weight.detach()[seen], head.bias.detach()[seen]
    assert float(weight.norm(dim=1).sub(1).abs().max()) < 1e-5 and float(bias.abs().max()) == 0.0


def test_bad_split_specs_are_one_line(env, tmp_path):
    for args, message in ((["--stream", "split-intents:9"], "1 <= N <= 6"),
                          (["--stream", "split-intents:2", "--class-order", "1,2"], "--class-order"),
                          (["--stream", "intents", "--scenario", "class"], "--scenario task"),
                          (["--stream", "split-digits", "--k", "3"], "--k, --data-dir do not apply to digits"),
                          (["--stream", "permuted-digitsX:3", "--model", "mlp"], "is not a digits stream"),
                          (["--stream", "split-digits,split-digits", "--model", "mlp"], "stream of its own"),
                          (["--stream", "split-intents:2", "--strategies", "naive", "--task-inference", "entropy"],
                           "none of --strategies naive does"),
                          (["--stream", "split-intents:2", "--strategies", "er-ace,single,der", "--scenario", "class"],
                           "single is a task-incremental method"),
                          (["--stream", "split-intents:3", "--strategies", "naive,graft", "--region-size", "0.5"],
                           "--region-size 0.5 for 3 tasks needs 150%"),
                          (["--stream", "split-intents:3", "--strategies", "naive,graft-paper", "--scenario", "class"],
                           "graft-paper fine-tunes each task"),
                          (["--stream", "split-intents:2", "--strategies", "er-ace,der,naive"],
                           "er-ace is a class-incremental method: it runs with --scenario class, not in the "
                           "task-incremental scenario; der is")):
        res = cli(env, *args, "--out", str(tmp_path / "x"))
        assert res.exit_code == 2 and message in res.output, (args, res.output)
        written = [p for p in (tmp_path / "x").rglob("*") if p.is_file() and not p.name.startswith(".cl-graft")]
        assert not written, (args, written)                                 # refused before any strategy trained


TOY = '''
    """A toy stream family: N experiences of the intents task, each its own head."""
    from cl_graft.benchmarks.families import StreamFamily
    from cl_graft.benchmarks.families.text import text_setup


    def setup(request):
        import dataclasses
        from cl_graft.benchmarks.data import load_rows

        rows = load_rows("intents", request.data_dir, request.data, seed=request.seed)
        n = int(request.spec.partition(":")[2])
        splits = [dataclasses.replace(rows, spec=dataclasses.replace(rows.spec, name=f"echo{i}")) for i in range(n)]
        return text_setup(request, splits, data_tasks=["intents"], record={"stream": request.spec})


    FAMILY = StreamFamily(name="echo", grammar="echo:N, one task N times", setup=setup,
                          claims=lambda spec: spec.startswith("echo:"), scenarios=("task",), priority=50)
'''


def test_a_new_family_is_one_module(env, tmp_path, monkeypatch):
    """A package of the user's (here a folder on the path with its metadata) declares the entry point."""
    points = entry_point_module(tmp_path, "toy_family", TOY, group="cl_graft.streams", name="echo")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert find_family("echo:2") is importlib.import_module("toy_family").FAMILY
        res = cli(env, "--stream", "echo:2", "--strategies", "naive", "--out", str(tmp_path / "run"))
        assert res.exit_code == 0, res.output
        assert json.loads((tmp_path / "run" / "results.json").read_text())["tasks"] == ["echo0", "echo1"]
        assert json.loads((tmp_path / "run" / "config.json").read_text())["stream_family"] == {
            "name": "echo", "module": "toy_family", "distribution": "toy-family 0.1", "entry_point": "echo"}
        points.write_text("[cl_graft.streams]\necho = no_such_module\n")
        with pytest.raises(UserError, match="echo = no_such_module .*toy-family 0.1.* cannot be loaded: "
                                            "ModuleNotFoundError"):
            find_family("echo:2")
        res = cli(env, "--stream", "intents", "--strategies", "naive", "--out", str(tmp_path / "refused"))
        assert res.exit_code == 2 and res.output.count("\n") == 1 and "plugin echo = no_such_module" in res.output
        assert not (tmp_path / "refused").exists()
    finally:
        sys.modules.pop("toy_family", None)


def test_split_stream_tunes_resumes_infers_and_matches_bytes(env, tmp_path, monkeypatch):
    """A split text stream with the harness's options: ``--tune`` chooses on dev rows (ewc's grid), an interrupted
    graft run resumes to the same results, replay-matched keeps at most graft's bytes, and ``--task-inference``
    in the task scenario reports graft's accuracy without task labels."""
    split = ["--stream", "split-intents:3", "--class-order", "5,4,3,2,1,0"]
    full = tmp_path / "full"
    res = cli(env, *split, "--scenario", "class", "--strategies", "graft,replay-matched,ewc", "--tune",
              "--tune-budget", "2", "--out", str(full))
    assert res.exit_code == 0, res.output
    runs = json.loads((full / "results.json").read_text())["strategies"]
    assert len(runs["ewc"]["info"]["tuning"]["dev_average"]) == 2 and "tuned on dev" in res.output
    assert 0 < runs["replay-matched"]["info"]["memory_bytes"] <= runs["graft"]["bytes"]
    out, settings = tmp_path / "resumed", ["--settings-from", str(full)]
    with monkeypatch.context() as m:
        training_calls(m, experience=1)
        cli(env, *split, "--scenario", "class", "--strategies", "graft", *settings, "--out", str(out))
    res = cli(env, *split, "--scenario", "class", "--strategies", "graft", *settings, "--resume", "--out", str(out))
    assert res.exit_code == 0, res.output
    resumed = json.loads((out / "results.json").read_text())["strategies"]["graft"]
    assert resumed["matrix"] == runs["graft"]["matrix"] and resumed["bytes"] == runs["graft"]["bytes"]
    assert resumed["info"]["task_id"] == runs["graft"]["info"]["task_id"]
    task = tmp_path / "task"
    res = cli(env, *split, "--scenario", "task", "--strategies", "graft", "--task-inference", "features",
              "--out", str(task))
    assert res.exit_code == 0, res.output
    agnostic = json.loads((task / "results.json").read_text())["strategies"]["graft"]["info"]["task_inference"]
    assert len(agnostic["accuracy"]) == len(agnostic["task_id"]) == 3


def test_gem_and_er_ace_run_on_a_split_text_stream(env, tmp_path):
    """Text batches share one width, so GEM's memory (its experiences' rows concatenated) and ER-ACE's memory
    loader (the memory's own collate) serve text rows; each ends above twice chance."""
    out = tmp_path / "run"
    res = cli(env, "--stream", "split-intents:2", "--scenario", "class", "--strategies", "gem,er-ace",
              "--out", str(out))
    assert res.exit_code == 0, res.output
    runs = json.loads((out / "results.json").read_text())["strategies"]
    for name in ("gem", "er-ace"):
        final = runs[name]["matrix"][-1]
        assert sum(final) / len(final) > 2 / 6, (name, runs[name]["matrix"])       # chance: 1 of 6 classes
        assert runs[name]["bytes"] > 0


def test_split_banking77_runs_from_the_hub_without_a_data_folder(env, tmp_path, monkeypatch):
    """No ``--data-dir`` and no ``$CL_GRAFT_DATA``: ``split-banking77:7`` loads the registered task through
    ``datasets.load_dataset`` (here a fake holding the Hub's shape: 77 ClassLabel names in alphabetical order, two
    train rows and one test row per intent), its labels in meta.json order."""
    import datasets

    from cl_graft.benchmarks.intent_labels import BANKING77
    from cl_graft.benchmarks.tasks import ENV_DATA

    names, calls = sorted(BANKING77, key=str.casefold), []
    splits = {"train": hub_dataset("label", names, [(f"{w} about {n}", n) for n in names for w in ("hi", "so")]),
              "test": hub_dataset("label", names, [(f"now {n}", n) for n in names])}

    def load_dataset(path, name=None, *, split):
        calls.append((path, name, split))
        return splits[split]

    monkeypatch.delenv(ENV_DATA, raising=False)
    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    out = tmp_path / "hub"
    res = CliRunner().invoke(main, ["run", "--model", str(env / "model"), "--preset", "smoke", "--stream",
                                    "split-banking77:7", "--scenario", "class", "--strategies", "ncm",
                                    "--class-order", ",".join(map(str, range(77))), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert calls == [("PolyAI/banking77", None, "train"), ("PolyAI/banking77", None, "test")]
    config = json.loads((out / "config.json").read_text())
    assert config["data_sha256"] == {"banking77": "hub:PolyAI/banking77"} and config["data"] == "huggingface-hub"
    assert config["groups"] == [list(range(11 * g, 11 * g + 11)) for g in range(7)]
    assert json.loads((out / "results.json").read_text())["tasks"] == [f"banking77-{g}" for g in range(7)]
