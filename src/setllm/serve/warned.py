"""A request's warnings go back with it: the ``setllm-warning`` response headers, and the
server's log line naming the route and the request.

setllm warns about a request's input where the library would (a segment ending in whitespace,
list text that looks like markup, options stripped of spaces); in a server those words would
reach only its log, once, with nothing to say which request they were about. So while the
server runs, every :class:`setllm.errors.SetLLMWarning` raised on behalf of a request is
caught here: the request's :class:`Notes` (a ``ContextVar`` of the request's task, and of its
job on the model thread: :class:`.engine.Engine` sets it while it prepares and runs the job)
keep its text for the response's headers, and the log says ``warning: POST /v1/generate
(request ID): ...``. A warning raised outside any request keeps the CLI's once-per-message line.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
import warnings
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field

from ..errors import SetLLMWarning

HEADER = "setllm-warning"  # one per warning about the request
REQUEST_ID = "x-request-id"  # the request's id in the log and in its response (the client's own, where it sent one)
_current: ContextVar[Notes | None] = ContextVar("setllm_request_notes", default=None)


@dataclass
class Notes:
    """What setllm warned about one request: ``route`` (``POST /v1/generate``) and ``request_id`` name it in the log."""

    route: str
    request_id: str = field(default_factory=lambda: uuid.uuid4().hex[:16])
    warnings: list[str] = field(default_factory=list)

    def add(self, message: str) -> bool:
        """Keep ``message`` (each text once per request); whether it was new."""
        if message in self.warnings:
            return False
        self.warnings.append(message)
        return True

    def headers(self) -> list[tuple[str, str]]:
        """The response's headers: the request's id and each warning (as latin-1 text, a header's charset)."""
        return [(REQUEST_ID, self.request_id)] + [(HEADER, _header_text(w)) for w in self.warnings]


def current() -> Notes | None:
    """The notes of the request being answered in this context, if any."""
    return _current.get()


@contextlib.contextmanager
def collecting(notes: Notes | None) -> Iterator[None]:
    """Warnings raised inside (in this context) are ``notes``' (None: nobody's)."""
    token = _current.set(notes)
    try:
        yield
    finally:
        _current.reset(token)


class _Hook:
    """``warnings.showwarning`` while a server runs: a request's warnings to its notes and to the
    log with its route, others as before. Installed by the first app started, removed by the
    last one stopped (tests run several in one process)."""

    def __init__(self):
        self.users = 0
        self.lock = threading.Lock()
        self.previous = None
        self.said: set[str] = set()  # outside requests: each text once, as the CLI's filter does

    def install(self) -> None:
        with self.lock:
            self.users += 1
            if self.users == 1:
                self.previous = warnings.showwarning
                warnings.showwarning = self.show
                # Every occurrence reaches show(): each request with the problem hears of it.
                warnings.filterwarnings("always", category=SetLLMWarning)

    def remove(self) -> None:
        with self.lock:
            self.users -= 1
            if self.users == 0:
                if warnings.showwarning == self.show:
                    warnings.showwarning = self.previous
                with contextlib.suppress(ValueError):
                    warnings.filters.remove(("always", None, SetLLMWarning, None, 0))
                    warnings._filters_mutated()  # noqa: SLF001 - the registry caches what the filters said

    def show(self, message, category, filename, lineno, file=None, line=None) -> None:
        notes = current()
        text = str(message)
        if issubclass(category, SetLLMWarning):
            if notes is not None:
                if notes.add(text):
                    self.previous(f"{notes.route} (request {notes.request_id}): {text}", category, filename, lineno, file, line)
                return
            if text in self.said:
                return
            self.said.add(text)
        self.previous(message, category, filename, lineno, file, line)


HOOK = _Hook()


def _header_text(message: str) -> str:
    return " ".join(message.split()).encode("latin-1", "replace").decode("latin-1")
