"""The service an MCP server answers from, loaded on a thread so the handshake never waits for the store."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .api import SegosService


class ServiceSlot:
    """The service a server answers from, built by `factory` on a thread (`start`) so that the server
    answers the handshake while the store loads; requests `wait()` for it. Attribute access is passed on
    to the loaded service, so tool bodies call `service.search(...)` on the slot once it is ready.

    `on_ready(service)` and `on_error(exc)` run on the loading thread when it ends.
    """

    def __init__(
        self,
        factory: Callable[[], SegosService],
        *,
        on_ready: Callable[[SegosService], None] | None = None,
        on_error: Callable[[BaseException], None] | None = None,
    ):
        self._factory = factory
        self._future: Future[SegosService] = Future()
        self._on_ready, self._on_error = on_ready, on_error
        self._thread: threading.Thread | None = None

    @classmethod
    def of(cls, service: SegosService) -> ServiceSlot:
        """A slot holding a service built already."""
        slot = cls(lambda: service)
        slot._future.set_result(service)
        return slot

    def start(self) -> None:
        if self._future.done() or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._load, name="segos-load-store", daemon=True)
        self._thread.start()

    def _load(self) -> None:
        try:
            service = self._factory()
        except BaseException as exc:
            self._future.set_exception(exc)
            if self._on_error is not None:
                self._on_error(exc)
            return
        self._future.set_result(service)
        if self._on_ready is not None:
            self._on_ready(service)

    def settle(self) -> None:
        """Wait until a started load has ended (so that `on_error` has run for a store that cannot be
        served, even when the client went away first)."""
        if self._thread is not None:
            self._thread.join()

    async def wait(self) -> SegosService:
        if not self._future.done():
            self.start()
            return await asyncio.wrap_future(self._future)
        return self._future.result()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # the slot's own state (e.g. looked up before __init__ ran): not passed on
            raise AttributeError(name)
        return getattr(self._future.result(timeout=0), name)
