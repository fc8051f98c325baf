"""More known failure classes of an NCCL log (`nccl_failures.explain` calls these), each read in its
source:

- `topology-detection`: NCCL's topology detection (src/graph/xml.cc, topo.cc; os/linux.cc in
  2.30) failed: a WARN printed from those files (`Could not find real path of
  /sys/class/pci_bus/...`, the same words in every release 2.7-2.30, `XML Parse ...`, `Add
  NVLink error ...`), or an error whose return lines (`graph/topo.cc:523 -> 2`,
  src/include/checks.h) pass through those files. (graph/search.cc's `Could not find a path for
  pattern N, falling back to simple order` is the channel search falling back, not detection
  failing.) The PCI path is built from the GPU's bus id; an NCCL maintainer on that WARN
  (NVIDIA/nccl#573): NCCL cannot find the GPU's PCI topology in /sys, make sure NCCL can access
  that path.
- `shm-access`: creating a shared-memory segment failed for a reason other than space
  (`Call to shm_open failed : Permission denied`, include/shm.h to 2.11; `misc/shmutils.cc:68 -> 2
  (Permission denied)` before `Error while creating shared memory segment`, 2.12-2.29; `failed to
  extend /dev/shm/nccl-XXXXXX`, a template mkstemp never filled in, 2.12-2.29; `failed to create
  shared memory file /dev/shm/nccl-XXXXXX, error Permission denied (13)`, 2.30). The
  `nccl-shm-*` segments are the SHM transport's (transport/shm.cc to 2.11): only there is
  NCCL_SHM_DISABLE named as the lever.
- `ib-completion-error`: `NET/IB : Got completion [from peer X] with error N` (2.7-2.29) or `with
  status=N` (2.30, nccl-rdma-sharp-plugins' ib_plugin.c): the InfiniBand/RoCE work completion
  failed; N is rdma-core's `enum ibv_wc_status` (libibverbs/verbs.h; NCCL's copy in
  src/include/ibvcore.h). 12 (retries exhausted) and 20 (response timeout) are the fabric not
  delivering within the ack timeout: only there are the fabric's checks named. 5 (flushed) follows
  an earlier error on the queue pair (a warning at medium confidence that points to it). For 12,
  NCCL 2.30 hints (src/transport/net_ib/common.h) at NCCL_IB_TIMEOUT set too short, named here
  only where the log shows the job set it.
- `net-plugin`: a network plugin NCCL loaded (`NET/Plugin: Loaded net plugin NAME`, `Using network
  NAME`, or lines tagged `NET/<Tag>` that are not NCCL's own IB/Socket/Plugin/MLX5), with the
  WARN lines its own files printed: they are the plugin's words, not NCCL's.
"""

from __future__ import annotations

from dataclasses import dataclass

from ncclprobe.evidence.nccl.nccl_log import NET_OWN_TAGS as _OWN_TAGS
from ncclprobe.evidence.nccl.nccl_log import NcclLog
from ncclprobe.numbers import ascii_re

_TOPO_FILES = ("graph/xml.cc", "graph/xml.h", "graph/topo.cc")
_PCI_PATH = ascii_re(r"Could not find real path of (?P<path>/sys/\S+)")
_TOPO_HARMLESS = ("not dumping topology", "Skipping nvlink detection", "trying to use CUDA instead")

_SHM_WORDS = ("shm_open", "shared memory segment", "/dev/shm/nccl-")
# strerror of the errors that say /dev/shm itself refused the file, with what each means there
_SHM_ERRNO = ascii_re(
    r"(?P<why>Permission denied|Operation not permitted|Read-only file system|No such file or directory)"
)
_SHM_MEANS = {
    "Permission denied": "the process may not create files there",
    "Operation not permitted": "the process may not create files there",
    "Read-only file system": "/dev/shm is mounted read-only",
    "No such file or directory": "/dev/shm does not exist where the process runs",
}
_MKSTEMP = "/dev/shm/nccl-XXXXXX"
_SHM_TRANSPORT = ascii_re(r"\bnccl-shm-(?:send|recv)-\S+")

