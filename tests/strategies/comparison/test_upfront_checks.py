"""Every strategy's refusal of a stream comes from its entry's up-front check (``check_scenario`` and ``check``,
run for every strategy of a run before any trains), never from its builder alone: a builder that refuses a stream
its checks let through would refuse it only after the strategies listed before it trained."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from cl_graft.benchmarks.families import StreamRequest, find_family
from cl_graft.cli import main
from cl_graft.errors import UserError

from helpers import intents_env

avalanche = pytest.importorskip("avalanche")

STREAMS = [("split-digits", "task", "mlp"), ("split-digits", "class", "mlp"),
           ("permuted-digits:2", "class", "mlp"), ("permuted-digits:2", "task", "mtmlp"),
           ("split-intents:3", "task", None), ("split-intents:3", "class", None)]
"""``(--stream, --scenario, --model)``: digits streams with a single-head and a multi-head model, and a split text
stream (None: the tiny BERT of :func:`helpers.intents_env`), in both scenarios."""
PEER = SimpleNamespace(bytes=100_000, info={}, matrix=[[1.0]])
"""The result of a strategy another reads (its entry's ``peers``)."""


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    return intents_env(tmp_path_factory.mktemp("upfront"))


@pytest.mark.parametrize("spec,scenario,model", STREAMS)
def test_every_entry_refuses_up_front_or_builds(env, spec, scenario, model):
    from cl_graft.strategies.comparison.registry import STRATEGIES, strategy_settings
    from cl_graft.strategies.comparison.runner import _build, fresh_model
    from cl_graft.strategies.interface.config import continual_setup

    data, cfg = continual_setup("smoke", seed=0, steps=1)
    text = model is None
    setup = find_family(spec).setup(StreamRequest(
        spec=spec, scenario=scenario, data=data, seed=0, model=str(env / "model") if text else model,
        data_dir=str(env / "data") if text else None))
    stream, _ = setup.make()
    refused_late = {}
    for name, entry in STRATEGIES.items():
        settings = strategy_settings(name, data, seed=0)
        try:
            entry.check_scenario(stream.scenario)
            if entry.check is not None:
                entry.check(settings, stream)
        except UserError:
            continue                                                  # refused before anything trains
        try:
            _build(entry, fresh_model(setup.base, stream, 0)[0], cfg, settings, 1, stream=stream, report=None,
                   peers={p: PEER for p in entry.peers})
        except UserError as e:
            refused_late[name] = str(e)
    assert not refused_late, refused_late


@pytest.mark.parametrize("stream,scenario,late", [("split-digits", "task", "ncm"),
                                                   ("split-digits", "task", "linear-probe"),
                                                   ("permuted-digits:2", "class", "icarl"),
                                                   ("permuted-digits:2", "class", "bic")])
def test_a_refusal_comes_before_the_strategies_listed_first_train(tmp_path, stream, scenario, late):
    out = tmp_path / "o"
    result = CliRunner().invoke(main, ["run", "--stream", stream, "--scenario", scenario, "--model", "mlp",
                                       "--preset", "smoke", "--quiet", "--steps", "2", "--strategies",
                                       f"naive,{late}", "--out", str(out)])
    assert result.exit_code == 2 and result.output.startswith(f"error: {late} "), result.output
    assert result.output.strip().count("\n") == 0
    assert not (out / "naive" / "result.json").exists()                # naive, listed first, did not run
