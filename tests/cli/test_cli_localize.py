"""`cl-graft localize`: end to end on a tiny saved BERT and toy data; bad input → one line, exit 2, nothing written."""
from __future__ import annotations

import json
import shlex

import pytest
from click.testing import CliRunner
from safetensors.torch import load_file, save_file

from cl_graft.cli import main
from cl_graft.regions.region import MASKS_NAME, Region

from helpers import save_tiny_model, write_sentiment_task

FAST = ["--preset", "smoke", "--steps", "2", "--n-batches", "1", "--select-rows", "16"]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A tiny BERT saved as a Hugging Face folder, toy data, and one finished localize run."""
    root = tmp_path_factory.mktemp("cli")
    save_tiny_model(root / "tiny")
    write_sentiment_task(root / "data", "toy", 80, 0)
    write_sentiment_task(root / "data", "toyood", 80, 1)
    base = ["--model", str(root / "tiny"), "--data-dir", str(root / "data"), *FAST]
    out = root / "run"
    res = _run(["--task", "toy", "--region-size", "0.01,0.05", "--methods", "graft,topk,random", "--ood", "toyood",
                *base, "--out", str(out)])
    assert res.exit_code == 0, res.output
    return root, base, out, res.output


def _run(args):
    return CliRunner().invoke(main, ["localize", *args])


def test_graft_retraining_and_bitfit_are_rows_of_the_table(setup, tmp_path):
    _, base, out, _ = setup
    res = _run(["--task", "toy", "--finetuned", str(out / "finetuned"), "--region-size", "0.05",
                "--methods", "retrain,bitfit", *base, "--out", str(tmp_path / "trained")])
    assert res.exit_code == 0, res.output
    rows = json.loads((tmp_path / "trained" / "results.json").read_text())["rows"]
    assert [r["name"] for r in rows] == ["FT", "retrain-0.05", "bitfit"]
    graft = Region.load(out / "regions" / "graft-0.05")              # same settings and seed: same region
    assert rows[1]["size"] == graft.size and rows[2]["region_size"] is None and rows[2]["size"] > 0
    assert all(0 <= r["accuracy"] <= 1 and 0 <= r["agreement"] <= 1 for r in rows)
    assert not (tmp_path / "trained" / "regions").exists()            # trained baselines save no region


def test_end_to_end_writes_table_regions_and_png(setup):
    _, _, out, output = setup
    results = json.loads((out / "results.json").read_text())
    names = [r["name"] for r in results["rows"]]
    assert names == ["FT", "graft-0.01", "topk-0.01", "random-0.01", "graft-0.05", "topk-0.05", "random-0.05"]
    for row in results["rows"][1:]:
        region = Region.load(out / "regions" / row["name"])
        assert region.size == row["size"] <= int(row["region_size"] * results["numel"] + 1e-6)
        assert region.meta["method"] == row["method"] and 0 <= row["agreement"] <= 1
        assert set(row["ood"]) == {"toyood"} and row["seconds"] >= 0
        assert (out / "regions" / row["name"] / "anatomy.png").stat().st_size > 1000
    assert results["rows"][0]["agreement"] == 1.0 and (out / "finetuned" / "model.safetensors").exists()
    assert "| graft-0.01 |" in output and "OOD toyood" in output
    assert "finetune toy" not in output and "localize toy" not in output   # no progress bars off a terminal
    assert (out / "table.md").read_text().startswith("toy:")
    config = json.loads((out / "config.json").read_text())
    assert config["localize"]["steps"] == 2
    words = [*shlex.split(config["command_line"]), config["data"], config["model"]]  # typed as absolute paths
    assert "--data-dir" in words and not [w for w in words if w.startswith("/")]  # recorded relative to the cwd


def test_finetuned_model_and_saved_region(setup):
    root, base, out, _ = setup
    res = _run(["--task", "toy", "--finetuned", str(out / "finetuned"), "--region-size", "0.02",
                "--methods", "lottery",
                "--region", str(out / "regions" / "graft-0.01"), *base, "--quiet", "--out", str(root / "run2")])
    assert res.exit_code == 0 and res.stdout == "", res.output                       # --quiet: errors only
    rows = json.loads((root / "run2" / "results.json").read_text())["rows"]
    assert [r["name"] for r in rows] == ["FT", "given-0-graft-0.01", "lottery-0.02"]
    assert rows[1]["size"] == Region.load(out / "regions" / "graft-0.01").size
    assert not (root / "run2" / "finetuned").exists()


def _bad_region(root, out, kind: str):
    src = out / "regions" / "topk-0.01"
    dst = root / f"bad-{kind}"
    if not dst.exists():
        region = Region.load(src)
        if kind == "mismatch":
            region = Region({"backbone.encoder.layer.7.x.weight": region.masks[region.names[0]]}, region.meta)
        if kind == "empty":
            region = region - region
        region.save(dst)
        if kind == "truncated":
            data = (dst / MASKS_NAME).read_bytes()
            (dst / MASKS_NAME).write_bytes(data[: len(data) // 2])
        if kind == "tampered":
            packed = load_file(dst / MASKS_NAME)
            name = next(iter(packed))
            packed[name][0] ^= 1
            save_file(packed, dst / MASKS_NAME)
    return str(dst)


@pytest.mark.parametrize("args, message", [
    (["--region-size", "0"], "--region-size 0 is outside (0, 1]"),
    (["--region-size", "1.5"], "--region-size 1.5 is outside (0, 1]"),
    (["--region-size", "abc"], "--region-size 'abc' is not a number"),
    (["--region-size", "1e-3,"], "empty item"),
    (["--region-size", "1e-9"], "empty region"),
    (["--region-elements", "0"], "empty region"),
    (["--region-elements", "99999999"], "over the 13578 graftable parameters"),
    (["--methods", "graft,magic"], "unknown region method 'magic'"),
    (["--ood", "nosuch"], "unknown task 'nosuch'"),
    (["--lr", "-1"], "lr a positive number"),
    (["--region", "mismatch"], "does not match region"),
    (["--region", "empty"], "is empty"),
    (["--region", "truncated"], "truncated"),
    (["--region", "tampered"], "region.safetensors: "),
    (["--region", "topk-0.05", "--region-elements", "10"], "over --region-elements 10"),
    (["--finetuned", "/no/such/model"], "not found"),
])
def test_bad_input_one_line_exit_2_nothing_written(setup, args, message):
    root, base, out, _ = setup
    if args[0] == "--region":
        args = ["--region", str(out / "regions" / args[1]) if args[1].startswith("topk") else
                _bad_region(root, out, args[1]), *args[2:]]
    target = root / "never"
    size = [] if "--region-size" in args else ["--region-size", "0.01"]
    res = _run(["--task", "toy", *size, *base, *args, "--out", str(target)])
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output, res.output
    errors = [line for line in res.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and message in errors[0] and res.output.rstrip().endswith(errors[0]), res.output
    assert not target.exists()


def test_existing_results_are_not_overwritten(setup):
    _, base, out, _ = setup
    before = (out / "results.json").read_bytes()
    res = _run(["--task", "toy", "--region-size", "0.01", "--methods", "topk", *base, "--out", str(out)])
    assert res.exit_code == 2 and "already holds" in res.output
    assert (out / "results.json").read_bytes() == before


@pytest.mark.slow
def test_real_minilm_smoke_on_real_sst2(minilm_sst2, tmp_path):
    finetuned, data, made = minilm_sst2                          # conftest: the real MiniLM fine-tuned on sst2
    assert made.exit_code == 0, made.output
    res = _run(["--task", "sst2", "--data-dir", str(data), "--finetuned", str(finetuned), "--preset", "smoke",
                "--region-size", "1e-4", "--methods", "graft,topk", "--steps", "2", "--n-batches", "1",
                "--select-rows", "32", "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    rows = json.loads((tmp_path / "o" / "results.json").read_text())["rows"]
    assert [r["size"] for r in rows] == [None, rows[1]["size"], 1064] and rows[1]["size"] <= 1064
    assert all(0 <= r["accuracy"] <= 1 and 0 <= r["ece"] <= 1 for r in rows)
