"""Digit streams (:mod:`cl_graft.benchmarks.digits`): ``split-digits`` and ``permuted-digits:N`` on scikit-learn's
``load_digits`` (offline), with a model trained from scratch (``--model mlp|mtmlp|cnn``)."""
from __future__ import annotations

from cl_graft.errors import UserError

from . import StreamFamily, StreamRequest, StreamSetup


def _setup(request: StreamRequest) -> StreamSetup:
    from ..digits import DigitsStream, digits_model, parse_digits_stream

    if parse_digits_stream(request.spec) is None:                     # a misspelt name, before its options
        raise UserError(f"{request.spec!r} is not a digits stream (split-digits, permuted-digits:N)")
    request.refuse(("k", "eval_cap", "head", "fresh_head", "data_dir", "class_order"), "digits")
    base = digits_model(request.model, request.seed).to(request.device)
    the_stream = DigitsStream.make(request.spec, request.model, seed=request.seed, scenario=request.scenario)
    tune_stream = (DigitsStream.make(request.spec, request.model, seed=request.seed, scenario=request.scenario,
                                     tune=True) if request.tune else None)
    record = {"stream": the_stream.name, "tasks": the_stream.tasks, "model": request.model,
              "scenario": request.scenario}
    return StreamSetup(record=record, base=base, make=lambda: (the_stream, tune_stream),
                       source="sklearn.datasets.load_digits")


def _claims(spec: str) -> bool:
    """``split-digits`` and ``permuted-digits…`` (a misspelt count is refused by the setup, in one line)."""
    return "," not in spec and (spec == "split-digits" or spec.startswith("permuted-digits"))


FAMILY = StreamFamily(name="digits", grammar="a digits stream (sklearn's load_digits, offline): split-digits "
                      "(5 tasks of 2 digits) or permuted-digits:N (N tasks of 10 digits under pixel permutations)",
                      claims=_claims, setup=_setup, priority=20)
