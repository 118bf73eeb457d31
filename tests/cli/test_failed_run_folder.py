"""A run that stopped on an error after it wrote files (issue 45, item 5): ``--resume`` cannot continue it (the same
settings stop on the same error), so the error, then and at the next try, says to pass ``--overwrite``, which
removes only the files cl-graft wrote; the message names only options the command has (``finetune`` has no
``--resume``)."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from cl_graft.errors import UserError
from cl_graft.files import write_json
from cl_graft.outdir import OWNER_FILE, claim_out_dir


def _fail_after_writing(out, command: str, *, resume: bool = False) -> str:
    """Claims ``out`` as a resumable run, writes a file, stops on a check; the error's text."""
    with pytest.raises(UserError) as error, claim_out_dir(out, command, settings={"a": 1}, resume=resume,
                                                          keep_on_error=True) as run_dir:
        write_json(run_dir.path / "state.json", {})                         # as cl-graft writes (noted as the run's)
        raise UserError("experience 2: label 9 is not a class of the model's 2 outputs")
    return str(error.value)


def test_the_failing_run_says_resume_cannot_continue_it(tmp_path):
    out = tmp_path / "out"
    message = _fail_after_writing(out, "run")
    assert message.startswith("experience 2: label 9") and "\n" not in message
    assert "--resume cannot continue" in message and "--overwrite" in message
    assert (out / "state.json").is_file()                                     # kept, as a resumable run's state
    assert json.loads((out / OWNER_FILE).read_text())["failed"].startswith("experience 2: label 9")


@pytest.mark.parametrize("resume", [True, False])
def test_the_next_claim_says_resume_cannot_continue_it_and_overwrite_removes_the_run(tmp_path, resume):
    out = tmp_path / "out"
    _fail_after_writing(out, "run")
    with pytest.raises(UserError) as error:
        claim_out_dir(out, "run", settings={"a": 1}, resume=resume, keep_on_error=True)
    message = str(error.value)
    assert "stopped on an error (experience 2: label 9" in message, message
    assert "--resume cannot continue" in message and "--overwrite" in message, message
    with claim_out_dir(out, "run", settings={"a": 1}, overwrite=True, keep_on_error=True) as run_dir:
        run_dir.finish({"command": "run"})
    assert sorted(p.name for p in out.iterdir()) == [OWNER_FILE, "config.json"]          # state.json removed
    assert "failed" not in json.loads((out / OWNER_FILE).read_text())


def test_a_failure_of_a_resumed_run_is_noted_too(tmp_path):
    out = tmp_path / "out"
    with claim_out_dir(out, "run", settings={"a": 1}, keep_on_error=True) as run_dir:
        write_json(run_dir.path / "progress.json", {})                          # an interrupted run, say
    message = _fail_after_writing(out, "run", resume=True)
    assert "--resume cannot continue" in message
    with pytest.raises(UserError, match="--resume cannot continue"):
        claim_out_dir(out, "run", settings={"a": 1}, resume=True, keep_on_error=True)


def test_an_interrupted_run_is_resumable_and_a_command_without_resume_is_not_told_to_resume(tmp_path):
    interrupted = tmp_path / "interrupted"
    with claim_out_dir(interrupted, "run", settings={}, keep_on_error=True) as run_dir:
        (run_dir.path / "progress.json").write_text("{}")                       # no record: unfinished, not failed
    with pytest.raises(UserError, match="continue it with --resume, or pass --overwrite"):
        claim_out_dir(interrupted, "run", settings={}, keep_on_error=True)
    unfinished = tmp_path / "unfinished"
    with claim_out_dir(unfinished, "finetune", settings={}) as run_dir:
        (run_dir.path / "model.safetensors").write_text("x")
        run_dir.lock.release()                                                  # as if killed: nothing removed
        run_dir.lock = None
    with pytest.raises(UserError) as error:
        claim_out_dir(unfinished, "finetune", settings={})
    assert "--overwrite" in str(error.value) and "--resume" not in str(error.value), error.value


def test_a_run_that_fails_at_its_second_experience(tmp_path, monkeypatch):
    """``cl-graft run`` whose check fails at experience 2, after experience 1 trained and was saved: the error
    says to overwrite, and so does the next try, with or without ``--resume``."""
    pytest.importorskip("avalanche")
    import cl_graft.strategies.graft.strategy as graft_strategy
    from cl_graft.cli import main

    check = graft_strategy.check_labels

    def failing(labels, classes, where):
        if where.startswith("experience 1 "):          # the second (0-based)
            raise UserError("label 9 is not a class of the model's outputs")
        check(labels, classes, where)

    monkeypatch.setattr(graft_strategy, "check_labels", failing)
    out = tmp_path / "out"
    args = ["run", "--stream", "permuted-digits:3", "--model", "mlp", "--preset", "smoke", "--quiet",
            "--strategies", "graft", "--steps", "5", "--out", str(out)]
    for extra in ([], [], ["--resume"]):
        result = CliRunner().invoke(main, args + extra)
        errors = [line for line in result.output.splitlines() if line.startswith("error:")]
        assert result.exit_code == 2 and len(errors) == 1, result.output
        assert "--resume cannot continue" in errors[0] and "--overwrite" in errors[0], errors[0]
    assert (out / "graft").is_dir() and not (out / "config.json").exists()


def test_a_resumed_run_refused_before_it_writes_stays_resumable(tmp_path):
    """A resumed run whose saved state is refused (an edited progress file, say) wrote nothing: the folder is left
    as it was, the error names no --overwrite, and once the cause is mended --resume continues."""
    out = tmp_path / "out"
    with claim_out_dir(out, "run", settings={"a": 1}, keep_on_error=True) as run_dir:
        write_json(run_dir.path / "progress.json", {"rows": []})
    owner = (out / OWNER_FILE).read_bytes()
    with pytest.raises(UserError) as error, claim_out_dir(out, "run", settings={"a": 1}, resume=True,
                                                          keep_on_error=True):
        raise UserError("progress.json: field 'rows[0][0]' must be a number of at least 0, at most 1, got 5.0")
    assert "--overwrite" not in str(error.value) and (out / OWNER_FILE).read_bytes() == owner
    with claim_out_dir(out, "run", settings={"a": 1}, resume=True, keep_on_error=True) as run_dir:
        run_dir.finish({"command": "run"})
    assert (out / "config.json").is_file()
