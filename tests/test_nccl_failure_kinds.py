"""NCCL log lines written from NCCL's own format strings (the pinned excerpts of
tests/fixtures/nccl_source, read at each release tag) and from plugins' real lines: each is read
(behind the prefixes Ray, torchrun, mpirun and timestamps put in front), each known failure class
is named with its mechanism, and each class's healthy twin stays silent."""

from __future__ import annotations

import re

import pytest

from ncclprobe.evidence.failure_lines import FailureLines, looks_like_failure
from ncclprobe.evidence.nccl.nccl_failure_kinds import WC_STATUS
from ncclprobe.evidence.nccl.nccl_failures import explain, explain_lines
from ncclprobe.evidence.nccl.nccl_log import parse_nccl_log
from tests.nccl_source import load


def c_format(line: str, *args) -> str:
    """The first C string literal of `line`, printf'd with `args`."""
    fmt = re.findall(r'"((?:[^"\\]|\\.)*)"', line)[0].replace("\\n", "")
    fmt = re.sub(r"%(?:l|z|ll)?[diu]", "%d", fmt)
    return fmt % args


def warn_prefix(tag: str, file: str, func: str = "f") -> str:
    """NCCL's WARN prefix at `tag`, from its src/debug.cc."""
    debug = load(tag, "src/debug.cc")
    if tag == "v2.30.7-1":
        host = c_format(debug.line(r'"%s:%d:%d "'), "gpu-node", 4242, 4300)
        return host + c_format(debug.line(r"\(%s\) NCCL WARN"), 3, file, 77, func, "")
    return c_format(debug.line("NCCL WARN"), "gpu-node", 4242, 4300, 3, file, 77)


def info_prefix(tag: str) -> str:
    if tag == "v2.30.7-1":
        debug = load(tag, "src/debug.cc")
        host = c_format(debug.line(r'"%s:%d:%d "'), "gpu-node", 4242, 4300)
        return host + c_format(debug.line("NCCL INFO"), 3, "")
    return c_format(load(tag, "src/debug.cc").line("NCCL INFO"), "gpu-node", 4242, 4300, 3)


def kinds(text: str) -> dict[str, str]:
    explained, _ = explain(parse_nccl_log(text))
    return {k.kind: f"{k.message} | {k.fix}" for k in explained}


def unexplained(text: str) -> list[str]:
    return explain(parse_nccl_log(text))[1]


# -- the prefixes and formats of each release


@pytest.mark.parametrize("tag", ["v2.12.12-1", "v2.30.7-1"])
def test_a_warn_line_of_each_release_is_read_with_its_file(tag):
    line = warn_prefix(tag, "graph/xml.cc", "ncclTopoGetPciNode") + "Something broke"
    log = parse_nccl_log(line)
    assert log.warnings == ["Something broke"] and log.warning_files == ["graph/xml.cc"]


@pytest.mark.parametrize(
    "tag, path, values, expected",
    [
        ("v2.8.3-1", "src/graph/paths.cc", (24, 32, 2), {"coll": 24, "p2p": 32}),
        ("v2.17.1-1", "src/init.cc", (24, 0, 32, 2), {"coll": 24, "nvls": 0, "p2p": 32}),
        (
            "v2.21.5-1",
            "src/init.cc",
            (16, 16, 0, 32, 2),
            {"coll": 16, "nvls": 0, "p2p": 32},
        ),
        (
            "v2.30.7-1",
            "src/init.cc",
            (16, 16, 0, 32, 2),
            {"coll": 16, "nvls": 0, "p2p": 32},
        ),
    ],
)
def test_the_channel_counts_of_every_format_are_read(tag, path, values, expected):
    """The collnet number is not read: 2.21+ prints nChannels (the coll count) in its place."""
    excerpt = load(tag, path)
    if "collnet" in excerpt.text:
        assert "comm->nChannels, comm->nChannels, comm->nvlsChannels" in excerpt.text
    number = next(n for n, line in excerpt.lines.items() if "coll channels" in line)
    fmt = excerpt.lines[number] + (excerpt.lines.get(number + 1, "") if tag == "v2.30.7-1" else "")
    log = parse_nccl_log("h:1:2 [0] NCCL INFO " + c_format(fmt, *values))
    assert log.channel_counts == expected


