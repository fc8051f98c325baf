"""Several hosts on this machine, for tests of runs across hosts: each one a network namespace with
its own PID, UTS (host name) and mount namespaces, joined by a bridge in a namespace of its own.

A host sees only its own processes (`ps`, /proc), has its own name (`hostname`, what NCCL and
torchrun print) and its own address on a private network, 10.213.0.0/24, that exists only inside
these namespaces: the bridge lives in a namespace of its own, nothing joins it to this machine's
network, so no packet can leave. Names resolve through a hosts file bind-mounted over /etc/hosts in
each host's mount namespace only. The filesystem is shared, as a cluster's shared directory is.

Each host is held by a small init process (pid 1 of its PID namespace, reaping orphans); killing
it ends every process of that host. `exec_script` runs a shell line on a host, as `ssh HOST LINE`
would (`nsenter` into the holder's namespaces), with the host's own extra environment (a setting a
node's profile sets, to prove it is named). A process inside one host's PID namespace cannot enter
another's (setns reaches only descendants), so a launcher that starts processes on other hosts
itself (mpirun through its rsh agent) runs through `launch_script`: the host's network and name,
this machine's PID namespace. Everything is removed on `close()`, also after a
failure; what a killed test run left (namespaces and holders of a process that is gone) is removed
by the next one (`reap_stale`).

Needs root (or CAP_SYS_ADMIN and CAP_NET_ADMIN) and the `ip`, `nsenter` and `unshare` tools;
`unavailable()` says why not, for a clean skip.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil

PREFIX = "ncpt"  # ncpt<owner pid>h<i>, ncpt<owner pid>sw: namespaces of one test process
OWNED = re.compile(rf"\b{PREFIX}(\d+)")  # in the command line of what a test process started
HOLDER_MARK = "ncclprobe-netns-holder"
SUBNET = "10.213.0"
HOLDER = f"""# {HOLDER_MARK} {PREFIX}{{owner}}
import os, time
while True:
    try:
        os.waitpid(-1, 0)
    except ChildProcessError:
        time.sleep(0.2)
