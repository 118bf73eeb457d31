"""Closed-form heads on fixed features (``cl_graft.heads``): RanPAC's head is one head whatever order its classes
and rows come in; the streaming LDA head scores as Avalanche's ``StreamingLDA`` does; both keep what they
learned as named tensors and read them back."""
from __future__ import annotations

import pytest
import torch

from cl_graft.errors import UserError
from cl_graft.heads import RandomProjectionRidge, StreamingLDA

DIM, CLASSES = 8, 4


def _rows(seed: int, per: int = 12) -> tuple[torch.Tensor, torch.Tensor]:
    """``per`` rows of each of 4 classes around their own centre (the same centres for every seed), shuffled."""
    centres = torch.randn(CLASSES, DIM, generator=torch.Generator().manual_seed(0))
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(CLASSES).repeat_interleave(per)
    x = centres[y] + 0.3 * torch.randn(len(y), DIM, generator=g)
    order = torch.randperm(len(y), generator=g)
    return x[order], y[order]


def _arrival(y: torch.Tensor) -> torch.Tensor:
    """Each row's column: its class numbered in the order the rows bring the classes."""
    column = {c: k for k, c in enumerate(dict.fromkeys(y.tolist()))}
    return torch.tensor([column[c] for c in y.tolist()])


def _by_class(head, order: list[int], x: torch.Tensor, y: torch.Tensor, test: torch.Tensor) -> torch.Tensor:
    """``head`` fed one class at a time in ``order`` (class ``order[k]`` is column ``k``); its test scores with
    column ``c`` = class ``c``."""
    for k, c in enumerate(order):
        rows = y == c
        head.add_(x[rows], torch.full((int(rows.sum()),), k))
    return head.scores(test)[:, [order.index(c) for c in range(CLASSES)]]


def test_ranpac_head_is_the_same_whatever_order_its_classes_come_in():
    x, y = _rows(1)
    test, truth = _rows(2)
    scores = [_by_class(RandomProjectionRidge(dim=DIM, width=64, ridge=1e-3, seed=5), order, x, y, test)
              for order in ([0, 1, 2, 3], [2, 0, 3, 1])]
    whole = RandomProjectionRidge(dim=DIM, width=64, ridge=1e-3, seed=5)
    first = {c: k for k, c in enumerate(dict.fromkeys(y.tolist()))}
    whole.add_(x, _arrival(y))
    scores.append(whole.scores(test)[:, [first[c] for c in range(CLASSES)]])
    for other in scores[1:]:
        torch.testing.assert_close(other, scores[0], rtol=1e-4, atol=1e-4)
    assert float((scores[0].argmax(1) == truth).float().mean()) > 0.9


def test_slda_head_scores_as_avalanches_streaming_lda():
    pytest.importorskip("avalanche")
    from avalanche.training import StreamingLDA as AvalancheLDA
    from avalanche.training.plugins import EvaluationPlugin

    x, y = _rows(3)
    test, truth = _rows(4)
    reference = AvalancheLDA(slda_model=torch.nn.Identity(), criterion=torch.nn.CrossEntropyLoss(), input_size=DIM,
                             num_classes=CLASSES, shrinkage_param=1e-2, evaluator=EvaluationPlugin(loggers=[]))
    for xi, yi in zip(x, y):
        reference.fit(xi.unsqueeze(0), yi.unsqueeze(0))
    head = StreamingLDA(dim=DIM, shrinkage=1e-2)
    column, columns = {c: k for k, c in enumerate(dict.fromkeys(y.tolist()))}, _arrival(y)
    head.add_(x[:20], columns[:20])                                        # two experiences, rows in order
    head.add_(x[20:], columns[20:])
    ours = head.scores(test)[:, [column[c] for c in range(CLASSES)]]
    torch.testing.assert_close(ours, reference.predict(test), rtol=1e-4, atol=1e-3)
    assert float((ours.argmax(1) == truth).float().mean()) > 0.9


@pytest.mark.parametrize("make", [lambda: StreamingLDA(dim=DIM, shrinkage=1e-2),
                                  lambda: RandomProjectionRidge(dim=DIM, width=16, ridge=1e-2, seed=3)])
def test_a_head_read_back_from_its_tensors_scores_the_same(make):
    x, y = _rows(5)
    head = make()
    head.add_(x, _arrival(y))
    keywords = {"dim": DIM, "shrinkage": 1e-2} if isinstance(head, StreamingLDA) else \
        {"dim": DIM, "width": 16, "ridge": 1e-2, "seed": 3}
    again = type(head).from_tensors(head.tensors(), **keywords, what="saved")
    torch.testing.assert_close(again.scores(x), head.scores(x))
    tensors = {**head.tensors()}
    name = next(iter(tensors))
    tensors[name] = tensors[name][..., :1]
    with pytest.raises(UserError, match=f"saved: tensor '{name}' has shape"):
        type(head).from_tensors(tensors, **keywords, what="saved")


def test_columns_come_in_order_and_settings_are_checked():
    head = StreamingLDA(dim=DIM)
    with pytest.raises(ValueError, match="order of arrival"):
        head.add_(torch.zeros(1, DIM), torch.tensor([1]))
    with pytest.raises(UserError, match="slda_shrinkage must be in"):
        StreamingLDA(dim=DIM, shrinkage=0.0)
    with pytest.raises(UserError, match="ranpac_ridge must be > 0"):
        RandomProjectionRidge(dim=DIM, width=4, ridge=0.0, seed=0)
