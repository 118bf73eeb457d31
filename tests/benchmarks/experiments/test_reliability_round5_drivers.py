"""Reliability, round 5 (issue 56), the multi-seed drivers' items: an ``--out`` spelled with ``..`` or through a
link is not taken for a folder inside a running command's (item 2); the options the driver sets are its own (item
3); ``--report-from`` a folder without the benchmark writes nothing (item 9); and the smaller items: ``--settings-from``
a run that chose no settings, a hand-edited ``results.json``, the driver module run alone. The probe group
``round5_drivers`` (``benchmarks.experiments.probes.reliability``) runs the same cases as a user would."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from cl_graft.benchmarks.experiments import seeds
from cl_graft.benchmarks.experiments.class_text import main
from cl_graft.errors import UserError
from cl_graft.outdir import claim_out_dir
from cl_graft.schema import sealed
from click.testing import CliRunner

from helpers import cli, results_json, strategy_json

pytest.importorskip("avalanche")


class Claiming:
    """Stands in for the driver's ``subprocess``: each ``cl-graft run`` claims its ``--out`` as the command does
    first, then fails (exit 2), so nothing trains; ``claims`` keeps each claim's outcome."""

    def __init__(self):
        self.claims: list[str] = []

    def run(self, cmd, **_):
        args = cmd[3:]
        try:
            with claim_out_dir(Path(args[args.index("--out") + 1]), "run", settings={}):
                self.claims.append("claimed")
        except UserError as e:
            self.claims.append(str(e))
        return subprocess.CompletedProcess(cmd, 2)


def _one_error(result) -> str:
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    return lines[0]


# ----- 2: --out with `..` or through a link --------------------------------------------------------------------------
def test_2_the_drivers_invocations_under_an_out_spelled_with_dotdot_are_not_refused(tmp_path, monkeypatch):
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    started = Claiming()
    monkeypatch.setattr(seeds, "subprocess", started)
    result = CliRunner().invoke(main, ["--benchmarks", "split-intents:2//class", "--seeds", "0,1", "--class-peers",
                                       "naive", "--out", "../out/S2"])
    assert started.claims == ["claimed"], started.claims             # the invocation claimed work/.../seed0
    assert result.exit_code == 2 and "exited with 2" in result.output


def test_2_nested_folders_compare_resolved_paths_on_both_sides(tmp_path, monkeypatch):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real", target_is_directory=True)
    with claim_out_dir(tmp_path / "busy", "run", settings={}):                     # a command writing busy/
        monkeypatch.chdir(tmp_path / "busy")
        with claim_out_dir(Path("../sibling"), "run", settings={}) as sibling:   # cl-graft run --out ../sibling
            assert sibling.path.resolve() == tmp_path / "sibling"
        with pytest.raises(UserError, match="which is running"):
            claim_out_dir(Path("../link/../busy/inside"), "run", settings={})
    params = {"out": tmp_path / "link" / "S2", "overwrite": False}
    with seeds.claimed("test", params) as run_dir:                   # the script's scratch lent through the link
        scratch = seeds.work_folder(run_dir)
        with claim_out_dir(tmp_path / "real" / "S2" / "work" / "x", "run", settings={}):
            pass
        with pytest.raises(UserError, match="which is running"):     # out of the lent folder through `..`
            claim_out_dir(scratch / ".." / "results", "run", settings={})
    assert not (tmp_path / "real" / "S2" / "results").exists()


