"""Reliability, round 4 (issue 45): the settings that run are the settings recorded, a resumed run is checked like
a saved one, the Python API keeps the command line's folder rules, and the page scripts read results through the
same schema as ``cl-graft``. One test per item; the probe (``benchmarks.experiments.reliability_probe``) runs the
same cases as a user would."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

avalanche = pytest.importorskip("avalanche")

from cl_graft.cli import main

RUN = ["run", "--model", "mlp", "--preset", "smoke", "--quiet"]


def _invoke(*args):
    return CliRunner().invoke(main, [*RUN, *map(str, args)])


def _one_line_error(result, *needles: str) -> str:
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    assert all(n in lines[0] for n in needles), lines[0]
    return lines[0]


# ----- 1: an explicit setting is never silently replaced; the record holds what ran --------------------------------
def test_tuned_settings_are_recorded_and_an_explicit_setting_is_not_overridden(tmp_path):
    tuned = tmp_path / "tuned"
    result = _invoke("--stream", "permuted-digits:2", "--strategies", "ewc,replay", "--tune", "--tune-budget", "2",
                     "--steps", "5", "--out", tuned)
    assert result.exit_code == 0, result.output
    results = json.loads((tuned / "results.json").read_text())
    config = json.loads((tuned / "config.json").read_text())
    for name, key in (("ewc", "ewc_lambda"), ("replay", "replay_mem")):
        chosen = results["strategies"][name]["info"]["tuning"]["chosen"][key]
        assert config["strategy_settings"][name][key] == chosen                  # what ran, not the default
        assert results["run"]["strategy_settings"][name][key] == chosen
        assert results["strategies"][name]["info"]["settings"][key] == chosen
    for how in (["--settings-from", tuned], ["--tune", "--tune-budget", "2"]):
        out = tmp_path / f"fixed{len(how)}"
        result = _invoke("--stream", "permuted-digits:2", "--strategies", "ewc", *how, "--ewc-lambda", "5",
                         "--out", out)
        _one_line_error(result, "--ewc-lambda", how[0], "ewc")
        assert not out.exists()
    again = _invoke("--stream", "permuted-digits:2", "--strategies", "ewc,replay", "--settings-from", tuned,
                    "--steps", "5", "--out", tmp_path / "again")
    assert again.exit_code == 0, again.output
    ran = json.loads((tmp_path / "again/config.json").read_text())["strategy_settings"]
    assert ran == config["strategy_settings"]
