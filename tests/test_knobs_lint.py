"""The knowledge table's syntax helpers and the environment lint: each rule, and clean settings."""

import pytest

from ncclprobe.errors import UsageProblem
from ncclprobe.nccl.knob_row import Scope
from ncclprobe.nccl.knobs import KNOBS, explain, scope_of
from ncclprobe.nccl.lint import lint_env
from ncclprobe.nccl.lint_finding import SettingFinding
from ncclprobe.nccl.node import NO_NVLINK, NVLINK_ALL, NodeFacts
from ncclprobe.nccl.values import protocol_states, subsystems_enabled, validate_value
from ncclprobe.nccl.version import parse_version

PCIE = NodeFacts(links=NO_NVLINK)
HOPPER_NVSWITCH = NodeFacts(links=NVLINK_ALL, compute_capabilities=(90, 90))

ISSUE_VARIABLES = [
    "NCCL_PROTO",
    "NCCL_ALGO",
    "NCCL_P2P_LEVEL",
    "NCCL_P2P_DISABLE",
    "NCCL_SHM_DISABLE",
    "NCCL_BUFFSIZE",
    "NCCL_NTHREADS",
    "NCCL_MIN_NCHANNELS",
    "NCCL_MAX_NCHANNELS",
    "NCCL_MIN_CTAS",
    "NCCL_MAX_CTAS",
    "NCCL_NVLS_ENABLE",
    "NCCL_CUMEM_ENABLE",
    "NCCL_DEBUG",
    "NCCL_DEBUG_SUBSYS",
    "NCCL_DEBUG_FILE",
    "NCCL_TOPO_FILE",
    "NCCL_TOPO_DUMP_FILE",
    "NCCL_LAUNCH_MODE",
    "NCCL_TUNER_PLUGIN",
    "NCCL_TUNER_CONFIG_FILE",
]


def test_table_covers_every_variable_the_issue_names():
    assert set(ISSUE_VARIABLES) <= set(KNOBS)
    for name in ISSUE_VARIABLES:
        doc = explain(name)
        assert doc["summary"] and doc["source"] and doc["read"] in ("communicator", "process")


def test_scopes_that_plan_the_sweep():
    assert (
        scope_of("NCCL_PROTO") is Scope.COMMUNICATOR and scope_of("NCCL_ALGO") is Scope.COMMUNICATOR
    )
    assert (
        scope_of("NCCL_P2P_LEVEL") is Scope.PROCESS and scope_of("NCCL_BUFFSIZE") is Scope.PROCESS
    )
    assert scope_of("NCCL_SOMETHING_NEW") is Scope.PROCESS


def test_explain_unknown_variable_is_a_usage_problem():
    with pytest.raises(UsageProblem, match="not in the knowledge table"):
        explain("NCCL_NOPE")


@pytest.mark.parametrize(
    "text, expected",
    [
        ("2.28.9", (2, 28, 9)),
        ("2.29.7+cuda12.9", (2, 29, 7)),
        ("2.30", (2, 30, 0)),
        (None, None),
        ("dev", None),
    ],
)
def test_parse_version(text, expected):
    assert parse_version(text) == expected


@pytest.mark.parametrize(
    "value, expected",
    [
        ("LL", {"all": {"LL": "forced", "LL128": "off", "Simple": "off"}}),
        ("^LL", {"all": {"LL": "off", "LL128": "forced", "Simple": "forced"}}),
        ("simple,ll128", {"all": {"LL": "off", "LL128": "forced", "Simple": "forced"}}),
        (
            "^LL128;allreduce:LL128",
            {
                "all": {"LL": "forced", "LL128": "off", "Simple": "forced"},
                "allreduce": {"LL": "off", "LL128": "forced", "Simple": "off"},
            },
        ),
    ],
)
def test_protocol_states(value, expected):
    assert protocol_states(value) == expected


def test_subsystems_enabled():
    assert subsystems_enabled("INIT,TUNING") == {"INIT", "TUNING"}
    assert "ENV" in subsystems_enabled("ALL") and "ENV" in subsystems_enabled("^COLL")
    assert "ENV" not in subsystems_enabled("^ENV,COLL") and "INIT" in subsystems_enabled(
        "^ENV,COLL"
    )
    assert subsystems_enabled("init,env") == {"INIT", "ENV"}


