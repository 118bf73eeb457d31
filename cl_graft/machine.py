"""The conditions a run's times were measured under: threads, the machine's load, whether the CPU multiplies
bfloat16 natively (the size search's precision depends on it: on the README's main job graft / naive was
1.31–1.35 with float32 passes, 1.08–1.13 with bfloat16 ones). :func:`conditions` is what a run record keeps at
start, :func:`load_average` what it adds at the end.
"""
from __future__ import annotations

import os

import torch


def native_bfloat16(device: torch.device) -> bool:
    """Whether ``device`` multiplies bfloat16 natively: a CUDA device that supports it, or a CPU with AVX512-BF16
    or AMX (elsewhere bfloat16 is emulated, slower than float32)."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device.type != "cpu":
        return False
    checks = (getattr(torch.cpu, "_is_avx512_bf16_supported", None), getattr(torch.cpu, "_is_amx_tile_supported", None))
    return any(check is not None and check() for check in checks)


def load_average() -> list[float] | None:
    """The machine's 1-, 5- and 15-minute load averages (runnable processes), None where the system has none."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (OSError, AttributeError):
        return None


def conditions(device: str | torch.device | None = None) -> dict:
    """The conditions at this moment: ``torch_threads`` (``torch.get_num_threads()``), ``omp_num_threads`` (the
    environment's ``OMP_NUM_THREADS``, None when unset), ``load_average_start`` (:func:`load_average`),
    ``bfloat16_native`` (:func:`native_bfloat16` of ``device``, default the CPU)."""
    device = torch.device(device) if device is not None else torch.device("cpu")
    return {"torch_threads": torch.get_num_threads(), "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
            "load_average_start": load_average(), "bfloat16_native": native_bfloat16(device)}
