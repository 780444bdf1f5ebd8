"""``/v1/completions``: :mod:`.protocol` (its bodies), :mod:`.serving` (what it does), :mod:`.api_router` (the route)."""
