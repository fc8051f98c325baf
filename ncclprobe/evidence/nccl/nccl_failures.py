"""What an NCCL log's failure lines mean: each known class once, with its cause, its count and the
fix, instead of the lines listed one by one. Lines no class explains stay "not explained"
(`evidence.failure_lines`): NCCL's own WARN lines, and the other lines that look like a failure.

Known classes, each read in its source (NCCL's, CUDA's, a maintainer's words):
- `shm-full`: creating a shared-memory segment (`nccl-shm-*`, `/dev/shm/nccl-*`) failed with "No
  space left on device" (`Call to posix_fallocate failed` to 2.11, `failed to extend /dev/shm/nccl-X
  to N bytes` after, its reason on the return line `misc/shmutils.cc:N -> 2 (No space left on
  device)` where printed; without any reason it is said "likely" full, at medium confidence).
  That is the container's /dev/shm: Docker gives 64 MB unless `--shm-size` (or
  `--ipc=host`), a Kubernetes pod the node's default unless an `emptyDir` of `medium: Memory` is
  mounted there. NCCL needs one segment of the logged size per SHM connection.
- `no-ibverbs`: `Failed to open libibverbs.so` is NCCL looking for InfiniBand and not finding the
  library: harmless on a machine without IB (NCCL then uses its socket transport). A WARN line up to
  2.7 (explained here); an INFO line since, and in RCCL, which needs no explaining.
- `peer-unreachable`: a TCP connection to a peer failed with `No route to host`, `Connection
  refused` or `Connection timed out` (strerror of EHOSTUNREACH, ECONNREFUSED, ETIMEDOUT): NCCL's
  `socketStartConnect: connect to ADDR returned ..., exceeded error retry count` (2.19+,
  src/misc/socket.cc `socketConnectCheck`), `connect to ADDR failed : ...`, `Net : Connect to ADDR
  failed : ...` (2.12), or the same words in PyTorch's or gloo's lines; `Software caused connection
  abort` too, which NCCL before 2.24 did not retry (a maintainer in NVIDIA/nccl#1515). A firewall between the hosts,
  or the wrong interface: NCCL binds the first interface it finds unless NCCL_SOCKET_IFNAME names one.
- `socket-network`: the job's ranks span hosts and NCCL's network is `Socket` (`Using network
  Socket`, src/init.cc), typically after `NET/Plugin: Could not find: libnccl-net.so` (2.19+,
  src/plugin/plugin_open.cc; `NET/Plugin : No plugin found (libnccl-net.so), using internal
  implementation` before): NCCL found no network plugin (aws-ofi-nccl for EFA and Slingshot, RCCL's
  librccl-net.so) and no InfiniBand device, so inter-node traffic goes over TCP.
- `test-failure`: nccl-tests' and rccl-tests' `Test NCCL failure FILE:LINE 'reason'` and `Test CUDA
  failure ...` lines (`Cuda failure` before 2.0), the reason the run stopped; the last one is shown
  (every rank prints one), with the CUDA or NCCL error's own meaning where it is a known one
  (`nccl_errors.ERRORS`).
More classes (topology detection, /dev/shm access, InfiniBand completion errors, network plugins
and their own WARN lines) are in `nccl_failure_kinds`. Other WARN lines are shown as they are.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ncclprobe.evidence.failure_lines import FailureLines
from ncclprobe.evidence.nccl import nccl_failure_kinds as kinds
from ncclprobe.evidence.nccl.nccl_errors import KnownError, known_error
from ncclprobe.evidence.nccl.nccl_log import NcclLog, parse_nccl_log
from ncclprobe.nccl.lint_finding import SettingFinding
from ncclprobe.numbers import ascii_re
from ncclprobe.secrets import mask_text
from ncclprobe.verdict import Verdict, worst

_SHM_SEGMENT = ascii_re(
    r"creating shared memory segment (?P<name>\S+) \(size (?P<size>[0-9]{1,19})\)"
)
_NO_SPACE = "No space left on device"
_SHM_MARKS = ("posix_fallocate", "shared memory segment", "/dev/shm/nccl-")
_IBVERBS = "Failed to open libibverbs.so"
_UNREACHABLE = ascii_re(
    r"(?i:connect\w*\b.{0,200}?(?P<why>No route to host|Connection refused|Connection timed out"
    r"|Software caused connection abort))"
)
_PEER = ascii_re(r"(?i:connect to )(?P<peer>\S+?)(?:<(?P<port>\d+)>)?[ ,:]")
# torchrun's agent on a signal (torch/distributed/elastic/multiprocessing/api.py,
# `_terminate_process_handler`): `raise SignalException(f"Process {os.getpid()} got signal: {sigval}",
# ...)`, printed as the traceback's last source line and the exception line
_LAUNCHER_SIGNAL = ascii_re(r"SignalException\b.*got signal: (?P<signal>\d+|\{sigval\})")
_TEST_REASON = ascii_re(r"(?P<kind>NCCL|CUDA|Cuda|HIP) failure (?P<where>\S+) '(?P<what>[^']*)'")


@dataclass(frozen=True)
class Explained:
    """One kind of failure line, explained."""

    kind: str
    severity: str  # "error" (the job failed or will), "warning", "info" (harmless)
    message: str
    fix: str
    lines: int  # how many log lines it stands for
    confidence: str = "high"

    def to_json(self) -> dict:
        return self.__dict__ | {"message": mask_text(self.message)}


def explain(log: NcclLog) -> tuple[list[Explained], list[str]]:
    """(the explained kinds, the WARN lines no kind explains). The log's other failure lines
    (`log.failure_lines`) lose those a kind explains: what is left there is not explained."""
    full = shm_full(log)
    shm = list(full.warnings) if full else []  # another cause: `shm_access`, or shown as it is
    ib = [w for w in log.warnings if _IBVERBS in w]
    unreachable = [
        line
        for line in log.warnings + [f.text for f in log.failure_lines.lines]
        if _UNREACHABLE.search(line)
    ]
    out = []
    if full:
        out.append(
            Explained(full.kind, full.severity, full.message, full.fix, full.lines, full.confidence)
        )
    if ib:
        out.append(
            Explained(
                kind="no-ibverbs",
                severity="info",
                message="libibverbs.so not found: NCCL looked for InfiniBand and uses its socket "
                "transport for the network instead; harmless on a machine without InfiniBand",
                fix="nothing, unless the job should use InfiniBand/RoCE: then install rdma-core",
                lines=len(ib),
            )
        )
    if unreachable:
        out.append(_unreachable(unreachable))
    socket = _socket_network(log)
    if socket:
        out.append(socket)
    if log.failures:
        out.append(_test_failure(log.failures))
    explained = set(shm) | set(ib) | set(unreachable)
    found = [k for k in (kinds.topology(log), kinds.shm_access(log), kinds.ib_completion(log)) if k]
    found += kinds.net_plugins(log, explained | {w for k in found for w in k.warnings})
    for k in found:
        out.append(Explained(k.kind, k.severity, k.message, k.fix, k.lines, k.confidence))
        explained |= set(k.warnings)
    log.failure_lines.forget(unreachable)
    return out, [w for w in log.warnings if w not in explained]


def explain_lines(found: FailureLines) -> list[Explained]:
    """The known classes among failure lines any reader kept (a job log, a server log): a peer
    that could not be reached, a documented CUDA or NCCL error; the lines they explain leave
    `found`, the rest stay not explained."""
    texts = [line.text for line in found.lines]
    unreachable = [t for t in texts if _UNREACHABLE.search(t)]
    out = [_unreachable(unreachable)] if unreachable else []
    signalled = [t for t in texts if _LAUNCHER_SIGNAL.search(t)]
    if signalled:
        out.append(_launcher_signalled(signalled))
        found.forget(signalled)
        texts = [t for t in texts if t not in signalled]
    errors: dict[str, tuple[KnownError, list[str]]] = {}
    for t in texts:
        known = known_error(t) if t not in unreachable else None
        if known is not None:
            errors.setdefault(known.name, (known, []))[1].append(t)
    for known, lines in errors.values():
        out.append(
            Explained(
                kind="known-error",
                severity="error",
                message=f"{known.name}: {known.meaning} (`{lines[-1]}`"
                + (f", and {len(lines) - 1} more line(s)" if len(lines) > 1 else "")
                + ")",
                fix=known.fix,
                lines=len(lines),
            )
        )
    found.forget(unreachable + [t for _, lines in errors.values() for t in lines])
    return out + _nccl_kinds(found)


def _nccl_kinds(found: FailureLines) -> list[Explained]:
    """The NCCL log's classes (`nccl_failure_kinds`) over NCCL WARN lines another reader kept (a
    job's or a server's log holds them among its own lines): each WARN is read as NCCL's."""
    by_message: dict[str, list[str]] = {}
    texts = [line.text for line in found.lines]
    for text in texts:
        for message in parse_nccl_log(text).warnings:
            by_message.setdefault(message, []).append(text)
    if not by_message:
        return []
    log = parse_nccl_log("\n".join(texts))
    kinds_found = [
        k for k in (kinds.topology(log), kinds.shm_access(log), kinds.ib_completion(log)) if k
    ]
    taken = {w for k in kinds_found for w in k.warnings}
    kinds_found += [k for k in kinds.net_plugins(log, taken) if k.warnings]
    found.forget(t for k in kinds_found for w in k.warnings for t in by_message.get(w, []))
    return [
        Explained(k.kind, k.severity, k.message, k.fix, k.lines, k.confidence) for k in kinds_found
    ]


