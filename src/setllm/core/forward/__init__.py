"""Forwards and drivers: one forward of a model under a variant (:mod:`.runtime`), the one
scoring driver of packed fixed-row forwards (:mod:`.scoring`), KV-cached decoding
(:mod:`.generation`), CUDA graphs of scoring's prefill (:mod:`.graphs`), and the drivers'
torch-free values (:mod:`.values`)."""
