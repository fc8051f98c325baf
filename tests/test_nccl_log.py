"""NCCL debug-log parser against the real logs in tests/fixtures/nccl_logs (facts read by eye from
each file), plus the TUNING formats no saved log shows, built from the exact format strings."""

from pathlib import Path

import pytest

from ncclprobe.errors import UsageProblem
from ncclprobe.evidence.nccl.nccl_log import TuningEntry, parse_nccl_log, parse_nccl_log_file

LOGS = Path(__file__).parent / "fixtures" / "nccl_logs"

# file -> (nccl_version, env subset, nranks, transports, number of warnings)
FACTS = {
    "nccl_2.8.3_2node_16x_a100_p4d_efa_mpirun_tagged_old_tests_format.log": (
        "2.8.3",
        {},
        16,
        {"P2P": 256, "NET": 64},
        0,
    ),
    # the file name says 2.22.3 (the nccl-tests build); the banner NCCL printed says 2.20.3
    "nccl_2.22.3_2node_16x_h100_p5_efa_ofi_tuner_mpirun_tagged.log": (
        "2.20.3",
        {
            "NCCL_BUFFSIZE": "8388608",
            "NCCL_NET_FORCE_FLUSH": "0",
            "NCCL_TOPO_FILE": "/opt/aws-ofi-nccl/install/share/aws-ofi-nccl/xml/p5.48xl-topo.xml",
        },
        16,
        {"P2P": 464, "NET": 512},
        0,
    ),
    "nccl_2.22.3_2x_a100_sxm64_nvlink_sendrecv_leonardo.log": (
        "2.22.3",
        {"NCCL_P2P_LEVEL": "NVL", "NCCL_BUFFSIZE": "4194304"},
        2,
        {"P2P": 16},
        0,
    ),
    "nccl_2.25.1_2x_rtx5090_pcie_shm_genoa.log": ("2.25.1", {}, 2, {"SHM": 4}, 5),
    "nccl_2.27.3_4x_l40s_g6e48xlarge_1pod_shm.log": (
        "2.27.3",
        {
            "NCCL_P2P_LEVEL": "NVL",
            "NCCL_PROTO": "simple",
            "NCCL_SOCKET_IFNAME": "^docker0,lo",
            "NCCL_TOPO_FILE": "",
        },
        4,
        {"SHM": 28},
        0,
    ),
    "nccl_2.27.3_l40s_g6e48xlarge_4pod_net_libfabric_p2plevel_nvl.log": (
        "2.27.3",
        {"NCCL_P2P_LEVEL": "NVL", "NCCL_PROTO": "simple"},
        4,
        {"NET": 24},
        0,
    ),
    "nccl_2.28.9_1x_h200_1rank_debug_subsys_all.log": (
        "2.28.9",
        {"NCCL_P2P_LEVEL": "SYS"},
        1,
        {},
        0,
    ),
    "nccl_2.28.9_h200_2ranks_1gpu_hostid_proto_excl_ll_tuning.log": (
        "2.28.9",
        {"NCCL_PROTO": "^LL", "NCCL_NVLS_ENABLE": "0", "NCCL_HOSTID": "fakehost0"},
        2,
        {"NET": 4},
        0,
    ),
    "nccl_2.28.9_h200_2ranks_1gpu_hostid_proto_unknown_token.log": (
        "2.28.9",
        {"NCCL_PROTO": "LL,Bogus"},
        2,
        {},
        1,
    ),
    "nccl_2.28.9_h200_2ranks_1gpu_hostid_p2p_level_lowercase.log": (
        "2.28.9",
        {"NCCL_P2P_LEVEL": None, "NCCL_NVLS_ENABLE": "0"},
        2,
        {"NET": 4},
        0,
    ),
    "nccl_2.29.7dev_tuning_subsys_rtx5090_2ranks_1gpu_socket.log": (
        "2.29.7",
        {"NCCL_P2P_DISABLE": "1"},
        None,
        {},
        0,
    ),
}


def test_every_fixture_log_is_covered():
    from tests.test_nccl_log_failures import FACTS as FAILURE_FACTS  # RCCL, vLLM, failure lines

    assert sorted(p.name for p in LOGS.iterdir()) == sorted({**FACTS, **FAILURE_FACTS})


