"""Every experiment script follows one output rule (benchmarks/experiments/script_out.py): ``--out DIR`` claimed as a
command's folder, scratch in ``DIR/work``, the run record ``DIR/config.json`` listing every file written.

Each script answers ``--help`` with ``--out`` and none of the old output options; the scripts that run in seconds
on tiny settings (their own options) run once into a fresh ``--out``; the others need MiniLM or the real data.
"""
from __future__ import annotations

import importlib
import json
import os
import pkgutil
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from cl_graft.outdir import SCRATCH_ENV, claim_out_dir

pytest.importorskip("avalanche")

from cl_graft.benchmarks import experiments
from cl_graft.benchmarks.experiments.script_out import WORK, claimed, work_folder

from helpers import REPO_ROOT, results_json, strategy_json

OLD_OPTIONS = ("--work", "--results", "--log-dir", "--json", "--report-only-in-place")


def _scripts() -> dict[str, click.Command]:
    """Every script (a module with a click ``main``), named relative to the package (``probes.small_regions``)."""
    found = {}
    for info in pkgutil.walk_packages(experiments.__path__, f"{experiments.__name__}."):
        if info.name.endswith(".__main__"):
            continue
        module = importlib.import_module(info.name)
        if isinstance(getattr(module, "main", None), click.Command):
            found[info.name.removeprefix(f"{experiments.__name__}.")] = module.main
    return found


SCRIPTS = _scripts()


def _invoke(script: str, args: list) -> click.testing.Result:
    return CliRunner().invoke(SCRIPTS[script], [str(a) for a in args])


def _record(out: Path, *, users: tuple[str, ...] = ()) -> list[str]:
    """The files the run record lists, checked against the folder (less the owner file and the user's files)."""
    files = json.loads((out / "config.json").read_text())["files"]
    present = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert files == [f for f in present if f != ".cl-graft.json" and f not in users]
    return files


def test_the_scripts_are_found():
    assert {"benchmarks_page", "continual_seeds", "distributed_scaling", "example_avalanche", "localization",
            "region_sweep", "digits", "probes.reliability.probe", "probes.task_inference_rules", "text_size_page",
            "probes.retrain_ab", "probes.retrain_in_region", "probes.small_regions"} <= set(SCRIPTS)
    assert "region_size" not in SCRIPTS                                   # retired: the digits tables replace it


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_help_names_out_and_no_old_output_option(script):
    result = _invoke(script, ["--help"])
    assert result.exit_code == 0, result.output
    assert "--out DIRECTORY" in result.output and "--overwrite" in result.output
    assert not [o for o in OLD_OPTIONS if f"{o} " in result.output]


def _text_run(seed: int) -> dict:
    """A ``cl-graft run`` results.json of graft and single on two tasks (what text_size_page reads)."""
    sizing = [{"share": 0.01, "cap_share": 0.2, "below_cap": True, "loss": 0.01, "bound": 0.02, "temperature": 1.5,
               "free": 0.9, "search_seconds": 3.0}] * 2
    sizing[1] = {**sizing[1], "retrain": {"rung_share": 0.05, "kept": True}}          # retrained from the 5% rung
    return results_json({"seed": seed, "command_line": "cl-graft run", "git_revision": "abc", "device_name": "cpu",
                         "torch": "2"}, ["qnli", "sst2"],
                        {"graft": strategy_json([0.8, 0.9], info={"sizing": sizing,
                                                                  "task_bytes": [{"total": 10 ** 6}] * 2},
                                                bytes=2 ** 21, seconds=120.0),
                         "single": strategy_json([0.8, 0.8], forgetting=float("nan"))})


