"""A second host for tests: a network namespace joined to this one by a veth pair, and TCP relays into it.

Services the tests use (PostgreSQL, Redis, the object store) listen on
127.0.0.1 only, which a namespace cannot reach; a relay listening on the
host's end of the veth pair forwards to them, as a lab's network would
route to the database host.
"""

from __future__ import annotations

import random
import secrets
import socket
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass


class NamespaceUnavailable(Exception):
    """Network namespaces cannot be made here (not root, no CONFIG_NET_NS, a sandbox forbids it)."""


@dataclass
class Namespace:
    name: str
    host_ip: str  # this namespace's end of the veth pair
    ns_ip: str  # the namespace's own address

    def argv(self, *command: str) -> list[str]:
        """A command line that runs `command` inside the namespace."""
        return ["ip", "netns", "exec", self.name, *command]


def _ip(*args: str) -> None:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise NamespaceUnavailable(f"`ip {' '.join(args)}` failed: {proc.stderr.strip() or proc.returncode}")


@contextmanager
def network_namespace() -> Iterator[Namespace]:
    tag = secrets.token_hex(3)
    name, host_if, ns_if = f"kperf-{tag}", f"kph{tag}", f"kpn{tag}"
    # A /30 of its own, picked at random so concurrent runs do not collide.
    net = f"10.{random.randint(200, 250)}.{random.randint(0, 255)}"
    ns = Namespace(name=name, host_ip=f"{net}.1", ns_ip=f"{net}.2")
    try:
        _ip("netns", "add", name)
    except (NamespaceUnavailable, FileNotFoundError) as e:
        raise NamespaceUnavailable(str(e)) from e
    try:
        _ip("link", "add", host_if, "type", "veth", "peer", "name", ns_if)
        _ip("link", "set", ns_if, "netns", name)
        _ip("addr", "add", f"{ns.host_ip}/30", "dev", host_if)
        _ip("link", "set", host_if, "up")
        _ip("netns", "exec", name, "ip", "addr", "add", f"{ns.ns_ip}/30", "dev", ns_if)
        _ip("netns", "exec", name, "ip", "link", "set", ns_if, "up")
        _ip("netns", "exec", name, "ip", "link", "set", "lo", "up")
        yield ns
    finally:
        # Deleting the namespace deletes its end of the pair, and with it the other.
        subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)
        subprocess.run(["ip", "link", "del", host_if], capture_output=True, check=False)


class TcpRelay:
    """Accepts on (host, port) and copies bytes both ways to target, one thread per direction."""

    def __init__(self, host: str, target: tuple[str, int]) -> None:
        self.target = target
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, 0))
        self.sock.listen(64)
        self.port = int(self.sock.getsockname()[1])
        self.stopped = False
        threading.Thread(target=self._accept, name=f"relay-{self.port}", daemon=True).start()

    def _accept(self) -> None:
        while not self.stopped:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=10)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            # Half-close, so the other direction finishes what it is sending.
            for s, how in ((dst, socket.SHUT_WR), (src, socket.SHUT_RD)):
                with suppress(OSError):
                    s.shutdown(how)

    def close(self) -> None:
        self.stopped = True
        self.sock.close()