@pytest.mark.parametrize("name", sorted(FACTS))
def test_facts_of_each_real_log(name):
    version, env, nranks, transports, nwarnings = FACTS[name]
    log = parse_nccl_log_file(LOGS / name)
    assert log.nccl_version == version
    assert {key: log.env.get(key) for key in env} == env
    assert log.nranks == nranks
    assert log.transports == transports
    assert len(log.warnings) == nwarnings
    assert log.nccl_lines > 0


def test_integer_values_lose_their_period_and_strings_keep_theirs():
    log = parse_nccl_log_file(
        LOGS / "nccl_2.22.3_2node_16x_h100_p5_efa_ofi_tuner_mpirun_tagged.log"
    )
    assert log.env["NCCL_BUFFSIZE"] == "8388608"  # logged as "8388608."
    assert log.env["NCCL_TOPO_FILE"].endswith(".xml")  # string: no period to strip
    assert log.hosts == {"test-nccl-worker-0", "test-nccl-worker-1"}  # mpirun tags removed
    assert log.ring_channels == 16 and log.tree_channels == 16
    assert log.connected == {"rings": 16, "trees": 16}
    assert log.transport_details == {"P2P/CUMEM": 464, "NET/AWS Libfabric/GDRDMA": 512}


def test_old_2_8_log_with_bare_banner_and_busid_brackets():
    log = parse_nccl_log_file(
        LOGS / "nccl_2.8.3_2node_16x_a100_p4d_efa_mpirun_tagged_old_tests_format.log"
    )
    assert log.nccl_version_full == "2.8.3+cuda11.2"
    assert log.transport_details["P2P/IPC/read"] == 256
    assert len(log.communicators) == 16 and {c["rank"] for c in log.communicators} == set(range(16))


def test_tuning_lines_with_names_2_24_plus():
    log = parse_nccl_log_file(LOGS / "nccl_2.29.7dev_tuning_subsys_rtx5090_2ranks_1gpu_socket.log")
    assert len(log.tuning) == 72
    assert log.tuning[0] == TuningEntry(
        "Broadcast", 1024, "RING", "LL", channels=(0, 0), pid=3038984
    )
    assert log.tuning[-1].bytes == 67108864 and log.tuning[-1].proto == "SIMPLE"
    assert {t.algo for t in log.tuning} == {"RING"}
    assert sum(t.proto == "SIMPLE" for t in log.tuning) == 49


def test_h200_log_per_call_lines_and_single_rank():
    log = parse_nccl_log_file(LOGS / "nccl_2.28.9_1x_h200_1rank_debug_subsys_all.log")
    assert log.calls == {"AllReduce": 329}
    assert log.tuning == []  # one rank: NCCL logs no TUNING line
    assert log.pids == {437}
    assert log.communicators[0]["bus_id"] == "60"


def test_func_proto_algo_matrix_shows_simple_only():
    log = parse_nccl_log_file(
        LOGS / "nccl_2.27.3_l40s_g6e48xlarge_4pod_net_libfabric_p2plevel_nvl.log"
    )
    assert log.enabled_matrix["AllReduce"]["protocols"] == ["SIMPLE"]
    assert "COLLNET_DIRECT" in log.enabled_matrix["AllReduce"]["algorithms"]
    assert log.tuner_plugin == "nccl_ofi_tuner"


def test_h200_exclusion_list_forces_ll128_without_nvlink():
    """Recorded on NCCL 2.28.9: NCCL_PROTO=^LL enables LL128 in the matrix and NCCL then picks it."""
    log = parse_nccl_log_file(LOGS / "nccl_2.28.9_h200_2ranks_1gpu_hostid_proto_excl_ll_tuning.log")
    assert log.enabled_matrix["AllReduce"]["protocols"] == ["LL128", "SIMPLE"]
    assert [(t.bytes, t.algo, t.proto) for t in log.tuning] == [
        (1024, "RING", "LL128"),
        (65536, "RING", "LL128"),
        (4194304, "RING", "SIMPLE"),
        (67108864, "RING", "SIMPLE"),
    ]
    assert log.communicators[0]["nnodes"] == 2 and log.connected == {"rings": 1}


def test_timestamped_warn_line_of_2_28():
    log = parse_nccl_log_file(LOGS / "nccl_2.28.9_h200_2ranks_1gpu_hostid_proto_unknown_token.log")
    assert log.warnings == ['Unrecognized element token "Bogus" when parsing "LL,Bogus"']


def test_warn_lines_keep_their_message():
    log = parse_nccl_log_file(LOGS / "nccl_2.25.1_2x_rtx5090_pcie_shm_genoa.log")
    assert log.warnings[-1] == "Cuda failure 1 'invalid argument'"
    assert log.connected == {"rings": 2}


