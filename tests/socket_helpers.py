"""Raw-socket clients for the HTTP-limit attacks on both servers (tests/test_server_limits.py for `lake serve`,
tests/test_serve_model_limits.py for `lake serve-model`): loopback only, bounded in count and time."""
from __future__ import annotations

import select
import socket
import threading
import time

import httpx

HEALTH = b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"


def post_head(path: str, length: int = 100000) -> bytes:
    """A POST's head declaring a `length`-byte JSON body, and the body's first byte."""
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\n\r\n[").encode()


def connect(port: int, timeout: float = 5.0, address: str | None = None) -> socket.socket:
    """A connection to 127.0.0.1:`port`, from `address` if given (127.0.0.0/8 is all this machine's: another
    loopback address is another client address to the server)."""
    if address is None:
        return socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s = socket.socket()
    s.settimeout(timeout)
    s.bind((address, 0))
    s.connect(("127.0.0.1", port))
    return s


def read_all(s: socket.socket, timeout: float = 5.0) -> bytes:
    """Everything the server sends until it closes (or `timeout` passes: then what came so far)."""
    s.settimeout(timeout)
    out = b""
    try:
        while chunk := s.recv(65536):
            out += chunk
    except (TimeoutError, ConnectionResetError):
        pass
    return out


def closed_within(s: socket.socket, seconds: float) -> tuple[bool, bytes]:
    t0 = time.monotonic()
    data = read_all(s, seconds + 2)
    return time.monotonic() - t0 < seconds + 2, data


def ask(sock: socket.socket, request: bytes) -> bytes:
    sock.sendall(request)
    return read_all(sock, 5)


def health_ms(url: str) -> float:
    t0 = time.perf_counter()
    assert httpx.get(url + "/v1/health", timeout=3).status_code == 200
    return (time.perf_counter() - t0) * 1000


class Tricklers:
    """`n` connections from `address`, each sending `head` and then one more byte every `every` s; `answers`
    holds what the server said to each it closed (b"": closed without a word)."""

    def __init__(self, port: int, n: int, head: bytes, address: str = "127.0.0.1", every: float = 0.2):
        self.socks = []
        for _ in range(n):
            self.socks.append(connect(port, address=address))
            self.socks[-1].sendall(head)
        self.answers: dict[int, bytes] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._drip, args=(every,), daemon=True)
        self._thread.start()

    def _drip(self, every: float) -> None:
        while not self._stop.wait(every):
            for i, s in enumerate(self.socks):
                if i in self.answers:
                    continue
                if select.select([s], [], [], 0)[0]:  # the server answered (and closed): what did it say?
                    self.answers[i] = read_all(s, 0.5)
                    continue
                try:
                    s.sendall(b" ")
                except OSError:
                    self.answers[i] = read_all(s, 0.5)

    def wait(self, count: int, timeout: float) -> None:
        """Until `count` connections have been closed by the server (or `timeout` s)."""
        deadline = time.monotonic() + timeout
        while len(self.answers) < count and time.monotonic() < deadline:
            time.sleep(0.05)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for s in self.socks:
            s.close()


def probe_behind_a_crowd(port: int, address: str, crowd: int = 20) -> tuple[bytes, float]:
    """A health probe from `address` that sends its head a moment after connecting (a busy or distant client: 0.3
    s), `crowd` more connections from the same address having come meanwhile: (its answer, seconds from its head to
    the answer)."""
    probe = connect(port, timeout=10, address=address)
    time.sleep(0.1)  # the server has taken the probe's connection
    others = [connect(port, address=address) for _ in range(crowd)]
    time.sleep(0.2)  # ... and the crowd's
    t0 = time.monotonic()
    try:
        probe.sendall(HEALTH)
        return read_all(probe, 10), time.monotonic() - t0
    except OSError:
        return b"", time.monotonic() - t0
    finally:
        probe.close()
        for s in others:
            s.close()


def slowloris_head(port: int, head: bytes, seconds: float = 4.0) -> tuple[bytes, float]:
    """`head`, then one byte of a header value every 0.1 s (never a whole head, never silent for long) until the
    server answers, closes, or `seconds` pass: (its whole answer, seconds from the first byte to the end)."""
    s = connect(port)
    t0, answer = time.monotonic(), b""
    s.sendall(head)
    while not answer and time.monotonic() - t0 < seconds:
        s.settimeout(0.1)
        try:
            answer = s.recv(4096)
        except TimeoutError:
            pass
        if answer:
            break
        try:
            s.sendall(b"a")
        except OSError:
            break
    answer += read_all(s, 2)
    s.close()
    return answer, time.monotonic() - t0


def huge_header(url: str, path: str = "/v1/health") -> tuple[bytes, int, float, float]:
    """Up to 100 MiB of one header value sent to `path` (as the red team sent), health asked meanwhile: (the
    server's answer, bytes sent, seconds until it answered, health's time in ms)."""
    s = connect(int(url.rsplit(":", 1)[1]))
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ".encode())
    sent, stop = [0], threading.Event()

    def flood():
        chunk = b"a" * 65536
        try:
            while sent[0] < 100 << 20 and not stop.is_set():
                s.sendall(chunk)
                sent[0] += len(chunk)
        except OSError:  # the server answered and closed
            pass

    t = threading.Thread(target=flood, daemon=True)
    t0 = time.monotonic()
    t.start()
    health = health_ms(url)
    answer = read_all(s, 10)
    took = time.monotonic() - t0
    stop.set()
    t.join(10)
    s.close()
    return answer, sent[0], took, health
