"""Hosts as Linux network namespaces, and network partitions as nftables drop rules in the root namespace.

A ``Network`` gives every host (a Kafka broker, a ZooKeeper server, ...) its own network namespace joined to
the root namespace by a veth pair, and routes between hosts through the root namespace. The test process and
its clients stay in the root namespace. Faults are nftables ``drop`` rules in one table the network owns.

Invariants:
- Host ``n`` (1-based, in the order of ``add_host``) is the namespace ``<tag>-<name>`` with the address
  ``10.<R>.<n>.2/24`` on its ``eth0`` and a default route via ``10.<R>.<n>.1``, the root side of the pair (the
  link ``<tag><n>``). ``R`` is drawn at random from 100..250 among the ``10.R.0.0/16`` blocks nothing on
  this machine routes yet. ``<tag>`` is ``<prefix><pid><letter>``: the pid of the process that made the
  network and one letter per network of that process, so a later run can tell leftovers of dead processes
  from the resources of live ones (``cleanup_stale``).
- Host-to-host packets cross the root namespace's ``forward`` hook, so that is where cuts are: the table
  ``inet <tag>`` has a ``forward`` chain (policy accept) holding one ``ip saddr S ip daddr D drop`` rule per
  directed cut, and ``input``/``output`` chains holding the cuts between a host and the root namespace's
  clients. The rules match every packet, whatever its conntrack state: established connections are cut too,
  not just new ones. A drop in any table is final, so another table's ``accept`` cannot let a cut through.
- The Python state (``cuts()``, ``clients_cut()``) is the truth: every change re-renders the whole table's
  rules in one ``nft -f -`` transaction (flush and re-add), so a partition is applied atomically, and the
  state only changes once nft accepted it.
- A cut drops silently (no ICMP, no RST): peers see timeouts, as in a real partition. TCP needs both
  directions, so a one-way cut ``src -> dst`` also stops new TCP connections from ``dst`` to ``src`` (the
  SYN-ACK is dropped) and stalls established ones (their ACKs are dropped); what still flows is the data
  ``dst`` sends, which ``src`` receives.
- The root namespace forwards IPv4 while a network has hosts (``net.ipv4.ip_forward=1``); ``close()`` puts
  back the value found when the network was made, unless a namespace of another network is still there.
  That value is also kept in the table's comment, so ``cleanup_stale`` can put it back after a killed run.
- Every command has a timeout and a failure raises ``NetnsError`` naming the command and its stderr.
  ``close()`` is idempotent, kills what still runs inside the namespaces, and removes the namespaces, the
  root-side veths and the table. Nothing here ever skips a test: ``require_netns()`` raises.
"""

from __future__ import annotations

import ipaddress
import itertools
import json
import os
import random
import re
import shlex
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from types import TracebackType

COMMAND_TIMEOUT_S = 10.0
IP_FORWARD = "/proc/sys/net/ipv4/ip_forward"
MAX_IFNAME = 15  # IFNAMSIZ - 1
MAX_HOSTS = 254
HOST_IFNAME = "eth0"  # the host's end of its veth pair, inside its namespace
PREFIX_RE = re.compile(r"[a-z]{1,6}")
NAME_RE = re.compile(r"[A-Za-z0-9_.]{1,32}")
# Any namespace a Network of this module made, whatever its prefix: <prefix><pid><letter>-<name>.
ANY_NETWORK_NETNS_RE = re.compile(r"[a-z]{1,6}\d+[a-z]-.+")


class NetnsError(Exception):
    """A command setting up or changing the test network failed."""


class NetnsUnavailableError(NetnsError):
    """This machine (or user) cannot make network namespaces and nftables rules."""


def require_netns() -> None:
    """Raise ``NetnsUnavailableError`` unless we are root and ``ip`` and ``nft`` exist (and nf_tables answers)."""
    problems: list[str] = []
    if os.geteuid() != 0:
        problems.append(f"not running as root (euid {os.geteuid()}): namespaces, veths and nftables need root")
    for tool, package in (("ip", "iproute2"), ("nft", "nftables")):
        if shutil.which(tool) is None:
            problems.append(f"no `{tool}` on PATH: install Debian's `{package}` package")
    if not problems:
        try:
            _run(["nft", "list", "tables"])
        except NetnsError as exc:
            problems.append(f"nftables is not usable here (kernel without nf_tables?): {exc}")
    if problems:
        raise NetnsUnavailableError("the network-partition tests cannot run: " + "; ".join(problems))


