"""Probes: experiments that each answer one question, named for it, their conclusion a committed page under
``benchmarks/results/`` that keeps the command and revision that made it (its run record):

- :mod:`.reliability`: does every command (and the Python API) refuse bad input in one line, keep the user's files
  and resume exactly? (``reliability.md``);
- :mod:`.retrain_in_region`: does training a few steps inside a small top-|Δ| region recover what grafting it lost?
  (``retrain_probe/``); :mod:`.retrain_ab`: does ``--retrain`` help graft's automatic size? (``retrain_ab/``);
- :mod:`.small_regions`: can any region of 0.5–1% keep a task's trained accuracy? (``small_regions/``);
- :mod:`.flagged_baselines`: why the sanity flags marked SI, EWC and LwF (``sanity.md``);
- :mod:`.class_routing`, :mod:`.feature_forms`, :mod:`.task_inference_rules`: which rule tells a row's task without
  its label, and at what bytes? (``class_text/``, ``task_inference.md``).

Pages made before these scripts moved here name their old modules (``benchmarks/experiments/<name>.py``); each such
page or its folder's README says where the script is now."""
