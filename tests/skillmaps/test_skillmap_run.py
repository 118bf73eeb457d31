"""The skill-map run (cl_graft.skillmaps.experiment) end to end on tiny models, and the `cl-graft multitask` and
`cl-graft plot` commands that run and redraw it."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from cl_graft.errors import UserError
from cl_graft.regions.region import Region, load_heads
from cl_graft.skillmaps.report import summary

from helpers import save_tiny_model, tiny_bert, tiny_skillmap_config, tiny_splits, toy_tasks, write_task


def _snapshot(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


# ----------------------------------------------------------------------------- the skill-map run, end to end


def test_skillmap_run_end_to_end(tmp_path):
    from cl_graft.skillmaps.experiment import run_skillmap
    from cl_graft.skillmaps.results import load_skillmap

    base = tiny_bert()
    before = _snapshot(base)
    sm = run_skillmap(base, tiny_splits(), tiny_skillmap_config(), out=tmp_path, progress=False)
    assert all(torch.equal(before[n], p) for n, p in base.named_parameters()) and not base.tasks  # untouched
    loaded = load_skillmap(tmp_path)
    np.testing.assert_array_equal(loaded.acc_graft, sm.acc_graft)
    np.testing.assert_array_equal(loaded.intersections, sm.intersections)
    assert loaded.tasks == ["toy", "toypair"]
    assert loaded.groups == {"sentiment": ["toy"], "pairs": ["toypair"]}
    assert sm.acc_single.shape == (2,) and sm.acc_union.shape == (2, 2)
    # saved regions reproduce the graft row: θ_pre + γ_toy ⊙ Δ evaluated on toy
    region = Region.load(tmp_path / "regions" / "toy")
    assert region.size == sm.region_elements[0] == sm.intersections[0, 0] > 0
    assert set(load_heads(tmp_path / "regions" / "toy")) == {"heads.toy.weight", "heads.toy.bias"}
    # a single-member group's union is that task's region: same accuracies as its graft row
    np.testing.assert_allclose(sm.acc_union, sm.acc_graft)
    assert np.isfinite(sm.overlap).all() and np.allclose(np.diag(sm.overlap), 1.0)
    assert sorted(p.name for p in (tmp_path / "figures").iterdir()) == sorted(
        ["accuracy.png", "overlap.png", "iou.png", "transfer.png", "anatomy_layer.png", "anatomy_type.png",
         "composition.png", "composition_steps.png", "composition_summary.png"])
    assert "most similar regions" in summary(loaded)


def test_skillmap_run_is_seeded(tmp_path):
    from cl_graft.skillmaps.experiment import run_skillmap

    cfg = tiny_skillmap_config(single=None)
    a = run_skillmap(tiny_bert(), tiny_splits(), cfg, out=tmp_path / "a", progress=False)
    b = run_skillmap(tiny_bert(), tiny_splits(), cfg, out=tmp_path / "b", progress=False)
    assert a.acc_single is None
    for name in ("acc_graft", "acc_union", "acc_union_steps", "intersections", "acc_pre", "acc_mt"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert Region.load(tmp_path / "a" / "regions" / "toypair") == Region.load(tmp_path / "b/regions/toypair")


def test_skillmap_needs_two_tasks_and_known_group_members(tmp_path):
    from cl_graft.skillmaps.experiment import run_skillmap

    with pytest.raises(UserError, match="at least two tasks"):
        run_skillmap(tiny_bert(), {"toy": tiny_splits()["toy"]}, tiny_skillmap_config(), out=tmp_path)
    with pytest.raises(UserError, match="'sst2' is not one of the run's tasks"):
        run_skillmap(tiny_bert(), tiny_splits(), tiny_skillmap_config(groups={"s": ("sst2",)}), out=tmp_path)
    assert not any(tmp_path.iterdir())


# ----------------------------------------------------------------------------- the command line


def _cli(args):
    from click.testing import CliRunner

    from cl_graft.cli import main

    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def tiny_setup(tmp_path_factory):
    """A tiny BERT saved as a local model folder and a data folder with two toy tasks."""
    root = tmp_path_factory.mktemp("cli")
    save_tiny_model(root / "model")
    for name, rows in toy_tasks().items():
        write_task(root / "data" / name, ["a", "b"], {"train": rows * 4, "test": rows * 4})
    return root


@pytest.fixture(scope="module")
def cli_run(tiny_setup):
    out = tiny_setup / "run"
    res = _cli(["multitask", "--tasks", "toy,toypair", "--groups", "one=toy;two=toypair", "--preset", "smoke",
                "--model", tiny_setup / "model", "--data-dir", tiny_setup / "data", "--out", out])
    assert res.exit_code == 0, res.output
    return out, res.output


def test_cli_multitask_smoke_end_to_end(cli_run):
    out, output = cli_run
    assert "most similar regions" in output and "union one (toy)" in output
    config = json.loads((out / "config.json").read_text())
    assert config["command"] == "multitask" and config["tasks"] == ["toy", "toypair"]
    assert config["device"] in ("cpu", "cuda")
    assert (out / "skillmap.json").is_file() and (out / "regions/toypair/region_config.json").is_file()
    assert len(list((out / "figures").glob("*.png"))) == 9


def test_cli_refuses_to_overwrite(cli_run, tiny_setup):
    out, _ = cli_run
    before = (out / "skillmap.json").read_bytes()
    res = _cli(["multitask", "--tasks", "toy,toypair", "--model", tiny_setup / "model",
                "--data-dir", tiny_setup / "data", "--preset", "smoke", "--out", out])
    assert res.exit_code == 2 and "already holds" in res.output
    assert (out / "skillmap.json").read_bytes() == before


def test_cli_plot_redraws_without_recomputing(cli_run, tmp_path):
    out, _ = cli_run
    res = _cli(["plot", out, "--out", tmp_path / "figs"])
    assert res.exit_code == 0, res.output
    redrawn, first = (sorted(p.name for p in d.glob("*.png")) for d in (tmp_path / "figs", out / "figures"))
    assert redrawn == first


@pytest.mark.parametrize("args, message", [
    (["--tasks", "sst2"], "at least two tasks"),
    (["--tasks", "sst2,sst2"], "'sst2' more than once"),
    (["--tasks", "sst2,nosuchtask"], "unknown task 'nosuchtask'"),
    (["--tasks", "sst2,cr", "--preset", "huge"], "unknown preset 'huge'"),
    (["--tasks", "sst2,cr", "--groups", "nli=mnli"], "'mnli' is not one of the run's tasks"),
    (["--tasks", "sst2,cr", "--groups", "oops"], "expected NAME=TASK"),
    (["--tasks", "sst2,cr", "--region-size", "0"], "--region-size must be in (0, 1]"),
])
def test_cli_multitask_bad_input(tmp_path, args, message):
    res = _cli(["multitask", *args, "--data-dir", tmp_path, "--out", tmp_path / "out"])
    assert res.exit_code == 2, res.output
    assert message in res.output and len(res.output.strip().splitlines()) == 1, res.output
    assert not (tmp_path / "out").exists()


def _alien(tmp_path, cli_run, kind):
    folder = tmp_path / kind
    folder.mkdir()
    good = json.loads((cli_run[0] / "skillmap.json").read_text())
    content = {
        "other_json": {"format": "cl-graft/continual", "format_version": 1},
        "no_format": [1, 2, 3],
        "future": {**good, "format_version": 99},
        "missing_key": {k: v for k, v in good.items() if k != "intersections"},
        "bad_shape": {**good, "acc_graft": [[0.5, 0.5]]},
        "one_task": {**good, "tasks": ["toy"]},
        "bad_group": {**good, "groups": {"g": ["nope"], "h": ["toy"]}},
        "bad_numel": {**good, "numel": "many"},
    }.get(kind)
    if content is not None:
        (folder / "skillmap.json").write_text(json.dumps(content))
    elif kind == "broken_json":
        (folder / "skillmap.json").write_text("{not json")
    return folder


@pytest.mark.parametrize("kind, message", [
    ("empty", "not a cl-graft multitask results folder"), ("broken_json", "invalid JSON"),
    ("other_json", "format 'cl-graft/continual'"), ("no_format", "not a cl-graft multitask results file"),
    ("future", "format version 99"), ("missing_key", "lack 'intersections'"),
    ("bad_shape", "'acc_graft' has shape (1, 2)"), ("one_task", "two or more"), ("bad_group", "'nope'"),
    ("bad_numel", "'numel' must be a positive integer"),
])
def test_cli_plot_refuses_other_layouts(tmp_path, cli_run, kind, message):
    res = _cli(["plot", _alien(tmp_path, cli_run, kind)])
    assert res.exit_code == 2, res.output
    assert message in res.output and len(res.output.strip().splitlines()) == 1, res.output
    assert not (tmp_path / kind / "figures").exists()


def test_cli_plot_missing_folder(tmp_path):
    res = _cli(["plot", tmp_path / "nope"])
    assert res.exit_code == 2 and "no such results folder" in res.output