RAY = "(RayWorkerWrapper pid=2657296, ip=10.0.0.5) "
PREFIXES = [
    "(train_rft pid=2657296) 2024-05-11 14:10:52.224 ",
    RAY,
    "[rank0]:",
    "[1,0]<stdout>:",
    "[2025-01-01 10:00:00] ",
    "2024-05-11T14:10:52.224Z ",
    "\x1b[36m(RayWorkerWrapper pid=2657296, ip=10.0.0.5)\x1b[0m ",  # Ray's colours kept in a paste
    "0: ",  # srun -l
]


@pytest.mark.parametrize("prefix", PREFIXES)
def test_nccl_lines_behind_a_launchers_prefix_are_nccl_lines(prefix):
    text = "\n".join(
        prefix + line
        for line in (
            "n176:2657296:2658229 [0] NCCL INFO Connected all rings",
            "n176:2657296:2658229 [0] NCCL INFO 24 coll channels, 0 nvls channels, 32 p2p channels, "
            "32 p2p channels per peer",
            "n176:2657296:2658232 [0] include/alloc.h:102 NCCL WARN Cuda failure 1 'invalid argument'",
        )
    )
    log = parse_nccl_log(text)
    assert (log.nccl_lines, log.channel_counts["coll"]) == (3, 24)
    assert log.warnings == ["Cuda failure 1 'invalid argument'"]


def test_the_headline_carries_the_channel_count(tmp_path):
    from click.testing import CliRunner

    from ncclprobe.cli import cli

    path = tmp_path / "ray.log"
    path.write_text(
        RAY
        + "n1:7:8 [1] NCCL INFO 24 coll channels, 0 nvls channels, 32 p2p channels, 32 p2p channels per peer\n"
    )
    result = CliRunner().invoke(cli, ["nccl-log", str(path), "--format", "json"])
    assert (
        '"headline": "NCCL (version not logged), ? ranks, 1 process(es), 1 NCCL lines, 24 coll channels"'
        in result.output
    )
    assert result.exit_code == 0, result.output


# -- topology detection


def _topology_2_12() -> str:
    path = "/sys/class/pci_bus/0000:01/../../0000:01:00.0"
    warn = warn_prefix("v2.12.12-1", "graph/xml.cc") + c_format(
        load("v2.12.12-1", "src/graph/xml.cc").line("real path"), path
    )
    ret = load("v2.12.12-1", "src/include/checks.h").line("-> %d")
    returns = [
        info_prefix("v2.12.12-1") + c_format(ret, f, n, 2)
        for f, n in (("graph/xml.cc", 469), ("graph/topo.cc", 523), ("init.cc", 581))
    ]
    return "\n".join([warn, *returns])


def _topology_2_30() -> str:
    path = "/sys/class/pci_bus/fffffff/../../fffffff:ffff"
    warn = warn_prefix("v2.30.7-1", "os/linux.cc", "ncclOsGetPciPath") + c_format(
        load("v2.30.7-1", "src/os/linux.cc").line("real path"), path
    )
    # INFO_LOC(FLAGS, "-> %d", RES) is INFO("%s:%d (%s) " "-> %d", file, line, func, RES)
    loc = load("v2.30.7-1", "src/include/debug.h").line(r"INFO\(\(FLAGS\), \"").split('"')[1]
    assert '"-> %d"' in load("v2.30.7-1", "src/include/checks.h").line("INFO_LOC")
    ret = info_prefix("v2.30.7-1") + (loc + "-> %d") % (
        "graph/topo.cc",
        900,
        "ncclTopoGetSystem",
        2,
    )
    return warn + "\n" + ret


