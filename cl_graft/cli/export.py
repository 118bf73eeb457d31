"""``cl-graft export``: one task's union-grafted model out of a ``cl-graft run`` as a transformers folder."""
from __future__ import annotations

from pathlib import Path

import click

from ..errors import UserError

AVALANCHE = True
"""This command uses Avalanche (:func:`cl_graft.cli.command_modules`)."""

RECORD = "cl_graft_export.json"
"""The export's run record (``config.json`` is the transformers model's own)."""


def _run_record(skills: Path) -> tuple[dict, Path, bool]:
    """The settings of the ``cl-graft run`` whose skills folder this is (``<run>/<strategy>/state/skills``): its
    ``config.json``, or for an unfinished run the settings it recorded when it started; with the run's folder and
    whether the run finished."""
    from ..artifacts import RUN_CONFIG
    from ..files import read_json
    from ..outdir import OWNER_FILE
    from ..schema import ListOf, Obj, check_json

    if not (skills / "skills.json").is_file():
        raise UserError(f"--skills {skills}: not a skills folder (skills.json missing)")
    schema = Obj({"stream": ListOf(str), "seed": int, "model": str, "head": str, "preset": str})
    for folder in skills.resolve().parents:
        if (folder / RUN_CONFIG).is_file():
            record = read_json(folder / RUN_CONFIG)
            if isinstance(record, dict) and record.get("command") == "run":
                _refuse_digits(skills, record)
                return check_json(folder / RUN_CONFIG, record, schema), folder, True
        if (folder / OWNER_FILE).is_file():
            owner = read_json(folder / OWNER_FILE)
            if isinstance(owner, dict) and owner.get("command") == "run":
                _refuse_digits(skills, owner.get("settings"))
                started = check_json(folder / OWNER_FILE, owner, Obj({"settings": schema}))["settings"]
                return started, folder, False
    raise UserError(f"--skills {skills}: no cl-graft run config.json above it")


def _refuse_digits(skills: Path, record) -> None:
    """Refuses the skills of a digits run (its ``stream`` is one name, not a list of text tasks).

    Raises:
        UserError: one line saying what ``export`` supports.
    """
    if isinstance(record, dict) and isinstance(record.get("stream"), str):
        raise UserError(f"--skills {skills}: a run of the digits stream {record['stream']}; export writes a task of "
                        f"a text-stream run (--stream qnli,agnews,...) as a transformers folder; a digits model is "
                        f"exported from Python (cl_graft.strategies.export_task)")


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
    from ..provenance import portable_path, run_record
    from ..strategies.graft.export import export_task
    from ..strategies.graft.saved_checks import load_skills
    from ..training.models import build_classifier

    skills = Path(skills)
    record, run, finished = _run_record(skills)
    if task not in record["stream"]:
        raise UserError(f"task {task!r} is not in the run's stream ({','.join(record['stream'])})")
    torch.manual_seed(record["seed"])
    clf = build_classifier(record["model"], head=record["head"],
                           max_length=get_preset(record["preset"], seed=record["seed"]).max_length)
    for i, name in enumerate(record["stream"]):
        clf.add_task(get_task(name, data_dir), seed=record["seed"] + i)
    owners = load_skills(skills, clf)
    if owners.tasks != record["stream"][:len(owners.tasks)]:
        raise UserError(f"{skills / 'skills.json'}: field 'tasks' ({','.join(owners.tasks)}) is not the start of "
                        f"the run's stream ({','.join(record['stream'])})")
    if task not in owners.tasks:
        learned = ", ".join(owners.tasks) or "none yet"
        if finished:
            raise UserError(f"--skills {skills} holds no skill for task {task!r} (it holds {learned})")
        raise UserError(f"task {task!r} is not learned in the unfinished run in {run}; resume it with `cl-graft run "
                        f"... --out {run} --resume` or export a finished task ({learned})")
    settings = {"command": "export", "skills": portable_path(skills.resolve()), "task": task}
    with claim_out_dir(out, "export", settings=settings, overwrite=overwrite, record_name=RECORD) as run_dir:
        export_task(owners, clf, task, run_dir.path)
        run_dir.finish(run_record(**settings))
    click.echo(f"{task} -> {run_dir.path}  (AutoModel.from_pretrained or cl_graft.strategies.load_task_model)")
