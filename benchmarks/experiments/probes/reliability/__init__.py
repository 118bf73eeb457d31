"""The reliability probe: every ``cl-graft`` command (and the Python API, as scripts) run as a new user would, its
cases grouped by what they protect (:data:`.probe.GROUPS`): the reference runs the other cases read, input
validation, what runs is what is recorded, output folders, the Python API's folder rules, resumed runs, saved state,
numerics, the results pages, and messages. ``python -m cl_graft.benchmarks.experiments.probes.reliability --out DIR
--page benchmarks/results/reliability.md`` (:mod:`.probe`)."""
