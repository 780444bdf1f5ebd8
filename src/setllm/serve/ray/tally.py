"""What the router of this process did, for ``/metrics`` of the ingress. Its own module:
Ray Serve ships a router's module to the caller by value (cloudpickle), so counts kept
there would be a copy's; this module is imported, so the ingress reads the same objects."""

from __future__ import annotations

from collections import Counter

from .routing import REASONS

DECISIONS: Counter = Counter({reason: 0 for reason in REASONS})  # requests routed, by why
HELD: dict[str, int] = {}  # documents the router records per replica (by its name)
