"""The number format of the size search's passes (:attr:`~.rules.RegionSize.precision`): the held-out and
training-input passes of the ladder and the refinement's finder run their matrix products in bfloat16 where the
device computes it natively, which is what the search costs (issue 44: on the README's text stream, 2 CPU cores
with AVX512-BF16, a MiniLM forward pass of 64 rows × 64 tokens took 0.31 s instead of 0.99 s).

Every pass of one task's search runs in the same format (the trained model's reference, each rung, the finder's
region), so a rung is always compared with a reference computed alike. Weights stay float32: only the products are
rounded (``torch.autocast``), and probabilities are taken in float64 from the logits as before. The format used is
recorded in each region's ``meta["sizing"]["precision"]``.

``"auto"`` keeps float32 for a model of fewer than :data:`BFLOAT16_MIN_ELEMENTS` graftable elements: there the casts
cost more than the products save (split-digits' MLP, 19,210 elements: the search and refinement took 0.21–0.23 s per
run in bfloat16 against 0.17–0.18 s in float32, seeds 1 and 2 of ``cl-graft run --stream split-digits --model mlp
--scenario class --strategies graft --precision bfloat16|float32``).
"""
from __future__ import annotations

import contextlib

import torch

from cl_graft.machine import native_bfloat16

PRECISIONS = ("auto", "float32", "bfloat16")
BFLOAT16_MIN_ELEMENTS = 1_000_000
"""The fewest graftable elements for which ``"auto"`` takes bfloat16 (MiniLM has 10.6 M)."""


def search_dtype(precision: str, device: torch.device, *, elements: int) -> torch.dtype:
    """The products' dtype for ``precision`` (one of :data:`PRECISIONS`) on ``device`` for a model of ``elements``
    graftable elements: ``"auto"`` is bfloat16 where :func:`native_bfloat16` and the model has at least
    :data:`BFLOAT16_MIN_ELEMENTS`, else float32."""
    if precision == "auto":
        big = elements >= BFLOAT16_MIN_ELEMENTS
        return torch.bfloat16 if big and native_bfloat16(device) else torch.float32
    return torch.bfloat16 if precision == "bfloat16" else torch.float32


def products(dtype: torch.dtype, device: torch.device):
    """A context in which ``device``'s matrix products run in ``dtype`` (float32: a no-op). The cast weights are
    not cached, so weights grafted in place inside it are seen by the next pass."""
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=dtype, cache_enabled=False)
