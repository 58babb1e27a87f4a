"""Two emulated hosts on one machine: network namespaces joined by a link of chosen rate and
delay, each rank in its own namespace under its own hostname, so ailens sees two hosts.

    with TwoHosts(rate_mbit=100, delay_ms=1) as hosts:
        subprocess.run(hosts.wrap(0, ["hostname"]))        # -> ailens-h0
        hosts.torchrun_cmds(...) / hosts.mpiexec_cmd(...)   # launch the way jobs are launched

The link is ``tc qdisc ... netem rate R delay D`` on a veth pair when the kernel has netem;
otherwise (kernels built without sch_netem, like this development VM's) a user-space
emulator does netem's job: each namespace gets a TUN device and a forwarder process moves
packets between them, serialised at rate R (one queue per direction) and delivered D later.
``method`` says which one ran. Setup needs root, iproute2 (``ip``, ``tc``) and util-linux
(``unshare``); :func:`available` says why not otherwise. Namespaces, devices and the
forwarder are removed on exit, on error, and by :func:`remove_stale` for runs that died.

Run as a script it is the forwarder: ``python netns.py forward DEV0 DEV1 RATE_MBIT DELAY_MS``.
"""

from __future__ import annotations

import fcntl
import os
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections import deque
from pathlib import Path

PREFIX = "ailens-"
SUBNET = "10.213.0"  # one /24 per pair; pairs are isolated from each other, so it is reused
IFNAME = "ail0"  # the link's device name inside both namespaces (GLOO_SOCKET_IFNAME, -iface)
TUN_MTU = 64000  # large packets keep the user-space forwarder's per-packet cost small
QUEUE_BYTES = 4 << 20  # per direction; beyond this packets are dropped (TCP backs off)


def _run(*cmd: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, check=check, timeout=timeout)


def available() -> tuple[bool, str]:
    """(True, "") when two hosts can be emulated here, else (False, the reason)."""
    if os.geteuid() != 0:
        return False, "not root: network namespaces need CAP_SYS_ADMIN (run as root)"
    for tool, pkg in (("ip", "iproute2"), ("tc", "iproute2"), ("unshare", "util-linux")):
        if shutil.which(tool) is None:
            return False, f"`{tool}` not found: install {pkg} (apt-get install {pkg})"
    probe = f"{PREFIX}probe-{os.getpid()}"
    r = _run("ip", "netns", "add", probe, check=False)
    if r.returncode:
        return False, f"`ip netns add` failed: {r.stderr.strip()}"
    _run("ip", "netns", "del", probe, check=False)
    if not netem_available() and not Path("/dev/net/tun").exists():
        return False, "neither tc netem (sch_netem) nor /dev/net/tun for the user-space link"
    return True, ""


def netem_available() -> bool:
    """Whether this kernel has the netem qdisc (tried on a throw-away namespace's loopback)."""
    ns = f"{PREFIX}netem-{os.getpid()}"
    if _run("ip", "netns", "add", ns, check=False).returncode:
        return False
    try:
        r = _run(
            "ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "lo", "root", "netem",
            "delay", "1ms", check=False,
        )  # fmt: skip
        return r.returncode == 0
    finally:
        _run("ip", "netns", "del", ns, check=False)


def remove_stale() -> list[str]:
    """Delete namespaces this helper left behind (their owner process is gone)."""
    out = _run("ip", "netns", "list", check=False).stdout
    gone = []
    for line in out.splitlines():
        name = line.split()[0] if line.split() else ""
        if not name.startswith(PREFIX):
            continue
        try:
            pid = int(name.rsplit("-", 1)[1])
        except (IndexError, ValueError):
            continue
        if not Path(f"/proc/{pid}").exists():
            _run("ip", "netns", "del", name, check=False)
            gone.append(name)
    return gone