def _launcher_signalled(lines: list[str]) -> Explained:
    numbers = sorted(
        {m["signal"] for t in lines if (m := _LAUNCHER_SIGNAL.search(t))} - {"{sigval}"}
    )
    names = {"2": "SIGINT", "15": "SIGTERM", "1": "SIGHUP", "3": "SIGQUIT"}
    said = ", ".join(f"{n} ({names[n]})" if n in names else n for n in numbers)
    said = f"signal {said}" if said else "a signal"
    return Explained(
        kind="launcher-signalled",
        severity="info",
        message=f"torchrun was sent {said} and ended its workers (`SignalException`, "
        f"{len(lines)} line(s)): the job was ended from outside (Ctrl-C, a scheduler's time "
        "limit, `ncclprobe capture` at a hang), not failed by itself",
        fix="nothing for this line; read what made it end: the hang or the limit before it",
        lines=len(lines),
    )


def shm_full(log: NcclLog) -> kinds.Found | None:
    """/dev/shm full (or likely full) in this log's WARN and return lines, as `nccl_failure_kinds`
    reads its classes (`diagnose` reads the ranks' logs through these)."""
    shm = [w for w in log.warnings if any(mark in w for mark in _SHM_MARKS)]
    full = _shm_full(log, shm)
    if full is None:
        return None
    e = _shm(shm, likely=full == "likely")
    confidence = "medium" if full == "likely" else "high"
    return kinds.Found(e.kind, e.severity, e.message, e.fix, tuple(shm), e.lines, confidence)