_COMPLETION = ascii_re(
    r"Got completion (?:from peer (?P<peer>\S+) )?with (?:error |status=)(?:[^()\s]*\()?(?P<status>\d{1,4})"
)
# rdma-core libibverbs/verbs.h `enum ibv_wc_status`: the ones a fabric, a peer or memory causes
WC_STATUS = {
    4: (
        "IBV_WC_LOC_PROT_ERR",
        "the local HCA could not access the buffer (its memory registration)",
    ),
    5: (
        "IBV_WC_WR_FLUSH_ERR",
        "the request was flushed: the queue pair had already failed; the first error is elsewhere",
    ),
    10: ("IBV_WC_REM_ACCESS_ERR", "the peer's HCA refused access to its buffer"),
    12: (
        "IBV_WC_RETRY_EXC_ERR",
        "transport retries exhausted: the sender resent until its retry count without an "
        "acknowledgement from the peer, so the packets (or their acknowledgements) did not get "
        "through the fabric (a link, cable, switch port or route; on RoCE its lossless "
        "configuration), or the peer's side was gone",
    ),
    13: (
        "IBV_WC_RNR_RETRY_EXC_ERR",
        "receiver-not-ready retries exhausted: the peer had no receive posted in time (a stalled "
        "or dead peer process)",
    ),
    20: ("IBV_WC_RESP_TIMEOUT_ERR", "the peer's response timed out"),
}
# the statuses that mean the fabric did not deliver in time (ibv_wc_status_str: "transport retry
# counter exceeded", "response timeout error"); the others name a flush or a side that refused
_DELIVERY = {12, 20}


_VERSIONED = ascii_re(r"_v\d{1,3}$")


@dataclass(frozen=True)
class Plugin:
    name: str
    what: str  # who makes it
    tags: tuple[str, ...]  # how its lines are tagged (`NET/<tag>`) or its name in NCCL's lines
    files: tuple[str, ...]  # how its source files start


PLUGINS = (
    Plugin(
        "FastSocket",
        "Google's FastSocket TCP plugin (github.com/google/nccl-fastsocket)",
        ("FastSocket",),
        ("net_fastsocket",),
    ),
    Plugin(
        "AWS OFI",
        "aws-ofi-nccl, the libfabric plugin for EFA and Slingshot (github.com/aws/aws-ofi-nccl)",
        ("OFI", "AWS Libfabric", "Libfabric"),
        ("nccl_ofi",),
    ),
    Plugin(
        "RDMA-SHARP",
        "nccl-rdma-sharp-plugins, Mellanox's IB/UCX/SHARP plugin shipped in HPC-X "
        "(github.com/Mellanox/nccl-rdma-sharp-plugins)",
        ("IBext", "UCX", "UCX-RMA", "SHARP"),
        ("ib_plugin", "ucx_plugin", "ucx_rma_plugin", "sharp_plugin", "p2p_plugin"),
    ),
)


@dataclass(frozen=True)
class Found:
    """One class's reading: its kind, severity, message, fix and the WARN lines it explains."""

    kind: str
    severity: str
    message: str
    fix: str
    warnings: tuple[str, ...]
    lines: int
    confidence: str = "high"  # "medium" where the lines point elsewhere (a flush)


def _warns(log: NcclLog) -> list[tuple[str, str]]:
    """(WARN text, the file that printed it or '')."""
    files = log.warning_files + [None] * (len(log.warnings) - len(log.warning_files))
    return [(w, f or "") for w, f in zip(log.warnings, files)]