class TwoHosts:
    """Two network namespaces joined by an emulated link; a context manager that always
    cleans up. ``hosts[i]`` = (namespace, address, hostname)."""

    def __init__(self, rate_mbit: float, delay_ms: float, *, force_tun: bool = False) -> None:
        if rate_mbit <= 0 or delay_ms < 0:
            raise ValueError("rate must be > 0 Mbit/s and delay >= 0 ms")
        self.rate_mbit = float(rate_mbit)
        self.delay_ms = float(delay_ms)
        self.force_tun = force_tun
        tag = f"{os.getpid()}"
        self.hosts = [
            (f"{PREFIX}h{i}-{tag}", f"{SUBNET}.{i + 1}", f"ailens-h{i}") for i in range(2)
        ]
        self.method = ""
        self._forwarder: subprocess.Popen | None = None
        self._tmp: tempfile.TemporaryDirectory | None = None

    # ---------------------------------------------------------------- set-up / clean-up

    def __enter__(self) -> TwoHosts:
        ok, why = available()
        if not ok:
            raise RuntimeError(why)
        remove_stale()
        try:
            self._setup()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _setup(self) -> None:
        for ns, _, _ in self.hosts:
            _run("ip", "netns", "add", ns)
            _run("ip", "-n", ns, "link", "set", "lo", "up")
        if not self.force_tun and netem_available():
            self._veth_netem()
        else:
            self._tun_forwarder()
        for ns, addr, _ in self.hosts:
            peer = [a for _, a, _ in self.hosts if a != addr][0]
            _run("ip", "-n", ns, "addr", "add", addr, "peer", peer, "dev", IFNAME)
            _run("ip", "-n", ns, "link", "set", IFNAME, "up")
        # The link answers before anything uses it.
        r = self.run(0, ["ping", "-c", "1", "-W", "5", self.hosts[1][1]], timeout=15)
        if r.returncode and shutil.which("ping"):
            raise RuntimeError(f"emulated link does not carry packets: {r.stdout}{r.stderr}")

    def _veth_netem(self) -> None:
        (ns0, _, _), (ns1, _, _) = self.hosts
        tmp0, tmp1 = f"ailv0-{os.getpid()}"[:15], f"ailv1-{os.getpid()}"[:15]
        _run("ip", "link", "add", tmp0, "type", "veth", "peer", "name", tmp1)
        for dev, ns in ((tmp0, ns0), (tmp1, ns1)):
            _run("ip", "link", "set", dev, "netns", ns)
            _run("ip", "-n", ns, "link", "set", dev, "name", IFNAME)
            _run(
                "ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", IFNAME, "root", "netem",
                "rate", f"{self.rate_mbit}mbit", "delay", f"{self.delay_ms}ms",
                "limit", "10000",
            )  # fmt: skip
        self.method = "tc netem on a veth pair"

    def _tun_forwarder(self) -> None:
        devs = [f"ailt{i}-{os.getpid()}"[:15] for i in range(2)]
        self._forwarder = subprocess.Popen(
            [sys.executable, __file__, "forward", *devs, str(self.rate_mbit), str(self.delay_ms)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        line = self._forwarder.stdout.readline()
        if line.strip() != "ready":
            err = self._forwarder.stderr.read() if self._forwarder.poll() is not None else ""
            raise RuntimeError(f"link forwarder did not start: {line}{err}")
        for dev, (ns, _, _) in zip(devs, self.hosts, strict=True):
            _run("ip", "link", "set", dev, "netns", ns)
            _run("ip", "-n", ns, "link", "set", dev, "name", IFNAME)
            _run("ip", "-n", ns, "link", "set", IFNAME, "mtu", str(TUN_MTU))
        self.method = (
            f"user-space emulator (TUN devices, MTU {TUN_MTU}; this kernel has no netem): "
            "serialised at the rate, delivered after the delay"
        )

    def close(self) -> None:
        """Stop the forwarder and delete both namespaces (their devices go with them)."""
        fw, self._forwarder = self._forwarder, None
        if fw is not None:
            try:
                fw.stdin.close()  # the forwarder exits when its stdin closes
                fw.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                fw.kill()
                fw.wait()
        for ns, _, _ in self.hosts:
            _run("ip", "netns", "del", ns, check=False)
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    # ---------------------------------------------------------------- running things there

    def describe(self) -> dict:
        """The link as a JSON-ready dict (what the benchmark records)."""
        return {
            "rate_mbit": self.rate_mbit,
            "delay_ms": self.delay_ms,
            "method": self.method,
            "hosts": [h for _, _, h in self.hosts],
        }

    def wrap(self, i: int, argv: list[str]) -> list[str]:
        """``argv`` run in host ``i``'s namespace under its own hostname."""
        ns, _, name = self.hosts[i]
        return [
            "ip", "netns", "exec", ns, "unshare", "--uts", "sh", "-c",
            'hostname "$0" && exec "$@"', name, *argv,
        ]  # fmt: skip

    def run(self, i: int, argv: list[str], *, timeout: float = 60, **kw):
        return subprocess.run(
            self.wrap(i, argv), capture_output=True, text=True, timeout=timeout, **kw
        )

    def env(self) -> dict:
        """Environment for ranks: the transports use the emulated link's device."""
        return {
            "GLOO_SOCKET_IFNAME": IFNAME,
            "HOROVOD_GLOO_IFACE": IFNAME,
            "UCX_NET_DEVICES": IFNAME,
            "FI_TCP_IFACE": IFNAME,
            "MPIR_CVAR_CH4_NETMOD": os.environ.get("MPIR_CVAR_CH4_NETMOD", "ofi"),
            "FI_PROVIDER": os.environ.get("FI_PROVIDER", "tcp"),
        }

    def torchrun_cmds(self, torchrun: str, script_argv: list[str], port: int = 29533) -> list:
        """One torchrun agent per host (one rank each), rendezvous on host 0."""
        master = self.hosts[0][1]
        return [
            self.wrap(
                i,
                [
                    torchrun, "--nnodes=2", f"--node-rank={i}", "--nproc-per-node=1",
                    f"--master-addr={master}", f"--master-port={port}", *script_argv,
                ],
            )
            for i in range(2)
        ]  # fmt: skip

    def mpiexec_cmd(self, mpiexec: str, argv: list[str]) -> list[str]:
        """Hydra's mpiexec on host 0, its proxies started on each host through a fake ssh
        that enters that host's namespace; one rank per host."""
        if self._tmp is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="ailens-ssh-")
        ssh = Path(self._tmp.name) / "ssh"
        table = {addr: (ns, name) for ns, addr, name in self.hosts}
        ssh.write_text(_FAKE_SSH.format(python=sys.executable, table=table))
        ssh.chmod(0o755)
        hosts = ",".join(a for _, a, _ in self.hosts)
        return self.wrap(
            0,
            [
                mpiexec, "-launcher", "ssh", "-launcher-exec", str(ssh), "-hosts", hosts,
                "-iface", IFNAME, "-n", "2", "-ppn", "1", *argv,
            ],
        )  # fmt: skip


# Hydra calls `ssh [options] HOST COMMAND...`; run COMMAND in HOST's namespace and UTS.
_FAKE_SSH = """#!{python}
import os, sys
table = {table!r}
args = sys.argv[1:]
while args and args[0].startswith("-"):
    opt = args.pop(0)
    if opt in ("-o", "-p", "-l", "-i", "-F") and args:
        args.pop(0)
host, cmd = args[0], " ".join(args[1:])
ns, name = table[host]
os.execvp("ip", ["ip", "netns", "exec", ns, "unshare", "--uts", "sh", "-c",
                 'hostname "$0" && exec sh -c "$1"', name, cmd])
"""


# --------------------------------------------------------------------------- the forwarder

_TUNSETIFF = 0x400454CA
_IFF_TUN = 0x0001
_IFF_NO_PI = 0x1000


def _open_tun(name: str) -> int:
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, _TUNSETIFF, struct.pack("16sH", name.encode(), _IFF_TUN | _IFF_NO_PI))
    return fd


