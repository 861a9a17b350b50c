"""A TCP port for a rendezvous (``MASTER_PORT``, a Ray head) that a test's processes will listen on later.

Why not ``bind(("127.0.0.1", 0))``: the kernel hands out such a port from its *ephemeral* range, the same
range every outgoing connection takes its local port from. Between the moment the test closes its probe
socket and the moment rank 0 listens on the port, any connection on the machine (a Ray worker talking to
its raylet, the other xdist worker's gloo ranks) may take it, and rank 0 fails with ``EADDRINUSE``. On a
busy 2-core machine that happened (``tests/job/test_ray.py``, a verl-style job, 2026-12-06).

How: a random port below the ephemeral range (``/proc/sys/net/ipv4/ip_local_port_range``), which outgoing
connections never take, that binds now. Only another listener choosing the same port in the same moment
could collide: one in several thousand per pair of concurrent picks, not a busy machine's every connection.
"""

from __future__ import annotations

import random
import socket

__all__ = ["free_port"]

_RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
_LOWEST = 20000  # above the well-known and most registered services' ports


def _ephemeral_start() -> int:
    try:
        with open(_RANGE_FILE) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def free_port() -> int:
    """A port on 127.0.0.1 that binds now and that the kernel does not give to outgoing connections."""
    high = _ephemeral_start()
    low = _LOWEST if high - _LOWEST >= 1000 else 1024
    if high - low < 1000:  # a machine whose ephemeral range starts low: no room below it, take the kernel's pick
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return int(sock.getsockname()[1])
    rng = random.Random()  # (seeded from the OS: a test that seeds ``random`` must not make every process pick alike)
    for _ in range(200):
        port = rng.randrange(low, high)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port between {low} and {high} on 127.0.0.1 after 200 tries")
