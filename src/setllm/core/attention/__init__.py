"""Attention backends: each mask rendered for its backend (:mod:`.renderers`: sdpa and eager
tensors, flex attention's block mask from :mod:`.flex`), attention per request in a packed row
(:mod:`.packed_attention`), a long set's attention split by element on the CPU (:mod:`.element_blocks`)."""
