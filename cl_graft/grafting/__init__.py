"""Grafting θ_pre + γ ⊙ (θ_ft − θ_pre): new grafted models, WiSE interpolation, and skill patches applied and
undone in place (:mod:`.graft`), saved as safetensors + JSON (:mod:`.patch_io`)."""
