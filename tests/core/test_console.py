"""The command console: one live progress line re-labelled per phase, result lines above it, quiet and verbose."""
from __future__ import annotations

import io

import pytest

from cl_graft.console import Console
from cl_graft.errors import UserError


def test_the_live_line_counts_a_phase_and_result_lines_go_above_it():
    out, err = io.StringIO(), io.StringIO()
    with Console(out=out, err=err, live=True) as console:
        console.phase("graft · task 1/2 alpha · train", 4)
        console.advance(2)
        console.echo("graft  task 1/2 alpha  acc 50.0")
        console.phase("graft · task 1/2 alpha · size search")
    frames = err.getvalue().split("\r")
    assert any("graft · task 1/2 alpha · train:" in f and "2/4 steps" in f and "run 0:0" in f for f in frames)
    assert any("size search [00:00]" in f and "%" not in f for f in frames)      # timed only, no count
    assert out.getvalue() == "graft  task 1/2 alpha  acc 50.0\n"
    assert err.getvalue().endswith("\r")                                         # the line is wiped at the end


def test_off_a_terminal_there_is_no_progress_line_and_quiet_prints_nothing():
    out, err = io.StringIO(), io.StringIO()
    console = Console(out=out, err=err)                      # StringIO is no terminal: no live line
    console.phase("train", 3)
    console.advance()
    console.echo("a result")
    console.close()
    assert err.getvalue() == "" and out.getvalue() == "a result\n"
    quiet = Console("quiet", out=out, err=err, live=None)
    quiet.echo("never")
    assert "never" not in out.getvalue() and not quiet.live


def test_flags_choose_the_level_and_exclude_each_other():
    assert Console.from_flags(quiet=False, verbose=True).verbose
    assert Console.from_flags(quiet=True, verbose=False).quiet
    with pytest.raises(UserError, match="exclude each other"):
        Console.from_flags(quiet=True, verbose=True)


def test_off_a_terminal_a_plain_line_shows_the_run_is_alive():
    import time

    out, err = io.StringIO(), io.StringIO()
    with Console(out=out, err=err, every=0.05) as console:            # every minute in use; here every 50 ms
        console.phase("graft · task 1/3 perm0 · train", 500)
        console.advance(120)
        time.sleep(0.3)
        console.phase("graft · task 1/3 perm0 · size search")
        time.sleep(0.3)
    lines = err.getvalue().splitlines()
    assert any(line.startswith("[run 0:0") and "graft · task 1/3 perm0 · train: 120/500 steps (phase 0:0" in line
               for line in lines), lines
    assert any(line.endswith("size search (phase 0:00)") for line in lines), lines
    assert "\r" not in err.getvalue() and out.getvalue() == ""        # plain lines, nothing on standard output
    n = len(lines)
    time.sleep(0.2)
    assert len(err.getvalue().splitlines()) == n                      # none after the console closed
    assert Console(err=err).every == 60 and Console("quiet", err=err).every == 0
