"""Numerics: a learning rate that diverges, a model whose finite weights give NaN outputs, an experience that
diverges through the Python API: the run stops in one line (no model written), and a failed experience is undone
bit-exactly (the model and task 0's accuracy as before it)."""
from __future__ import annotations

import json

from . import scripts
from .harness import LOC, Case, Probe

TITLE = "numerics: a non-finite loss, weight or output stops the run"


def cases(p: Probe) -> list[Case]:
    r, d = p.root, ["--data-dir", p.data]
    o = r / "o-numerics"
    return [
        Case("--lr 1e9 (diverges)", ["finetune", "--task", "sst2", *d, "--preset", "smoke", "--lr", "1e9",
                                     "--out", o], check=p.absent(o, "no model, no folder")),
        Case("finetune --steps 1 --lr 1e30 (finite weights, NaN outputs)",
             ["finetune", "--task", "sst2", *d, "--preset", "smoke", "--steps", "1", "--lr", "1e30", "--out", o],
             check=p.absent(o)),
        Case("localize --finetuned a model with NaN outputs", ["localize", "--task", "sst2", *d, *LOC,
                                                               "--finetuned", r / "ft-nan", "--out", o],
             setup=lambda: _nan_model(p), check=p.absent(o)),
        Case("Python API: experience 1 diverges", [p.data, r / "undo.json"], want=0, script=scripts.UNDO_SCRIPT,
             check=lambda: _undone(p)),
    ]


def _nan_model(p: Probe) -> None:
    """The fine-tune with one weight matrix at 3e38: every weight finite, every output NaN."""
    import torch

    from cl_graft.artifacts import load_classifier, save_classifier

    model = load_classifier(p.root / "ft")
    with torch.no_grad():
        dict(model.named_parameters())["backbone.encoder.layer.0.output.dense.weight"].fill_(3e38)
    save_classifier(model, p.root / "ft-nan")


def _undone(p: Probe) -> str:
    done = json.loads((p.root / "undo.json").read_text())
    if not (done["restored"] and done["same_accuracy"] and done["tasks"] == ["sst2", "cr"]):
        return f"FAILED: {done}"
    return "model restored bit-exactly, task 0 accuracy unchanged, experience 1 trained after"
