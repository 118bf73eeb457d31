"""Reliability, round 5 (issue 56), the multi-seed drivers' items: an ``--out`` spelled with ``..`` or through a
link is not taken for a folder inside a running command's (item 2); the options the driver sets are its own (item
3); ``--report-from`` a folder without the benchmark writes nothing (item 9); and the smaller items: ``--settings-from``
a run that chose no settings, a hand-edited ``results.json``, the driver module run alone. The probe group
``round5_drivers`` (``benchmarks.experiments.probes.reliability``) runs the same cases as a user would."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from cl_graft.benchmarks.experiments import seeds
from cl_graft.benchmarks.experiments.class_text import main
from cl_graft.errors import UserError
from cl_graft.outdir import claim_out_dir
from click.testing import CliRunner

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