@pytest.mark.parametrize(
    "name, value",
    [
        ("NCCL_DEBUG", "info"),
        ("NCCL_PROTO", "^LL128;allreduce:LL128"),
        ("NCCL_ALGO", "allreduce:^tree"),
        ("NCCL_P2P_LEVEL", "2"),
        ("NCCL_LAUNCH_MODE", "group"),  # strcasecmp since 2.13
        ("NCCL_NTHREADS", "384"),
        ("NCCL_NTHREADS", "64"),  # multiples of 32
        ("NCCL_BUFFSIZE", "0x400000"),
    ],
)  # strtoll, base 0
def test_values_nccl_accepts(name, value):
    assert validate_value(name, value) == value


@pytest.mark.parametrize(
    "name, value, match",
    [
        ("NCCL_P2P_LEVEL", "nvl", "did you mean NVL"),
        ("NCCL_PROTO", "LL,Fast", "unknown token 'Fast'"),
        ("NCCL_PROTO", "LL, Simple", "unknown token ' Simple'.*no spaces"),
        ("NCCL_ALGO", "allreduce :tree", "unknown collective.*no spaces"),
        ("NCCL_ALGO", "gather:ring", "unknown collective"),
        ("NCCL_LAUNCH_MODE", "grouped", "not valid"),
        ("NCCL_NTHREADS", "100", "multiple of 32 from 64 to 512"),
        ("NCCL_NTHREADS", "1024", "multiple of 32 from 64 to 512"),
    ],
)
def test_values_nccl_rejects_or_ignores(name, value, match):
    with pytest.raises(UsageProblem, match=match):
        validate_value(name, value)


