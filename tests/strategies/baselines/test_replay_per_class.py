"""``--replay-per-class k``: ``replay`` and ``der`` keep k rows of every class seen (the tiny intents task split in
three, class scenario); replay's memory is then the setting, so neither ``--tune`` nor ``--settings-from`` touches
replay's grid."""
from __future__ import annotations

import json
from collections import Counter

import pytest

from helpers import cli, intents_env

avalanche = pytest.importorskip("avalanche")

from cl_graft.benchmarks.families import StreamRequest, find_family
from cl_graft.strategies.comparison.registry import STRATEGIES, strategy_settings
from cl_graft.strategies.comparison.runner import _build, fresh_model
from cl_graft.strategies.comparison.tuning import tune
from cl_graft.strategies.interface.config import continual_setup

from cl_graft.strategies.baselines.common import buffer

PER_CLASS = 3


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    return intents_env(tmp_path_factory.mktemp("replay_per_class"))


@pytest.mark.parametrize("name", ["replay", "der"])
def test_the_memory_keeps_k_rows_of_every_class_seen(env, name):
    data, cfg = continual_setup("smoke", seed=0, steps=2)
    setup = find_family("split-intents:3").setup(StreamRequest(
        spec="split-intents:3", scenario="class", data=data, seed=0, model=str(env / "model"),
        data_dir=str(env / "data")))
    stream, _ = setup.make()
    settings = strategy_settings(name, data, seed=0, given={"replay_per_class": PER_CLASS})
    strategy = _build(STRATEGIES[name], fresh_model(setup.base, stream, 0)[0], cfg, settings, 2, stream=stream,
                      report=None)
    seen: set[int] = set()
    for exp in stream.benchmark.train_stream:
        strategy.train(exp)
        seen |= {int(c) for c in exp.classes_in_this_experience}
        memory = buffer(strategy)
        counts = Counter(int(memory[i]["label"]) for i in range(len(memory)))
        assert counts == {c: PER_CLASS for c in seen}, counts               # not the whole memory on 2 classes
    assert len(seen) == 6


def test_a_fixed_memory_is_not_tuned_and_needs_no_tuned_choice(env, tmp_path):
    data = continual_setup("smoke", seed=0)[0]
    fixed = strategy_settings("replay", data, seed=0, given={"replay_per_class": PER_CLASS})
    assert tune("replay", fixed, lambda s: 1 / 0) == (fixed, {})           # nothing run
    args = ["--stream", "split-intents:3", "--scenario", "class", "--strategies", "replay", "--steps", "2"]
    tuned = tmp_path / "seed0"                     # --replay-mem beside it: what --tune would choose, yet no refusal
    res = cli(env, *args, "--replay-per-class", str(PER_CLASS), "--replay-mem", "7", "--tune", "--out", str(tuned))
    assert res.exit_code == 0, res.output
    saved = json.loads((tuned / "results.json").read_text())
    replay = saved["strategies"]["replay"]
    assert "tuning" not in replay["info"] and replay["info"]["memory_rows"] == 6 * PER_CLASS
    assert saved["run"]["strategy_settings"]["replay"]["replay_per_class"] == PER_CLASS
    res = cli(env, *args, "--replay-per-class", str(PER_CLASS), "--settings-from", str(tuned), "--seed", "1",
              "--out", str(tmp_path / "seed1"))
    assert res.exit_code == 0, res.output
    res = cli(env, *args, "--settings-from", str(tuned), "--seed", "1", "--out", str(tmp_path / "plain"))
    assert res.exit_code == 2 and "'replay' was not tuned there" in res.output      # its memory grid, never tried
    res = cli(env, *args, "--replay-mem", "7", "--tune", "--out", str(tmp_path / "both"))
    assert res.exit_code == 2 and "--replay-mem sets what --tune chooses for replay" in res.output


@pytest.mark.parametrize("name", ["replay", "der"])
def test_per_class_memory_refuses_a_stream_whose_experiences_share_classes(tmp_path, name):
    from click.testing import CliRunner

    from cl_graft.cli import main

    res = CliRunner().invoke(main, ["run", "--stream", "permuted-digits:2", "--scenario", "class", "--model", "mlp",
                                    "--preset", "smoke", "--strategies", name, "--replay-per-class", "2",
                                    "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and f"{name} with --replay-per-class needs new classes" in res.output, res.output
