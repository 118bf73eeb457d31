"""``cl-graft export``: one task's union-grafted model out of a ``cl-graft run`` as a transformers folder."""
from __future__ import annotations

from pathlib import Path

import click

from ..errors import UserError

RECORD = "cl_graft_export.json"
"""The export's run record (``config.json`` is the transformers model's own)."""


def _run_record(skills: Path) -> dict:
    """The ``config.json`` of the ``cl-graft run`` whose skills folder this is (``<run>/<strategy>/state/skills``)."""
    from ..artifacts import RUN_CONFIG
    from ..files import read_json
    from ..schema import ListOf, Obj, check_json

    if not (skills / "skills.json").is_file():
        raise UserError(f"--skills {skills}: not a skills folder (skills.json missing)")
    for folder in skills.resolve().parents:
        if (folder / RUN_CONFIG).is_file():
            record = read_json(folder / RUN_CONFIG)
            if isinstance(record, dict) and record.get("command") == "run":
                return check_json(folder / RUN_CONFIG, record, Obj({
                    "stream": ListOf(str), "seed": int, "model": str, "head": str, "preset": str}))
    raise UserError(f"--skills {skills}: no cl-graft run config.json above it")


@click.command()
@click.option("--skills", type=click.Path(file_okay=False, exists=True), required=True,
              help="A run's skills folder, e.g. runs/cl/graft/state/skills.")
@click.option("--task", required=True, help="The task whose model to export (learned in the run).")
@click.option("--out", type=click.Path(file_okay=False), required=True, help="Output folder.")
@click.option("--data-dir", type=click.Path(file_okay=False), default=None,
              help="Folder of the tasks (for their label names; default: $CL_GRAFT_DATA, else the registry).")
@click.option("--overwrite", is_flag=True, help="Replace an export already in --out.")
def export(skills, task, out, data_dir, overwrite):
    """Write TASK's model (θ_pre + the regions of the tasks learned up to it + its head) to OUT in Hugging Face
    save_pretrained format (safetensors), loadable with AutoModel.from_pretrained(OUT) or, with its head,
    cl_graft.strategies.graft.export.load_task_model(OUT)."""
    import torch

    from ..benchmarks.tasks import get_task
    from ..outdir import claim_out_dir
    from ..presets import get_preset
    from ..provenance import run_record
    from ..strategies.graft.export import export_task
    from ..strategies.graft.owner_map import OwnerMap
    from ..training.models import build_classifier

    skills = Path(skills)
    record = _run_record(skills)
    if task not in record.get("stream", []):
        raise UserError(f"task {task!r} is not in the run's stream ({','.join(record.get('stream', []))})")
    torch.manual_seed(record["seed"])
    clf = build_classifier(record["model"], head=record["head"],
                           max_length=get_preset(record["preset"], seed=record["seed"]).max_length)
    for i, name in enumerate(record["stream"]):
        clf.add_task(get_task(name, data_dir), seed=record["seed"] + i)
    owners = OwnerMap.load(skills, clf)
    settings = {"command": "export", "skills": str(skills.resolve()), "task": task}
    with claim_out_dir(out, "export", settings=settings, overwrite=overwrite, record_name=RECORD) as run_dir:
        export_task(owners, clf, task, run_dir.path)
        run_dir.finish(run_record(**settings))
    click.echo(f"{task} -> {run_dir.path}  (AutoModel.from_pretrained or cl_graft.strategies.load_task_model)")
