"""Loaded by every Python process the hub tests start: refuse and record connections off 127.0.0.1 (and count
conversions, as every process of a test session does: tests/counting)."""

import os
import socket
import sys


def _guard(event, args):  # type: ignore[no-untyped-def]
    if event not in ("socket.connect", "socket.getaddrinfo"):
        return
    log = os.environ.get("PACKAGER_NETGUARD_LOG")  # read when it happens: a process forked by tests/warmcli.py
    if not log:  # has its command's, not the one it started with
        return
    if event == "socket.connect":
        sock, address = args
        if sock.family == socket.AF_UNIX:
            return
        host = address[0] if isinstance(address, tuple) else str(address)
    else:
        host = str(args[0])
    if host in ("127.0.0.1", "localhost", "::1", "") or host.startswith("127."):
        return
    with open(log, "a", encoding="utf-8") as out:
        out.write(f"{event} {host}\n")
    raise PermissionError(f"test network guard: {host} is not loopback")


sys.addaudithook(_guard)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "counting"))
import packager_test_counts  # noqa: E402