def topology(log: NcclLog) -> Found | None:
    warns = [
        w
        for w, f in _warns(log)
        if (f in _TOPO_FILES or _PCI_PATH.search(w)) and not any(h in w for h in _TOPO_HARMLESS)
    ]
    returns = sum(n for f, n in log.returns.items() if f in _TOPO_FILES)
    if not warns and not returns:
        return None
    pci = next((m for w in warns if (m := _PCI_PATH.search(w))), None)
    what = (
        f"while reading the PCI tree: it could not resolve `{pci['path']}` under /sys, the path "
        "it builds from a GPU's (or NIC's) PCI bus id"
        if pci
        else (f"(`{warns[0]}`)" if warns else "")
    )
    through = f"; the error returned through graph/ ({returns} return line(s))" if returns else ""
    return Found(
        kind="topology-detection",
        severity="error",
        message=f"NCCL's topology detection failed {what}{through}, so the communicator was "
        "not created",
        fix="compare the GPUs' bus ids (`nvidia-smi --query-gpu=pci.bus_id --format=csv`) with "
        "`ls -l /sys/class/pci_bus/` where the job runs: a VM, WSL2 or a container that hides "
        "/sys lacks them; NCCL must be able to read that path (an NCCL maintainer on this WARN, "
        "NVIDIA/nccl#573)"
        if pci
        else "read the WARN line above the return lines: it names what NCCL could not read",
        warnings=tuple(warns),
        lines=len(warns) + returns,
    )


def shm_access(log: NcclLog) -> Found | None:
    warns = [w for w, f in _warns(log) if "shm" in f or any(word in w for word in _SHM_WORDS)]
    # 2.12-2.29 print the failed open's reason on its return line only (`misc/shmutils.cc:68 -> 2
    # (Permission denied)`, SYSCHECKGOTO), the WARN after it without one
    reasons = [why for file, why in log.return_errors.items() if "shm" in file]
    if not warns or any("No space left" in w for w in warns + reasons):
        return None  # space: `shm-full`
    whys = sorted({m["why"] for w in warns + reasons if (m := _SHM_ERRNO.search(w))})
    unfilled = any(_MKSTEMP in w for w in warns)
    if not whys and not unfilled:
        return None
    verb = "open (attach to)" if any("attaching to" in w for w in warns) else "create"
    transport = next((m[0] for w in warns if (m := _SHM_TRANSPORT.search(w))), None)
    why = (
        "; ".join(f"{w}: {_SHM_MEANS[w]}" for w in whys)
        if whys
        else "the file was never created (mkstemp failed; the line does not say why)"
    )
    lever = (
        f"; `{transport}` is a segment of NCCL's SHM transport (ranks on one host without P2P): "
        "NCCL_SHM_DISABLE=1 makes them connect another way (P2P or the network), slower where "
        "P2P is off"
        if transport
        else ""
    )
    return Found(
        kind="shm-access",
        severity="error",
        message=f"NCCL could not {verb} its shared-memory segment in /dev/shm: {why} "
        f"({len(warns)} line(s)){lever}",
        fix="check `ls -ld /dev/shm` (normally drwxrwxrwt, mode 1777) and `ls -l /dev/shm/nccl-*` "
        "(a segment of the same name another user left) where the job runs, and the container's "
        "or security policy's view of /dev/shm",
        warnings=tuple(warns),
        lines=len(warns),
    )


