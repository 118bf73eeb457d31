"""``replay-matched``: Avalanche's ``Replay`` with a memory of as many bytes as :data:`MATCHED` kept in the
same run (its result in ``ctx.peers``), in rows of the stream's average size
(:func:`~..interface.entry.row_bytes`)."""
from __future__ import annotations

from ..interface.entry import BuildContext, StrategyEntry, row_bytes
from .common import MODEL, replay_kept

MATCHED = "graft"
"""The strategy whose kept bytes the memory holds (it runs before, in the same run)."""


def build(ctx: BuildContext):
    """Replay with the matched memory."""
    from avalanche.training import Replay

    rows = [row for exp in ctx.stream.benchmark.train_stream for row in exp.dataset]
    per_row = sum(row_bytes(r) for r in rows) / max(1, len(rows))
    memory = max(1, int(ctx.peers[MATCHED].bytes / per_row))
    return Replay(**ctx.template, plugins=ctx.plugins, mem_size=memory)


ENTRY = StrategyEntry(
    name="replay-matched",
    help=f"Avalanche Replay with a memory of as many bytes as {MATCHED} keeps in the same run",
    stores=MODEL + f" and as many bytes of memory rows as {MATCHED} keeps", build=build,
    kept_bytes=replay_kept, peers=(MATCHED,))
