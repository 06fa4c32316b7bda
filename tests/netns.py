"""A private network for partition tests: one network namespace per node.

    root namespace (etcd, the test's clients) -- veth --+
    node k's namespace (one node process)    -- veth --+-- a bridge, in a namespace of its own
    ...                                                 |

The bridge lives in its own namespace so that the host's firewall (Docker sets
FORWARD to DROP) never sees this traffic. A cut is a set of iptables DROP rules
inside one node's namespace: packets vanish, TCP connections hang, as when a
cable is pulled, rather than being refused.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid


def available() -> str | None:
    """Why partition tests cannot run here, or None when they can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "iptables"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed"
    return None


def _run(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, timeout=30)


class Net:
    def __init__(self, nodes: int) -> None:
        tag = uuid.uuid4().hex[:6]
        self.ns = [f"a11{tag}n{i}" for i in range(1, nodes + 1)]
        self.switch = f"a11{tag}sw"
        self.host_if = f"a11{tag}h"
        # a /24 that nothing on this machine routes yet
        taken = subprocess.run(["ip", "route"], capture_output=True, text=True).stdout
        third = next(n for n in range(77, 250) if f"10.211.{n}." not in taken)
        self.prefix = f"10.211.{third}"
        self.host_ip = f"{self.prefix}.1"  # the root namespace: etcd and the test's clients
        self.ips = [f"{self.prefix}.{10 + i}" for i in range(1, nodes + 1)]

    def create(self) -> Net:
        try:
            _run("ip", "netns", "add", self.switch)
            _run("ip", "-n", self.switch, "link", "add", "br0", "type", "bridge")
            _run("ip", "-n", self.switch, "link", "set", "br0", "up")
            _run("ip", "link", "add", self.host_if, "type", "veth", "peer", "name", "up0")
            _run("ip", "link", "set", "up0", "netns", self.switch)
            _run("ip", "addr", "add", f"{self.host_ip}/24", "dev", self.host_if)
            _run("ip", "link", "set", self.host_if, "up")
            _run("ip", "-n", self.switch, "link", "set", "up0", "master", "br0", "up")
            for i, (ns, ip) in enumerate(zip(self.ns, self.ips, strict=True)):
                port = f"p{i}"
                _run("ip", "netns", "add", ns)
                _run("ip", "-n", ns, "link", "set", "lo", "up")
                _run("ip", "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", port)
                _run("ip", "-n", ns, "link", "set", port, "netns", self.switch)
                _run("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", "eth0")
                _run("ip", "-n", ns, "link", "set", "eth0", "up")
                _run("ip", "-n", self.switch, "link", "set", port, "master", "br0", "up")
        except BaseException:
            self.destroy()
            raise
        return self

    def wrap(self, i: int) -> list[str]:
        """The command prefix that runs a process in node i's namespace (i from 0)."""
        return ["ip", "netns", "exec", self.ns[i]]

    def cut(self, i: int, etcd_port: int) -> None:
        """Node i loses etcd and every other node; the test's clients still reach it."""
        ns = self.ns[i]
        rules = [
            ["OUTPUT", "-d", self.host_ip, "-p", "tcp", "--dport", str(etcd_port)],
            ["INPUT", "-s", self.host_ip, "-p", "tcp", "--sport", str(etcd_port)],
        ]
        for k, ip in enumerate(self.ips):
            if k != i:
                rules += [["OUTPUT", "-d", ip], ["INPUT", "-s", ip]]
        for rule in rules:
            _run("ip", "netns", "exec", ns, "iptables", "-A", *rule, "-j", "DROP")

    def isolate_from_peers(self, i: int) -> None:
        """Node i loses the other nodes only (etcd and clients still reach it)."""
        for k, ip in enumerate(self.ips):
            if k != i:
                for rule in (["OUTPUT", "-d", ip], ["INPUT", "-s", ip]):
                    _run("ip", "netns", "exec", self.ns[i], "iptables", "-A", *rule, "-j", "DROP")

    def heal(self, i: int) -> None:
        _run("ip", "netns", "exec", self.ns[i], "iptables", "-F")

    def destroy(self) -> None:
        for ns in [*self.ns, self.switch]:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
        subprocess.run(["ip", "link", "del", self.host_if], capture_output=True, timeout=30)
