"""The learner protocol over HTTP, for a learner on another machine (a GPU box):

    python3 -m mcp_gym_learner serve --http --port 8765 [--host 127.0.0.1] [--token T]

`POST /rpc` takes the same JSON request as one stdin line and answers the same JSON response
(HTTP 200, whether `ok` is true or false). With a token, every request needs
`Authorization: Bearer <token>` (401 otherwise). Binds 127.0.0.1 unless told: expose it through an
SSH tunnel, or pass --host 0.0.0.0 together with a token. Requests are handled one at a time, in the
order they arrive (a long `train` holds the others). `GET /health` answers {"ok": true} (with the
token too, when there is one). The process logs `listening on http://HOST:PORT` to stderr, after
which it accepts requests (port 0 picks a free port). `shutdown` answers, then the server stops.
"""

from __future__ import annotations

import hmac
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, Optional

MAX_BODY_BYTES = 1 << 31  # 2 GiB: a TrainBatch of some millions of tokens


def _log(msg: str) -> None:
    print(f"[learner] {msg}", file=sys.stderr, flush=True)


def make_server(dispatch: Callable[[str], Dict[str, Any]], encode: Callable[[Dict[str, Any]], str],
                host: str = "127.0.0.1", port: int = 0, token: Optional[str] = None,
                on_shutdown: Optional[Callable[[], bool]] = None) -> ThreadingHTTPServer:
    lock = threading.Lock()
    expected = f"Bearer {token}".encode() if token else None

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "mcp-gym-learner"

        def log_message(self, fmt: str, *args: Any) -> None:  # to stderr, in our format
            _log(f"http {self.address_string()} {fmt % args}")

        def _send(self, status: int, body: Dict[str, Any]) -> None:
            data = (encode(body) + "\n").encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()

        def _authorized(self) -> bool:
            if expected is None:
                return True
            got = (self.headers.get("Authorization") or "").encode("utf-8", "replace")
            if hmac.compare_digest(got, expected):
                return True
            self._send(401, {"id": None, "ok": False,
                             "error": "authorization: a valid 'Authorization: Bearer <token>' header is required"})
            return False

        def do_GET(self) -> None:  # noqa: N802
            if self.path.rstrip("/") not in ("/health", ""):
                self._send(404, {"id": None, "ok": False, "error": f"path: {self.path} (POST /rpc)"})
                return
            if self._authorized():
                self._send(200, {"id": None, "ok": True, "result": {"pid": os.getpid()}})

        def do_POST(self) -> None:  # noqa: N802
            if self.path.rstrip("/") != "/rpc":
                self.close_connection = True
                self._send(404, {"id": None, "ok": False, "error": f"path: {self.path} (POST /rpc)"})
                return
            if not self._authorized():
                self.close_connection = True
                return
            try:
                n = int(self.headers.get("Content-Length") or "-1")
            except ValueError:
                n = -1
            if n < 0 or n > MAX_BODY_BYTES:
                self.close_connection = True
                self._send(411 if n < 0 else 413, {"id": None, "ok": False,
                                                   "error": "request: a Content-Length up to 2 GiB is required"})
                return
            body = self.rfile.read(n).decode("utf-8", errors="replace")
            with lock:  # one request at a time, like the stdin stream
                resp = dispatch(body.strip())
            self._send(200, resp)
            if on_shutdown is not None and on_shutdown():
                threading.Thread(target=self.server.shutdown, daemon=True).start()

    srv = ThreadingHTTPServer((host, port), Handler)
    srv.daemon_threads = True
    return srv


def serve_http(host: str = "127.0.0.1", port: int = 0, token: Optional[str] = None) -> int:
    from .distributed import broadcast_object, follow, init_from_env, shutdown_group
    from .runtime import tune_malloc
    from .protocol import encode_response
    from .service import LearnerService
    from .stdio_server import make_dispatcher

    rank, world, _ = init_from_env()
    tune_malloc()
    service = LearnerService()
    if rank != 0:
        _log(f"rank {rank}/{world} following rank 0 (pid {os.getpid()})")
        follow(service)
        shutdown_group()
        return 0
    dispatch = make_dispatcher(service)
    srv = make_server(dispatch, encode_response, host, port, token, on_shutdown=lambda: service.shutdown)
    h, p = srv.server_address[:2]
    if host not in ("127.0.0.1", "localhost", "::1") and not token:
        _log("warning: listening beyond localhost without a token: anyone who reaches the port can drive the learner")
    _log(f"listening on http://{h}:{p} (POST /rpc{', bearer token required' if token else ''}; pid {os.getpid()}"
         f"{f', rank 0 of {world}' if world > 1 else ''})")
    try:
        srv.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        srv.server_close()
        if world > 1:
            if not service.shutdown:
                broadcast_object(None)
            shutdown_group()
    _log("bye")
    return 0


__all__ = ["make_server", "serve_http"]