def _run(
    cmd: Sequence[str], *, stdin: str | None = None, timeout_s: float = COMMAND_TIMEOUT_S, check: bool = True
) -> subprocess.CompletedProcess[str]:
    shown = shlex.join(cmd)
    try:
        proc = subprocess.run(list(cmd), input=stdin, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired as exc:
        raise NetnsError(f"`{shown}` did not finish within {timeout_s:.0f}s") from exc
    except OSError as exc:
        raise NetnsError(f"`{shown}` could not run: {exc}") from exc
    if check and proc.returncode != 0:
        script = f"\n--- its input:\n{stdin}" if stdin else ""
        raise NetnsError(f"`{shown}` exited with {proc.returncode}: {proc.stderr.strip() or '(no stderr)'}{script}")
    return proc


def _json(cmd: Sequence[str]) -> object:
    out = _run(cmd).stdout.strip()
    return json.loads(out) if out else []


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _owner_pid(name: str, prefix: str, rest: str) -> int | None:
    match = re.fullmatch(rf"{re.escape(prefix)}(\d+)[a-z]{rest}", name)
    return int(match.group(1)) if match else None


def _netns_names() -> list[str]:
    entries = _json(["ip", "-j", "netns", "list"])
    assert isinstance(entries, list)
    return [str(entry["name"]) for entry in entries]


def _link_names() -> list[str]:
    entries = _json(["ip", "-j", "link", "show"])
    assert isinstance(entries, list)
    return [str(entry["ifname"]) for entry in entries]


def _inet_tables() -> list[str]:
    listing = _json(["nft", "-j", "list", "tables"])
    assert isinstance(listing, dict)
    return [
        str(item["table"]["name"])
        for item in listing.get("nftables", [])
        if "table" in item and item["table"].get("family") == "inet"
    ]


def _kill_netns_processes(netns: str, timeout_s: float = 5.0) -> None:
    """SIGKILL whatever still runs in ``netns`` and wait (bounded) until it is gone."""
    deadline = time.monotonic() + timeout_s
    while True:
        pids = [int(p) for p in _run(["ip", "netns", "pids", netns], check=False).stdout.split()]
        if not pids:
            return
        if time.monotonic() >= deadline:
            raise NetnsError(f"processes {pids} still run in namespace {netns} {timeout_s:.0f}s after SIGKILL")
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.02)


def _delete_netns(netns: str) -> None:
    if netns in _netns_names():
        _kill_netns_processes(netns)
        _run(["ip", "netns", "delete", netns])


def _delete_link(ifname: str) -> None:
    # Deleting a namespace frees its end of a veth pair asynchronously, and the root end with it: the link
    # may vanish between our look and our delete, which is fine.
    if ifname in _link_names():
        proc = _run(["ip", "link", "delete", ifname], check=False)
        if proc.returncode != 0 and ifname in _link_names():
            raise NetnsError(f"`ip link delete {ifname}` exited with {proc.returncode}: {proc.stderr.strip()}")


def _read_ip_forward() -> str:
    with open(IP_FORWARD, encoding="ascii") as f:
        return f.read().strip()


def _write_ip_forward(value: str) -> None:
    with open(IP_FORWARD, "w", encoding="ascii") as f:
        f.write(f"{value}\n")


def _restore_ip_forward(value: str) -> bool:
    """Put ``value`` back unless a namespace of some network is still there (it needs forwarding)."""
    if value == _read_ip_forward() or any(ANY_NETWORK_NETNS_RE.fullmatch(name) for name in _netns_names()):
        return False
    _write_ip_forward(value)
    return True