# env, lint keyword arguments, expected {(severity, code)}
CASES = [
    ({}, {}, set()),
    (
        {
            "NCCL_PROTO": "LL,Simple",
            "NCCL_P2P_LEVEL": "SYS",
            "NCCL_DEBUG": "INFO",
            "NCCL_DEBUG_SUBSYS": "INIT,ENV,TUNING",
            "NCCL_DEBUG_FILE": "/tmp/nccl.%h.%p",
        },
        {"node": PCIE},
        set(),
    ),
    ({"PATH": "/bin", "HOME": "/root"}, {}, set()),
    ({"NCCL_P2P_LEVEL": "sys"}, {}, {("error", "p2p-level-case")}),
    ({"NCCL_P2P_LEVEL": "Nvl"}, {}, {("error", "p2p-level-case")}),
    ({"NCCL_P2P_LEVEL": "FAST"}, {}, {("error", "p2p-level-unknown")}),
    ({"NCCL_P2P_LEVEL": "3"}, {}, {("info", "p2p-level-legacy-int")}),
    ({"NCCL_P2P_LEVEL": "PXN"}, {}, {("info", "p2p-level-undocumented")}),
    ({"NCCL_PROTO": "LL,Bogus"}, {"nccl_version": "2.28.9"}, {("error", "unknown-token")}),
    ({"NCCL_ALGO": "Ring,Bogus"}, {}, {("error", "unknown-token")}),
    ({"NCCL_PROTO": "^LL"}, {"node": PCIE}, {("error", "ll128-without-nvlink")}),
    ({"NCCL_PROTO": "^LL"}, {}, {("warning", "ll128-without-nvlink")}),
    ({"NCCL_PROTO": "^LL"}, {"node": HOPPER_NVSWITCH, "nccl_version": "2.28.9"}, set()),
    # NCCL before 2.15 kept LL128 off on sm90: with the version unknown, only a warning
    ({"NCCL_PROTO": "^LL"}, {"node": HOPPER_NVSWITCH}, {("warning", "ll128-without-nvlink")}),
    ({"NCCL_PROTO": "LL128"}, {"node": PCIE}, {("error", "ll128-without-nvlink")}),
    ({"NCCL_PROTO": "^LL,LL128"}, {"node": PCIE}, set()),
    ({"NCCL_PROTO": "^LL128;allreduce:LL128"}, {"node": PCIE}, {("error", "ll128-without-nvlink")}),
    (
        {"NCCL_PROTO": "allreduce:LL"},
        {"nccl_version": "2.21.5"},
        {("error", "per-collective-too-old")},
    ),
    ({"NCCL_ALGO": "NVLS"}, {"nccl_version": "2.16.2"}, {("error", "algo-too-new")}),
    ({"NCCL_ALGO": "NVLS"}, {"nccl_version": "2.18.1"}, set()),
    (
        {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "TUNING"},
        {},
        {("warning", "debug-subsys-without-env")},
    ),
    ({"NCCL_DEBUG_SUBSYS": "INIT,ENV"}, {}, {("info", "debug-subsys-without-info")}),
    (
        {"NCCL_P2P_DISABLE": "1", "NCCL_P2P_LEVEL": "NVL"},
        {},
        {("warning", "p2p-disable-and-level")},
    ),
    (
        {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"},
        {},
        {("warning", "no-intranode-transport")},
    ),
    ({"NCCL_DEBUG_FILE": "/tmp/nccl.log"}, {}, {("warning", "debug-file-shared")}),
    (
        {"NCCL_MIN_NCHANNELS": "8", "NCCL_MAX_NCHANNELS": "4"},
        {"nccl_version": "2.16.0"},
        {("error", "min-above-max")},
    ),
    ({"NCCL_MAX_NCHANNELS": "4"}, {}, {("info", "deprecated")}),
    ({"NCCL_LAUNCH_MODE": "GROUP"}, {}, {("info", "deprecated")}),
    (
        {"NCCL_LAUNCH_MODE": "group"},
        {"nccl_version": "2.28.9"},
        {("info", "deprecated")},
    ),  # any case since 2.13
    ({"NCCL_LAUNCH_MODE": "group"}, {"nccl_version": "2.12.12"}, {("error", "launch-mode-case")}),
    ({"NCCL_NTHREADS": "384"}, {}, set()),
    ({"NCCL_P2P_LEVEL": "C2C"}, {"nccl_version": "2.25.1"}, {("error", "p2p-level-too-new")}),
    ({"NCCL_P2P_LEVEL": "C2C"}, {"nccl_version": "2.26.2"}, {("info", "p2p-level-undocumented")}),
    ({"NCCL_P2P_LEVEL": "P2C"}, {"nccl_version": "2.26.6"}, {("error", "p2p-level-too-new")}),
    ({"NCCL_P2P_LEVEL": "P2C"}, {"nccl_version": "2.27.3"}, {("info", "p2p-level-undocumented")}),
    ({"NCCL_P2P_LEVEL": "P2C"}, {}, {("info", "p2p-level-undocumented")}),
    (
        {"NCCL_TUNER_CONFIG_FILE": "t.csv", "NCCL_TUNER_PLUGIN": "example"},
        {"nccl_version": "2.27.3"},
        {("warning", "tuner-config-too-old")},
    ),
    (
        {"NCCL_TUNER_CONFIG_FILE": "t.csv", "NCCL_TUNER_PLUGIN": "example"},
        {"nccl_version": "2.27.5"},
        set(),
    ),
    (
        {"NCCL_TUNER_PLUGIN": "none"},
        {"nccl_version": "2.27.7"},
        {("warning", "tuner-none-too-old")},
    ),
    ({"NCCL_TUNER_PLUGIN": "none"}, {"nccl_version": "2.28.3"}, set()),
    ({"NCCL_NO_CACHE": "ALL"}, {"nccl_version": "2.29.3"}, {("warning", "no-cache-too-old")}),
    ({"NCCL_NO_CACHE": "NCCL_BUFFSIZE,ALL"}, {"nccl_version": "2.29.7"}, set()),
    ({"NCCL_NO_CACHE": "BUFFSIZE"}, {"nccl_version": "2.30.7"}, {("warning", "no-cache-name")}),
    (
        {"NCCL_NO_CACHE": "NCCL_P2P_LEVEL"},
        {"nccl_version": "2.30.7"},
        {("info", "no-cache-no-effect")},
    ),
    ({"NCCL_BUFFSIZE": "4M"}, {}, {("error", "number-as-read")}),
    ({"NCCL_NTHREADS": " 256"}, {}, {("error", "quoted-value")}),
    ({"NCCL_NVLS_ENABLE": "1"}, {"node": PCIE}, {("warning", "nvls-without-nvlink")}),
    ({"NCCL_NVLS_ENABLE": "1"}, {"node": HOPPER_NVSWITCH}, set()),
    ({"NCCL_TUNER_CONFIG_FILE": "t.csv"}, {}, {("info", "tuner-config-without-plugin")}),
    ({"NCCL_PROTOCOL": "LL"}, {}, {("warning", "unknown-variable")}),
    (
        {"NCCL_IB_HCA": "mlx5_0", "NCCL_SOCKET_IFNAME": "eth0", "NCCL_LL128_BUFFSIZE": "1"},
        {},
        set(),
    ),
]


@pytest.mark.parametrize("env, kwargs, expected", CASES)
def test_lint_rules(env, kwargs, expected):
    findings = lint_env(env, **kwargs)
    assert {(f.severity, f.code) for f in findings} == expected
    for finding in findings:
        assert finding.message and finding.fix and finding.severity in ("error", "warning", "info")


def test_lint_message_names_the_forcing_clause():
    [finding] = lint_env({"NCCL_PROTO": "^LL128;allreduce:LL128"}, node=PCIE)
    assert "`allreduce:LL128` names LL128" in finding.message
    [finding] = lint_env({"NCCL_PROTO": "^LL"}, node=PCIE)
    assert "^ list that leaves LL128 in" in finding.message


@pytest.mark.parametrize("value", ["Fast", "LL, Simple"])
def test_unknown_token_consequence_depends_on_version(value):
    old = lint_env({"NCCL_PROTO": value}, nccl_version="2.21.5")[0].message
    new = lint_env({"NCCL_PROTO": value}, nccl_version="2.24.3")[0].message
    assert "silently" in old and "fails" in new


def test_errors_come_first_and_findings_serialise():
    findings = lint_env({"NCCL_DEBUG_FILE": "/tmp/x", "NCCL_P2P_LEVEL": "sys"})
    assert [f.severity for f in findings] == ["error", "warning"]
    assert set(findings[0].to_json()) == {"severity", "variable", "message", "fix", "code"}
    assert SettingFinding("info", None, "m", "f").code == ""


def test_lint_of_what_nccl_reported_in_the_recorded_h200_logs():
    """The environment NCCL itself reported (2.28.9, a path without NVLink) gets the verdicts the
    same logs prove: ^LL forced LL128 there; the lowercase level left no trace."""
    from pathlib import Path

    from ncclprobe.evidence.nccl.nccl_log import parse_nccl_log_file

    logs = Path(__file__).parent / "fixtures" / "nccl_logs"
    forced = parse_nccl_log_file(
        logs / "nccl_2.28.9_h200_2ranks_1gpu_hostid_proto_excl_ll_tuning.log"
    )
    assert any(t.proto == "LL128" for t in forced.tuning)
    shared_gpu = NodeFacts(over_network=True)  # --share-gpu: the ranks meet over NET/Socket
    codes = {
        f.code for f in lint_env(forced.env, node=shared_gpu, nccl_version=forced.nccl_version)
    }
    assert codes == {"ll128-without-nvlink"}
    ignored = parse_nccl_log_file(
        logs / "nccl_2.28.9_h200_2ranks_1gpu_hostid_p2p_level_lowercase.log"
    )
    assert "NCCL_P2P_LEVEL" not in ignored.env
    assert {
        f.code for f in lint_env({"NCCL_P2P_LEVEL": "sys"}, nccl_version=ignored.nccl_version)
    } == {"p2p-level-case"}


@pytest.mark.parametrize(
    "version, vendor, gpus, expected",
    [
        ("2.28.9", "intel", 8, "PXB"),
        ("2.28.9", "amd", 2, "SYS"),
        ("2.28.9", "amd", 4, "PXB"),
        ("2.28.9", None, 8, "PXB"),
        ("2.28.9", None, 2, None),
        ("2.21.5", "amd", 8, "SYS"),
        ("2.21.5", "intel", 2, "PXB"),
        ("2.21.5", "arm", 4, "PXB"),
        ("2.21.5", None, 4, None),
        (None, "intel", 4, None),
    ],
)
def test_default_p2p_level(version, vendor, gpus, expected):
    from ncclprobe.nccl.p2p import default_p2p_level

    assert default_p2p_level(version, vendor, gpus) == expected
