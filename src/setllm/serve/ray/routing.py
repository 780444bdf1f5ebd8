"""Where a request goes: the routing decision as a pure function of what the router knows
(which documents each replica holds, how many requests each has in flight). No Ray here, so
it is tested alone; :mod:`.router` is its Ray Serve adapter.

A replica "holds" a document once the router has sent it a request with that document (its
document cache then has it, unless evicted since: the record keeps the most recent
``capacity`` documents per replica, least recently sent out first).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass

AFFINITY, LOAD, NO_DOCUMENTS, NEW_DOCUMENTS = "affinity", "load", "no_documents", "new_documents"
REASONS = (AFFINITY, LOAD, NO_DOCUMENTS, NEW_DOCUMENTS)


@dataclass(frozen=True)
class Decision:
    """``replicas``: where the request should go (several: equally good, the less loaded
    wins); empty: by load alone. ``reason``: one of :data:`REASONS`."""

    replicas: tuple[Hashable, ...]
    reason: str


def decide(documents: Sequence[str], holdings: Mapping[Hashable, Holdings], in_flight: Mapping[Hashable, int], imbalance: int,
           share: float = 0.5) -> Decision:
    """The decision for a request with ``documents`` (keys, any order) among the replicas of
    ``in_flight`` (their requests in flight):

    - by load where it has no documents, or where the load differs by more than ``imbalance``;
    - to the replicas that hold the most of its documents, where one holds at least ``share``
      of them (affinity);
    - else to the replicas that hold the fewest documents (new documents spread the caches:
      otherwise every set sharing one document with a busy replica would follow it there,
      and one replica would end up with every request).
    """
    if not in_flight:
        return Decision((), LOAD)
    if not documents:
        return Decision((), NO_DOCUMENTS)
    if max(in_flight.values()) - min(in_flight.values()) > imbalance:
        return Decision((), LOAD)
    wanted = set(documents)
    held = {r: holdings[r].count(wanted) if r in holdings else 0 for r in in_flight}
    most = max(held.values())
    if most and most >= share * len(wanted):
        return Decision(tuple(r for r in in_flight if held[r] == most), AFFINITY)
    size = {r: len(holdings[r]) if r in holdings else 0 for r in in_flight}
    return Decision(tuple(r for r in in_flight if size[r] == min(size.values())), NEW_DOCUMENTS)


class Holdings:
    """The documents a replica was sent, the most recent ``capacity`` of them."""

    def __init__(self, capacity: int = 100_000):
        self.capacity = capacity
        self._keys: OrderedDict[str, None] = OrderedDict()

    def add(self, documents: Iterable[str]) -> None:
        for key in documents:
            self._keys[key] = None
            self._keys.move_to_end(key)
        while len(self._keys) > self.capacity:
            self._keys.popitem(last=False)

    def count(self, documents: set[str]) -> int:
        return sum(key in self._keys for key in documents)

    def __len__(self) -> int:
        return len(self._keys)