@pytest.mark.parametrize("text", [_topology_2_12(), _topology_2_30()], ids=["2.12", "2.30.7"])
def test_a_pci_path_nccl_cannot_resolve_is_topology_detection_failing(text):
    found = kinds(text)
    assert "topology-detection" in found, found
    said = found["topology-detection"]
    assert "reading the PCI tree" in said and "/sys/class/pci_bus/" in said
    assert "nvidia-smi --query-gpu=pci.bus_id" in said
    assert unexplained(text) == []


def test_error_returns_through_topo_alone_are_topology_detection():
    text = "h:1:2 [0] NCCL INFO graph/topo.cc:523 -> 2\nh:1:2 [0] NCCL INFO init.cc:586 -> 2"
    found = kinds(text)
    assert (
        "topology-detection" in found and "reading the PCI tree" not in found["topology-detection"]
    )


def test_healthy_twins_of_topology_detection_stay_silent():
    harmless = (
        warn_prefix("v2.12.12-1", "graph/xml.cc")
        + "No NVML device handle. Skipping nvlink detection."
    )
    elsewhere = (
        "h:1:2 [0] NCCL INFO transport/net.cc:1302 -> 6\nh:1:2 [0] NCCL INFO proxy.cc:698 -> 6"
    )
    ib_path = (
        warn_prefix("v2.12.12-1", "transport/net_ib.cc")
        + "Could not find real path of mlx5_0 (/sys/x)"
    )
    search = (
        warn_prefix("v2.12.12-1", "graph/search.cc")
        + "Could not find a path for pattern 4, falling back to simple order"
    )
    for text in (harmless, elsewhere, ib_path, search):
        assert "topology-detection" not in kinds(text), text


# -- /dev/shm access


def _shm_2_8(call: str, errno: str) -> str:
    """include/shm.h's two WARN lines at 2.8.3 (SYSCHECKVAL's `"Call to " name " failed : %s"`)."""
    checks = load("v2.8.3-1", "src/include/checks.h").line("Call to")
    first = call.join(re.findall(r'"([^"]*)"', checks)) % errno
    first = warn_prefix("v2.12.12-1", "include/shm.h") + first
    segment = c_format(
        load("v2.8.3-1", "src/include/shm.h").line("Error while"),
        "creating",
        "nccl-shm-recv-b7948f403864987a-0-3-0",
        4460544,
    )
    return first + "\n" + warn_prefix("v2.12.12-1", "include/shm.h") + segment


def test_shm_open_refused_points_at_dev_shm_and_the_shm_transport():
    text = _shm_2_8("shm_open", "Permission denied")
    assert "Call to shm_open failed : Permission denied" in text
    found = kinds(text)
    assert set(found) == {"shm-access"}, found
    said = found["shm-access"]
    assert "/dev/shm" in said and "Permission denied" in said and "NCCL_SHM_DISABLE=1" in said
    assert "--shm-size" not in said and "full" not in said
    assert unexplained(text) == []


def test_a_dev_shm_file_never_created_is_access_without_the_transports_lever():
    extend = c_format(
        load("v2.19.4-1", "src/misc/shmutils.cc").line("failed to extend"),
        "/dev/shm/nccl-XXXXXX",
        9637892,
    )
    found = kinds(warn_prefix("v2.12.12-1", "misc/shmutils.cc") + extend)
    assert "shm-access" in found and "mkstemp" in found["shm-access"]
    assert "NCCL_SHM_DISABLE" not in found["shm-access"]


def test_healthy_twins_of_shm_access():
    full = _shm_2_8("posix_fallocate", "No space left on device")
    assert set(kinds(full)) == {"shm-full"}
    filled = c_format(
        load("v2.19.4-1", "src/misc/shmutils.cc").line("failed to extend"),
        "/dev/shm/nccl-Ab12Cd",
        9637892,
    )
    text = warn_prefix("v2.12.12-1", "misc/shmutils.cc") + filled
    assert set(kinds(text)) == {"shm-full"}  # fallocate failing, no reason given: likely full


