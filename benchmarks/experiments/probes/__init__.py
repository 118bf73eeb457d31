"""Probes: experiments that answer one question each, their conclusion a committed page under
``benchmarks/results/`` (its command and revision in its run record). :mod:`.reliability` is the reliability
probe of the command line and the Python API."""
