"""Reliability, round 4 (issue 45): the settings that run are the settings recorded, a resumed run is checked like
a saved one, the Python API keeps the command line's folder rules, and the page scripts read results through the
same schema as ``cl-graft``. One test per item; the probe (``benchmarks.experiments.probes.reliability``) runs the
same cases as a user would."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

avalanche = pytest.importorskip("avalanche")

from cl_graft.cli import main
from helpers import training_calls

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


# ----- 2, 7: a resumed run is checked like a saved one, and keeps the earlier session's records -------------------
GRAFT3 = ["--stream", "permuted-digits:3", "--strategies", "graft", "--steps", "5"]


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory):
    """A graft run of three tasks stopped (KeyboardInterrupt) in the third task's training: two rows committed."""
    out = tmp_path_factory.mktemp("r4") / "interrupted"
    with pytest.MonkeyPatch.context() as m:
        training_calls(m, experience=2)
        result = _invoke(*GRAFT3, "--out", out)
    assert result.exit_code != 0 and not (out / "results.json").exists()
    assert len(json.loads((out / "graft/state/progress.json").read_text())["rows"]) == 2
    return out


def _copy(folder: Path, to: Path, edit=None) -> Path:
    import shutil

    shutil.copytree(folder, to)
    if edit is not None:
        path = to / "graft/state/progress.json"
        path.write_text(json.dumps(edit(json.loads(path.read_text()))))
    return to


def _row(i, j, value):
    def edit(progress):
        progress["rows"][i][j] = value
        return progress
    return edit


@pytest.mark.parametrize("edit, field", [
    (_row(0, 0, 5.0), "'rows[0][0]' must be a number of at least 0, at most 1, got 5.0"),
    (_row(1, 1, -1), "'rows[1][1]' must be a number of at least 0"),
    (lambda p: {**p, "rows": [p["rows"][0][:2], p["rows"][1]]}, "'rows[0]' holds 2 accuracies, the stream has 3"),
    (lambda p: {**p, "rows": p["rows"] * 2}, "'rows' holds 4 rows"),
    (lambda p: {**p, "settings": {**p["settings"], "method": "topk"}}, "'settings.method' is \"topk\", this run's "),
    (lambda p: {**p, "tasks": ["perm0", "perm9", "perm2"]}, "'tasks[1]' is \"perm9\", this run's is \"perm1\""),
    (_row(0, 0, 0.5), "'sha256' does not match the file's content"),              # valid, but not what ran
    (lambda p: {**p, "state": {**p["state"], "pre_fingerprint": "0" * 64}}, "'sha256' does not match"),
    (lambda p: {k: v for k, v in p.items() if k != "sha256"}, "field 'sha256' is missing"),
])
def test_an_edited_progress_file_is_refused_naming_the_field(interrupted, tmp_path, edit, field):
    out = _copy(interrupted, tmp_path / "edited", edit)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    error = _one_line_error(_invoke(*GRAFT3, "--out", out, "--resume"), "progress.json", field)
    assert "--overwrite" not in error                                  # resumable once the file is mended
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before   # the folder as it was


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """The same graft run, not interrupted."""
    out = tmp_path_factory.mktemp("r4") / "finished"
    result = _invoke(*GRAFT3, "--out", out)
    assert result.exit_code == 0, result.output
    return out


def test_a_resumed_run_keeps_the_earlier_sessions_seconds(interrupted, finished, tmp_path):
    out = _copy(interrupted, tmp_path / "resumed")
    (out / "figures/.final.png.k1ll3d.tmp").mkdir(parents=True)          # an atomic write killed before a byte
    state = json.loads((out / "graft/state/progress.json").read_text())["state"]
    earlier = {what: state[what] for what in ("localize_seconds", "feature_seconds")}
    result = _invoke(*GRAFT3, "--out", out, "--resume")
    assert result.exit_code == 0, result.output
    saved = json.loads((out / "results.json").read_text())
    info = saved["strategies"]["graft"]["info"]
    for what, values in earlier.items():
        assert len(info[what]) == len(saved["tasks"]) == 3 and info[what][:2] == values and len(values) == 2, what
    skills = json.loads((out / "graft/state/skills/skills.json").read_text())
    assert "localize_seconds" not in json.dumps(skills)                # timings are not part of the skills
    assert not list(out.rglob("*.tmp"))                                   # (9) no empty temporary folder left
    assert json.loads((finished / "results.json").read_text())["strategies"]["graft"]["matrix"] == \
        saved["strategies"]["graft"]["matrix"]


# ----- 6: export of a digits run says what export supports ---------------------------------------------------------
@pytest.mark.parametrize("run", ["finished", "interrupted"])
def test_export_of_a_digits_run_says_what_export_supports(run, request, tmp_path):
    skills = request.getfixturevalue(run) / "graft/state/skills"
    result = CliRunner().invoke(main, ["export", "--skills", str(skills), "--task", "perm0",
                                       "--out", str(tmp_path / "exp")])
    _one_line_error(result, "digits stream permuted-digits:3", "export writes a task of a text-stream run",
                    "cl_graft.strategies.export_task")
    assert not (tmp_path / "exp").exists()


# ----- 9: smaller ---------------------------------------------------------------------------------------------------
def test_a_staged_folder_gives_its_files_the_mode_of_their_siblings(tmp_path):
    import os
    import stat

    from cl_graft.written import staged_folder

    old = os.umask(0o022)
    try:
        with staged_folder(tmp_path / "export", within=tmp_path) as tmp:        # as save_pretrained writes
            (tmp / "model.safetensors").write_bytes(b"x")
            os.chmod(tmp / "model.safetensors", 0o600)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "export/model.safetensors").stat().st_mode) == 0o644