def _extend_2_19(why: str | None) -> str:
    """2.19's `failed to extend` WARN (misc/shmutils.cc:72), its segment WARN, and the return line
    NCCL prints with the reason where it has one (`misc/shmutils.cc:144 -> 2 (REASON)`)."""
    source = load("v2.19.4-1", "src/misc/shmutils.cc")
    extend = c_format(source.line("failed to extend"), "/dev/shm/nccl-Ab12Cd", 9637892)
    text = warn_prefix("v2.12.12-1", "misc/shmutils.cc") + extend
    if why:
        text += f"\nh:1:2 [0] NCCL INFO misc/shmutils.cc:144 -> 2 ({why})"
    return text


def test_a_dev_shm_that_fallocate_could_not_extend_is_full_by_its_return_line_or_likely():
    explained, _ = explain(parse_nccl_log(_extend_2_19(None)))
    assert [(k.kind, k.confidence) for k in explained] == [("shm-full", "medium")]
    assert "likely full" in explained[0].message and "gives no reason" in explained[0].message
    explained, _ = explain(parse_nccl_log(_extend_2_19("No space left on device")))
    assert [(k.kind, k.confidence) for k in explained] == [("shm-full", "high")]
    assert "/dev/shm is full" in explained[0].message and "likely" not in explained[0].message


def test_healthy_twin_an_extend_refused_for_another_reason_is_not_full():
    found = kinds(_extend_2_19("Permission denied"))
    assert set(found) == {"shm-access"} and "Permission denied" in found["shm-access"]


# -- InfiniBand completion errors


def test_the_status_names_are_rdma_cores_enum_in_order():
    enum = load("v2.19.4-1", "src/include/ibvcore.h").text
    names = re.findall(r"\b(IBV_WC_\w+)", enum)
    for status, (name, _) in WC_STATUS.items():
        assert names[status] == name


def _completion(tag: str, status: int) -> str:
    if tag == "v2.12.12-1":
        fmt = load(tag, "src/transport/net_ib.cc").line("Got completion")
        return warn_prefix(tag, "transport/net_ib.cc") + c_format(
            fmt, "10.1.2.3<54862>", status, 0, 0, 129
        )
    if tag == "v2.19.4-1":
        fmt = load(tag, "src/transport/net_ib.cc").line("Got completion")
        return warn_prefix("v2.12.12-1", "transport/net_ib.cc") + c_format(
            fmt, "10.1.2.3<54862>", status, 0, 0, 129, "Recv", "", "", "", ""
        )
    fmt = load(tag, "src/transport/net_ib/p2p.cc").line("Got completion")
    names = {12: "IBV_WC_RETRY_EXC_ERR", 13: "IBV_WC_RNR_RETRY_EXC_ERR", 5: "IBV_WC_WR_FLUSH_ERR"}
    return warn_prefix(tag, "transport/net_ib/p2p.cc") + c_format(
        fmt,
        "10.1.2.3<54862>",
        names[status],
        status,
        "IBV_WC_RECV",
        128,
        129,
        "",
        "",
        "",
        "",
        "mlx5_0",
    )


@pytest.mark.parametrize("tag", ["v2.12.12-1", "v2.19.4-1", "v2.30.7-1"])
@pytest.mark.parametrize("status", [12, 13, 5])
def test_a_completion_error_of_each_release_is_read_and_only_retries_blame_the_fabric(tag, status):
    text = _completion(tag, status)
    explained, rest = explain(parse_nccl_log(text))
    assert [k.kind for k in explained] == ["ib-completion-error"] and rest == []
    said = f"{explained[0].message} | {explained[0].fix}"
    assert f"status {status} = {WC_STATUS[status][0]}" in said and "10.1.2.3<54862>" in said
    fabric = "did not deliver them in time" in said and "ib_write_bw" in said
    assert fabric == (status == 12), said  # 5 is a flush, 13 a peer not ready: not the fabric
    flushed = "find the first error" in said and "the other ranks' NCCL logs" in said
    assert flushed == (status == 5), said
    assert (explained[0].severity, explained[0].confidence) == (
        ("warning", "medium") if status == 5 else ("error", "high")
    )


