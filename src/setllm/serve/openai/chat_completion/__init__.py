"""``/v1/chat/completions``: :mod:`.protocol` (its bodies), :mod:`.serving` (what it does), :mod:`.api_router` (the route)."""