@pytest.mark.parametrize("args, wanted", [
    (["--expected-tasks", "0"], "--expected-tasks must be an integer >= 1"),
    (["--region-size", "0.1", "--tolerance", "0.01"], "setting --tolerance does not apply to --region-size 0.1"),
    (["--plan", "open", "--expected-tasks", "3"], "leave --expected-tasks unset"),
])
def test_setting_errors_name_the_options(tmp_path, args, wanted):
    line = _one_line_error(_invoke("--stream", "split-digits", "--strategies", "graft", *args,
                                   "--out", tmp_path / "o"), wanted)
    assert "expected_tasks" not in line and "size.tolerance" not in line
    assert not (tmp_path / "o").exists()


def test_the_folder_lock_is_the_filelock_packages(tmp_path):
    import os
    import tomllib

    from filelock import lock_descriptor

    import cl_graft.folder_lock as folder_lock
    from cl_graft.errors import UserError
    from cl_graft.folder_lock import LOCK_FILE, FolderLock

    assert not {"fcntl", "msvcrt"} & set(vars(folder_lock))                 # no hand-written OS locking
    deps = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())["project"]["dependencies"]
    assert any(d.startswith("filelock") for d in deps)
    lock = FolderLock(tmp_path, "first").acquire()
    fd = os.open(tmp_path / LOCK_FILE, os.O_RDWR)
    try:
        assert not lock_descriptor(fd, blocking=False)                      # the same primitive: held
        with pytest.raises(UserError, match=r"is in use by pid \d+ \(`first`"):
            FolderLock(tmp_path, "second").acquire()
        assert FolderLock(tmp_path, "").busy().startswith("pid")
    finally:
        os.close(fd)
        lock.release()
    assert not (tmp_path / LOCK_FILE).exists() and FolderLock(tmp_path, "").busy() is None
    FolderLock(tmp_path, "third").acquire().release()


def test_warnings_name_a_digits_task_by_its_name(tmp_path):
    result = _invoke("--stream", "split-digits", "--strategies", "graft", "--steps", "5", "--out", tmp_path / "w")
    assert result.exit_code == 0, result.output
    tasks = json.loads((tmp_path / "w/results.json").read_text())["tasks"]
    warned = [line for line in result.output.splitlines() if line.startswith("warning: task ")]
    assert warned, result.output                                     # 5 steps: tasks not surely above chance
    for line in warned:
        assert line.split("'")[1] in tasks, line                     # 'digits14', not the label '0'


# ----- 8: page scripts read results as cl-graft does: tampered values refused, legitimate runs not crashing -------
def _script(module: str, *args):
    import importlib

    main_ = importlib.import_module(f"cl_graft.benchmarks.experiments.{module}").main
    return CliRunner().invoke(main_, [str(a) for a in args])


def _script_error(result, *needles: str) -> str:
    lines = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert result.exit_code == 2 and len(lines) == 1 and "Traceback" not in result.output, result.output
    assert all(n in lines[0] for n in needles), lines[0]
    return lines[0]


def _tampered(finished: Path, tmp_path: Path, change) -> Path:
    results = json.loads((finished / "results.json").read_text())
    change(results)
    path = tmp_path / "tampered.json"
    path.write_text(json.dumps(results))
    return path


@pytest.mark.parametrize("change, field", [
    (lambda r: r["strategies"]["graft"]["summary"].update(average=7.5),
     "'strategies.graft.summary.average' must be a number of at least 0, at most 1, got 7.5"),
    (lambda r: r["strategies"]["graft"]["summary"].update(average=0.99), "'strategies.graft.summary' is not what"),
    (lambda r: r["strategies"]["graft"]["matrix"][0].append(0.5), "'strategies.graft.matrix[0]' holds 4 accuracies"),
    (lambda r: r["strategies"]["graft"].update(bytes=-1), "'strategies.graft.bytes' must be at least 0"),
])
@pytest.mark.parametrize("script", ["text_size_page", "probes.retrain_ab", "text_long_page"])
def test_page_scripts_refuse_tampered_results_in_one_line(finished, tmp_path, change, field, script):
    path = _tampered(finished, tmp_path, change)
    _script_error(_script(script, "--runs", path, "--out", tmp_path / "page"), "tampered.json", field)
    assert not (tmp_path / "page").exists()


def test_page_scripts_run_on_legitimate_runs_or_say_what_they_need(finished, tmp_path):
    _script_error(_script("text_size_page", "--runs", finished, "--out", tmp_path / "a"), "no single for seed 0")
    text_run = _tampered(finished, tmp_path, lambda r: (r["run"].pop("scenario"), r.pop("sha256")))  # a text run's
    # record named no scenario (written before results.json was sealed)
    result = _script("probes.retrain_ab", "--runs", text_run, "--out", tmp_path / "b")
    assert result.exit_code == 0, result.output
    assert "| permuted-digits:3 | mlp | task | 0 | 1 |" in (tmp_path / "b/retrain.md").read_text()
    _script_error(_script("digits", "--seeds", "a,b", "--out", tmp_path / "c"), "--seeds is comma-separated")
    _script_error(_script("digits", "--report-from", finished, "--out", tmp_path / "d"), "no runs/ folder")
    assert not any((tmp_path / x).exists() for x in "acd")
