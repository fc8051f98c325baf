"""Every threshold of `ncclprobe.nccl` at its boundary (issue 28 §4): each version comparison at the
release where NCCL's behaviour changes and at the one just before (a change that came with a
series' first release is pinned at x.y.0, one inside a series at its own release), each `>` / `>=`
at the value on either side. A build between two releases is judged as the release before it."""

from __future__ import annotations

import pytest

from ncclprobe.errors import UsageProblem
from ncclprobe.nccl.knob_row import Scope
from ncclprobe.nccl.knobs import effective_scope
from ncclprobe.nccl.lint import lint_env
from ncclprobe.nccl.ll128 import ll128_default
from ncclprobe.nccl.node import NVLINK_ALL, ONE_GPU, NodeFacts
from ncclprobe.nccl.p2p import default_p2p_level, legacy_level
from ncclprobe.nccl.safety import ll128_hazard
from ncclprobe.nccl.values import validate_value


def codes(env: dict, version: str | None, **kw) -> set[tuple[str, str]]:
    return {(f.severity, f.code) for f in lint_env(env, nccl_version=version, **kw)}


@pytest.mark.parametrize(
    "env, before, at, found",
    [
        ({"NCCL_PROTO": "allreduce:LL"}, "2.23.4", "2.24.0", ("error", "per-collective-too-old")),
        ({"NCCL_ALGO": "CollNetDirect"}, "2.13.4", "2.14.0", ("error", "algo-too-new")),
        ({"NCCL_ALGO": "NVLS"}, "2.16.5", "2.17.0", ("error", "algo-too-new")),
        ({"NCCL_ALGO": "NVLSTree"}, "2.17.1", "2.18.0", ("error", "algo-too-new")),
        ({"NCCL_ALGO": "PAT"}, "2.22.3", "2.23.0", ("error", "algo-too-new")),
        ({"NCCL_P2P_LEVEL": "PXN"}, "2.11.4", "2.12.0", ("error", "p2p-level-too-new")),
        ({"NCCL_P2P_LEVEL": "C2C"}, "2.25.1", "2.26.0", ("error", "p2p-level-too-new")),
        ({"NCCL_P2P_LEVEL": "P2C"}, "2.26.6", "2.27.0", ("error", "p2p-level-too-new")),
        ({"NCCL_NO_CACHE": "ALL"}, "2.29.6", "2.29.7", ("warning", "no-cache-too-old")),
        (
            {"NCCL_TUNER_CONFIG_FILE": "t.csv", "NCCL_TUNER_PLUGIN": "x"},
            "2.27.4",
            "2.27.5",
            ("warning", "tuner-config-too-old"),
        ),
        ({"NCCL_TUNER_PLUGIN": "none"}, "2.27.7", "2.28.0", ("warning", "tuner-none-too-old")),
        ({"NCCL_LAUNCH_MODE": "group"}, "2.12.12", "2.13.0", ("error", "launch-mode-case")),
        (
            {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV,REG"},
            "2.20.5",
            "2.21.0",
            ("info", "debug-subsys-too-new"),
        ),
        (
            {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV,RAS"},
            "2.23.4",
            "2.24.0",
            ("info", "debug-subsys-too-new"),
        ),
        (
            {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "ENV,ALLOC_HOST"},
            "2.30.6",
            "2.30.7",
            ("info", "debug-subsys-too-new"),
        ),
    ],
)
def test_a_rule_that_starts_at_a_release_fires_before_it_only(env, before, at, found):
    assert found in codes(env, before) and found not in codes(env, at)


def test_collnet_is_an_algorithm_only_before_2_14():
    env = {"NCCL_ALGO": "CollNet"}
    assert codes(env, "2.13.4") == set()
    assert codes(env, "2.14.0") == {("error", "algo-too-old")}
    assert codes(env, None) == {("warning", "algo-too-old")}  # version unknown: warned, not refused
    assert "2.24+ refuses it" in lint_env(env, nccl_version="2.24.0")[0].message
    assert "2.14-2.23 ignore it" in lint_env(env, nccl_version="2.23.4")[0].message


def test_the_unknown_token_consequence_changes_at_2_24():
    def message(version):
        return lint_env({"NCCL_PROTO": "LL129"}, nccl_version=version)[0].message

    assert "before 2.24 ignores" in message("2.23.4") and "2.24+ refuses" in message("2.24.0")


def test_deprecations_start_at_2_17_and_are_assumed_when_the_version_is_unknown():
    env = {"NCCL_MIN_NCHANNELS": "4"}
    assert ("info", "deprecated") not in codes(env, "2.16.5")
    assert ("info", "deprecated") in codes(env, "2.17.0") and ("info", "deprecated") in codes(
        env, None
    )


def test_no_cache_lifts_a_cache_from_2_29_7_exactly():
    env = {"NCCL_NO_CACHE": "NCCL_BUFFSIZE"}
    assert effective_scope("NCCL_BUFFSIZE", env, (2, 29, 6)) is Scope.PROCESS
    assert effective_scope("NCCL_BUFFSIZE", env, (2, 29, 7)) is Scope.COMMUNICATOR


def test_channel_bounds_allow_equal_and_refuse_one_above():
    assert codes({"NCCL_MIN_CTAS": "8", "NCCL_MAX_CTAS": "8"}, "2.28.9") == set()
    assert ("error", "min-above-max") in codes(
        {"NCCL_MIN_CTAS": "9", "NCCL_MAX_CTAS": "8"}, "2.28.9"
    )


@pytest.mark.parametrize("value", ["64", "96", "512", "0x40"])
def test_nthreads_nccl_uses_as_given(value):
    assert validate_value("NCCL_NTHREADS", value) == value


@pytest.mark.parametrize("value", ["32", "63", "80", "513", "544", "4M"])
def test_nthreads_nccl_replaces(value):
    with pytest.raises(UsageProblem):
        validate_value("NCCL_NTHREADS", value)


@pytest.mark.parametrize(
    "version, vendor, gpus, level",
    [
        ("2.22.3", "amd", 4, "SYS"),
        ("2.23.0", "amd", 4, "PXB"),
        ("2.23.0", "amd", 2, "SYS"),
        ("2.23.0", "amd", 3, "PXB"),
        ("2.22.3", "intel", 2, "PXB"),
        ("2.22.3", "zhaoxin", 2, "PXB"),
        ("2.23.0", None, 3, "PXB"),  # more than two GPUs: PXB whatever the CPU
        ("2.23.0", None, 2, None),
    ],
)
def test_the_default_p2p_level_at_its_boundaries(version, vendor, gpus, level):
    assert default_p2p_level(version, vendor, gpus) == level


@pytest.mark.parametrize(
    "value, level",
    [
        ("0", "LOC"),
        ("3", "PHB"),
        ("4", "SYS"),
        ("5", "SYS"),
        ("6", "SYS"),
        ("010", "SYS"),
        ("07", "SYS"),
        ("08", "LOC"),
        ("02", "PXB"),
    ],
)
def test_legacy_levels_clamp_at_five_and_read_octal(value, level):
    assert legacy_level(value) == level


def _on(version, caps=(90, 90), links=NVLINK_ALL, **kw):
    node = NodeFacts(links=links, compute_capabilities=caps, **kw)
    return ll128_default(node, version).on


@pytest.mark.parametrize(
    "before, at, expected_before, expected_at, kw",
    [
        ((2, 14, 3), (2, 15, 0), False, True, {"nvlink_direct": True}),  # sm90 joins the list
        ((2, 18, 1), (2, 18, 3), None, True, {"caps": (80, 80)}),  # NVB counts as NVLink
        ((2, 24, 3), (2, 25, 0), False, True, {"caps": (100, 100)}),
        ((2, 26, 6), (2, 27, 0), False, True, {"caps": (86, 86)}),  # any sm70+
        ((2, 29, 7), (2, 30, 0), False, True, {"caps": (90, 100)}),  # mixed from sm90 on
    ],
)
def test_ll128_rule_changes_at_its_release(before, at, expected_before, expected_at, kw):
    assert _on(before, **kw) is expected_before and _on(at, **kw) is expected_at


def _net(version, net, caps=(90, 90), c2c=None):
    node = NodeFacts(links=ONE_GPU, compute_capabilities=caps, over_network=True, net_path=net)
    return ll128_default(node, version, ll128_c2c=c2c).on


def test_ll128_over_the_network_at_its_boundaries():
    assert _net((2, 16, 5), "PXN") is False and _net((2, 17, 0), "PXN") is True
    assert _net((2, 17, 0), "PXN", caps=(89, 89)) is False  # PXN needs sm90: 89 is below
    assert _net((2, 17, 0), "PXN", caps=(90, 90)) is True
    assert _net((2, 27, 3), "PXN", c2c="0") is True and _net((2, 27, 4), "PXN", c2c="0") is True
    assert _net((2, 27, 5), "PXN", c2c="0") is False and _net((2, 27, 5), "PXN", c2c="1") is True
    assert _net((2, 27, 3), "P2C", c2c="0") is False and _net((2, 27, 3), "P2C") is True
    assert _net((2, 26, 6), "PXN") is True and _net((2, 27, 0), "P2C") is True
    assert _net((2, 27, 5), "P2C", c2c="") is True  # set but empty: NCCL's default 1
    assert _net((2, 28, 9), "PXN", c2c="0x0") is False and _net((2, 28, 9), "PXN", c2c="2") is True
    assert _net((2, 28, 9), "PXN", c2c="on") is None  # not an integer: NCCL's reading unknown
    assert _net((2, 28, 9), "PXB", caps=None) is None and _net((2, 28, 9), "PXN", caps=None) is None
    assert _net((2, 28, 9), "PHB", caps=None) is False  # off whatever the GPUs
    assert _net((2, 25, 1), "P2C") is None  # 2.25 has no P2C path type


def test_ll128_architecture_boundaries():
    assert _on((2, 28, 9), caps=(69, 69)) is False and _on((2, 28, 9), caps=(70, 70)) is True
    assert _on((2, 8, 2), caps=(80, 80), nvlink_direct=True) is None  # older than any rule read


def test_the_safety_rule_reads_nccl_ll128_c2c_from_the_settings():
    node = NodeFacts(links=ONE_GPU, compute_capabilities=(90,), over_network=True, net_path="PXN")
    assert ll128_hazard({"NCCL_PROTO": "LL128"}, node, "2.28.9") is None  # NCCL keeps it on
    hazard = ll128_hazard({"NCCL_PROTO": "LL128", "NCCL_LL128_C2C": "0"}, node, "2.28.9")
    assert hazard is not None and hazard.on is False
    assert codes({"NCCL_PROTO": "LL128", "NCCL_LL128_C2C": "0"}, "2.28.9", node=node) == {
        ("error", "ll128-without-nvlink")
    }
