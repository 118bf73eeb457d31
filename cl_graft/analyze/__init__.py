"""Calibration, out-of-distribution and WiSE analyses of fine-tuned vs grafted models (Panigrahi et al. 2023, §4):
reliability bins, temperature scaling, head re-fitting and OOD label maps (:mod:`.calibration`), and the tables
behind ``cl-graft analyze`` (:mod:`.report`)."""
