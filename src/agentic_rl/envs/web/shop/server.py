"""The shop's HTTP server: werkzeug's WSGI server in a thread, on 127.0.0.1 and a free port.

:class:`ShopServer` binds port 0 (the kernel picks a free one) on the loopback interface only,
serves the Flask app of :func:`~agentic_rl.envs.web.shop.app.create_app` from a daemon thread
(``threaded=True``: a browser's parallel requests never wait on each other; HTTP/1.1, so a
client keeps its connection), and stops on
:meth:`ShopServer.stop`: ``shutdown()`` ends the serving loop, ``server_close()`` closes the
listening socket, the thread is joined. A :func:`weakref.finalize` does the same when the owner
is garbage-collected or the interpreter exits, so no listening port outlives the env. The
server lives inside the owner's process: killing the process leaves nothing behind.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["ShopServer"]


def _stop(server: Any, thread: threading.Thread) -> None:
    """Stop serving, close the socket, join the thread. Never raises."""
    try:
        server.shutdown()
    except Exception:  # noqa: BLE001 - a half-started server has nothing to shut down
        pass
    try:
        server.server_close()
    except Exception:  # noqa: BLE001
        pass
    thread.join(timeout=10)


class ShopServer:
    """The shop served on ``127.0.0.1:<free port>`` (see the module docstring).

    Args:
        db_path: the shop's SQLite database.
        gate: decides every state-changing request (``create_app``'s ``gate``; a
            :class:`~agentic_rl.envs.web.shop.gate.SubmissionGate`); None refuses them all.

    Attributes:
        port: the bound port once :meth:`start` ran, else None.
    """

    def __init__(self, db_path: str | Path, gate: Callable[[str], str | None] | None = None):
        self.db_path = Path(db_path)
        self.gate = gate
        self.port: int | None = None
        self._server: Any = None
        self._finalizer: weakref.finalize | None = None

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>`` (starting the server if needed).

        Raises:
            ImportError: Flask is not installed.
            OSError: no port could be bound.
        """
        self.start()
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        """Whether the server is serving."""
        return self._server is not None

    def start(self) -> None:
        """Start serving (once; later calls do nothing).

        Raises:
            ImportError: Flask is not installed (extra ``web``).
            OSError: no port could be bound.
        """
        if self._server is not None:
            return
        from werkzeug.serving import WSGIRequestHandler, make_server

        from agentic_rl.envs.web.shop.app import create_app

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
        handler = type("KeepAliveHandler", (WSGIRequestHandler,), {"protocol_version": "HTTP/1.1"})
        server = make_server(
            "127.0.0.1",
            0,
            create_app(self.db_path, self.gate),
            threaded=True,
            request_handler=handler,
        )
        thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True
        )
        thread.name = f"web-shop-{server.server_port}"
        thread.start()
        self._server, self.port = server, int(server.server_port)
        self._finalizer = weakref.finalize(self, _stop, server, thread)

    def stop(self) -> None:
        """Stop the server and release its port. Idempotent; never raises."""
        finalizer, self._finalizer = self._finalizer, None
        self._server = None
        if finalizer is not None:
            finalizer()