def _sweep_part(task: str) -> dict:
    """One task's region_sweep.json (what --merge reads)."""
    cand = {"name": "topk", "size": 10, "seconds": 1.0, "dev_choose": 0.6, "test": {"accuracy": 0.7, "ece": 0.05}}
    cell = {"chosen": "topk", "chosen_point": {}, "candidates": [cand], "diff_test": 0.0, "se_single": 0.01,
            "se_paired": 0.01, "verdict": "within noise", "posthoc_best_test": {"name": "topk", "diff_test": 0.0}}
    return {"config": {"command_line": f"sweep {task}", "git_revision": "abc"}, "localize_base": {"steps": 12},
            "grid": [], "split_seed": 13, "ft": {task: {"n_test": 100, "test": 0.75}},
            "cells": {task: {"0.0001": cell}}}


def test_page_scripts_from_results(tmp_path):
    runs = [tmp_path / f"s{s}.json" for s in (0, 1)]
    for seed, path in enumerate(runs):
        path.write_text(json.dumps(_text_run(seed)))
    result = _invoke("text_size_page", ["--runs", ",".join(map(str, runs)), "--out", tmp_path / "text"])
    assert result.exit_code == 0, result.output
    assert _record(tmp_path / "text") == ["config.json", "text.md"]
    assert "| qnli | 1.00 | – | 20.0 |" in (tmp_path / "text" / "text.md").read_text()
    assert "| sst2 | 1.00 | 5.00 (kept) | 20.0 |" in (tmp_path / "text" / "text.md").read_text()
    again = _invoke("text_size_page", ["--runs", runs[0], "--out", tmp_path / "text"])
    assert again.exit_code == 2 and "pass --overwrite" in again.output           # its own folder, not silently
    (tmp_path / "text" / "notes.txt").write_text("the user's")
    assert _invoke("text_size_page", ["--runs", runs[0], "--out", tmp_path / "text", "--overwrite"]).exit_code == 0
    assert (tmp_path / "text" / "notes.txt").read_text() == "the user's"     # --overwrite replaces only its files
    assert _record(tmp_path / "text", users=("notes.txt",)) == ["config.json", "text.md"]
    for task, path in (("sst2", tmp_path / "a.json"), ("qnli", tmp_path / "b.json")):
        path.write_text(json.dumps(_sweep_part(task)))
    merged = _invoke("region_sweep", ["--merge", tmp_path / "a.json", "--merge", tmp_path / "b.json", "--out",
                                      tmp_path / "sweep", "--page", tmp_path / "sweep.md"])
    assert merged.exit_code == 0, merged.output
    assert _record(tmp_path / "sweep") == ["config.json", "region_sweep.json", "region_sweep.md"]
    assert (tmp_path / "sweep.md").read_text().startswith("#")


def test_benchmarks_page_tables_only(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO_ROOT)                                      # the committed artifacts, as the page names them
    out, page = tmp_path / "bp", tmp_path / "BENCHMARKS.md"
    result = _invoke("benchmarks_page", ["--tables-only", "--out", out, "--page", page])
    assert result.exit_code == 0, result.output
    assert _record(out) == ["BENCHMARKS.md", "config.json", "report.json"]
    assert page.read_text().startswith("# cl-graft benchmarks")


def test_a_script_refuses_a_folder_it_did_not_write(tmp_path):
    (tmp_path / "theirs").mkdir()
    (tmp_path / "theirs" / "data.csv").write_text("x")
    result = _invoke("digits", ["--out", tmp_path / "theirs", "--benchmarks", "split-digits/mlp/class"])
    assert result.exit_code == 2 and "choose a new or empty folder" in result.output
    assert sorted(p.name for p in (tmp_path / "theirs").iterdir()) == ["data.csv"]


def test_scratch_is_lent_to_the_commands_a_script_starts_and_nothing_else(tmp_path):
    params = {"out": tmp_path / "script", "overwrite": False}
    with claimed("test", params) as run_dir:
        scratch = work_folder(run_dir)
        assert scratch == tmp_path / "script" / WORK
        with claim_out_dir(scratch / "child", "run", settings={}) as child:      # a command the script started
            child.finish({})
            with pytest.raises(click.ClickException, match="inside"), \
                    claimed("other", {"out": scratch / "child" / "x"}):          # ... but not inside that one
                pass
        with pytest.raises(click.ClickException, match="inside"), \
                claimed("other", {"out": tmp_path / "script" / "results"}):      # nor beside the scratch
            pass
    assert SCRATCH_ENV not in os.environ
    assert "work/child/config.json" in _record(tmp_path / "script")              # the child's files are the run's