PREFIX = "host1:1234:1240 [0] NCCL INFO "


@pytest.mark.parametrize(
    "message, expected",
    [
        # 2.20-2.22: numeric codes, no function name (real message: NVIDIA/nccl#1595)
        (
            "1026048 Bytes -> Algo 1 proto 2 time 34.693867",
            TuningEntry(None, 1026048, "RING", "SIMPLE", predicted_time_us=34.693867, pid=1234),
        ),
        (
            "262144 Bytes -> Algo 0 proto 1 time 54.707825",
            TuningEntry(None, 262144, "TREE", "LL128", predicted_time_us=54.707825, pid=1234),
        ),
        # 2.23: function name prefix, still codes
        (
            "AllReduce: 4096 Bytes -> Algo 6 proto 0 time 9.5",
            TuningEntry("AllReduce", 4096, "PAT", "LL", predicted_time_us=9.5, pid=1234),
        ),
        # 2.24+: names (logging.rst example)
        (
            "AllReduce: 33554432 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..31}",
            TuningEntry("AllReduce", 33554432, "RING", "SIMPLE", channels=(0, 31), pid=1234),
        ),
        (
            "AllGather: 8 Bytes -> Algo NVLS_TREE proto LL128 channel{Lo..Hi}={0..3}",
            TuningEntry("AllGather", 8, "NVLS_TREE", "LL128", channels=(0, 3), pid=1234),
        ),
    ],
)
def test_three_generations_of_tuning_lines(message, expected):
    assert parse_nccl_log(PREFIX + message).tuning == [expected]


def test_interleaved_output_timestamps_and_ansi_are_skipped():
    text = "\n".join(
        [
            "Epoch 1: loss 0.3 via something",
            "[1,3]<stdout>:[2025-03-14 10:00:00] \x1b[1mhost2:77:78 [3] NCCL INFO NCCL version 2.26.2+cuda12.8\x1b[0m",
            "2025-03-14T10:00:01.123Z host2:77:78 [3] NCCL INFO NCCL_ALGO set by environment to Ring",
            "host2:77:78 [3] NCCL INFO Channel 00/0 : 3[3] -> 0[0] via P2P/CUMEM/read",
            "host2:77:78 [3] transport.cc:12 NCCL WARN Something broke",
        ]
    )
    log = parse_nccl_log(text)
    assert (log.nccl_version, log.env, log.transports) == (
        "2.26.2",
        {"NCCL_ALGO": "Ring"},
        {"P2P": 1},
    )
    assert log.warnings == ["Something broke"] and log.pids == {77}


@pytest.mark.parametrize(
    "garbage",
    [
        "",
        "\x00\x01",
        "NCCL INFO",
        "host:1:2 [0] NCCL INFO 99 Bytes -> Algo 9 proto 7",
        "NCCL version",
        "a:1:1 [0] NCCL INFO Channel 00/ : x",
        "h:1:1 [0] NCCL INFO 8 Bytes -> Algo 1 proto 0 time .",  # was ValueError
        "h:1:1 [0] NCCL INFO 8 Bytes -> Algo 1 proto 0 time 1.2.3",
    ],
)
def test_garbage_never_raises(garbage):
    log = parse_nccl_log(garbage)
    assert log.nccl_version is None


def test_unknown_codes_stay_visible():
    log = parse_nccl_log("h:1:1 [0] NCCL INFO 99 Bytes -> Algo 9 proto 7 time 1.0")
    assert (log.tuning[0].algo, log.tuning[0].proto) == ("ALGO_9", "PROTO_7")


def test_unreadable_file_is_a_usage_problem(tmp_path):
    with pytest.raises(UsageProblem, match="cannot read NCCL log"):
        parse_nccl_log_file(tmp_path / "missing.log")
    binary = tmp_path / "core"
    binary.write_bytes(b"\x7fELF\x00\x00")
    with pytest.raises(UsageProblem, match="binary"):
        parse_nccl_log_file(binary)


def test_to_json_names_never_codes():
    doc = parse_nccl_log(PREFIX + "1026048 Bytes -> Algo 1 proto 2 time 34.6").to_json()
    assert doc["schema_version"] == 1
    assert doc["tuning"][0]["algo"] == "RING" and doc["tuning"][0]["proto"] == "SIMPLE"
    assert doc["pids"] == [1234]
