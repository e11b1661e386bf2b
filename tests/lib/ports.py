"""A loopback TCP port for a test's server to bind.

A port that bind(("127.0.0.1", 0)) picked and gave back is the kernel's to
hand out again: the next bind to port 0 anywhere on the machine (pvgpud's
own tcp:// listener, another xdist worker's daemon) can get it before the
test's server binds it, and that server then fails with "Address already in
use".  Ports below the kernel's ephemeral range are never handed out by a
bind to port 0, so a free one there stays free for the test's server unless
another test picks the same one, which the random choice makes unlikely.
"""
import random
import socket

LOWEST = 10000


def ephemeral_range():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = (int(x) for x in f.read().split())
            return lo, hi
    except (OSError, ValueError):
        return 32768, 60999


def free_tcp_port():
    lo, _ = ephemeral_range()
    top = lo if lo > LOWEST + 1000 else 65535
    for port in random.sample(range(LOWEST, top), 200):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free loopback port in {LOWEST}-{top - 1}")
