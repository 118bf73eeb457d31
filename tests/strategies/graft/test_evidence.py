"""The evidence a region size is chosen on (cl_graft.strategies.graft.sizing.evidence): the two loss bounds and when
the labels overrule the trained model's beliefs, temperature scaling, chance level and the Wilson bound."""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("avalanche")

from cl_graft.strategies.graft.sizing.evidence import (
    Outputs,
    calibrate,
    chance_level,
    loss_evidence,
    settled,
    temperature,
    wilson_low,
    z_value,
)


def _outputs(right: torch.Tensor, confidence: float = 0.99) -> Outputs:
    """Two-class outputs on ``len(right)`` rows of label 1: class 1 with ``confidence`` where ``right``."""
    p1 = torch.where(right, torch.tensor(confidence), torch.tensor(1 - confidence)).double()
    return Outputs(torch.stack([1 - p1, p1], 1), torch.ones(len(right), dtype=torch.long))


def test_loss_bounds_need_rows_or_agreement():
    """The bound reaches the tolerance only where the rows vouch for it: many rows without a disagreement do, a
    handful do not (the pessimistic row), nor do many confident disagreements that happen to cancel out; a graft
    that gains accuracy is vouched for by the labels, and one that differs only where the trained model is unsure
    by the trained model's own probabilities, unless the labels show it losing more than the tolerance."""
    z = z_value(0.95)
    agree = torch.ones(400, dtype=torch.bool)
    assert loss_evidence(_outputs(agree), _outputs(agree), z=z, tolerance=0.02)["bound"] <= 0.02
    assert loss_evidence(_outputs(agree[:20]), _outputs(agree[:20]), z=z, tolerance=0.02)["bound"] > 0.02
    ref = torch.arange(400) < 300                                               # 300 right
    swapped = ref.clone()
    swapped[:30], swapped[300:330] = False, True                                # 30 lost, 30 gained
    evidence = loss_evidence(_outputs(ref), _outputs(swapped), z=z, tolerance=0.02)
    assert evidence["loss"] == 0.0 and evidence["disagree"] == 0.15 and evidence["bound"] > 0.02
    gains = ref.clone()
    gains[300:360] = True                                                       # 60 gained, none lost
    evidence = loss_evidence(_outputs(ref), _outputs(gains), z=z, tolerance=0.02)
    assert evidence["loss"] < 0 and evidence["hits_bound"] <= 0.02 < evidence["beliefs_bound"]
    unsure = loss_evidence(_outputs(ref, 0.51), _outputs(swapped, 0.99), z=z, tolerance=0.02)   # f unsure there
    assert unsure["beliefs_bound"] <= 0.02 < unsure["hits_bound"] and unsure["vouched"]    # the labels agree
    lost = swapped.clone()
    lost[300:330] = False                                                       # the 30 lost, none gained
    contradicted = loss_evidence(_outputs(ref, 0.51), _outputs(lost, 0.99), z=z, tolerance=0.02)
    assert contradicted["beliefs_bound"] <= 0.02 < contradicted["corrected"]    # the labels say 7.5 points lost
    assert not contradicted["vouched"] and contradicted["bound"] == contradicted["hits_bound"]


def test_temperature_scaling_softens_an_overconfident_model():
    """Rows right 70% of the time with 99% confidence: the fitted temperature is above 1 and brings the
    confidence near 70%; probabilities that are already calibrated keep T ≈ 1; the answers never change."""
    right = torch.arange(1000) % 10 < 7
    over = _outputs(right, 0.99)
    t = temperature(over.probs, over.labels)
    scaled = calibrate(over.probs, t)
    assert t > 2 and torch.equal(scaled.argmax(-1), over.probs.argmax(-1))
    assert abs(float(scaled.max(-1).values.mean()) - 0.7) < 0.02
    fair = _outputs(right, 0.7)
    assert abs(temperature(fair.probs, fair.labels) - 1) < 0.1


def test_chance_level_and_the_wilson_bound():
    """Chance is the most frequent class's share; the Wilson bound lies in [0, mean], grows with the rows, and a
    handful of rows all right does not make a 2-class task surely above chance."""
    assert chance_level(torch.tensor([0, 0, 1, 3])) == 0.5 and chance_level(torch.zeros(0, dtype=torch.long)) == 0
    z = 1.645
    for n, right in ((1, 1), (4, 4), (20, 13), (200, 130), (200, 0), (200, 200)):
        hits = torch.arange(n) < right
        assert 0.0 <= wilson_low(hits, z) <= right / n
    assert wilson_low(torch.ones(2, dtype=torch.bool), z) < 0.5 < wilson_low(torch.ones(8, dtype=torch.bool), z)
    assert wilson_low(torch.arange(20) < 13, z) < wilson_low(torch.arange(200) < 130, z)
    assert wilson_low(torch.ones(4, dtype=torch.bool), 0.0) == 1.0                  # z = 0: the mean


def test_held_out_rows_that_settle_a_rung_give_the_answer_every_row_gives():
    """settled(): where the held-out rows alone decide, the full evidence (with the training inputs, whatever they
    hold) decides the same; random cases of both kinds, and the training inputs' two extremes (all answered alike,
    all lost with full confidence)."""
    gen = torch.Generator().manual_seed(0)
    z, decided = z_value(0.95), {True: 0, False: 0, None: 0}

    def probs(n: int, classes: int = 3) -> torch.Tensor:
        return torch.softmax(3 * torch.randn(n, classes, generator=gen, dtype=torch.float64), -1)

    for case in range(400):
        n, m = int(torch.randint(20, 300, (1,), generator=gen)), int(torch.randint(0, 300, (1,), generator=gen))
        labels = torch.randint(0, 3, (n,), generator=gen)
        ref = probs(n)
        flip = torch.rand(n, generator=gen) < [0.0, 0.01, 0.05, 0.2][case % 4]
        graft = torch.where(flip[:, None], probs(n), ref)
        known = settled(Outputs(ref, labels), Outputs(graft, labels), z=z, tolerance=0.02, more_rows=m)
        decided[known] += 1
        ref_more = probs(m)
        for graft_more in (ref_more, torch.roll(torch.eye(3, dtype=torch.float64)[ref_more.argmax(-1)], 1, -1),
                           torch.where((torch.rand(m, generator=gen) < 0.05)[:, None], probs(m), ref_more)):
            full = loss_evidence(Outputs(ref, labels), Outputs(graft, labels), z=z, tolerance=0.02,
                                 ref_more=ref_more, graft_more=graft_more)
            assert known is None or full["vouched"] == known, case
    assert min(decided.values()) > 20, decided                                  # each answer is given