def test_a_flush_beside_a_retry_error_is_the_fabric_and_the_flush_is_not_on_its_own():
    text = _completion("v2.19.4-1", 5) + "\n" + _completion("v2.19.4-1", 12)
    said = kinds(text)["ib-completion-error"]
    assert "status 5 = IBV_WC_WR_FLUSH_ERR" in said and "Status 12: the fabric" in said


def test_the_status_meanings_follow_rdma_cores_words():
    """rdma-core's ibv_wc_status_str: 5 "Work Request Flushed Error", 12 "transport retry counter
    exceeded", 13 "RNR retry counter exceeded", 20 "response timeout error"."""
    assert "flushed" in WC_STATUS[5][1] and "retries exhausted" in WC_STATUS[12][1]
    assert "receiver-not-ready retries" in WC_STATUS[13][1] and "timed out" in WC_STATUS[20][1]


def test_a_short_ib_timeout_the_job_set_is_named_for_retries_exhausted():
    env = "h:1:2 [0] NCCL INFO NCCL_IB_TIMEOUT set by environment to 8."
    said = kinds(env + "\n" + _completion("v2.19.4-1", 12))["ib-completion-error"]
    assert "This job set NCCL_IB_TIMEOUT=8" in said and "no NCCL setting" not in said
    said = kinds(env + "\n" + _completion("v2.19.4-1", 13))["ib-completion-error"]
    assert "NCCL_IB_TIMEOUT" not in said  # receiver not ready: the ack timeout is not its mechanism


def test_the_sharp_plugins_completion_line_is_read_and_its_plugin_named():
    line = (
        "w0:3468:3905 [4] ib_plugin.c:1615 NCCL WARN NET/IB : Got completion from peer 10.2.3.4<54862> "
        "with status=12 opcode=0 len=0 vendor err 129 (Recv) localGid fd00::1 remoteGidsfd00::2"
    )
    found = kinds(line)
    assert "IBV_WC_RETRY_EXC_ERR" in found["ib-completion-error"]
    assert "nccl-rdma-sharp-plugins" in found["net-plugin"]


def test_healthy_twin_of_completion_errors():
    assert kinds("h:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB eth0:10.0.0.1<0>") == {}


# -- network plugins


FASTSOCKET = """\
full-debug2-test-1:4024:4048 [0] net_fastsocket.cc:765 NCCL WARN Cannot get incoming CPU.
full-debug2-test-0:4300:4325 [0] net_fastsocket.cc:785 NCCL WARN Maximum retry reached for accept 3.
full-debug2-test-0:4300:4325 [0] NCCL INFO NET/FastSocket : Connected after 1000 retries."""


def test_a_plugins_own_warn_lines_are_attributed_to_it():
    found = kinds(FASTSOCKET)
    assert set(found) == {"net-plugin"}
    said = found["net-plugin"]
    assert "FastSocket" in said and "google/nccl-fastsocket" in said and "not NCCL" in said
    assert "Cannot get incoming CPU." in said and "Maximum retry reached for accept 3." in said
    assert unexplained(FASTSOCKET) == []


@pytest.mark.parametrize(
    "text, name",
    [
        (
            "algo-1:46:58 [0] configure_nvls_option:287 NCCL WARN NET/OFI Could not find ncclGetVersion symbol",
            "aws-ofi-nccl",
        ),
        (
            "[2026-01-01 12:08:32] n0:194:710 [0] int cm_req_handle_error_entry(nccl_net_ofi_context_t*, "
            "fid_cq*, fi_cq_err_entry*, uint16_t):46 NCCL WARN NET/OFI Request 0x7f45 completed with error. RC: 103.",
            "aws-ofi-nccl",
        ),
        (
            "h:1:2 [0] NCCL INFO NET/Plugin: Loaded net plugin GPUDirectTCPX (v7)",
            "names itself GPUDirectTCPX",
        ),
        ("h:1:2 [0] NCCL INFO NET/Foo : using 4 streams", "names itself Foo"),
        ("gpu40:2899:2929 [0] NCCL INFO Using network IBext_v8", "nccl-rdma-sharp-plugins"),
    ],
)
def test_other_plugins_are_recognised_by_their_lines(text, name):
    found = kinds(text)
    assert name in found["net-plugin"]
    assert unexplained(text) == []