def ib_completion(log: NcclLog) -> Found | None:
    hits = [(w, m) for w, _ in _warns(log) if (m := _COMPLETION.search(w))]
    if not hits:
        return None
    statuses = sorted({int(m["status"]) for _, m in hits})
    peers = sorted({m["peer"] for _, m in hits if m["peer"]})
    said = "; ".join(
        f"status {s} = {WC_STATUS[s][0]}: {WC_STATUS[s][1]}"
        if s in WC_STATUS
        else f"status {s} (rdma-core's enum ibv_wc_status)"
        for s in statuses
    )
    where = (
        f" with peer(s) {', '.join(peers[:4])}{', ...' if len(peers) > 4 else ''}" if peers else ""
    )
    delivery = sorted(set(statuses) & _DELIVERY)
    if not delivery:  # a flush or a local/peer error: the fabric is not what these lines show
        flushed = set(statuses) <= {5}
        return Found(
            kind="ib-completion-error",
            severity="warning" if flushed else "error",
            message=f"InfiniBand/RoCE work requests failed{where} ({len(hits)} line(s)): {said}"
            + (
                ". A flush follows an earlier error on the same queue pair (this rank's or its "
                "peer's: a peer process that exited or failed first); these lines do not show "
                "which"
                if flushed
                else ""
            ),
            fix="find the first error: the other ranks' NCCL logs and job logs (a rank that "
            "failed or exited before this one), and an earlier completion error of another status"
            if flushed
            else "read the status's meaning above: it names the side (this HCA, the peer's) "
            "that refused the request",
            warnings=tuple(w for w, _ in hits),
            lines=len(hits),
            confidence="medium" if flushed else "high",
        )
    timeout = log.env.get("NCCL_IB_TIMEOUT") if 12 in statuses else None
    setting = (
        f" This job set NCCL_IB_TIMEOUT={timeout}: each retry waits 4.096 us x 2^{timeout} (the "
        "InfiniBand ack timeout); a value below NCCL's default shortens the wait before this error "
        "(NCCL 2.30's own hint for status 12)"
        if timeout
        else f" Status {', '.join(map(str, delivery))}: the fabric did not deliver them in time; "
        "no NCCL setting in this log causes it"
    )
    return Found(
        kind="ib-completion-error",
        severity="error",
        message=f"InfiniBand/RoCE transfers failed{where} ({len(hits)} line(s)): {said}.{setting}",
        fix="check the path between the hosts named: port state and error counters (`ibstat`, "
        "`perfquery`, the switch's port counters), cables, and `ib_write_bw` between the two "
        "hosts; on RoCE the PFC/ECN configuration",
        warnings=tuple(w for w, _ in hits),
        lines=len(hits),
    )


def net_plugins(log: NcclLog, taken: set[str]) -> list[Found]:
    """A plugin per name the log shows, with the WARN lines its files printed (less `taken`)."""
    names = set(log.net_tags) | {n for n in log.networks if n not in _OWN_TAGS}
    out = []
    for plugin in _plugins(names, log):
        warns = [
            w
            for w, f in _warns(log)
            if w not in taken
            and (
                any(f.rsplit("/", 1)[-1].startswith(p) for p in plugin.files)
                or any(w.startswith(f"NET/{t}") for t in plugin.tags)
            )
        ]
        shown = "; ".join(f"`{w}`" for w in dict.fromkeys(warns))
        used = sorted(log.networks)
        network = (
            f", and NCCL's network is {', '.join(used)} (`Using network`)"
            if used
            else "; which network NCCL used is not in the log"
        )
        out.append(
            Found(
                kind="net-plugin",
                severity="warning" if warns else "info",
                message=f"the log holds lines of the {plugin.name} network plugin ({plugin.what})"
                + network
                + (
                    f"; its own code printed {len(warns)} WARN line(s), not NCCL: {shown}"
                    if warns
                    else ""
                ),
                fix="read the plugin's WARN lines in its source and issues (its repository "
                "above), with the plugin's version"
                if warns
                else "nothing",
                warnings=tuple(warns),
                lines=max(len(warns), 1),
            )
        )
    return out


def _plugins(names: set[str], log: NcclLog) -> list[Plugin]:
    names = {_VERSIONED.sub("", n) for n in names}  # `Using network IBext_v8`: the plugin IBext
    found = [p for p in PLUGINS if names & set(p.tags) or names & {p.name}]
    files = {(f or "").rsplit("/", 1)[-1] for f in log.warning_files}
    found += [
        p
        for p in PLUGINS
        if p not in found and any(f.startswith(pre) for f in files for pre in p.files)
    ]
    known = {t for p in PLUGINS for t in (*p.tags, p.name)}
    found += [
        Plugin(n, f"a network plugin that names itself {n}", (n,), (n.lower(),))
        for n in sorted(names - known)
    ]
    return found
