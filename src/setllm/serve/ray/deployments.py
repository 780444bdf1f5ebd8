"""The Ray Serve application: the ingress in front of the engine replicas, with the engine's
replicas, autoscaling, router and resources set from :class:`.options.RayOptions`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ray import serve
from ray.serve.config import RequestRouterConfig

from ..config import ServeConfig
from .ingress import Ingress
from .options import RayOptions
from .replica import EngineReplica
from .router import DocumentRouter

INGRESS_IN_FLIGHT = 10_000  # the ingress only waits on replicas: it never refuses for load


def application(make_app: Callable[[], Any], config: ServeConfig, options: RayOptions, gpus: float = 0.0):
    """The bound application (``serve.run`` it). ``make_app``: builds the server's app on a
    replica; ``gpus``: per replica (1 on CUDA)."""
    drain = config.drain_limit
    engine = serve.deployment(EngineReplica, name="setllm-engine").options(
        **_replicas(options),
        max_ongoing_requests=config.max_queue + config.max_batch_size,  # the replica's own queue refuses past it (503)
        request_router_config=_router(options),
        ray_actor_options={"num_cpus": 1, "num_gpus": gpus},
        graceful_shutdown_timeout_s=drain + 1,
        graceful_shutdown_wait_loop_s=0.2,
    )
    ingress = serve.deployment(Ingress, name="setllm-ingress").options(
        num_replicas=1, max_ongoing_requests=INGRESS_IN_FLIGHT, ray_actor_options={"num_cpus": 0},
        graceful_shutdown_timeout_s=drain + 2, graceful_shutdown_wait_loop_s=0.2)
    return ingress.bind(engine.bind(make_app, drain), config)


def _replicas(options: RayOptions) -> dict[str, Any]:
    if not options.autoscaling:
        return {"num_replicas": options.replicas}
    low, high = options.bounds
    return {"autoscaling_config": {"min_replicas": low, "initial_replicas": options.replicas, "max_replicas": high,
                                   "target_ongoing_requests": options.target_in_flight,
                                   "upscale_delay_s": options.scale_up_s, "downscale_delay_s": options.scale_down_s}}


def _router(options: RayOptions) -> RequestRouterConfig:
    if options.router == "power-of-two":
        return RequestRouterConfig()
    return RequestRouterConfig(request_router_class=DocumentRouter,
                               request_router_kwargs={"imbalance": options.imbalance, "first_only": options.router == "first-document"})
