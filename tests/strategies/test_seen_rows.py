""":class:`SeenRows`: a row's features are computed once and found again by its bytes; each evaluation checks one
batch of kept rows against a fresh pass and forgets them all when the function has changed; the byte limit caps
what is kept."""
from __future__ import annotations

import torch

from cl_graft.strategies.head_inputs import SeenRows


def _counted(calls: list, shift: float = 0.0):
    def features(x):
        calls.append(x.clone())
        return torch.stack([x.float().sum(-1), x.float().max(-1).values], dim=-1) + shift       # (B, 2)
    return features


def test_only_rows_not_seen_before_are_computed_and_answers_are_the_same():
    calls, seen = [], SeenRows()
    x = torch.arange(12).reshape(4, 3)
    first = seen.get(x, _counted(calls))
    assert torch.equal(seen.get(x, _counted(calls)), first) and len(calls) == 1
    mixed = torch.stack([x[2], torch.tensor([9, 9, 9]), x[0]])
    got = seen.get(mixed, _counted(calls))
    assert torch.equal(calls[-1], torch.tensor([[9, 9, 9]]))          # one call, on the new row alone
    assert torch.equal(got, _counted([])(mixed))
    assert (seen.computed, seen.reused) == (5, 6)
    assert seen.info() == {"feature_rows": {"computed": 5, "reused": 6, "checks": 0, "forgotten": 0}}
    seen.get(x, _counted(calls), tag="other head")                   # another tag: computed again
    assert len(calls) == 3


def test_each_evaluation_checks_one_batch_and_a_changed_function_forgets_every_row():
    calls, seen = [], SeenRows()
    x, y = torch.arange(6).reshape(2, 3), torch.arange(6, 12).reshape(2, 3)
    seen.get(x, _counted(calls))
    seen.get(y, _counted(calls))
    seen.begin_()
    seen.get(x, _counted(calls))                                     # checked: computed whole, the same
    seen.get(y, _counted(calls))                                     # read back
    assert len(calls) == 3 and (seen.checks, seen.forgotten) == (1, 0)
    seen.begin_()
    changed = seen.get(x, _counted(calls, shift=1e-3))               # the model moved: every row forgotten
    assert torch.equal(changed, _counted([], shift=1e-3)(x)) and seen.forgotten == 1
    assert torch.equal(seen.get(y, _counted(calls, shift=1e-3)), _counted([], shift=1e-3)(y))
    assert len(calls) == 5
    seen.begin_()
    seen.get(torch.arange(3).reshape(1, 3) + 50, _counted(calls, shift=1e-3))   # no kept row: nothing checked
    assert seen.checks == 2


def test_the_limit_caps_what_is_kept():
    calls, small = [], SeenRows(limit=8)                             # one row of two float32 features
    x = torch.arange(6).reshape(2, 3)
    small.get(x, _counted(calls))
    small.get(x, _counted(calls))
    assert torch.equal(calls[-1], x[1:])
