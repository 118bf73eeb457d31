"""What the size search reports: each task's size record (:func:`sizing_records`), its log line
(:func:`size_line`) and the capacity warnings' messages (:func:`full_message`, :func:`chance_message`).

The record's keys are listed in the package docstring (:mod:`cl_graft.strategies.graft.sizing`); they are
written into saved regions and run records, so they keep their names (``share`` is the task's region size,
``elements`` its element count).
"""
from __future__ import annotations


def sizing_records(owners) -> list[dict]:
    """Per learned task of an :class:`~.owner_map.OwnerMap`: its name and region size record (``share`` of the
    graftable elements; ``loss``, ``met``, ``free`` … when the size was chosen automatically)."""
    numel = sum(o.numel() for o in owners.owner.values())
    out = []
    for task, patch in zip(owners.tasks, owners.patches):
        record = dict(patch.region.meta.get("sizing") or {})
        record.setdefault("share", patch.region.size / numel)
        out.append({"task": task, **record})
    return out


def size_line(task: str, record: dict) -> str:
    """The log line of one task's region size."""
    line = f"task {task}: region {100 * record['share']:.2f}% of graftable elements"
    if "loss" in record:
        line += (f", loses {100 * record['loss']:+.1f} points of the trained model's {record['validation']} "
                 f"accuracy (tolerance {100 * record['tolerance']:.0f})"
                 + ("" if record.get("below_cap") else f", its cap {100 * record['cap_share']:.2f}%"))
    if "free" in record:
        line += f", {100 * record['free']:.1f}% free"
    return line


def chance_message(task: str, record: dict) -> str:
    """The warning (or error) of a task whose grafted model is not surely above chance on its held-out rows
    although it keeps its trained model's score: the trained model learned (almost) nothing."""
    return (f"task {task!r} scores {100 * record['score']:.1f}% on its {record['rows']} {record['validation']} "
            f"rows (its trained model {100 * record['reference']:.1f}%), not surely above chance "
            f"({100 * record['chance']:.1f}%, its most frequent training class); it trained in the "
            f"{100 * record['free_before']:.1f}% of the graftable elements that were free")


def full_message(task: str, record: dict) -> str:
    """The capacity warning (or error) of a task that lost more than its tolerance."""
    return (f"task {task!r} lost {100 * record['loss']:.1f} points of its trained model's {record['validation']} "
            f"accuracy (tolerance {100 * record['tolerance']:.0f}) with {100 * record['share']:.2f}% of the "
            f"graftable elements; {100 * record['free_before']:.1f}% were free (this task could take "
            f"{100 * record['cap_share']:.1f}%)")
