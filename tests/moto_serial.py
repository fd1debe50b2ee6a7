"""moto's S3 server with one request handled at a time: run as
`python -m tests.moto_serial HOST PORT`.

S3 stores a conditional put (`If-None-Match: *`) atomically; moto's threaded server
checks the key then writes it, so two racing creates can both succeed there. The log
store's races (tests/test_faults_job_control.py) need the server's answer to be the
one S3 gives, so requests are served in turn (connections stay threaded)."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import run_simple


def serial(app: Callable[..., Iterable[bytes]]) -> Callable[..., list[bytes]]:
    """`app`, answering one request at a time, its body read inside the turn."""
    turn = threading.Lock()

    def serve(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        with turn:
            return list(app(environ, start_response))

    return serve


def main() -> None:
    host, port = sys.argv[1], int(sys.argv[2])
    app = DomainDispatcherApplication(create_backend_app)
    run_simple(host, port, serial(app), threaded=True, request_handler=MotoRequestHandler)


if __name__ == "__main__":
    main()