def forward(dev0: str, dev1: str, rate_mbit: float, delay_ms: float) -> None:
    """netem in user space: packets read from one TUN device are written to the other after
    waiting their turn on a link of ``rate_mbit`` (one queue per direction) plus
    ``delay_ms``. Runs until stdin closes."""
    fds = [_open_tun(dev0), _open_tun(dev1)]
    try:  # a link is not a process: it should not wait for a core
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
    except (AttributeError, OSError):
        pass
    print("ready", flush=True)
    bit_s = 1.0 / (rate_mbit * 1e6)
    delay = delay_ms / 1e3
    queues = [deque(), deque()]  # per direction: (deliver_at, packet)
    queued = [0, 0]
    free_at = [0.0, 0.0]
    ctl = sys.stdin.fileno()
    clock = time.monotonic
    while True:
        now = clock()
        for d in (0, 1):
            q = queues[d]
            while q and q[0][0] <= now:
                pkt = q.popleft()[1]
                queued[d] -= len(pkt)
                try:
                    os.write(fds[1 - d], pkt)
                except OSError:
                    pass  # device gone or full: the packet is lost, as on a wire
        due = [q[0][0] for q in queues if q]
        timeout = max(min(due) - clock(), 0.0) if due else None
        ready, _, _ = select.select([fds[0], fds[1], ctl], [], [], timeout)
        if ctl in ready and not os.read(ctl, 4096):
            return
        now = clock()
        for d in (0, 1):
            if fds[d] not in ready:
                continue
            while True:
                try:
                    pkt = os.read(fds[d], 65536)
                except BlockingIOError:
                    break
                if queued[d] + len(pkt) > QUEUE_BYTES:
                    continue  # tail drop
                start = max(now, free_at[d])
                free_at[d] = start + len(pkt) * 8 * bit_s
                queues[d].append((free_at[d] + delay, pkt))
                queued[d] += len(pkt)


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "forward":
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        forward(sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5]))
    else:
        print(__doc__)
        sys.exit(2)
