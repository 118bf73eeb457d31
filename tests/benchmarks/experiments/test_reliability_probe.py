"""The reliability probe (benchmarks/experiments/probes/reliability/): one probe whose cases are grouped by what
they protect, each case named once, its scripts valid Python, and its page one table per group marking a case not
as wanted. The probe itself runs for about an hour (its committed table is benchmarks/results/reliability.md)."""
from __future__ import annotations

import collections
import json
from pathlib import Path

import pytest

pytest.importorskip("avalanche")

from cl_graft.benchmarks.experiments.probes.reliability import scripts  # noqa: E402
from cl_graft.benchmarks.experiments.probes.reliability.harness import Case, Probe, first_error  # noqa: E402
from cl_graft.benchmarks.experiments.probes.reliability.probe import (  # noqa: E402
    GROUPS,
    all_cases,
    page_text,
    portable,
)


@pytest.fixture
def cases(tmp_path):
    data = tmp_path / "data"
    (data / "sst2").mkdir(parents=True)
    rows = [json.dumps({"text": f"row {i}", "label": i % 2}) for i in range(300)]
    (data / "sst2" / "train.jsonl").write_text("\n".join(rows) + "\n")
    return all_cases(Probe(tmp_path / "root", data))


def test_every_case_is_in_one_group_named_for_what_it_protects_and_named_once(cases):
    titles = [g.TITLE for g in GROUPS]
    assert len(set(titles)) == len(titles) and all(t and not t.startswith("round") for t in titles)
    counts = collections.Counter(c.group for c in cases)
    assert set(counts) == set(titles) and min(counts.values()) >= 3, counts
    names = collections.Counter((c.group, c.name) for c in cases)
    assert [n for n, k in names.items() if k > 1] == []
    assert len(cases) >= 147                                        # rounds 1-4 (146, two reference runs shared) + 3


def test_the_failed_run_cases_of_issue_45_item_5_come_in_order(cases):
    folders = [c for c in cases if any(getattr(a, "name", None) == "failed" for a in c.args)]   # root/failed
    assert [c.want for c in folders] == [2, 2, 0]
    assert folders[0].script is scripts.FAILING and folders[1].args[-1] == "--resume"
    assert folders[2].args[-1] == "--overwrite"


def test_the_scripts_are_python_and_say_what_they_replace():
    found = {name: getattr(scripts, name) for name in dir(scripts) if name.isupper()}
    assert {"STOPPED", "FAILING", "API_SAVE", "SAVED", "PAGE"} <= set(found)
    for name, text in found.items():
        compile(text, name, "exec")
    assert "replaced" in scripts.FAILING and "put in by the probe" in scripts.FAILING


def test_the_page_is_one_table_per_group_and_marks_a_case_not_as_wanted():
    record = {"command_line": "probe", "git_revision": "abc123456789", "device_name": "cpu"}
    rows = [{"group": g, "case": f"case {i}", "command": "run", "exit": 2, "first_line": "error: a | b",
             "kept": "nothing written", "ok": i != 2, "seconds": 60.0}
            for i, g in enumerate(["input validation", "input validation", "output folders"])]
    text = page_text(rows, 1, record)
    assert text.startswith("# Reliability probe (3 cases, 1 not as wanted, 3 minutes)")
    assert text.count("## input validation") == 1 and text.count("## output folders") == 1
    assert "error: a \\| b" in text and text.rstrip().endswith("**NOT AS WANTED**")


def test_the_first_error_line_skips_progress_output():
    case = Case("x", [])
    assert first_error("training...\nwarning: task 'a' ...\nerror: bad\n") == "warning: task 'a' ..."
    assert first_error("") == "" and case.group == ""


def test_no_machine_path_reaches_the_artifact(tmp_path, monkeypatch):
    """However a message spells the probe's folders: joined to the working folder, resolved, or as given."""
    (tmp_path / "src").mkdir()
    (tmp_path / "out/work/probe-x").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "src")
    tmp, data = Path("../out/work/probe-x"), tmp_path / "data"
    text = (f"inside {tmp_path}/src/../out/work/probe-x/busy; {tmp_path}/out/work/probe-x/b; {tmp}/a; "
            f"{data}/sst2")
    assert portable(text, tmp, data) == "inside $TMP/busy; $TMP/b; $TMP/a; $DATA/sst2"
    import json as library                                                      # a library's file in a message
    named = f"cannot import name 'x' from 'json' ({library.__file__})"
    assert portable(named, tmp, data).startswith("cannot import name 'x' from 'json' ($PYTHON/")
