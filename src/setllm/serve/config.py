"""``ServeConfig``: every knob of ``setllm serve``, one ``--flag`` each (see
:func:`setllm.cli.common.add_command`), checked once so a bad value fails before the model
loads."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..core.doccache.options import cache_dir_field, cache_dir_mb_field, cache_mb_field, check_flags
from ..errors import InputError
from .errors import BadRequest

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


@dataclass
class ServeConfig:
    """How ``setllm serve`` listens, batches and bounds work.

    Attributes:
        host, port: where to listen; loopback by default, so nothing outside this machine
            can reach an unauthenticated model server unless asked to.
        max_batch_size: most requests scored in one forward pass.
        max_queue: most requests waiting for the model; one more gets 503 + Retry-After.
        max_prompt_tokens: longest prompt accepted (None: the model's context).
        timeout_s: a request not answered by then gets 504.
        batch_window_ms: how long the first request of a batch waits for company.
        max_options: most options in one choose/score request.
        max_generate_tokens: most tokens one generate/completions request may ask for.
        max_prompts: most prompts one ``/v1/completions`` request may list.
        max_set_elements: most set elements (options, documents, ``{{a||b}}`` elements) in
            one prompt: each is read on its own, so they are bounded apart from tokens.
        allowed_hosts: the ``Host`` names the server answers (comma-separated; ``*``: any);
            None: loopback names only for a server without ``--api-key`` on a loopback
            address (a web page that rebinds its DNS name to 127.0.0.1 cannot reach it),
            any otherwise.
        drain_s: how long a stop signal waits for accepted requests (None: ``timeout_s``).
        batch_check: score a probe alone and in batches (once per machine, in the background)
            and batch only identical requests if this machine gives other low bits in a batch
            (see docs/serving.md).
        cache_mb: keep documents read under ``sbp`` (:mod:`setllm.core.doccache`), at most
            this many MB, shared by every reading of the served weights (None: the library's
            default, :data:`setllm.core.doccache.DEFAULT_MB`; 0: off).
        cache_dir: also keep them on disk in this folder, found again after a restart (None:
            memory only); ``cache_dir_mb``: that folder's bound.
        api_key: the key every route but ``/health`` and the page needs, as ``Authorization:
            Bearer KEY`` (None: no key; ``setllm serve`` reads ``$SETLLM_API_KEY`` when the
            flag is not given). Never printed.
    """

    host: str = field(default="127.0.0.1", metadata={"help": "address to listen on; 0.0.0.0 exposes the server to the network", "metavar": "ADDR"})
    port: int = field(default=8000, metadata={"help": "TCP port (0: any free port; the one chosen is printed)", "metavar": "PORT"})
    max_batch_size: int = field(default=8, metadata={"help": "most requests per forward pass (1 = no batching)", "metavar": "N"})
    max_queue: int = field(default=64, metadata={"help": "most requests waiting; more get 503 with Retry-After", "metavar": "N"})
    max_prompt_tokens: int | None = field(default=None, metadata={"help": "longest prompt in tokens (default: the model's context)", "metavar": "N"})
    timeout_s: float = field(default=60.0, metadata={"help": "seconds before a request gets 504", "metavar": "S"})
    batch_window_ms: float = field(default=5.0, metadata={"help": "how long a batch waits for more requests", "metavar": "MS"})
    max_options: int = field(default=64, metadata={"help": "most options in one choose/score request", "metavar": "N"})
    max_generate_tokens: int = field(default=512, metadata={"help": "most new tokens one generate/completions request may ask for", "metavar": "N"})
    max_prompts: int = field(default=16, metadata={"help": "most prompts one /v1/completions request may list", "metavar": "N"})
    max_set_elements: int = field(default=256, metadata={"help": "most set elements (options, documents, {{a||b}} elements) in one prompt",
                                                         "metavar": "N"})
    allowed_hosts: str | None = field(default=None, metadata={
        "help": "Host header names answered, comma-separated ('*': any; default: loopback names only for a server on a loopback "
                "address without --api-key, else any)", "metavar": "NAMES"})
    drain_s: float | None = field(default=None, metadata={"help": "seconds a stop waits for accepted requests before answering them 503 "
                                                                   "(default: --timeout-s, as long as any request may take)", "metavar": "S"})
    batch_check: bool = field(default=True, metadata={
        "help": "check once per machine, in the background, that batching gives bit-identical scores here (--no-batch-check: trust it)"})
    cache_mb: float | None = cache_mb_field(None)  # None: not asked (said at start where it cannot be used)
    cache_dir: str | None = cache_dir_field()
    cache_dir_mb: float = cache_dir_mb_field()
    api_key: str | None = field(default=None, repr=False, metadata={
        "help": "require 'Authorization: Bearer KEY' on every route but /health and the page at / (default: $SETLLM_API_KEY; unset: no key)",
        "metavar": "KEY"})

    def __post_init__(self) -> None:
        _at_least("--port", self.port, 0)
        if self.port > 65535:
            raise InputError(f"--port must be at most 65535, got {self.port}")
        _at_least("--max-batch-size", self.max_batch_size, 1)
        _at_least("--max-queue", self.max_queue, 1)
        if self.max_prompt_tokens is not None:
            _at_least("--max-prompt-tokens", self.max_prompt_tokens, 1)
        _at_least("--max-options", self.max_options, 2)
        _at_least("--max-generate-tokens", self.max_generate_tokens, 1)
        _at_least("--max-prompts", self.max_prompts, 1)
        _at_least("--max-set-elements", self.max_set_elements, 2)
        if self.allowed_hosts is not None and not self.allowed_hosts.strip(", "):
            raise InputError("--allowed-hosts must name at least one host (or '*')")
        if not (isinstance(self.timeout_s, (int, float)) and math.isfinite(self.timeout_s) and self.timeout_s > 0):
            raise InputError(f"--timeout-s must be a positive number of seconds, got {self.timeout_s!r}")
        if not (isinstance(self.batch_window_ms, (int, float)) and 0 <= self.batch_window_ms <= 1000):
            raise InputError(f"--batch-window-ms must be between 0 and 1000, got {self.batch_window_ms!r}")
        if self.drain_s is not None and not (isinstance(self.drain_s, (int, float)) and math.isfinite(self.drain_s) and self.drain_s >= 0):
            raise InputError(f"--drain-s must be a number of seconds >= 0, got {self.drain_s!r}")
        check_flags(self.cache_mb, self.cache_dir, self.cache_dir_mb)
        if not self.host:
            raise InputError("--host must not be empty")
        if self.api_key is not None and (not self.api_key.strip() or self.api_key != self.api_key.strip()):
            raise InputError("--api-key must be non-empty, without leading or trailing spaces")

    @property
    def loopback(self) -> bool:
        return self.host in LOOPBACK_HOSTS

    @property
    def hosts(self) -> frozenset[str] | None:
        """The ``Host`` names answered, lower case without a port (None: any)."""
        if self.allowed_hosts is None:
            return frozenset(("localhost", "127.0.0.1", "::1")) if self.loopback and self.api_key is None else None
        names = frozenset(n.strip().lower().strip("[]") for n in self.allowed_hosts.split(",") if n.strip())
        return None if "*" in names else names

    @property
    def drain_limit(self) -> float:
        """How long a stop waits for accepted requests: ``--drain-s``, else as long as any
        request may take (``--timeout-s``) plus a little for its answer to go out."""
        return self.drain_s if self.drain_s is not None else self.timeout_s + 1.0

    # The request limits, checked where a request is read (the routes, the structured and tool paths alike).
    def check_elements(self, prompt) -> None:
        """A prompt of more set elements than ``--max-set-elements`` is a 400."""
        n = sum(len(s) for s in prompt.sets)
        if n > self.max_set_elements:
            raise BadRequest(f"prompt: at most {self.max_set_elements} set elements per prompt (--max-set-elements), got {n}")

    def check_options(self, options) -> None:
        """More options (or candidates) than ``--max-options`` is a 400."""
        if len(options) > self.max_options:
            raise BadRequest(f"options: at most {self.max_options} per request (--max-options), got {len(options)}")

    def check_new_tokens(self, n: int, field: str = "max_new_tokens") -> None:
        """More new tokens than ``--max-generate-tokens`` is a 400 naming the request's ``field``."""
        if n > self.max_generate_tokens:
            raise BadRequest(f"{field}: at most {self.max_generate_tokens} on this server (--max-generate-tokens), got {n}")


def _at_least(flag: str, value, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise InputError(f"{flag} must be an integer >= {low}, got {value!r}")