# ----- 3: the options the driver owns -----------------------------------------------------------------------------
@pytest.mark.parametrize("given, named", [
    (["--run-option=--seed=7"], "--seed"),
    (["--run-option=--seed", "--run-option=7"], "--seed"),
    (["--run-option", "--seed 7"], "--seed"),
    (["--run-option=--out=/abs/dir"], "--out"),
    (["--run-option=--steps=5", "--run-option=--settings-from=x"], "--settings-from"),
    (["--run-option=--tune"], "--tune"),
    (["--run-option=--strategies=graft"], "--strategies"),
    (["--run-option=--stream=split-digits"], "--stream"),
    (["--run-option=--scenario=task"], "--scenario"),
])
def test_3_a_run_option_the_driver_sets_is_refused_before_anything_runs(tmp_path, monkeypatch, given, named):
    started = Claiming()
    monkeypatch.setattr(seeds, "subprocess", started)
    error = _one_error(CliRunner().invoke(main, ["--benchmarks", "split-intents:2//class", "--seeds", "0,1",
                                                 "--class-peers", "naive", "--out", str(tmp_path / "o"), *given]))
    assert f"the driver sets {named} of every invocation itself" in error, error
    assert started.claims == [] and not (tmp_path / "o").exists()


def test_3_a_model_run_option_beside_a_benchmark_that_names_its_model_is_refused(tmp_path, monkeypatch):
    started = Claiming()
    monkeypatch.setattr(seeds, "subprocess", started)
    base = ["--class-peers", "naive", "--seeds", "0,1", "--run-option=--model=other", "--out", str(tmp_path / "o")]
    error = _one_error(CliRunner().invoke(main, [*base, "--benchmarks", "split-digits/mlp/class"]))
    assert "benchmark split-digits/mlp/class names its model" in error, error
    assert started.claims == [] and not (tmp_path / "o").exists()    # (an empty MODEL takes it: test_class_text_driver)


def test_3_a_seed_or_a_benchmark_given_twice_is_refused(tmp_path, monkeypatch):
    started = Claiming()
    monkeypatch.setattr(seeds, "subprocess", started)
    base = ["--class-peers", "naive", "--out", str(tmp_path / "o")]
    error = _one_error(CliRunner().invoke(main, [*base, "--benchmarks", "split-intents:2//class", "--seeds", "0,0"]))
    assert "--seeds lists seed 0 twice" in error
    error = _one_error(CliRunner().invoke(main, [*base, "--benchmarks", "split-intents:2//class", "--seeds", "0,1",
                                                 "--seeds-of", "split-intents:2//class=3,1,3"]))
    assert "--seeds-of split-intents:2//class lists seed 3 twice" in error
    error = _one_error(CliRunner().invoke(main, [*base, "--benchmarks", "split-intents:2//class,split-intents:2//class",
                                                 "--seeds", "0,1"]))
    assert "--benchmarks lists split-intents:2//class twice" in error
    error = _one_error(CliRunner().invoke(main, [*base, "--benchmarks", "split-intents:2//class", "--seeds", "0,1",
                                                 "--seeds-of", "split-intents:2//class=3,4", "--seeds-of",
                                                 "split-intents:2//class=5,6"]))       # the last one kept, silently
    assert "--seeds-of gives benchmark split-intents:2//class twice ('split-intents:2//class=3,4' and " \
           "'split-intents:2//class=5,6')" in error, error
    assert started.claims == [] and not (tmp_path / "o").exists()


@pytest.mark.parametrize("given, message", [("0,0", "--seeds lists seed 0 twice"),
                                            ("a,b", "--seeds is comma-separated whole numbers")])
def test_3_the_continual_seeds_driver_reads_its_seeds_as_the_page_drivers_do(tmp_path, given, message):
    from cl_graft.benchmarks.experiments.continual_seeds import main as continual

    error = _one_error(CliRunner().invoke(continual, ["--seeds", given, "--out", str(tmp_path / "o")]))
    assert message in error and not (tmp_path / "o").exists()