def test_healthy_twins_nccls_own_network_lines_name_no_plugin():
    text = "\n".join(
        "h:1:2 [0] NCCL INFO " + line
        for line in (
            "NET/Plugin : No plugin found (libnccl-net.so), using internal implementation",
            "NET/Plugin: Could not find: libnccl-net.so",
            "NET/IB : Using [0]mlx5_0:1/IB ; OOB eth0:10.0.0.1<0>",
            "NET/Socket : Using [0]eth0:10.0.0.1<0>",
            "Using network IB",
            "Using network Socket",
        )
    )
    assert "net-plugin" not in kinds(text)


# -- NCCL's result strings in a server's or a job's log


@pytest.mark.parametrize(
    "line",
    [
        "(VllmWorker rank=0 pid=12191) ERROR 03-25 21:13:53 multiproc_executor.py:374] RuntimeError: "
        "NCCL error: {s}",
        "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
        "ProcessGroupNCCL.cpp:1970, {s}, NCCL version 2.19.3",
    ],
)
@pytest.mark.parametrize("tag", ["v2.8.3-1", "v2.19.4-1"])
def test_invalid_usage_in_a_log_is_named_with_ncclDebug_as_the_way_to_its_reason(line, tag):
    words = re.findall(r'"([^"]*)"', load(tag, "src/init.cc").line("ncclInvalidUsage"))[0]
    found = FailureLines("server log")
    assert found.offer(1, line.format(s=words))
    explained = explain_lines(found)
    assert [e.message.split(":")[0] for e in explained] == ["ncclInvalidUsage"]
    assert "NCCL_DEBUG=WARN" in explained[0].fix and not found


def test_a_mention_of_the_warn_level_alone_is_no_failure():
    assert not looks_like_failure("export NCCL_DEBUG=WARN")
    assert not looks_like_failure("h:1:2 [0] NCCL INFO NCCL_DEBUG set by environment to WARN")
    assert looks_like_failure(
        "RuntimeError: NCCL error: invalid usage (run with NCCL_DEBUG=WARN for details)"
    )


def test_nccl_warn_lines_in_a_job_log_get_the_same_classes():
    """torchrun's `[rank0]:` lines kept by the job log's reader: the NCCL classes name them."""
    found = FailureLines("job log")
    lines = [
        f"[rank{r}]:" + line
        for r in (0, 1)
        for line in _shm_2_8("shm_open", "Permission denied").split("\n")
    ]
    lines += [
        "[rank0]: " + _completion("v2.19.4-1", 12),
        "[rank1]: UserWarning: something else failed",
    ]
    for number, line in enumerate(lines, 1):
        assert found.offer(number, line)
    explained = {e.kind: e for e in explain_lines(found)}
    assert set(explained) == {"shm-access", "ib-completion-error"}
    assert [line.text for line in found.lines] == ["[rank1]: UserWarning: something else failed"]


def test_healthy_twin_a_job_logs_own_failures_are_no_nccl_class():
    """The same words outside NCCL's WARN lines are the application's: not NCCL's classes."""
    found = FailureLines("job log")
    assert found.offer(1, "[rank0]: RuntimeError: shm_open failed: Permission denied (my cache)")
    assert found.offer(2, "[rank0]: ValueError: Got completion from peer with status=12 (a test)")
    assert explain_lines(found) == [] and len(found.lines) == 2


