"""``DocumentRouter``: a Ray Serve request router (its ``RequestRouter`` API) that sends a
request to the replica already holding the most of its documents, by content, in any order
(:func:`.routing.decide`); the rest goes as Ray's default router sends it (the less loaded of
two replicas). It runs in the caller's process (the ingress), which reads its counts
(:mod:`.tally`) for ``/metrics``.

Where a request is computed never changes its answer: every replica holds the same weights
and reads a request the same way; the router only decides which cache it warms.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from ray.serve._private.request_router import PowerOfTwoChoicesRequestRouter
from ray.serve.request_router import (
    LocalityMixin,
    MultiplexMixin,
    PendingRequest,
    ReplicaID,
    RequestRouter,
    RunningReplica,
)

from . import tally
from .routing import LOAD, Decision, Holdings, decide


class DocumentRouter(LocalityMixin, MultiplexMixin, RequestRouter):
    """Routes by the request's ``documents`` (keys, :mod:`.documents`), which the ingress
    puts in the dict it sends (the first argument of the call)."""

    def initialize_state(self, imbalance: int = 4, capacity: int = 100_000, first_only: bool = False) -> None:
        """``imbalance``: see :func:`.routing.decide`; ``capacity``: documents remembered per
        replica; ``first_only``: route by the first document alone (a prefix router's view,
        for comparison)."""
        self.imbalance, self.capacity, self.first_only = imbalance, capacity, first_only
        self.holdings: dict[ReplicaID, Holdings] = {}
        self.in_flight: Counter = Counter()
        self.decisions: dict[str, Decision] = {}  # by internal request id, until routed
        self.running: dict[str, ReplicaID] = {}

    def documents(self, pending: PendingRequest | None) -> list[str]:
        request = pending.args[0] if pending is not None and pending.args else None
        keys = list(request.get("documents") or ()) if isinstance(request, dict) else []
        return keys[:1] if self.first_only else keys

    async def choose_replicas(self, candidate_replicas: list[RunningReplica], pending_request: PendingRequest | None = None) -> list[list[RunningReplica]]:
        by_load = await PowerOfTwoChoicesRequestRouter.choose_replicas(self, candidate_replicas, pending_request)
        if pending_request is None or not by_load:
            return by_load
        loads = {r.replica_id: self.in_flight[r.replica_id] for r in candidate_replicas}
        decision = decide(self.documents(pending_request), self.holdings, loads, self.imbalance)
        self.decisions[pending_request.metadata.internal_request_id] = decision
        if not decision.replicas:
            return by_load
        return [[self._replicas[r] for r in decision.replicas if r in self._replicas], *by_load]

    def on_request_routed(self, pending_request: PendingRequest, replica_id: ReplicaID, result: Any) -> None:
        rid = pending_request.metadata.internal_request_id
        decision = self.decisions.pop(rid, Decision((), LOAD))
        reason = decision.reason if not decision.replicas or replica_id in decision.replicas else LOAD  # refused: went by load
        tally.DECISIONS[reason] += 1
        held = self.holdings.setdefault(replica_id, Holdings(self.capacity))
        held.add(self.documents(pending_request))
        tally.HELD[replica_id.unique_id] = len(held)
        self.in_flight[replica_id] += 1
        self.running[rid] = replica_id

    def on_request_completed(self, replica_id: ReplicaID, internal_request_id: str) -> None:
        if self.running.pop(internal_request_id, None) is not None:
            self.in_flight[replica_id] -= 1

    def update_replicas(self, replicas: list[RunningReplica]) -> None:
        super().update_replicas(replicas)
        live = {r.replica_id for r in replicas}
        for gone in [r for r in self.holdings if r not in live]:  # a replica that left took its cache with it
            del self.holdings[gone]
            tally.HELD.pop(gone.unique_id, None)
            self.in_flight.pop(gone, None)

    def on_replica_actor_died(self, replica_id: ReplicaID) -> None:
        super().on_replica_actor_died(replica_id)
        self.holdings.pop(replica_id, None)
        tally.HELD.pop(replica_id.unique_id, None)