# ----- 9: --report-from a folder without the benchmark ------------------------------------------------------------
def test_9_report_from_a_folder_without_the_benchmark_names_it_and_writes_nothing(tmp_path):
    kept = tmp_path / "earlier" / "runs" / "split-other-2-class" / "seed0"
    kept.mkdir(parents=True)
    (kept / "results.json").write_text("{}")
    error = _one_error(CliRunner().invoke(main, ["--benchmarks", "split-intents:2//class", "--report-from",
                                                 str(tmp_path / "earlier"), "--out", str(tmp_path / "o")]))
    assert "runs/ holds no run of benchmark split-intents:2//class" in error and "split-other-2-class" in error
    assert not (tmp_path / "o").exists()
    error = _one_error(CliRunner().invoke(main, ["--benchmarks", "split-other:2//class", "--report-from",
                                                 str(tmp_path / "earlier"), "--out", str(tmp_path / "o")]))
    assert f"{kept / 'results.json'}: field 'run' is missing" in error           # read before anything is copied
    assert not (tmp_path / "o").exists()


# ----- smaller items -------------------------------------------------------------------------------------------------
def test_settings_from_a_run_that_chose_no_settings_is_refused_in_one_line(env, tmp_path):
    untuned = tmp_path / "untuned"
    result = cli(env, "--stream", "alpha,beta", "--strategies", "naive", "--steps", "2", "--quiet",
                 "--out", str(untuned))
    assert result.exit_code == 0, result.output
    result = cli(env, "--stream", "alpha,beta", "--strategies", "naive", "--steps", "2", "--settings-from",
                 str(untuned), "--out", str(tmp_path / "o"))
    assert result.exit_code == 2 and "its run chose no settings" in result.output, result.output
    assert str(untuned / "results.json") in result.output and not (tmp_path / "o").exists()
    saved = json.loads((untuned / "results.json").read_text())
    assert saved["sha256"] == sealed(saved)["sha256"]                 # the run sealed its results


def test_a_hand_edited_tuned_choice_in_results_json_is_refused_naming_the_file(env, tmp_path):
    from cl_graft.strategies.comparison.registry import STRATEGIES

    grid = STRATEGIES["ewc"].grid
    src = tmp_path / "tuned"
    src.mkdir()
    info = {"tuning": {"chosen": dict(grid[0])}}
    results = sealed(results_json({"seed": 0, "tune": True}, ["alpha", "beta"],
                                  {"ewc": strategy_json([0.8, 0.8], info=info)}))
    results["strategies"]["ewc"]["info"]["tuning"]["chosen"] = dict(grid[1])     # a valid point, not the one chosen
    (src / "results.json").write_text(json.dumps(results))
    result = cli(env, "--stream", "alpha,beta", "--strategies", "ewc", "--steps", "2", "--settings-from", str(src),
                 "--out", str(tmp_path / "o"))
    assert result.exit_code == 2, result.output
    assert f"{src / 'results.json'}: field 'sha256' does not match the file's content" in result.output
    assert not (tmp_path / "o").exists()


def test_the_driver_module_run_alone_says_which_scripts_to_run():
    done = subprocess.run([sys.executable, "-m", "cl_graft.benchmarks.experiments.seeds"], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("Error: ") and len(done.stderr.strip().splitlines()) == 1
    assert "cl_graft.benchmarks.experiments.class_text" in done.stderr


def test_the_probe_runs_these_cases_as_a_user_would(tmp_path):
    from cl_graft.benchmarks.experiments.probes.reliability import recorded_settings, references, round5_drivers
    from cl_graft.benchmarks.experiments.probes.reliability.harness import Probe
    from cl_graft.benchmarks.experiments.probes.reliability.probe import GROUPS

    read = (references, recorded_settings)                 # it reads the reference run and the tuned run they make
    assert all(GROUPS.index(round5_drivers) > GROUPS.index(group) for group in read)
    cases = round5_drivers.cases(Probe(tmp_path, tmp_path / "data"))
    names = " ".join(c.name for c in cases)
    for item in ("`..`", "--run-option=--seed=7", "--run-option=--out", "--seeds 0,0", "--benchmarks B,B",
                 "--report-from", "chose no settings", "results.json was edited", "driver module alone"):
        assert item in names, item
    assert [c.want for c in cases].count(0) == 1 and all(c.want == 2 for c in cases[1:])