def test_a_plugin_whose_lines_are_there_is_not_said_to_be_the_network_nccl_used():
    text = (
        "h:1:2 [0] NCCL INFO NET/OFI Using aws-ofi-nccl 1.7.4\n"
        "h:1:2 [0] nccl_ofi_net.c:99 NCCL WARN NET/OFI aws-ofi-nccl initialization failed\n"
        "h:1:2 [0] NCCL INFO Using network Socket"
    )
    said = kinds(text)["net-plugin"]
    assert "NCCL's network is Socket" in said and "aws-ofi-nccl initialization failed" in said


@pytest.mark.parametrize(
    "errno, means",
    [
        ("Read-only file system", "mounted read-only"),
        ("No such file or directory", "does not exist"),
        ("Operation not permitted", "may not create files"),
    ],
)
def test_each_refusal_of_dev_shm_says_what_it_means(errno, means):
    said = kinds(_shm_2_8("shm_open", errno))["shm-access"]
    assert f"{errno}: " in said and means in said


def test_a_process_out_of_file_descriptors_is_not_dev_shm_refusing():
    assert "shm-access" not in kinds(_shm_2_8("shm_open", "Too many open files"))


# -- /dev/shm refused in 2.12-2.29 (the reason on the return line) and 2.30 (in the WARN)


def test_a_refused_open_of_2_21_is_read_from_its_return_line():
    """SYSCHECKGOTO prints `file:line -> 2 (strerror)` at INFO, then the WARN without a reason."""
    checks = load("v2.21.5-1", "src/include/checks.h").line("-> %d")
    ret = info_prefix("v2.12.12-1") + c_format(
        checks, "misc/shmutils.cc", 68, 2, "Permission denied"
    )
    warn = warn_prefix("v2.12.12-1", "misc/shmutils.cc") + c_format(
        load("v2.21.5-1", "src/misc/shmutils.cc").line("Error while"),
        "creating",
        "/dev/shm/nccl-Ab12Cd",
        9637892,
    )
    found = kinds(ret + "\n" + warn)
    assert set(found) == {"shm-access"}, found
    said = found["shm-access"]
    assert "Permission denied: the process may not create files there (1 line(s))" in said
    assert "NCCL_SHM_DISABLE" not in said  # a /dev/shm/nccl-* file: not only the SHM transport's
    twin = info_prefix("v2.12.12-1") + c_format(
        checks, "transport/net.cc", 68, 2, "Permission denied"
    )
    assert kinds(twin + "\n" + warn) == {}  # another file's refusal: not /dev/shm's


def test_a_refused_file_of_2_30_is_read_from_its_warn():
    fmt = load("v2.30.7-1", "src/os/linux.cc").line("failed to create shared memory file")
    line = warn_prefix("v2.30.7-1", "os/linux.cc", "ncclOsShmOpen") + c_format(
        fmt, "/dev/shm/nccl-XXXXXX", "Read-only file system", 30
    )
    assert "Read-only file system: /dev/shm is mounted read-only" in kinds(line)["shm-access"]
    segment = load("v2.30.7-1", "src/os/linux.cc").line("Error while %s shared memory segment")
    line = warn_prefix("v2.30.7-1", "os/linux.cc", "ncclOsShmOpen") + c_format(
        segment, "attaching to", "/dev/shm/nccl-Ab12Cd", 9637892, "Permission denied", 13
    )
    said = kinds(line)["shm-access"]
    assert "could not open (attach to) its" in said and "Permission denied: " in said


# -- what each class's message carries (pinned against mutants)


def test_the_topology_message_counts_the_warn_and_its_return_lines():
    explained, _ = explain(parse_nccl_log(_topology_2_12()))
    topology = next(k for k in explained if k.kind == "topology-detection")
    assert topology.lines == 3 and "(2 return line(s))" in topology.message  # init.cc is not graph/
    one_each = explain(parse_nccl_log(_topology_2_30()))[0]
    assert [k.lines for k in one_each] == [2]  # a WARN and a return line
    alone = kinds(_topology_2_12().split("\n")[0])["topology-detection"]
    assert "returned through" not in alone


