"""The ladder every surface shares: a prompt with sets becomes tokens, positions and a mask,
and one forward pass scores options or generates.

``prompt`` (sets, markup, JSON) -> ``encoding`` (tokens, SetPE positions) -> ``codec``
(canonical order, response ids, checks) -> ``masks`` / ``variants`` / ``runtime`` (one
forward under a variant's mask and positions) -> ``scoring`` (with ``packed_attention``, its
attention per request in a packed row) / ``generation``. Nothing here imports from above it
(the API, tasks, training, the front ends).
"""
