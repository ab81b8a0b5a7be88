"""The process helpers themselves: a test must talk to the server it started, never to another process that
happens to hold the port (other test runs share the machine's loopback ports)."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
from service_procs import start_api


class _Impostor(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # http.server calls it by this name
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"status": "ok"}')

    def log_message(self, *args: object) -> None:
        pass


def test_start_api_refuses_a_port_another_server_holds(tmp_path: Path) -> None:
    impostor = HTTPServer(("127.0.0.1", 0), _Impostor)
    threading.Thread(target=impostor.serve_forever, daemon=True).start()
    try:
        with pytest.raises(RuntimeError, match="exited|not healthy"):
            start_api(tmp_path, port=impostor.server_address[1], timeout=60)
    finally:
        impostor.shutdown()
        impostor.server_close()