"""


def unavailable() -> str | None:
    """Why hosts cannot be made here (None when they can)."""
    if not sys.platform.startswith("linux"):
        return "network namespaces are Linux only"
    missing = [tool for tool in ("ip", "nsenter", "unshare") if shutil.which(tool) is None]
    if missing:
        return f"{', '.join(missing)} not found"
    if os.geteuid() != 0:
        return "creating network namespaces needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN)"
    probe = f"{PREFIX}{os.getpid()}probe"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode:
        return f"ip netns add failed: {made.stderr.strip() or made.returncode}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


class Cluster:
    """Hosts `names` (in order: addresses 10.213.0.1, .2, ...), `extra_env[host]` set on that host."""

    def __init__(self, names: list[str], workdir: Path, extra_env: dict[str, dict] | None = None):
        self.names = list(names)
        self.workdir = Path(workdir)
        self.extra_env = extra_env or {}
        self.tag = f"{PREFIX}{os.getpid()}"
        self.netns = {name: f"{self.tag}h{i}" for i, name in enumerate(self.names)}
        self.address = {name: f"{SUBNET}.{i + 1}" for i, name in enumerate(self.names)}
        self.holders: dict[str, subprocess.Popen] = {}
        self.init_pid: dict[str, int] = {}
        self.exec_script = self.workdir / "nodeexec.sh"
        self.launch_script = self.workdir / "launchexec.sh"
        self.rsh_agent = self.workdir / "rsh-agent.sh"

    def start(self) -> Cluster:
        reap_stale()
        try:
            self._network()
            hosts_file = self.workdir / "hosts"
            hosts_file.write_text(
                "127.0.0.1 localhost\n" + "".join(f"{self.address[n]} {n}\n" for n in self.names)
            )
            for name in self.names:
                self._hold(name, hosts_file)
            self._scripts()
        except BaseException:
            self.close()
            raise
        return self

    def _network(self) -> None:
        switch = f"{self.tag}sw"
        _ip("netns", "add", switch)
        _ip("-n", switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", switch, "link", "set", "br0", "up")
        for name in self.names:
            ns, port = self.netns[name], f"p{self.netns[name][-6:]}"
            _ip("netns", "add", ns)
            _ip(
                "-n",
                switch,
                "link",
                "add",
                port,
                "type",
                "veth",
                "peer",
                "name",
                "eth0",
                "netns",
                ns,
            )
            _ip("-n", switch, "link", "set", port, "master", "br0")
            _ip("-n", switch, "link", "set", port, "up")
            _ip("-n", ns, "addr", "add", f"{self.address[name]}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")

    def _hold(self, name: str, hosts_file: Path) -> None:
        ready = self.workdir / f"{name}.ready"
        setup = (
            f"hostname {name} && mount --bind {hosts_file} /etc/hosts && touch {ready} && "
            f'exec {sys.executable} -c "$0"'
        )
        holder = subprocess.Popen(
            [
                "nsenter",
                f"--net=/run/netns/{self.netns[name]}",
                "unshare",
                "--uts",
                "--mount",
                "--pid",
                "--fork",
                "--mount-proc",
                "--propagation",
                "private",
                "sh",
                "-c",
                setup,
                HOLDER.format(owner=os.getpid()),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        self.holders[name] = holder
        deadline = time.monotonic() + 20
        while not ready.exists():
            if holder.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"host {name} did not start: {holder.stderr.read().decode()[-500:]}"
                )
            time.sleep(0.05)
        children = psutil.Process(holder.pid).children()
        self.init_pid[name] = children[0].pid

    def _scripts(self) -> None:
        cases = "".join(
            f"  {name}|{self.address[name]}) pid={self.init_pid[name]}; "
            f"extra={_quote_words(self.extra_env.get(name, {}))};;\n"
            for name in self.names
        )
        head = f'#!/bin/sh\ncase "$1" in\n{cases}  *) echo "no test host $1" >&2; exit 2;;\nesac\n'
        self.exec_script.write_text(  # as ssh HOST LINE would: every namespace of the host
            head + 'exec env $extra nsenter -t "$pid" --net --uts --mount --pid -- sh -c "$2"\n'
        )
        self.launch_script.write_text(  # the host's network and name, this machine's processes
            head + 'exec env $extra nsenter -t "$pid" --net --uts -- unshare --mount sh -c '
            f'\'mount --bind {self.workdir}/hosts /etc/hosts && exec sh -c "$0"\' "$2"\n'
        )
        for script in (self.exec_script, self.launch_script):
            script.chmod(0o755)
        self.rsh_agent.write_text(  # Open MPI's plm_rsh_agent: [options] HOST COMMAND...
            '#!/bin/sh\nwhile [ "${1#-}" != "$1" ]; do shift; done\nhost=$1; shift\n'
            f'exec {self.exec_script} "$host" "$*"\n'
        )
        self.rsh_agent.chmod(0o755)

    def run(self, host: str, line: str, *, launcher: bool = False, **popen) -> subprocess.Popen:
        """Start the shell line on `host` (its own session: `stop` ends it whole). `launcher`: with
        the host's network and name but among this machine's processes, as a launcher that starts
        processes on the other hosts must be (a PID namespace can enter only its descendants)."""
        script = self.launch_script if launcher else self.exec_script
        return subprocess.Popen([str(script), host, line], start_new_session=True, **popen)

    def node_exec(self) -> str:
        """`--node-exec`'s template for these hosts."""
        return f"{self.exec_script} {{host}}"

    def close(self) -> None:
        for pid in self.init_pid.values():
            _kill(pid)  # pid 1 of the host: every process of the host goes with it
        for holder in self.holders.values():
            _kill(holder.pid)
            holder.wait(timeout=10)
        for ns in [*self.netns.values(), f"{self.tag}sw"]:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def stop(proc: subprocess.Popen) -> None:
    """End a `Cluster.run` process's session, then reap it."""
    try:
        os.killpg(proc.pid, 9)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait(timeout=10)


def reap_stale() -> None:
    """Namespaces and holders that a test process left when it was killed: removed."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    for line in listed.splitlines():
        name = line.split()[0] if line.split() else ""
        owner = _owner(name)
        if owner is not None and not psutil.pid_exists(owner):
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
    for proc in psutil.process_iter(["pid", "cmdline"]):  # holders, and daemons started there
        for match in OWNED.finditer(" ".join(proc.info["cmdline"] or ())):
            if not psutil.pid_exists(int(match.group(1))):
                _kill(proc.info["pid"])
                break


def _owner(name: str) -> int | None:
    if not name.startswith(PREFIX):
        return None
    digits = ""
    for char in name[len(PREFIX) :]:
        if not char.isdigit():
            break
        digits += char
    return int(digits) if digits else None


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")


def _kill(pid: int) -> None:
    try:
        os.kill(pid, 9)
    except (ProcessLookupError, PermissionError):
        pass


def _quote_words(env: dict) -> str:
    """`A=1 B=2` as one shell word that splits back into the assignments (values: no spaces)."""
    text = " ".join(f"{k}={v}" for k, v in env.items())
    return f"'{text}'"
