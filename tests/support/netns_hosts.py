"""Test hosts: network namespaces a test creates itself, joined by one bridge, each running real
processes (a Dask scheduler, workers, moto's S3 server, the job's client).

Each host is a network namespace with one veth into the bridge and an address of a /24 chosen
for this run from 10.213.0.0/16 (test hosts only: no route leaves the bridge); its processes
also get a host name of their own (a UTS namespace), as on separate machines. The test process
itself reaches them through the bridge's own address (.1), as an operator's shell on the
network would. Helpers kill every process of a host, cut and restore its link or its route to
one other host. Everything is torn down when the `Hosts` context ends, also when the test
failed. Needs root, `ip` (iproute2) and `unshare`; `skip_reason()` says why not where they
are missing; packet loss needs `nft` (nftables) besides: `loss_skip_reason()`.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field


def skip_reason() -> str | None:
    """Why test hosts cannot be made here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "no `ip` command (install iproute2)"
    if shutil.which("unshare") is None:
        return "no `unshare` command (install util-linux)"
    probe = f"swprobe{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"cannot create a network namespace: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def loss_skip_reason() -> str | None:
    """Why packet loss cannot be made on test hosts here, or None."""
    return skip_reason() or (None if shutil.which("nft") else "no `nft` command (install nftables)")


def _ip(*words: str) -> None:
    subprocess.run(["ip", *words], check=True, capture_output=True, text=True)


def _free_subnet() -> str:
    """A 10.213.N /24 that no address or route of this machine uses yet: a lab left behind by
    a killed run (its bridge, and its store still answering at .2) must not take the new
    lab's traffic, as it did once when a new lab drew the same N."""
    shown = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True)
    routes = subprocess.run(["ip", "-4", "route", "show"], capture_output=True, text=True)
    taken = {word.split(".")[2] for word in (shown.stdout + routes.stdout).split()
             if word.startswith("10.213.") and word.count(".") == 3}  # fmt: skip
    free = [n for n in range(1, 255) if str(n) not in taken]
    if not free:
        raise RuntimeError("every 10.213.N.0/24 is in use here: remove the swbr* bridges left")
    return f"10.213.{random.choice(free)}"


@dataclass
class Host:
    """One namespace: its name, address, and the processes the test started there."""

    name: str
    namespace: str
    address: str
    link: str  # the veth end on the bridge's side: down cuts the host off
    processes: list[subprocess.Popen[str]] = field(default_factory=list)

    def command(self, args: Sequence[str]) -> list[str]:
        """`args` run in this host: its network, and its own host name."""
        named = ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', self.name]
        return ["ip", "netns", "exec", self.namespace, *named, *args]

    def spawn(self, args: Sequence[str], env: dict[str, str] | None = None,
              log: str | None = None) -> subprocess.Popen[str]:  # fmt: skip
        """A process in this host (output to `log`, else discarded)."""
        out = open(log, "a") if log else subprocess.DEVNULL  # noqa: SIM115 (the process owns it)
        process = subprocess.Popen(
            self.command(args),
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), **(env or {})},
            stdout=out, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        )  # fmt: skip
        self.processes.append(process)
        return process

    def run(self, args: Sequence[str], env: dict[str, str] | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess[str]:  # fmt: skip
        """A command in this host, waited for."""
        return subprocess.run(
            self.command(args),
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), **(env or {})},
            capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip

    def pids(self) -> list[int]:
        listed = subprocess.run(["ip", "netns", "pids", self.namespace],
                                capture_output=True, text=True)  # fmt: skip
        return [int(p) for p in listed.stdout.split()]

    def kill_all(self) -> None:
        """Every process in the namespace, at once (SIGKILL): the host is gone."""
        for _ in range(5):
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)

    def signal_all(self, number: int) -> None:
        """Send every process in the namespace `number` (SIGSTOP: the host freezes, as in a
        long pause; SIGCONT: it goes on where it was)."""
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, number)

    def cut(self) -> None:
        _ip("link", "set", self.link, "down")

    def restore(self) -> None:
        _ip("link", "set", self.link, "up")

    def cut_from(self, other: Host) -> None:
        """Nothing this host sends reaches `other` any more (its other links stay up)."""
        _ip("-n", self.namespace, "route", "add", "blackhole", f"{other.address}/32")

    def restore_to(self, other: Host) -> None:
        _ip("-n", self.namespace, "route", "del", "blackhole", f"{other.address}/32")

    def drop(self, percent: float, port: int) -> None:
        """Drop `percent` of the TCP packets to and from this host's `port`, at random (what
        `netem loss` does to a link; by nftables, which kernels without netem have)."""
        per_mille = round(percent * 10)
        rules = [
            "add table inet swloss",
            "add chain inet swloss in { type filter hook input priority 0; }",
            "add chain inet swloss out { type filter hook output priority 0; }",
            f"add rule inet swloss in tcp dport {port} numgen random mod 1000 < {per_mille} drop",
            f"add rule inet swloss out tcp sport {port} numgen random mod 1000 < {per_mille} drop",
        ]
        subprocess.run(["ip", "netns", "exec", self.namespace, "nft", "-f", "-"],
                       input="\n".join(rules) + "\n", check=True, capture_output=True,
                       text=True)  # fmt: skip


