"""Dev-only tuning: grids of the same size for every strategy, test rows never handed to the tuning runs."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from cl_graft.errors import UserError
from cl_graft.task import TaskRows

from helpers import SENTIMENT, cli, results_json, strategy_json, training_calls

avalanche = pytest.importorskip("avalanche")

from cl_graft.benchmarks.data import split_dev
from cl_graft.strategies import RegionSize
from cl_graft.strategies.baselines.ewc import EWCSettings
from cl_graft.strategies.comparison.registry import STRATEGIES, StrategyEntry, strategy_settings
from cl_graft.strategies.comparison.tuning import TUNE_BUDGET, tune
from cl_graft.strategies.interface.config import continual_setup
from cl_graft.strategies.interface.settings import apply_point, has_setting

COMMITTED = Path(__file__).resolve().parents[3] / "benchmarks" / "results" / "digits" / "runs" / "split-digits-cnn-task"
"""A committed tuned seed (seed0) and a seed that reused its choice (seed1), both written when graft's setting
``region_size`` was called ``size``."""


def test_every_grid_fills_the_default_budget_with_valid_settings():
    data = continual_setup("smoke", seed=0)[0]
    tuned = {n for n, e in STRATEGIES.items() if e.grid}
    assert {"graft", "graft-paper", "packnet", "ewc", "lwf", "replay"} <= tuned
    for name in tuned:
        grid = STRATEGIES[name].grid
        assert len(grid) >= TUNE_BUDGET and len({str(p) for p in grid}) == len(grid)   # distinct candidates
        for point in grid:
            apply_point(strategy_settings(name, data, seed=0), point)   # every setting exists
    with pytest.raises(ValueError, match="not a field of EWCSettings"):
        StrategyEntry(name="x", help="y", stores="z", build=print, kept_bytes=print, settings=EWCSettings,
                      grid=({"lwf_alpha": 1},))


def test_apply_point_and_tune_pick_the_best_first_on_ties():
    data = continual_setup("smoke", seed=0)[0]
    graft = strategy_settings("graft", data, seed=0)
    assert graft.region_size == RegionSize()                         # the default: sized per task on dev rows
    fixed = apply_point(graft, {"region_size": "0.1"})               # --region-size 0.1
    assert fixed.region_size == 0.1 and apply_point(graft, {"region_size": "auto"}).region_size == RegionSize()
    assert strategy_settings("graft", data, seed=0, given={"region_size": 0.02}).region_size == 0.02
    strict = apply_point(graft, {"region_size": "auto",            # --region-size auto --tolerance 0.01
                                 "region_size.tolerance": 0.01})
    assert strict.region_size == RegionSize(tolerance=0.01)
    with pytest.raises(UserError, match="does not apply to region_size = 0.1"):
        apply_point(fixed, {"region_size.tolerance": 0.01})
    for bad in ("0", "1.5", "abc", "nan", True):
        with pytest.raises(UserError, match="region size must be auto or a share"):
            apply_point(graft, {"region_size": bad})
    ewc = strategy_settings("ewc", data, seed=0)
    assert apply_point(ewc, {"ewc_lambda": 5.0}).ewc_lambda == 5.0 and ewc.ewc_lambda == 1e4
    with pytest.raises(UserError, match="not a setting"):
        apply_point(graft, {"localize.nope": 1})
    with pytest.raises(UserError, match="not a setting of EWCSettings"):
        apply_point(ewc, {"region_size": 0.1})
    lams = [p["ewc_lambda"] for p in STRATEGIES["ewc"].grid]              # its candidates, in order
    scores = dict(zip(lams, [0.5, 0.7, 0.7, 0.9, 0.1]))
    chosen, record = tune("ewc", ewc, lambda s: scores[s.ewc_lambda])
    assert chosen.ewc_lambda == lams[1] and record["chosen"] == {"ewc_lambda": lams[1]}   # the first of the ties
    assert record["dev_average"] == [0.5, 0.7, 0.7] and record["budget"] == TUNE_BUDGET == 3
    chosen, record = tune("ewc", ewc, lambda s: scores[s.ewc_lambda], budget=4)      # one budget, any grid
    assert chosen.ewc_lambda == lams[3] and len(record["grid"]) == 4 and record["budget"] == 4
    assert len(tune("ewc", ewc, lambda s: scores[s.ewc_lambda], budget=50)[1]["grid"]) == len(STRATEGIES["ewc"].grid)
    with pytest.raises(UserError, match="tuning budget"):
        tune("ewc", ewc, lambda s: 0.0, budget=0)
    naive = strategy_settings("naive", data, seed=0)
    assert tune("naive", naive, lambda s: 1 / 0) == (naive, {})        # nothing to tune: nothing run


def test_split_dev_holds_no_test_row():
    rows = [{"text": f"r{i}", "label": i % 2} for i in range(30)]
    s = TaskRows(SENTIMENT, train=rows[:10], dev=rows[10:20], test=rows[20:])
    (t,) = split_dev([s])
    assert t.train == s.train and t.dev + t.test == s.dev and not set(map(str, t.test)) & set(map(str, s.test))
    with pytest.raises(UserError, match="needs dev rows"):
        split_dev([TaskRows(SENTIMENT, train=rows, dev=rows[:1], test=rows)])


def test_cli_tune_never_hands_test_rows_to_the_tuning_runs(env, tmp_path, monkeypatch):
    from cl_graft.strategies.comparison import runner

    seen, real = [], runner.run_strategy

    def spy(name, base, stream, cfg, settings, **kw):
        bm = stream.benchmark
        seen.append((name, settings.ewc_lambda, {str(bm.test_stream[i].dataset[j]["text"])
                                                 for i in range(len(stream.tasks))
                                                 for j in range(len(bm.test_stream[i].dataset))}))
        return real(name, base, stream, cfg, settings, **kw)

    monkeypatch.setattr(runner, "run_strategy", spy)
    out = tmp_path / "tuned"
    result = cli(env, "--stream", "alpha,beta", "--strategies", "ewc", "--tune", "--out", str(out))
    assert result.exit_code == 0, result.output
    test_texts = set()
    for name in ("alpha", "beta"):
        test_texts |= {json.loads(line)["text"] for line in (env / "data" / name / "test.jsonl").read_text().splitlines()}
    grid = [p["ewc_lambda"] for p in STRATEGIES["ewc"].grid[:3]]
    assert [lam for _, lam, _ in seen[:3]] == grid                     # three grid points, then the real run
    assert all(not texts & test_texts for _, _, texts in seen[:3])     # tuning never sees a test row
    assert seen[3][2] <= test_texts
    info = json.loads((out / "results.json").read_text())["strategies"]["ewc"]["info"]["tuning"]
    assert info["chosen"]["ewc_lambda"] == seen[3][1] and len(info["dev_average"]) == 3
    assert "tuned on dev" in result.output


def test_settings_from_reuses_a_tuned_choice_without_tuning_again(env, tmp_path, monkeypatch):
    from cl_graft.strategies.comparison import runner

    tuned = tmp_path / "tuned"
    assert cli(env, "--stream", "alpha,beta", "--strategies", "ewc,naive", "--tune", "--out", str(tuned)).exit_code == 0
    chosen = json.loads((tuned / "results.json").read_text())["strategies"]["ewc"]["info"]["tuning"]["chosen"]
    seen, real = [], runner.run_strategy

    def spy(name, base, stream, cfg, settings, **kw):
        seen.append((name, getattr(settings, "ewc_lambda", None)))
        return real(name, base, stream, cfg, settings, **kw)

    monkeypatch.setattr(runner, "run_strategy", spy)
    out = tmp_path / "seed1"
    result = cli(env, "--stream", "alpha,beta", "--strategies", "ewc,naive", "--settings-from", str(tuned),
                 "--seed", "1", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert seen == [("ewc", chosen["ewc_lambda"]), ("naive", None)]    # one run each: nothing tuned again
    saved = json.loads((out / "results.json").read_text())
    info = saved["strategies"]["ewc"]["info"]["tuning"]
    assert info == {"chosen": chosen, "from": f"{tuned} (seed 0)"} and "settings chosen on dev by" in result.output
    assert saved["run"]["settings_from"]["ewc"]["chosen"] == chosen
    ran = saved["run"]["strategy_settings"]["ewc"]                      # the record says what ran, not the default
    assert ran["ewc_lambda"] == chosen["ewc_lambda"]
    tuned_run = json.loads((tuned / "results.json").read_text())["run"]["strategy_settings"]["ewc"]
    assert tuned_run["ewc_lambda"] == chosen["ewc_lambda"]


def _tuned(folder, name: str, info: dict) -> None:
    """A finished run's results.json in ``folder`` holding ``name`` with ``info`` (as the checked loader reads it)."""
    (folder / "results.json").write_text(json.dumps(results_json({"seed": 0}, ["alpha", "beta"],
                                                                 {name: strategy_json([0.8, 0.8], info=info)})))


