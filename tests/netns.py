"""What the tests' multi-node scripts share: they run inside ``unshare -n`` (a network
namespace with loopback only, as root), start Ray nodes with ``ray start --block`` and
end them by process tree."""

from __future__ import annotations

import fcntl
import socket
import struct

import psutil

#: ``ioctl`` requests and the flag of ``ip link set lo up`` (no iproute2 needed).
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1


def loopback_only_up() -> None:
    """Bring up this namespace's loopback; refuse to go on outside such a namespace
    (Ray would use the machine's address)."""
    interfaces = [name for _, name in socket.if_nameindex()]
    if interfaces != ["lo"]:
        raise SystemExit(f"not in a network namespace of loopback only: {interfaces}")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sH", b"lo", 0)
        flags = struct.unpack("16sH", fcntl.ioctl(s, SIOCGIFFLAGS, request)[:18])[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH", b"lo", flags | IFF_UP))


def started(proc, what: str, tail: int = 40) -> None:
    """Read ``ray start --block``'s output until the node is up (it then blocks)."""
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if "Ray runtime started" in line:
            return
    raise SystemExit(f"{what} did not start: " + "".join(lines[-tail:]))


def kill_tree(pid: int) -> list[int]:
    """SIGKILL ``pid`` and every process under it; the PIDs killed."""
    try:
        root = psutil.Process(pid)
        tree = [root] + root.children(recursive=True)
    except psutil.Error:
        return []
    for p in tree:
        try:
            p.kill()
        except psutil.Error:
            pass
    return [p.pid for p in tree]