def test_a_topology_warn_that_is_no_pci_path_is_quoted():
    line = warn_prefix("v2.12.12-1", "graph/xml.cc") + "XML Parse : Unexpected EOF"
    said = kinds(line)["topology-detection"]
    assert "(`XML Parse : Unexpected EOF`)" in said and "read the WARN line" in said


def test_a_log_without_warn_files_is_still_read():
    """A log built without the files of its WARN lines (another reader's) still gets its classes."""
    from ncclprobe.evidence.nccl.nccl_log import NcclLog

    log = NcclLog(
        warnings=["Could not find real path of /sys/class/pci_bus/0000:01/../../0000:01:00.0"]
    )
    assert [k.kind for k in explain(log)[0]] == ["topology-detection"]


@pytest.mark.parametrize("count, shown, more", [(3, 3, False), (4, 4, False), (5, 4, True)])
def test_peers_are_listed_up_to_four(count, shown, more):
    lines = [
        warn_prefix("v2.12.12-1", "transport/net_ib.cc")
        + c_format(
            load("v2.12.12-1", "src/transport/net_ib.cc").line("Got completion"),
            f"10.0.0.{p}<1>",
            12,
            0,
            0,
            129,
        )
        for p in range(count)
    ]
    said = kinds("\n".join(lines))["ib-completion-error"]
    assert said.count("10.0.0.") == shown and (", ..." in said) == more
    assert "transport retries exhausted" in said  # the status's meaning, not only its name


def test_a_plugin_named_by_its_tag_and_its_network_line_is_one_plugin():
    text = FASTSOCKET + "\nfull-debug2-test-0:4300:4325 [0] NCCL INFO Using network FastSocket"
    found = kinds(text)
    assert "NCCL's network is FastSocket" in found["net-plugin"]
    assert "| read the plugin's WARN lines" in found["net-plugin"]
    both = "h:1:2 [0] NCCL INFO NET/FastSocket : Using 8 streams\nh:1:2 [0] NCCL INFO Using network FastSocket"
    assert "FastSocket network plugin" in kinds(both)["net-plugin"]
    quiet = kinds("h:1:2 [0] NCCL INFO NET/OFI Selected Provider is efa")["net-plugin"]
    assert quiet.endswith("| nothing")


def test_diagnose_names_a_class_once_across_the_ranks_logs(tmp_path):
    """`diagnose --nccl-log` over two ranks' logs with the same refusal: one finding, both logs."""
    from click.testing import CliRunner

    from ncclprobe.cli import cli

    paths = []
    for rank in (0, 1):
        path = tmp_path / f"nccl.host.{rank}.log"
        path.write_text(
            _shm_2_8("shm_open", "Permission denied").replace("4242", str(4242 + rank)) + "\n"
        )
        paths.append(str(path))
    healthy = tmp_path / "nccl.host.9.log"
    healthy.write_text("h:9:9 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB eth0:10.0.0.1<0>\n")
    args = ["diagnose", "--format", "json"]
    result = CliRunner().invoke(cli, [*args, "--nccl-log", paths[0], "--nccl-log", paths[1]])
    findings = [f for f in _findings(result.output) if f["rule"] == "failure-shm-access"]
    assert len(findings) == 1 and findings[0]["evidence"]["logs"] == [
        "nccl.host.0.log",
        "nccl.host.1.log",
    ]
    quiet = CliRunner().invoke(cli, [*args, "--nccl-log", str(healthy)])
    assert not [f for f in _findings(quiet.output) if f["rule"].startswith("failure-")]


def _findings(output: str) -> list[dict]:
    import json

    return json.loads(output)["findings"]


def test_a_response_timeout_is_a_delivery_status_and_a_local_protection_error_is_not():
    said = kinds(_completion("v2.19.4-1", 20))["ib-completion-error"]
    assert "Status 20: the fabric did not deliver" in said and "ib_write_bw" in said
    said = kinds(_completion("v2.19.4-1", 4))["ib-completion-error"]
    assert "did not deliver" not in said and "ib_write_bw" not in said
    assert "find the first error" not in said  # not a flush either
