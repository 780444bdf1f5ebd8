"""The ladder every surface shares: a prompt with sets becomes tokens, positions and a mask,
and one forward pass scores options or generates.

``prompt`` (sets, markup, JSON) -> ``segments`` / ``encoding`` (tokens, SetPE positions) ->
``codec`` (canonical order, response ids, checks) -> ``masks`` / ``variants`` / ``runtime``
(one forward under a variant's mask and positions) -> ``scoring`` / ``generation``. Nothing
here imports from above it (the API, tasks, training, the front ends).
"""
