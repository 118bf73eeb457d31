"""Calibration, out-of-distribution and WiSE analyses of fine-tuned vs grafted models (Panigrahi et al. 2023,
§4): reliability bins, temperature scaling, head re-fitting and OOD label maps (:mod:`.calibration`), the
experiment behind ``cl-graft analyze`` (:mod:`.experiment`) and its table and figures (:mod:`.report`)."""
