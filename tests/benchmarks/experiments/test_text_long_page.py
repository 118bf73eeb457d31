"""The long text stream's page (benchmarks/experiments/text_long_page.py) on synthetic results of two invocations."""
from __future__ import annotations

import json

import pytest
from cl_graft.benchmarks.experiments.script_out import ScriptError
from cl_graft.benchmarks.experiments.text_long_page import main, page_text
from click.testing import CliRunner

from helpers import results_json, strategy_json

TASKS = ["qnli", "agnews", "sst2"]


def _result(final: list[float], *, forgetting: float = 0.0, sizing: list[dict] | None = None) -> dict:
    return strategy_json(final, forgetting=forgetting, bytes=3 * 10 ** 6, seconds=100.0,
                         info={} if sizing is None else {"sizing": sizing})


def _run(strategies: dict, *, seed: int = 0, line: str = "cl-graft run") -> dict:
    record = {"stream": TASKS, "seed": seed, "preset": "quick", "k": 128, "eval_cap": 100,
              "config": {"recipe": {"steps": 50}}, "command_line": line, "git_revision": "abc",
              "device_name": "cpu", "torch": "2", "wall_seconds": 600.0}
    return results_json(record, TASKS, strategies)


def _sizing(above: list[bool]) -> list[dict]:
    return [{"share": s, "cap_share": 0.25, "free": 1 - (i + 1) * 0.05, "above_chance": a, "reference": 0.6,
             "score": 0.59, "chance": 0.5, "tolerance": 0.02, "confidence": 0.95}
            for i, (s, a) in enumerate(zip([0.002, 0.05, 0.01], above))]


def test_page_merges_invocations_and_checks_the_stream():
    graft = _result([0.55, 0.88, 0.70], sizing=_sizing([False, True, True]))
    runs = [_run({"graft": graft, "replay-matched": _result([0.5, 0.8, 0.8], forgetting=0.02)}, line="A"),
            _run({"single": _result([0.56, 0.90, 0.80], forgetting=float("nan")),
                  "naive": _result([0.5, 0.7, 0.8], forgetting=0.1)}, line="B")]
    text = page_text(runs)
    assert "| qnli | 0.20 | 25.0 | 95.0 | 60.0 → 59.0 (50.0) | no | 55.0 | 56.0 | 98% | 50.0 | 50.0 |" in text
    assert "- `A` (git abc" in text and "- `B` (git abc" in text
    assert "Tasks at ≥ 95% of single: 2 of 3 (not: sst2)." in text        # 70 < 0.95 × 80
    assert "Not surely above chance on dev rows (graft's check): qnli." in text
    assert "median 1.00%" in text and "largest 5.00%" in text and "free share after the last task 85.0%" in text
    assert "single -4.3, replay-matched +1.0, naive +4.3" in text and "lose up to 2.0 points" in text
    assert "| naive | 66.7 | 10.0 | -10.0 | 3.0 | 100 |" in text
    assert "| single | 75.3 | – | – | 3.0 | 100 |" in text                 # single forgets nothing: no figure
    assert "of single-task fine-tuning on 2 of 3 task runs (more than 2 below on sst2 -10.0)" in text
    assert "replay-matched" in text and "its memory holds" not in text        # no memory record: no line
    runs[0]["strategies"]["replay-matched"]["info"].update(memory_rows=300, memory_bytes=10 ** 6)
    assert ("- replay-matched: its memory holds 300 rows, 1,000,000 B (1.00 MB); fewer bytes than graft's 3.0 MB, so "
            "it holds every training row of the stream (capped at the stream's rows, not matched)") in page_text(runs)


def test_runs_of_other_settings_or_twice_the_same_strategy_are_refused():
    graft = _result([0.5, 0.5, 0.5], sizing=_sizing([True] * 3))
    with pytest.raises(ScriptError, match="differ in 'seed'"):
        page_text([_run({"graft": graft}), _run({"single": _result([0.5] * 3)}, seed=1)])
    with pytest.raises(ScriptError, match="'graft' is in two"):
        page_text([_run({"graft": graft}), _run({"graft": graft, "single": _result([0.5] * 3)})])
    with pytest.raises(ScriptError, match="no run holds 'single'"):
        page_text([_run({"graft": graft})])


def test_cli_writes_the_page_and_names_a_missing_run(tmp_path):
    graft = _result([0.5, 0.6, 0.7], sizing=_sizing([True] * 3))
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "results.json").write_text(json.dumps(_run({"graft": graft})))
    (tmp_path / "b.json").write_text(json.dumps(_run({"single": _result([0.5, 0.6, 0.7])})))
    ok = CliRunner().invoke(main, ["--runs", f"{tmp_path / 'a'},{tmp_path / 'b.json'}", "--out", str(tmp_path / "o")])
    assert ok.exit_code == 0, ok.output
    assert (tmp_path / "o" / "text_long.md").read_text().startswith("# Long text stream: 3 tasks")
    bad = CliRunner().invoke(main, ["--runs", str(tmp_path / "nope"), "--out", str(tmp_path / "p")])
    assert bad.exit_code == 2 and "no results.json" in bad.output and not (tmp_path / "p").exists()