class Hosts:
    """Namespaces on one bridge; `add(name)` makes one. A context manager that tears all down."""

    def __init__(self) -> None:
        self.tag = f"{os.getpid() % 10000}{random.randrange(100)}"
        self.subnet = _free_subnet()
        self.bridge = f"swbr{self.tag}"[:15]
        self.gateway = f"{self.subnet}.1"
        self.hosts: dict[str, Host] = {}
        self.names: dict[str, str] = {}  # host name -> address, as every host resolves it

    def __enter__(self) -> Hosts:
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        return self

    def add(self, name: str) -> Host:
        index = len(self.hosts) + 2
        namespace = f"sw{self.tag}-{name}"
        outside, inside = f"sw{self.tag}h{index}"[:15], f"sw{self.tag}n{index}"[:15]
        address = f"{self.subnet}.{index}"
        _ip("netns", "add", namespace)
        self.hosts[name] = host = Host(name, namespace, address, outside)
        _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
        _ip("link", "set", inside, "netns", namespace)
        _ip("link", "set", outside, "master", self.bridge, "up")
        _ip("-n", namespace, "addr", "add", f"{address}/24", "dev", inside)
        _ip("-n", namespace, "link", "set", inside, "up")
        _ip("-n", namespace, "link", "set", "lo", "up")
        _ip("-n", namespace, "route", "add", "default", "via", self.gateway)
        self._write_hosts_files()
        return host

    def resolve(self, name: str, host: Host) -> None:
        """Every host (and every one added later) resolves `name` to `host`'s address, as a
        cluster's DNS resolves a Service: `ip netns exec` mounts /etc/netns/NS/hosts over
        /etc/hosts for the processes it starts (those started from now on)."""
        self.names[name] = host.address
        self._write_hosts_files()

    def _write_hosts_files(self) -> None:
        lines = ["127.0.0.1 localhost", *(f"{a} {n}" for n, a in self.names.items())]
        for host in self.hosts.values():
            folder = pathlib.Path("/etc/netns") / host.namespace
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "hosts").write_text("\n".join(lines) + "\n")

    def __exit__(self, *exc: object) -> None:
        for host in self.hosts.values():
            host.kill_all()
            for process in host.processes:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(timeout=5)
            subprocess.run(["ip", "netns", "del", host.namespace], capture_output=True)
            shutil.rmtree(pathlib.Path("/etc/netns") / host.namespace, ignore_errors=True)
            subprocess.run(["ip", "link", "del", host.link], capture_output=True)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)


def wait_for_port(host: Host, port: int, timeout: float = 60) -> None:
    """Until something listens on host:port (reached from this process, over the bridge)."""
    import socket

    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host.address, port), timeout=1):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"nothing listens on {host.address}:{port}") from None
            time.sleep(0.2)
