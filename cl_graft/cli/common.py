"""Options and data preparation shared by several commands."""
from __future__ import annotations

import os

import click


def common_options(f):
    """--model/--head/--preset/--data-dir/--seed/--device/--out/--overwrite, in that order in --help."""
    opts = [
        click.option("--model", default="minilm", show_default=True,
                     help="Hub id or local path of the pre-trained model; 'minilm' = the bundled all-MiniLM-L6-v2."),
        click.option("--head", type=click.Choice(["linear", "mlm", "causal"]), default="linear", show_default=True,
                     help="linear head on pooled states, or prompt-based label words (masked / causal LM)."),
        click.option("--preset", default="quick", show_default=True, help="Run size: smoke, quick or paper."),
        click.option("--data-dir", type=click.Path(file_okay=False), default=None,
                     help="Folder of <task>/{train,test}.jsonl (default: $CL_GRAFT_DATA, else the HF Hub)."),
        click.option("--seed", type=int, default=0, show_default=True, help="Seed for sampling and training."),
        click.option("--device", default="auto", show_default=True,
                     help="Where models run: auto (a CUDA GPU if torch sees one, else the CPU), cpu, cuda, cuda:N."),
        click.option("--out", type=click.Path(file_okay=False), required=True, help="Output folder."),
        click.option("--overwrite", is_flag=True, help="Replace results already in --out."),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


def data_source(data_dir: str | None) -> str:
    return data_dir or os.environ.get("CL_GRAFT_DATA") or "huggingface-hub"
