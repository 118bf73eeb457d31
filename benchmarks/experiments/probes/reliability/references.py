"""The reference runs: the folders other groups' cases read (``ft``: a fine-tune of sst2, ``run``: a graft run of
sst2, cr, ``mt``: a multitask run of sst2, cr), each checked as a result of its own."""
from __future__ import annotations

from .harness import FT, RUN, Case, Probe

TITLE = "the reference runs (later cases read their folders)"


def cases(p: Probe) -> list[Case]:
    r, d = p.root, ["--data-dir", p.data]
    return [
        Case("finetune sst2", ["finetune", "--task", "sst2", *d, *FT, "--out", r / "ft"], want=0,
             check=p.recorded(r / "ft")),
        Case("run graft sst2,cr", ["run", "--stream", "sst2,cr", *d, *RUN, "--strategies", "graft",
                                   "--task-inference", "features", "--out", r / "run"],  # saved feature statistics
             want=0, check=lambda: "results written" if (r / "run/results.json").is_file() else "NO RESULTS"),
        Case("multitask sst2,cr", ["multitask", "--tasks", "sst2,cr", "--no-single", *d, "--preset", "smoke",
                                   "--out", r / "mt"], want=0, check=p.recorded(r / "mt")),
    ]
