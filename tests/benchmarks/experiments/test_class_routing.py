"""The class-routing probe: task-level Gaussians cannot tell apart tasks whose classes surround one centre; the
class-level rules can."""
from __future__ import annotations

import torch

from cl_graft.benchmarks.experiments.probes.class_routing import identification


def test_class_rules_identify_tasks_that_task_gaussians_confuse():
    gen = torch.Generator().manual_seed(0)
    centres = torch.tensor([[6.0, 0.0], [-6.0, 0.0], [0.0, 6.0], [0.0, -6.0]])   # classes 0, 1 | 2, 3
    labels = torch.arange(4).repeat_interleave(50)
    fit = centres[labels] + 0.5 * torch.randn(200, 2, generator=gen)
    score = centres[labels] + 0.5 * torch.randn(200, 2, generator=gen)
    out = identification(fit, labels, score, labels, [[0, 1], [2, 3]])
    assert out["class LDA lowrank:32"]["task"] > 0.95 and out["nearest class mean"]["class"] > 0.95
    assert out["task LDA full"]["task"] < 0.8                                   # both tasks centred at 0