def test_settings_from_a_committed_run_tuned_before_the_rename_runs_the_same_settings(env, tmp_path):
    """``--settings-from`` a committed tuned run whose record names graft's choice ``size``: the choice is read as
    ``region_size`` (cl_graft.regions.names) and the run gets the settings the committed seed 1 ran with."""
    tuning = json.loads((COMMITTED / "seed0" / "results.json").read_text())["strategies"]["graft"]["info"]["tuning"]
    assert tuning["chosen"] == {"size": 0.1} and all(list(p) == ["size"] for p in tuning["grid"])
    assert not any(has_setting(e.settings, "size") for e in STRATEGIES.values())     # the old name is free
    out = tmp_path / "o"
    result = cli(env, "--stream", "alpha,beta", "--strategies", "graft", "--settings-from", str(COMMITTED / "seed0"),
                 "--out", str(out))
    assert result.exit_code == 0, result.output
    saved = json.loads((out / "results.json").read_text())
    assert saved["run"]["settings_from"]["graft"]["chosen"] == {"region_size": 0.1}
    assert saved["strategies"]["graft"]["info"]["tuning"]["chosen"] == {"region_size": 0.1}
    ran = saved["run"]["strategy_settings"]["graft"]                   # what ran: the committed seed 1's choice
    committed = json.loads((COMMITTED / "seed1" / "results.json").read_text())["run"]
    assert ran["region_size"] == committed["settings_from"]["graft"]["chosen"]["size"] == 0.1 and "size" not in ran
    before = committed["strategy_settings"]["graft"]                    # its settings before the choice
    assert {k: ran[k] for k in ("method", "reconstruct")} == {k: before[k] for k in ("method", "reconstruct")}
    assert [round(d, 2) for d in saved["strategies"]["graft"]["info"]["region_density"]] == [0.1, 0.1]


