"""``python -m cl_graft.benchmarks.experiments.probes.reliability``: see :mod:`.probe`."""
from .probe import main

if __name__ == "__main__":
    main()