def cleanup_stale(prefix: str) -> list[str]:
    """Remove the namespaces, veths and nft tables that networks with ``prefix`` left behind in dead processes.

    Only resources whose name carries the pid of a process that no longer exists are touched, so networks of
    live processes (another test run) are left alone. Processes still running in a stale namespace (servers
    of the killed run) are SIGKILLed, and ``ip_forward`` gets back the value a stale table recorded. Returns
    what was removed (and restored).
    """
    removed: list[str] = []
    forwarding_before: str | None = None
    for netns in _netns_names():
        pid = _owner_pid(netns, prefix, "-.+")
        if pid is not None and not _pid_alive(pid):
            _delete_netns(netns)
            removed.append(f"netns {netns}")
    for table in _inet_tables():
        pid = _owner_pid(table, prefix, "")
        if pid is not None and not _pid_alive(pid):
            listing = _run(["nft", "list", "table", "inet", table]).stdout
            recorded = re.search(r'comment "ip_forward=(\d)"', listing)
            if recorded and recorded.group(1) != "1":
                forwarding_before = recorded.group(1)
            _run(["nft", "delete", "table", "inet", table])
            removed.append(f"nft table inet {table}")
    for ifname in _link_names():
        pid = _owner_pid(ifname.split("@", 1)[0], prefix, r"\d+")
        if pid is not None and not _pid_alive(pid):
            _delete_link(ifname.split("@", 1)[0])
            removed.append(f"link {ifname}")
    if forwarding_before is not None and _restore_ip_forward(forwarding_before):
        removed.append(f"{IP_FORWARD} = {forwarding_before}")
    return removed


@dataclass(frozen=True)
class Host:
    """One machine of the test network: a network namespace with one address."""

    name: str
    ip: str
    netns: str
    index: int  # 1-based: the host's address is 10.<R>.<index>.2
    veth: str  # the root namespace's end of the host's veth pair

    def wrap(self, cmd: Sequence[str]) -> list[str]:
        """``cmd`` run inside this host's namespace (``ip netns exec`` execs it: the pid is ``cmd``'s)."""
        return ["ip", "netns", "exec", self.netns, *cmd]