def _shm_full(log: NcclLog, shm: list[str]) -> str | None:
    """ "full" where a WARN or a return line of the shared-memory code says "No space left on
    device" (2.12-2.29 print the reason on the return line only: `misc/shmutils.cc:144 -> 2 (No
    space left on device)`); "likely" where NCCL's `failed to extend /dev/shm/nccl-X to N bytes`
    (2.12-2.29's fallocate failing) gives no reason at all; None otherwise (another reason, or the
    unfilled `nccl-XXXXXX` of a failed mkstemp: `nccl_failure_kinds.shm_access`)."""
    reasons = [why for file, why in log.return_errors.items() if "shm" in file]
    if any(_NO_SPACE in w for w in shm + reasons):
        return "full"
    extend = [w for w in shm if "failed to extend" in w and "nccl-XXXXXX" not in w]
    return "likely" if extend and not reasons else None


def _shm(shm: list[str], likely: bool = False) -> Explained:
    sizes = {int(m["size"]) for w in shm if (m := _SHM_SEGMENT.search(w))}
    segment = f" of {max(sizes)} bytes ({max(sizes) / 2**20:.1f} MiB)" if sizes else ""
    state = (
        "is likely full: NCCL could not extend its shared-memory file (the log gives no reason; "
        "a full /dev/shm is the usual one)"
        if likely
        else "is full"
    )
    return Explained(
        kind="shm-full",
        severity="error",
        message=f"/dev/shm {state}: NCCL could not create its shared-memory segments{segment} "
        f"({len(shm)} line(s)). In a container /dev/shm is small (Docker's default is 64 MB), "
        "and NCCL needs one segment per SHM connection between local ranks",
        fix="give the container a larger /dev/shm (docker run --shm-size=1g, or --ipc=host; "
        "Kubernetes: an emptyDir with medium: Memory mounted at /dev/shm), or "
        "NCCL_SHM_DISABLE=1 (local ranks then connect by P2P or the network: slower where "
        "P2P is off)",
        lines=len(shm),
    )