def test_the_record_names_the_checkout_as_the_script_started(tmp_path, monkeypatch):
    """A page script writes a tracked page inside its block; its record keeps the revision read before that (not
    ``+dirty`` from its own page)."""
    from cl_graft import provenance

    states = iter(["abc", "abc+dirty"])
    monkeypatch.setattr(provenance, "git_revision", lambda: next(states))
    with claimed("test", {"out": tmp_path / "o"}) as run_dir:
        (run_dir.path / "page.md").write_text("x")
    assert json.loads((tmp_path / "o" / "config.json").read_text())["git_revision"] == "abc"


def test_example_avalanche_writes_its_logs_into_out(env, tmp_path):
    out = tmp_path / "example"
    args = ["--stream", "alpha,beta", "--data-dir", env / "data", "--model", env / "model", "--k", "16",
            "--epochs", "1", "--region-size", "0.05", "--out", out]
    metrics = SCRIPTS["example_avalanche"].main([str(a) for a in args], standalone_mode=False)
    assert metrics["StreamForgetting/eval_phase/test_stream"] == 0.0
    files = _record(out)
    assert {"config.json", "logs/log.txt", "logs/eval_results.csv"} <= set(files)
    assert (out / "logs" / "log.txt").stat().st_size > 0


def _digits_run(seed: int, retrain: float, average: float) -> dict:
    """A ``cl-graft run ... --strategies graft --retrain R`` results.json (what probes/retrain_ab.py reads)."""
    sizing = [{"share": 0.01, "retrain": {"kept": True}}, {"share": 0.05, "retrain": {"kept": False}}] if retrain \
        else [{"share": 0.02}, {"share": 0.1}]
    return results_json({"seed": seed, "command_line": f"cl-graft run --retrain {retrain}", "git_revision": "abc1234",
                         "stream": "split-digits", "model": "mlp", "scenario": "task",
                         "strategy_settings": {"graft": {"size": {"retrain": retrain}}}}, ["t0", "t1"],
                        {"graft": strategy_json([average, average], info={"sizing": sizing}, bytes=10 ** 6)})


def test_retrain_ab_pairs_the_variants_by_seed(tmp_path):
    runs = []
    for seed in (0, 1, 2):
        for retrain, average in ((0.0, 0.90), (0.25, 0.88 + 0.01 * seed)):
            runs.append(tmp_path / f"r{retrain}-s{seed}.json")
            runs[-1].write_text(json.dumps(_digits_run(seed, retrain, average)))
    result = _invoke("probes.retrain_ab", ["--runs", ",".join(map(str, runs)), "--out", tmp_path / "page"])
    assert result.exit_code == 0, result.output
    text = (tmp_path / "page" / "retrain.md").read_text()
    assert "| split-digits | mlp | task | 0 | 3 | 90.00 | – | 6.00 | 10.0 | 1.00 | 0 of 6 |" in text
    assert "| split-digits | mlp | task | 0.25 | 3 | 89.00 | -1.00 [-3.48, +1.48] | 3.00 | 5.0 | 1.00 | 3 of 6 |" in text
    fixed = _digits_run(0, 0.0, 0.9)
    fixed["run"]["strategy_settings"]["graft"]["size"] = 0.01
    runs[0].write_text(json.dumps(fixed))
    bad = _invoke("probes.retrain_ab", ["--runs", ",".join(map(str, runs)), "--out", tmp_path / "page2"])
    assert bad.exit_code == 2 and "fixed region size" in bad.output and not (tmp_path / "page2").exists()
