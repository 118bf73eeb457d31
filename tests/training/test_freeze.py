"""ElementFreeze: frozen elements keep their bits under SGD (momentum, L2) and AdamW (decoupled decay);
trainable elements move exactly as under the stock optimizer."""
from __future__ import annotations

import pytest
import torch

from cl_graft.training.freeze import ElementFreeze

OPTIMIZERS = {
    "sgd": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.05),
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.05),
    "adam-l2": lambda ps: torch.optim.Adam(ps, lr=0.01, weight_decay=0.05),
}


def _net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3))


def _train(net, opt, steps: int, *, freeze: ElementFreeze | None = None, masks=None):
    """Two phases: ``steps`` free steps (fills momentum / moments), then ``steps`` steps with freezing."""
    x, y = torch.randn(16, 6, generator=torch.Generator().manual_seed(1)), torch.arange(16) % 3
    params = dict(net.named_parameters())
    for phase in ("warm", "frozen"):
        if phase == "frozen" and freeze is not None:
            freeze.begin_(opt)
        for _ in range(steps):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(net(x), y).backward()
            if phase == "frozen" and freeze is not None:
                freeze.before_update_()
            elif phase == "frozen" and masks is not None:                 # gradient masking alone
                for n, m in masks.items():
                    params[n].grad.mul_(m)
            opt.step()
            if phase == "frozen" and freeze is not None:
                freeze.after_update_()
        if phase == "warm":
            snapshot = {n: p.detach().clone() for n, p in params.items()}
    if freeze is not None:
        freeze.end_(opt)
    return snapshot


def _masks(net, share: float = 0.5):
    """About ``share`` of the first layer's weight elements are trainable."""
    gen = torch.Generator().manual_seed(2)
    return {"0.weight": torch.rand(net[0].weight.shape, generator=gen) < share}


def _bits(t):
    return t.detach().contiguous().view(torch.int32)


@pytest.mark.parametrize("kind", sorted(OPTIMIZERS))
@pytest.mark.parametrize("guard", [False, True])
@pytest.mark.parametrize("share, store", [(0.8, "frozen_idx"), (0.2, "masks")])     # few / most frozen
def test_frozen_elements_keep_bits(kind, guard, share, store):
    net = _net()
    masks = _masks(net, share)
    trainable = {**masks, "2.weight": None, "2.bias": None}                # 0.bias frozen whole
    opt = OPTIMIZERS[kind](net.parameters())
    freeze = ElementFreeze(dict(net.named_parameters()), trainable, guard=guard)
    assert list(getattr(freeze, store)) == ["0.weight"]                   # the path under test
    before = _train(net, opt, 5, freeze=freeze)
    w, b = net[0].weight, net[0].bias
    assert torch.equal(_bits(w)[~masks["0.weight"]], _bits(before["0.weight"])[~masks["0.weight"]])
    assert torch.equal(_bits(b), _bits(before["0.bias"]))
    assert not torch.equal(w[masks["0.weight"]], before["0.weight"][masks["0.weight"]])   # trainable moved
    assert opt.param_groups[0]["weight_decay"] == 0.05                                      # handed back


@pytest.mark.parametrize("kind", sorted(OPTIMIZERS))
def test_gradient_masking_alone_moves_frozen_elements(kind):
    net = _net()
    masks = {"0.weight": _masks(net)["0.weight"], "0.bias": torch.zeros(5, dtype=torch.bool)}
    opt = OPTIMIZERS[kind](net.parameters())
    before = _train(net, opt, 5, masks=masks)
    frozen = ~masks["0.weight"]
    assert not torch.equal(net[0].weight[frozen], before["0.weight"][frozen])


@pytest.mark.parametrize("kind", ["sgd", "adamw"])
def test_trainable_elements_follow_the_stock_optimizer(kind):
    """A fully trainable tensor gets bit-identical updates with and without ElementFreeze (fresh state)."""
    runs = []
    for use in (False, True):
        net = _net()
        opt = OPTIMIZERS[kind](net.parameters())
        trainable = {n: None for n, _ in net.named_parameters()}
        freeze = ElementFreeze(dict(net.named_parameters()), trainable) if use else None
        x, y = torch.randn(8, 6, generator=torch.Generator().manual_seed(3)), torch.arange(8) % 3
        if freeze:
            freeze.begin_(opt)
        for _ in range(4):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(net(x), y).backward()
            if freeze:
                freeze.before_update_()
            opt.step()
        runs.append([p.detach().clone() for p in net.parameters()])
    assert all(torch.equal(_bits(a), _bits(b)) for a, b in zip(*runs, strict=True))


def test_all_true_and_all_false_masks_are_whole_tensors():
    net = _net()
    trainable = {"0.weight": torch.ones(5, 6, dtype=torch.bool), "0.bias": torch.zeros(5, dtype=torch.bool)}
    freeze = ElementFreeze(dict(net.named_parameters()), trainable)
    assert freeze.whole == {"0.weight"} and "0.bias" in freeze.frozen
    assert not freeze.masks and not freeze.frozen_idx
