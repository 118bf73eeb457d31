"""Data-parallel runs under ``torchrun``: one job over several processes, on ``torch.distributed``.

``torchrun --nproc_per_node N -m cl_graft.cli <command> ...`` starts N copies of a command; each finds the
torchrun environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``/``MASTER_PORT``) and joins one
process group (:func:`init`: gloo on CPUs, NCCL on GPUs, one GPU per local rank). Then:

- every rank draws the same global batch (same seed) and works on its own contiguous slice (:func:`shard`;
  the global batch must divide by the world size), so the optimizer steps are the single-process run's;
  gradients are averaged by ``DistributedDataParallel`` (:func:`wrap`) — fine-tuning, multi-task training,
  graft re-training — or, for the region gradient of localization, which is a gradient with respect to a flat
  buffer and not a module's, by one ``all_reduce`` per step (:func:`all_mean_`);
- a run matches the single-process run up to floating-point summation order when the model has no dropout;
  with dropout, each rank draws its own masks, so runs agree in distribution, not bit for bit;
- rank 0 alone writes the output folder and prints (:mod:`cl_graft.outdir` gives the other ranks a private
  scratch copy that is removed at exit); :func:`check_same` stops every rank with a one-line error when the
  ranks disagree on settings, data or results (a hash gathered from all ranks).

Continual strategies run in Avalanche's distributed mode (its data loaders shard each experience with a
``DistributedSampler`` once the process group exists); see :mod:`cl_graft.strategies.comparison.runner`.
"""
from __future__ import annotations

import datetime
import hashlib
import json
import os
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

from .errors import UserError

TORCHRUN_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
TIMEOUT = datetime.timedelta(minutes=30)


def launched() -> bool:
    """True when this process was started by ``torchrun`` (its environment variables are set)."""
    return all(v in os.environ for v in TORCHRUN_ENV)


def active() -> bool:
    """True once the process group exists (after :func:`init`, or a caller's own ``init_process_group``)."""
    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    return dist.get_rank() if active() else 0


def world_size() -> int:
    return dist.get_world_size() if active() else 1


def is_main() -> bool:
    """True on rank 0 (and in a single-process run): the process that writes and prints."""
    return rank() == 0


def init(device: str = "auto") -> torch.device:
    """Joins torchrun's process group; returns this rank's device (``cuda:<LOCAL_RANK>`` with NCCL, else CPU).

    Args:
        device: the command's ``--device``: ``auto`` (GPUs when torch sees them), ``cpu`` or ``cuda``.

    Raises:
        UserError: no torchrun environment, or more local ranks than GPUs.
    """
    if not launched():
        missing = [v for v in TORCHRUN_ENV if v not in os.environ]
        raise UserError(f"--distributed needs torchrun's environment ({', '.join(missing)} not set); start the "
                        f"command with `torchrun --nproc_per_node N -m cl_graft.cli ...`")
    gpu = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
    local = int(os.environ["LOCAL_RANK"])
    if gpu:
        if local >= torch.cuda.device_count():
            raise UserError(f"local rank {local} has no GPU ({torch.cuda.device_count()} visible)")
        torch.cuda.set_device(local)
    if not active():
        dist.init_process_group("nccl" if gpu else "gloo", timeout=TIMEOUT)
    return torch.device("cuda", local) if gpu else torch.device("cpu")


def shutdown() -> None:
    if active():
        dist.destroy_process_group()


def describe() -> dict:
    """What a run record says about the processes: world size and backend (None in a single process)."""
    return {"world_size": world_size(), "backend": dist.get_backend() if active() else None}


def barrier() -> None:
    if active():
        dist.barrier()


def check_batch(batch_size: int, what: str = "batch size") -> int:
    """The per-rank share of a global ``batch_size``.

    Raises:
        UserError: ``batch_size`` does not divide by the world size.
    """
    n = world_size()
    if batch_size % n:
        raise UserError(f"the global {what} {batch_size} does not divide by the {n} processes; choose a multiple "
                        f"of {n}")
    return batch_size // n


def shard(batch: Any) -> Any:
    """This rank's contiguous slice of a global batch: a list of rows, a tensor ``(B, ...)`` or a list/tuple of
    tensors with the same first dimension (e.g. Avalanche's ``[x, y, t]``). Unchanged in a single process.

    Raises:
        UserError: the batch does not divide by the world size.
    """
    n = world_size()
    if n == 1:
        return batch
    if isinstance(batch, Tensor):
        size = check_batch(batch.shape[0])
        return batch[rank() * size:(rank() + 1) * size]
    if isinstance(batch, (list, tuple)) and batch and all(isinstance(b, Tensor) for b in batch):
        return type(batch)(shard(b) for b in batch)
    size = check_batch(len(batch))
    return batch[rank() * size:(rank() + 1) * size]


def wrap(model: nn.Module, *, unused: bool = False) -> nn.Module:
    """``model`` in ``DistributedDataParallel`` when the group exists (its trainable parameters as they are now:
    set ``requires_grad`` first), else ``model`` itself. ``unused``: some trainable parameters get no gradient
    in a step (other tasks' heads in multi-task training)."""
    if not active() or world_size() == 1:
        return model
    device = next(model.parameters()).device
    ids = [device] if device.type == "cuda" else None
    return nn.parallel.DistributedDataParallel(model, device_ids=ids, find_unused_parameters=unused)


def all_mean_(t: Tensor) -> Tensor:
    """``t`` replaced IN PLACE by its mean over the ranks (one ``all_reduce``); unchanged in a single process."""
    if active() and world_size() > 1:
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        t.div_(world_size())
    return t


def fingerprint(value: Any) -> str:
    """sha256 of a JSON-able value, or of tensors (one, a sequence, or a name → tensor mapping), for
    :func:`check_same`."""
    if isinstance(value, Tensor):
        value = [value]
    items = sorted(value.items()) if isinstance(value, dict) else list(enumerate(value)) \
        if isinstance(value, Sequence) and not isinstance(value, str) else []
    h = hashlib.sha256()
    if items and all(isinstance(t, Tensor) for _, t in items):
        for key, t in items:
            h.update(str(key).encode())
            h.update(t.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    else:
        h.update(json.dumps(value, sort_keys=True, default=str).encode())
    return h.hexdigest()


def check_same(value: Any, what: str) -> None:
    """Stops every rank with the same one-line error unless all ranks hold the same ``value`` (by
    :func:`fingerprint`; one ``all_gather_object``). No-op in a single process.

    Raises:
        UserError: the ranks disagree on ``what``.
    """
    if not active() or world_size() == 1:
        return
    hashes: list[str | None] = [None] * world_size()
    dist.all_gather_object(hashes, fingerprint(value))
    odd = [r for r, h in enumerate(hashes) if h != hashes[0]]
    if odd:
        raise UserError(f"the processes disagree on {what} (rank {odd[0]} differs from rank 0); give every rank "
                        f"the same data, settings and files")
