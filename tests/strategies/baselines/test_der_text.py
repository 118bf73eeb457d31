"""``der`` on text rows (the tiny intents task split in three, class scenario): Avalanche 0.6's DER cannot batch
them; the entry's strategy keeps each memory row with the logits the model gave it, replays both, and leaves a
logit the ``SharedHead`` masked when it was stored out of the logit-matching loss."""
from __future__ import annotations

import json

import pytest
import torch

from helpers import cli, intents_env

avalanche = pytest.importorskip("avalanche")

from cl_graft.benchmarks.families import StreamRequest, find_family
from cl_graft.strategies.adapter import MASK_VALUE
from cl_graft.strategies.baselines.der import with_logits
from cl_graft.strategies.comparison.registry import STRATEGIES, strategy_settings
from cl_graft.strategies.comparison.runner import _build, fresh_model
from cl_graft.strategies.interface.config import continual_setup

MEMORY = 12


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    return intents_env(tmp_path_factory.mktemp("der_text"))


def _setup(env):
    data, cfg = continual_setup("smoke", seed=0, steps=4)
    setup = find_family("split-intents:3").setup(StreamRequest(
        spec="split-intents:3", scenario="class", data=data, seed=0, model=str(env / "model"),
        data_dir=str(env / "data")))
    stream, _ = setup.make()
    return data, cfg, setup.base, stream


class _LossTerms:
    """Records, at every step with memory rows, the logit-matching term DER adds (``F.mse_loss`` of the memory
    rows' outputs and their targets) and whether a target still holds ``MASK_VALUE``."""

    def __new__(cls):
        from avalanche.core import SupervisedPlugin

        class Plugin(SupervisedPlugin):
            def __init__(self):
                super().__init__()
                self.mse, self.masked_targets = [], []

            def before_backward(self, strategy, **kwargs):
                if strategy.replay_loader is not None:
                    out = strategy.mb_output[: strategy.batch_size_mem]
                    self.mse.append(float(torch.nn.functional.mse_loss(out.detach(), strategy.batch_logits)))
                    self.masked_targets.append(bool((strategy.batch_logits <= MASK_VALUE / 2).any()))

        return Plugin()


def test_avalanches_der_cannot_batch_text_rows(env):
    """The workaround's reason: Avalanche's logits pass batches dict rows with torch's default collate (a dict,
    or an error where their lengths differ) and unpacks ``x, _, _`` from it."""
    from avalanche.training import DER

    data, cfg, base, stream = _setup(env)
    model, _ = fresh_model(base, stream, 0)
    stock = DER(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.01), train_mb_size=8,
                train_epochs=1, evaluator=None, mem_size=MEMORY)
    with pytest.raises((ValueError, RuntimeError), match="unpack|equal size"):
        stock.train(stream.benchmark.train_stream[0])


def test_der_keeps_rows_and_their_logits_and_matches_them(env):
    data, cfg, base, stream = _setup(env)
    model, _ = fresh_model(base, stream, 0)
    settings = strategy_settings("der", data, seed=0, given={"replay_mem": MEMORY})
    terms = _LossTerms()
    strategy = _build(STRATEGIES["der"], model, cfg, settings, 4, stream=stream, report=None)
    strategy.plugins.append(terms)
    train = stream.benchmark.train_stream
    strategy.train(train[0])
    memory = strategy.storage_policy.buffer
    assert len(memory) == MEMORY and all(isinstance(memory[i], dict) for i in range(len(memory)))
    first = sorted(int(c) for c in train[0].classes_in_this_experience)
    x, y, _, stored = with_logits(memory.collate_fn)([memory[i] for i in range(len(memory))])
    assert set(y.tolist()) == set(first) and stored.shape == (MEMORY, 6)
    model.eval()
    with torch.no_grad():
        assert torch.allclose(model(x), stored, atol=1e-5)                  # the logits it gave them
    unseen = [c for c in range(6) if c not in first]
    assert (stored[:, unseen] == MASK_VALUE).all() and (stored[:, first] > MASK_VALUE / 2).all()
    model.train()
    assert not terms.mse                                                      # no memory in experience 0
    strategy.train(train[1])
    assert terms.mse and all(0 < m < 100 for m in terms.mse), terms.mse    # matched, never towards -1000
    assert not any(terms.masked_targets)


def test_der_runs_on_a_split_text_stream_and_differs_from_naive(env, tmp_path):
    res = cli(env, "--stream", "split-intents:3", "--scenario", "class", "--strategies", "naive,der", "--steps",
              "20", "--out", str(tmp_path / "out"))
    assert res.exit_code == 0, res.output
    runs = json.loads((tmp_path / "out" / "results.json").read_text())["strategies"]
    der, naive = runs["der"], runs["naive"]
    assert der["info"]["memory_rows"] == 32                                  # the smoke preset's replay_mem
    assert der["info"]["kept"]["logits"] == 32 * 6 * 4                       # six float32 logits per row
    assert 0 < der["info"]["kept"]["memory"] == der["info"]["memory_bytes"]
    assert der["matrix"] != naive["matrix"]
    assert sum(der["matrix"][-1][:2]) > sum(naive["matrix"][-1][:2])         # replay keeps earlier classes