class Network:
    """Hosts in network namespaces, routed through the root namespace, where nftables cuts links between them."""

    _used_blocks: set[int] = set()  # noqa: RUF012  (second octets chosen by live networks of this process)
    _counter = itertools.count()
    _lock = threading.Lock()

    def __init__(self, prefix: str = "odrf") -> None:
        if not PREFIX_RE.fullmatch(prefix):
            raise ValueError(f"prefix must be 1 to 6 lowercase letters (it starts interface names), got {prefix!r}")
        require_netns()
        cleanup_stale(prefix)
        self.prefix = prefix
        self._hosts: dict[str, Host] = {}
        self._cuts: frozenset[tuple[str, str]] = frozenset()
        self._clients_cut: frozenset[str] = frozenset()
        self._ip_forward_before = _read_ip_forward()
        self._forwarding_enabled = False
        self._closed = False
        self._table_made = False
        with Network._lock:
            self.tag = self._pick_tag(prefix)
            self.block = self._pick_block()
            Network._used_blocks.add(self.block)
        try:
            self._make_table()
        except BaseException:
            self.close()
            raise

    # -- setup ---------------------------------------------------------------------------------------------

    @staticmethod
    def _pick_tag(prefix: str) -> str:
        tables = set(_inet_tables())
        for _ in range(26):
            tag = f"{prefix}{os.getpid()}{chr(ord('a') + next(Network._counter) % 26)}"
            if tag not in tables:
                return tag
        raise NetnsError(f"this process already has 26 open networks with prefix {prefix!r}")

    def _pick_block(self) -> int:
        taken: list[ipaddress.IPv4Network] = []
        routes = _json(["ip", "-j", "-4", "route", "show", "table", "all"])
        addrs = _json(["ip", "-j", "-4", "addr", "show"])
        assert isinstance(routes, list) and isinstance(addrs, list)
        for route in routes:
            if route.get("dst") not in (None, "default"):
                taken.append(ipaddress.IPv4Network(route["dst"], strict=False))
        for link in addrs:
            for info in link.get("addr_info", []):
                taken.append(ipaddress.IPv4Network(f"{info['local']}/{info['prefixlen']}", strict=False))
        free = [
            octet
            for octet in range(100, 251)
            if octet not in Network._used_blocks
            and not any(net.overlaps(ipaddress.IPv4Network(f"10.{octet}.0.0/16")) for net in taken)
        ]
        if not free:
            raise NetnsError("every 10.R.0.0/16 block with R in 100..250 is routed already: no room for a network")
        return random.choice(free)

    def _make_table(self) -> None:
        chains = "".join(
            f"add chain inet {self.tag} {hook} {{ type filter hook {hook} priority 0; policy accept; }}\n"
            for hook in ("forward", "input", "output")
        )
        table = f'add table inet {self.tag} {{ comment "ip_forward={self._ip_forward_before}"; }}\n'
        _run(["nft", "-f", "-"], stdin=table + chains)
        self._table_made = True

    def _enable_forwarding(self) -> None:
        if _read_ip_forward() != "1":
            _write_ip_forward("1")
        self._forwarding_enabled = True

    def add_host(self, name: str) -> Host:
        """A new namespace with its address, ``lo`` and ``eth0`` up and a default route to the root namespace."""
        self._require_open()
        if not NAME_RE.fullmatch(name):
            raise ValueError(f"host names are 1 to 32 letters, digits, '_' or '.', got {name!r}")
        if name in self._hosts:
            raise ValueError(f"there already is a host {name!r}")
        index = len(self._hosts) + 1
        if index > MAX_HOSTS:
            raise NetnsError(f"a network has at most {MAX_HOSTS} hosts")
        veth = f"{self.tag}{index}"
        if len(veth) > MAX_IFNAME:
            raise NetnsError(f"interface name {veth!r} is longer than {MAX_IFNAME} characters: use a shorter prefix")
        root_ip = f"10.{self.block}.{index}.1"
        host = Host(name=name, ip=f"10.{self.block}.{index}.2", netns=f"{self.tag}-{name}", index=index, veth=veth)
        self._hosts[name] = host  # before anything exists, so that close() removes a half-made host
        ns = host.netns
        _run(["ip", "netns", "add", ns])
        _run(["ip", "link", "add", veth, "type", "veth", "peer", "name", HOST_IFNAME, "netns", ns])
        _run(["ip", "addr", "add", f"{root_ip}/24", "dev", veth])
        _run(["ip", "link", "set", veth, "up"])
        _run(["ip", "-n", ns, "addr", "add", f"{host.ip}/24", "dev", HOST_IFNAME])
        _run(["ip", "-n", ns, "link", "set", "lo", "up"])
        _run(["ip", "-n", ns, "link", "set", HOST_IFNAME, "up"])
        _run(["ip", "-n", ns, "route", "add", "default", "via", root_ip])
        self._enable_forwarding()
        return host

    @property
    def hosts(self) -> list[Host]:
        return list(self._hosts.values())

    # -- faults --------------------------------------------------------------------------------------------

    def cut(self, a: Host, b: Host) -> None:
        """Drop every packet between ``a`` and ``b``, both ways."""
        self._check(a, b)
        self._apply(self._cuts | {(a.ip, b.ip), (b.ip, a.ip)}, self._clients_cut)

    def cut_one_way(self, src: Host, dst: Host) -> None:
        """Drop the packets ``src`` sends to ``dst`` (for TCP that stops new connections both ways)."""
        self._check(src, dst)
        self._apply(self._cuts | {(src.ip, dst.ip)}, self._clients_cut)

    def isolate(self, host: Host, from_hosts: Iterable[Host]) -> None:
        """Cut ``host`` from each of ``from_hosts``, both ways (``host`` itself among them is ignored)."""
        others = [other for other in from_hosts if other != host]
        self._check(host, *others)
        pairs = {(host.ip, o.ip) for o in others} | {(o.ip, host.ip) for o in others}
        self._apply(self._cuts | pairs, self._clients_cut)

    def partition(self, *groups: Iterable[Host]) -> None:
        """Hosts in different groups can no longer talk; within a group, and for hosts in no group, nothing changes.

        Adds to the cuts already in place (``heal()`` first for a fresh partition). A host in two groups is an
        error.
        """
        lists = [list(group) for group in groups]
        seen: set[str] = set()
        for group in lists:
            for host in group:
                if host.name in seen:
                    raise ValueError(f"host {host.name} is in more than one group")
                seen.add(host.name)
        self._check(*(h for group in lists for h in group))
        pairs = {
            (a.ip, b.ip)
            for i, group in enumerate(lists)
            for j, other in enumerate(lists)
            if i != j
            for a in group
            for b in other
        }
        self._apply(self._cuts | pairs, self._clients_cut)

    def cut_from_clients(self, host: Host) -> None:
        """Drop every packet between ``host`` and the root namespace (the test's clients), both ways.

        Packets the root namespace sends are dropped on its ``output`` hook: TCP just retransmits (connects
        and writes time out), but a UDP ``send`` or ``ping`` gets EPERM at once rather than a silent loss.
        """
        self._check(host)
        self._apply(self._cuts, self._clients_cut | {host.ip})

    def heal(self) -> None:
        """Remove every cut."""
        self._require_open()
        self._apply(frozenset(), frozenset())

    def cuts(self) -> frozenset[tuple[str, str]]:
        """The directed host-to-host cuts in place, as ``(src_ip, dst_ip)`` pairs."""
        return self._cuts

    def clients_cut(self) -> frozenset[str]:
        """The ips of the hosts cut from the root namespace."""
        return self._clients_cut

    def ruleset(self) -> str:
        """The table as nft lists it (for failure messages and debugging)."""
        return _run(["nft", "list", "table", "inet", self.tag]).stdout

    def _check(self, *hosts: Host) -> None:
        self._require_open()
        for host in hosts:
            if self._hosts.get(host.name) != host:
                raise ValueError(f"{host} is not a host of network {self.tag}")

    def _apply(self, cuts: Iterable[tuple[str, str]], clients_cut: Iterable[str]) -> None:
        new_cuts = frozenset(cuts)
        new_clients_cut = frozenset(clients_cut)
        t = self.tag
        lines = [f"flush chain inet {t} {chain}" for chain in ("forward", "input", "output")]
        lines += [f"add rule inet {t} forward ip saddr {s} ip daddr {d} drop" for s, d in sorted(new_cuts)]
        for ip in sorted(new_clients_cut):
            lines.append(f"add rule inet {t} input ip saddr {ip} drop")
            lines.append(f"add rule inet {t} output ip daddr {ip} drop")
        _run(["nft", "-f", "-"], stdin="\n".join(lines) + "\n")
        self._cuts = new_cuts
        self._clients_cut = new_clients_cut

    def _require_open(self) -> None:
        if self._closed:
            raise NetnsError(f"network {self.tag} is closed")

    # -- teardown ------------------------------------------------------------------------------------------

    def close(self) -> None:
        """Kill what runs in the hosts, delete namespaces, veths and the table, restore ip_forward. Idempotent."""
        if self._closed:
            return
        self._closed = True
        errors: list[str] = []
        for host in self._hosts.values():
            for step in (lambda h=host: _delete_netns(h.netns), lambda h=host: _delete_link(h.veth)):
                try:
                    step()
                except NetnsError as exc:
                    errors.append(str(exc))
        if self._table_made:
            try:
                if self.tag in _inet_tables():
                    _run(["nft", "delete", "table", "inet", self.tag])
            except NetnsError as exc:
                errors.append(str(exc))
        try:
            self._restore_forwarding()
        except (NetnsError, OSError) as exc:
            errors.append(f"could not restore {IP_FORWARD}: {exc}")
        with Network._lock:
            Network._used_blocks.discard(self.block)
        if errors:
            raise NetnsError(f"closing network {self.tag} left things behind:\n" + "\n".join(errors))

    def _restore_forwarding(self) -> None:
        if self._forwarding_enabled:
            _restore_ip_forward(self._ip_forward_before)

    def __enter__(self) -> Network:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self._hosts)} hosts, {len(self._cuts)} cuts"
        return f"Network({self.tag}, 10.{self.block}.0.0/16, {state})"
