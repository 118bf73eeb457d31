"""Evidence that a grafted model loses at most a tolerance of its trained model's accuracy, from held-out rows.

Panigrahi et al. 2023 (https://arxiv.org/abs/2302.06600) claim a tiny region keeps nearly all of a task's
fine-tuned accuracy; the size search (:mod:`cl_graft.strategies.graft.sizing`) chooses each task's region size
by asking, rung by rung, whether the rows at hand can vouch for that. With f the trained model (θ_ft), g a
grafted one and y the label of a held-out row x, the quantity to bound is the accuracy g loses,
L = P(f(x) = y) − P(g(x) = y). Two estimates of L are read from the same rows, each with a one-sided upper confidence bound at level α/2 (so that using either holds at level α:
Bonferroni); a rung is vouched for when the paired bound is at most the tolerance τ, or when the beliefs' bound
is and the labels do not contradict it (below):

- **Paired hits** (labelled): e_i = 1[f right] − 1[g right] ∈ {−1, 0, 1}; its mean is L without assumptions.
  Rows where g is right and f wrong count in g's favour, so a graft that *gains* accuracy (a small region often
  regularises) is accepted on few rows. Its noise is √(disagreement / n): a hundred rows cannot resolve a
  loss of one point when the models disagree on several percent of them.
- **The trained model's own beliefs** (label-free): s_i = p_f(f(x_i) | x_i) − p_f(g(x_i) | x_i) ∈ [0, 1], the
  accuracy g loses *if f's probabilities are right*; 0 on every row where g answers as f does, and small where
  they disagree on a row f itself is unsure of, which is where disagreements fall. Its rows are almost all 0, so
  its bound is tight, and it needs no label, so it reads the held-out rows **and a sample of the training
  inputs** (hundreds more rows). f's probabilities are first temperature-scaled on the held-out rows' labels
  (:func:`temperature`, Guo et al. 2017: fine-tuned networks are overconfident, and grafting's paper reports
  θ_ft worse calibrated than its grafts). It assumes the scaled f is calibrated or overconfident on its own
  answers (then s_i over-states the loss of that row), and that g agrees with f on the inputs f trained on no
  better than on new inputs of the task (f is fitted, and so most confident, there: s_i over-states again).
  Those assumptions can fail (on one qnli seed a 0.5% graft lost 3 points of f's dev accuracy while the beliefs
  bound said at most 1.8), so the beliefs count only where the held-out labels do not contradict them: their
  estimate corrected by the labels, mean(s) + mean over the held-out rows of (e_i − s_i) (the rectifier of
  prediction-powered inference, Angelopoulos et al. 2023, used as a point check), must also be at most τ.
  Measured on MiniLM at the quick preset (sst2, qnli, agnews): top-|Δ| grafts disagree with f about as often on
  training inputs as on held-out ones.

Each bound is a normal bound mean + z·sd/√n over the rows **plus one pessimistic row** (e = s = 1: f right and
confident, g wrong), so that a handful of rows without a disagreement is not taken for certainty (as the rule of
three would not): with 20 rows the pessimistic row alone costs ~5 points. Never test rows; no random numbers.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import torch
from torch import Tensor


@dataclass(frozen=True)
class Outputs:
    """A model's class probabilities on the held-out rows and the rows' labels.

    Attributes:
        probs: ``(n, C)`` float, softmax outputs.
        labels: ``(n,)`` long, the true classes.
    """

    probs: Tensor
    labels: Tensor

    @property
    def answers(self) -> Tensor:
        """``(n,)`` long, the predicted classes."""
        return self.probs.argmax(-1)

    @property
    def hits(self) -> Tensor:
        """``(n,)`` bool, right on each row."""
        return self.answers == self.labels


def calibrate(probs: Tensor, temperature: float) -> Tensor:
    """``probs`` ``(n, C)`` at another softmax temperature: softmax(log p / T) (the answers stay the same)."""
    return torch.softmax(probs.double().clamp(min=1e-300).log() / temperature, dim=-1)


def temperature(probs: Tensor, labels: Tensor) -> float:
    """The softmax temperature T that makes ``probs`` ``(n, C)`` most likely for ``labels`` ``(n,)`` (temperature
    scaling, Guo et al. 2017): the best of a fixed grid of T from 1/20 to 20, evenly spaced in log T; 1.0 for
    no rows."""
    if not len(labels):
        return 1.0
    grid = torch.logspace(math.log10(0.05), math.log10(20.0), 121, dtype=torch.float64)       # (121,)
    rows = torch.arange(len(labels))
    nll = torch.stack([-calibrate(probs, float(t))[rows, labels].clamp(min=1e-300).log().mean() for t in grid])
    return float(grid[int(nll.argmin())])


def z_value(confidence: float) -> float:
    """The normal quantile of each of the two bounds: one-sided level 1 − (1 − confidence) / 2."""
    return NormalDist().inv_cdf(1 - (1 - confidence) / 2)


def upper_bound(losses: Tensor, z: float) -> float:
    """mean + z·sd/√n of ``losses`` ``(n,)`` with one pessimistic row of 1 added."""
    x = torch.cat([losses.double().reshape(-1), torch.ones(1, dtype=torch.float64)])        # (n + 1,)
    return float(x.mean() + z * x.std(unbiased=True) / math.sqrt(len(x)))


def beliefs(ref: Tensor, graft: Tensor) -> Tensor:
    """s_i = p_f(f(x_i)) − p_f(g(x_i)) of class probabilities ``ref`` (f) and ``graft`` (g), both ``(n, C)``:
    ``(n,)`` in [0, 1], 0 where the two answer alike."""
    rows = torch.arange(len(ref))
    return (ref[rows, ref.argmax(-1)] - ref[rows, graft.argmax(-1)]).clamp(min=0)


def loss_evidence(ref: Outputs, graft: Outputs, *, z: float, tolerance: float, ref_more: Tensor | None = None,
                  graft_more: Tensor | None = None) -> dict:
    """The evidence that ``graft`` loses at most ``tolerance`` of ``ref``'s (the trained model's) accuracy on the
    same held-out rows; the label-free estimate also reads the probabilities ``ref_more`` / ``graft_more``
    ``(m, C)`` of both models on rows whose labels are not used (a sample of the training inputs).

    Returns:
        ``loss`` (the paired point estimate acc(ref) − acc(graft)), ``hits_bound`` and ``beliefs_bound`` (their
        upper bounds), ``corrected`` (the beliefs' estimate corrected by the held-out labels), ``bound`` (the
        bound that decides: the smaller one the labels allow), ``vouched`` (``bound`` ≤ ``tolerance``),
        ``beliefs`` (the beliefs' mean) and ``disagree`` (share of the held-out rows answered differently); see
        the module docstring.
    """
    f, g = ref.hits.double(), graft.hits.double()
    held = beliefs(ref.probs, graft.probs)                                                  # (n,)
    s = torch.cat([held, beliefs(ref_more, graft_more)]) if ref_more is not None and len(ref_more) else held
    hits_bound, beliefs_bound = upper_bound(f - g, z), upper_bound(s, z)
    n = max(1, len(f))
    corrected = float(s.mean() + ((f - g) - held).mean()) if len(f) else 1.0
    bound = min(hits_bound, beliefs_bound) if corrected <= tolerance else hits_bound
    return {"loss": float((f - g).sum()) / n, "hits_bound": hits_bound, "beliefs_bound": beliefs_bound,
            "corrected": corrected, "bound": bound, "vouched": bound <= tolerance,
            "beliefs": float(s.mean()) if len(s) else 0.0, "disagree": float((ref.answers != graft.answers).sum()) / n}


def settled(ref: Outputs, graft: Outputs, *, z: float, tolerance: float, more_rows: int) -> bool | None:
    """Whether the held-out rows alone decide :func:`loss_evidence`'s ``vouched``, whatever the two models answer
    on the ``more_rows`` training inputs not scored yet: True when the paired bound is at most ``tolerance``;
    False when it is above and the beliefs cannot bring the bound down (their estimate corrected by the labels, or
    the mean their bound is at least, is above ``tolerance`` even if every training input is answered alike:
    s ≥ 0 there); else None. No row of the held-out set: None."""
    f, g = ref.hits.double(), graft.hits.double()
    n = len(f)
    if n == 0:
        return None
    if upper_bound(f - g, z) <= tolerance:
        return True
    held = beliefs(ref.probs, graft.probs)                                                  # (n,)
    corrected_low = float(held.sum()) / (n + more_rows) + float(((f - g) - held).mean())
    beliefs_low = (float(held.sum()) + 1) / (n + more_rows + 1)                             # mean, pessimistic row
    return False if corrected_low > tolerance or beliefs_low > tolerance else None


def chance_level(labels: Tensor) -> float:
    """The accuracy of always answering the most frequent class of ``labels`` ``(n,)`` (0.0 for no rows)."""
    return float(torch.bincount(labels).max()) / len(labels) if len(labels) else 0.0


def wilson_low(hits: Tensor, z: float) -> float:
    """The one-sided Wilson score lower bound of the accuracy ``hits.mean()`` of ``hits`` ``(n,)`` bool (z: its
    normal quantile); 0.0 for no rows. Unlike mean − z·sd/√n it stays inside [0, 1] and does not take a handful
    of rows all right for certainty."""
    n = len(hits)
    if n == 0:
        return 0.0
    p, z2 = float(hits.double().mean()), z * z
    centre = p + z2 / (2 * n)
    spread = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return max(0.0, (centre - spread) / (1 + z2 / n))
