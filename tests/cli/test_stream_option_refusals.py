"""Options that cannot mean anything for a run are refused in one line (exit 2) before anything is looked up or
written: a split stream's N in anything but ASCII digits, a digits model for a text stream (the name would go to
the Hub as a model id), ``--fresh-head`` with a linear head (always new; the flag would change nothing)."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from cl_graft.cli import main

pytest.importorskip("avalanche")


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    from helpers import intents_env

    return intents_env(tmp_path_factory.mktemp("refusals"))


def _refused(args: list, out) -> str:
    result = CliRunner().invoke(main, [*args, "--out", str(out)])
    assert result.exit_code == 2 and result.output.startswith("error: "), result.output
    assert result.output.strip().count("\n") == 0, result.output
    assert not out.exists()
    return result.output


@pytest.mark.parametrize("count", ["²", "３", "2.0", "+2"])
def test_a_split_count_takes_ascii_digits_only(env, tmp_path, count):
    said = _refused(["run", "--stream", f"split-intents:{count}", "--model", str(env / "model"), "--data-dir",
                     str(env / "data"), "--preset", "smoke"], tmp_path / "o")
    assert "write split-intents:N with N experiences, 1 <= N <= 6" in said


@pytest.mark.parametrize("stream", ["split-nosuchtask:2", "nosuchtask,alpha"])
def test_a_digits_model_for_a_text_stream_is_refused_before_any_lookup(tmp_path, stream):
    said = _refused(["run", "--stream", stream, "--model", "mlp", "--data-dir", str(tmp_path / "empty"),
                     "--preset", "smoke"], tmp_path / "o")                # no such task: nothing was looked up
    assert said.startswith(f"error: --model mlp is a digits model (split-digits, permuted-digits:N); --stream "
                           f"{stream} is a text stream"), said


@pytest.mark.parametrize("command", [["run", "--stream", "split-intents:2"], ["finetune", "--task", "intents"]])
def test_fresh_head_with_a_linear_head_is_refused(env, tmp_path, command):
    said = _refused([*command, "--model", str(env / "model"), "--data-dir", str(env / "data"), "--preset", "smoke",
                     "--fresh-head"], tmp_path / "o")
    assert "a linear head is always new: drop --fresh-head" in said
