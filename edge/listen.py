"""Where both servers listen: `bind_socket`, the listening socket bound before the server loads anything (a port
that is taken is an error at start, and a standby can wait for it: --bind-retry-s)."""
from __future__ import annotations

import socket
import time


def bind_socket(host: str, port: int, retry_s: float = 0.0) -> socket.socket:
    """A listening socket on host:port; with retry_s > 0 keep trying while the port is taken (a standby that
    takes over the moment the previous server dies: connections then wait in the backlog, not refused)."""
    deadline = time.monotonic() + retry_s
    while True:
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
            sock.listen(2048)
            sock.set_inheritable(True)
            return sock
        except OSError:
            sock.close()
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.02)
