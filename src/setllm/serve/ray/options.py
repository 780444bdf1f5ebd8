"""``RayOptions``: the flags of ``setllm serve`` that put it on Ray Serve. Imports no Ray."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...errors import InputError

ROUTERS = ("documents", "first-document", "power-of-two")
RAY_PIN = "ray[serve]==2.60.0"
RAY_INSTALL = "pip install -e '.[serve,ray]' in setllm's checkout"  # setllm is installed from its checkout, not from PyPI


@dataclass
class RayOptions:
    """How many replicas serve, where Ray runs, and how requests reach a replica.

    Attributes:
        replicas: replicas at start (None: one server, no Ray).
        min_replicas, max_replicas: autoscaling bounds (either one given: Ray Serve scales
            between them on requests in flight; neither: ``replicas`` always).
        target_in_flight: the requests in flight per replica autoscaling aims at.
        scale_up_s, scale_down_s: how long the load must stay above (below) the target before
            autoscaling adds (removes) a replica (Ray Serve's ``upscale_delay_s`` and
            ``downscale_delay_s``; a replica removed drains first).
        ray_address: a Ray cluster to join (None: start a local Ray instance).
        router: ``documents`` (to the replica holding the most of a request's documents),
            ``first-document`` (by the first document only, as a prefix router would) or
            ``power-of-two`` (Ray's default: the less loaded of two).
        imbalance: the difference in requests in flight between the most and least loaded
            replica past which every request goes by load.
    """

    replicas: int | None = field(default=None, metadata={
        "help": f"serve N replicas on Ray Serve behind one endpoint (needs {RAY_INSTALL}); default: one server, no Ray",
        "metavar": "N"})
    min_replicas: int | None = field(default=None, metadata={"help": "with --replicas: autoscale down to N replicas", "metavar": "N"})
    max_replicas: int | None = field(default=None, metadata={"help": "with --replicas: autoscale up to N replicas", "metavar": "N"})
    target_in_flight: float = field(default=2.0, metadata={
        "help": "with autoscaling: requests in flight per replica that Ray Serve aims at", "metavar": "N"})
    scale_up_s: float = field(default=30.0, metadata={
        "help": "with autoscaling: seconds the load stays above the target before a replica is added", "metavar": "S"})
    scale_down_s: float = field(default=600.0, metadata={
        "help": "with autoscaling: seconds the load stays below the target before a replica is removed (it drains first)", "metavar": "S"})
    ray_address: str | None = field(default=None, metadata={
        "help": "with --replicas: join this Ray cluster (e.g. ray://head:10001 or auto); default: start a local Ray instance",
        "metavar": "ADDR"})
    router: str = field(default="documents", metadata={
        "help": "with --replicas: how a request picks its replica: documents (where most of its documents are cached, in any "
                "order), first-document (by the first document, as a prefix router), power-of-two (Ray's default, by load)",
        "choices": ROUTERS})
    imbalance: int = field(default=4, metadata={
        "help": "with --replicas: past this difference in requests in flight between replicas, requests go by load", "metavar": "N"})

    def __post_init__(self) -> None:
        if self.replicas is None:
            given = [f for f, v in (("--min-replicas", self.min_replicas), ("--max-replicas", self.max_replicas),
                                    ("--ray-address", self.ray_address)) if v is not None]
            if given:
                raise InputError(f"{given[0]} needs --replicas N")
            return
        _positive("--replicas", self.replicas)
        low, high = self.bounds
        if not low <= self.replicas <= high:
            raise InputError(f"--replicas {self.replicas} must lie between --min-replicas {low} and --max-replicas {high}")
        if self.min_replicas is not None and self.min_replicas < 0:
            raise InputError(f"--min-replicas must be an integer >= 0, got {self.min_replicas}")
        if self.max_replicas is not None:
            _positive("--max-replicas", self.max_replicas)
        if not self.target_in_flight > 0:
            raise InputError(f"--target-in-flight must be > 0, got {self.target_in_flight}")
        for flag, seconds in (("--scale-up-s", self.scale_up_s), ("--scale-down-s", self.scale_down_s)):
            if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds >= 0:
                raise InputError(f"{flag} must be a number of seconds >= 0, got {seconds!r}")
        if self.imbalance < 0:
            raise InputError(f"--imbalance must be an integer >= 0, got {self.imbalance}")

    @property
    def autoscaling(self) -> bool:
        return self.min_replicas is not None or self.max_replicas is not None

    @property
    def bounds(self) -> tuple[int, int]:
        """(fewest, most) replicas."""
        n = self.replicas or 1
        return (n if self.min_replicas is None else self.min_replicas, n if self.max_replicas is None else self.max_replicas)


def _positive(flag: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f"{flag} must be an integer >= 1, got {value!r}")
