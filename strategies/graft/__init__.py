"""The method: forget-free continual learning by grafting (Panigrahi et al. 2023, §5.2,
https://arxiv.org/abs/2302.06600), as an Avalanche plugin (:mod:`.plugin`) and its thin strategy (:mod:`.strategy`).

The plugin keeps every task's region in an owner map (:mod:`.owner_map`), serves tasks by patch switching
(:mod:`..routing`, :mod:`..routing.features`), finds regions with a finder (:mod:`.finders`) on an experience's rows
(:mod:`.experience_data`) over the graftable tensors (:mod:`.targets`), exports one task as a plain model
(:mod:`.export`) and reports task-identification accuracy (:mod:`.task_identification`). Its entries in
``cl-graft run`` (:mod:`.entry`: settings in :mod:`.settings`, state between experiences in :mod:`.run_state`)
are declared here (:data:`ENTRIES`, found by the harness's registry) and import only the interface
(:mod:`cl_graft.strategies.interface`), never the harness.
"""
from .entry import ENTRIES

__all__ = ["ENTRIES"]
