"""``/v1/responses``: :mod:`.protocol` (its body), :mod:`.serving` (what it does, its events), :mod:`.api_router` (the route)."""