@pytest.mark.parametrize("make, extra, message", [
    (lambda d: None, [], "no results.json of a finished `cl-graft run`"),
    (lambda d: _tuned(d, "ewc", {}), [], "'ewc' was not tuned there"),
    (lambda d: _tuned(d, "ewc", {"tuning": {"chosen": {"ewc_lambda": 7}}}), [], "not a point of its grid"),
    (lambda d: _tuned(d, "ewc", {"tuning": {"chosen": {"ewc_lambda": 100.0}}}) or (d / "results.json").write_text(
        (d / "results.json").read_text().replace('"average": 0.8', '"average": 7.5')), [],
     "'strategies.ewc.summary.average' must be a number of at least 0, at most 1, got 7.5"),
    (lambda d: None, ["--tune"], "exclude each other"),
])
def test_settings_from_bad_input_is_one_line_exit_2(env, tmp_path, make, extra, message):
    src = tmp_path / "src"
    src.mkdir()
    make(src)
    result = cli(env, "--stream", "alpha,beta", "--strategies", "ewc", "--settings-from", str(src), *extra,
                 "--out", str(tmp_path / "o"))
    assert result.exit_code == 2 and message in result.output, result.output
    assert not (tmp_path / "o").exists()


def test_replay_matched_is_sized_by_the_bytes_of_the_graft_that_was_run(env, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    _tuned(src, "graft", {"tuning": {"chosen": {"region_size": 0.1}}})
    assert strategy_settings("graft", continual_setup("smoke", seed=0)[0], seed=0).region_size != 0.1
    out = tmp_path / "o"
    result = cli(env, "--stream", "alpha,beta", "--strategies", "graft,replay-matched", "--settings-from", str(src),
                 "--out", str(out))
    assert result.exit_code == 0, result.output
    runs = json.loads((out / "results.json").read_text())["strategies"]
    assert runs["graft"]["info"]["region_density"][0] == pytest.approx(0.1, abs=0.01)   # the chosen size ran
    assert 0 < runs["replay-matched"]["info"]["memory_bytes"] <= runs["graft"]["bytes"]   # (the arithmetic:
    # test_registry.py; here graft's bytes exceed the tiny stream, so the memory holds every row)


def test_tune_budget_is_one_number_for_every_strategy_and_recorded(env, tmp_path):
    out = tmp_path / "b2"
    result = cli(env, "--stream", "alpha,beta", "--strategies", "ewc,naive", "--tune", "--tune-budget", "2",
                 "--out", str(out))
    assert result.exit_code == 0, result.output
    saved = json.loads((out / "results.json").read_text())
    assert saved["run"]["tune_budget"] == 2
    assert saved["strategies"]["ewc"]["info"]["tuning"]["grid"] == [dict(p) for p in STRATEGIES["ewc"].grid[:2]]
    result = cli(env, "--stream", "alpha,beta", "--strategies", "ewc", "--tune-budget", "2",
                 "--out", str(tmp_path / "x"))
    assert result.exit_code == 2 and "add --tune" in result.output


def test_a_grid_point_the_stream_cannot_run_is_skipped_not_fatal():
    data = continual_setup("smoke", seed=0)[0]
    graft = strategy_settings("graft", data, seed=0)

    def score(s):                                    # the 0.1 point outgrows a long stream's capacity
        if s.region_size == 0.1:
            raise UserError("region budget 1921 is larger than the 0 free graftable elements")
        return 0.9 if s.region_size == 0.01 else 0.8

    chosen, record = tune("graft", graft, score)
    assert chosen.region_size == 0.01 and record["dev_average"][2] is None
    assert "larger than" in record["failed"]["2"]
    with pytest.raises(UserError, match="none of its 3 grid points ran"):
        tune("graft", graft, lambda s: score(apply_point(s, {"region_size": 0.1})))


def test_an_interrupted_search_continues_from_its_last_finished_experience(env, tmp_path, monkeypatch):
    args = ("--stream", "alpha,beta", "--strategies", "graft", "--tune", "--tune-budget", "2")
    out, whole = tmp_path / "stopped", tmp_path / "whole"
    with monkeypatch.context() as m:
        training_calls(m, stop_at=4)                   # the second grid point's second experience is interrupted
        assert cli(env, *args, "--out", str(out)).exit_code != 0
    assert (out / "graft" / "tune" / "1" / "score.json").exists()
    assert not (out / "graft" / "tune" / "2" / "score.json").exists()
    calls = training_calls(monkeypatch)
    resumed = cli(env, *args, "--out", str(out), "--resume")
    assert resumed.exit_code == 0, resumed.output
    assert [seed for _, seed in calls] == [1, 0, 1]     # point 1 read back, point 2 from its second experience, the run
    assert cli(env, *args, "--out", str(whole)).exit_code == 0
    runs = [json.loads((d / "results.json").read_text())["strategies"]["graft"] for d in (out, whole)]
    assert runs[0]["info"]["tuning"] == runs[1]["info"]["tuning"]
    assert runs[0]["matrix"] == runs[1]["matrix"]