def _unreachable(lines: list[str]) -> Explained:
    whys = sorted({m["why"] for line in lines if (m := _UNREACHABLE.search(line))})
    peers = sorted({m["peer"] for line in lines if (m := _PEER.search(line))})
    where = f" ({', '.join(mask_text(p) for p in peers[:4])}{', ...' if len(peers) > 4 else ''})"
    return Explained(
        kind="peer-unreachable",
        severity="error",
        message=f"a rank could not open a TCP connection to a peer{where if peers else ''}: "
        f"{' / '.join(whys)} ({len(lines)} line(s)). `No route to host` and a timeout mean the "
        "packets do not arrive (a firewall, or an interface the peer cannot reach); `Connection "
        "refused` means the host answered but nothing listened on that port (the peer is not up "
        "yet or already gone, or a firewall rejects it); `Software caused connection abort` "
        "(ECONNABORTED) is a connection the peer's side dropped, which NCCL before 2.24 did not "
        "retry (an NCCL maintainer, NVIDIA/nccl#1515)",
        fix="open the ports between the hosts (NCCL's bootstrap and NET/Socket use ephemeral TCP "
        "ports), and name the interface both ends share: NCCL_SOCKET_IFNAME=<iface> (and "
        "GLOO_SOCKET_IFNAME for torch's store and gloo); `ip -br addr` on each host shows them",
        lines=len(lines),
    )


def _socket_network(log: NcclLog) -> Explained | None:
    """Socket as the network of a job whose ranks span hosts (or a log of several hosts)."""
    nodes = max((c.get("nnodes") or 0 for c in log.communicators), default=0)
    spans = nodes > 1 or len(log.hosts) > 1
    if "Socket" not in log.networks or not spans:
        return None
    plugin = (
        f"NCCL found no network plugin (`{mask_text(log.net_plugin_missing)}`) and no "
        "InfiniBand device, so"
        if log.net_plugin_missing
        else "NCCL uses"
    )
    return Explained(
        kind="socket-network",
        severity="warning",
        message=f"the ranks span {nodes if nodes > 1 else len(log.hosts)} hosts and {plugin} "
        "its TCP socket transport between them (`Using network Socket`): on an InfiniBand, EFA or "
        "Slingshot fabric that is a fraction of its bandwidth",
        fix="install the fabric's NCCL network plugin where the job runs (aws-ofi-nccl for EFA "
        "and Slingshot/libfabric, RCCL's rccl-network-plugin), or make the InfiniBand devices "
        "visible (rdma-core, the container's /dev/infiniband); NCCL_NET_PLUGIN names a plugin "
        "that has another file name",
        lines=1,
    )


def _test_failure(failures: list[str]) -> Explained:
    last = failures[-1]
    reason = _TEST_REASON.search(last)
    known = known_error(reason["what"]) if reason else None
    every = (
        f" (the last of {len(failures)} such lines"
        + (", every one the same reason" if len({_reason(f) for f in failures}) == 1 else "")
        + ")"
        if len(failures) > 1
        else ""
    )
    meaning = f": {known.name}: {known.meaning}" if known else ""
    return Explained(
        kind="test-failure",
        severity="error",
        message=f"the test stopped: {last}{every}{meaning}",
        fix=known.fix
        if known
        else "the reason is in the NCCL lines before it: run with NCCL_DEBUG=INFO and read the "
        "first WARN line",
        lines=len(failures),
    )


def _reason(line: str) -> str:
    found = _TEST_REASON.search(line)
    return found["what"] if found else line


def verdict(log: NcclLog, lint_findings: Iterable[SettingFinding] = ()) -> Verdict:
    """FINDINGS on an error-kind failure, an unexplained WARN or failure line, or a lint error;
    harmless lines (no libibverbs on a machine without InfiniBand) alone are not a finding."""
    from ncclprobe.nccl import lint

    kinds, unexplained = explain(log)
    failed = (
        any(k.severity in ("error", "warning") for k in kinds)
        or bool(unexplained)
        or bool(log.failure_lines)
    )
    return worst([Verdict.of(failed), lint.verdict(lint_findings)])
