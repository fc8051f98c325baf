"""NCCL's topology rules as read in its source (issue 17 §3): how NVLink joins the GPUs, when NCCL
keeps LL128 on by itself, and the one safety rule that lint, recommend, run-engine and diagnose
apply with them. Pure functions on real `nvidia-smi topo -m` fixtures and hand-built link sets."""

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from ncclprobe.errors import UsageProblem
from ncclprobe.evidence.node.topo import node_facts, parse_topo
from ncclprobe.nccl.knob_row import Scope
from ncclprobe.nccl.knobs import KNOBS, effective_scope, explain, proof_scope
from ncclprobe.nccl.ll128 import ll128_default
from ncclprobe.nccl.node import (
    NO_NVLINK,
    NVLINK_ALL,
    NVLINK_PARTIAL,
    NVLINK_RING,
    ONE_GPU,
    NodeFacts,
    classify_links,
)
from ncclprobe.nccl.safety import check_job_settings
from ncclprobe.nccl.version import parse_version

TOPO = Path(__file__).parent / "fixtures" / "topo"
BRIDGED_3090 = TOPO / "rtx3090_4gpu_nvlink_bridge_pairs_nv4_phb_node.txt"


def _facts(name: str, **kw) -> NodeFacts:
    return node_facts(parse_topo((TOPO / name).read_text()), **kw)


@pytest.mark.parametrize(
    "name, gpus, links",
    [
        (
            "rtx3090_4gpu_nvlink_bridge_pairs_nv4_phb_node.txt",
            None,
            NVLINK_PARTIAL,
        ),  # "NVLink yes", pairs only
        (
            "rtx3090_4gpu_nvlink_bridge_pairs_nv4_phb_node.txt",
            [0, 2],
            NVLINK_ALL,
        ),  # one bridged pair
        ("rtx3090_4gpu_nvlink_bridge_pairs_nv4_phb_node.txt", [0, 1], NO_NVLINK),
        ("dgx_a100_80g_8gpu_nv12_4nic.txt", None, NVLINK_ALL),
        ("aws_g6e12xlarge_4x_l40s_node.txt", None, NO_NVLINK),
        ("h200_1gpu_ansi_escapes.txt", None, ONE_GPU),
    ],
)
def test_how_nvlink_joins_the_gpus_of_real_topologies(name, gpus, links):
    assert _facts(name, gpus=gpus).links == links


def _types(n: int, nvlink: set[tuple[int, int]]) -> list[list[str]]:
    """NCCL path types for n GPUs with NVLink on `nvlink` pairs, NVB through one shared neighbour."""
    linked = nvlink | {(j, i) for i, j in nvlink}
    types = [
        ["LOC" if i == j else "NVL" if (i, j) in linked else "PHB" for j in range(n)]
        for i in range(n)
    ]
    for i in range(n):
        for j in range(n):
            if types[i][j] == "PHB" and any(
                (i, k) in linked and (k, j) in linked for k in range(n)
            ):
                types[i][j] = "NVB"
    return types


def test_an_nvlink_ring_through_every_gpu_is_found_when_not_every_pair_is_nvlink():
    cube_mesh = {
        (0, 1),
        (0, 2),
        (0, 3),
        (0, 4),
        (1, 2),
        (1, 3),
        (1, 5),
        (2, 3),
        (2, 6),
        (3, 7),
        (4, 5),
        (4, 6),
        (4, 7),
        (5, 6),
        (5, 7),
        (6, 7),
    }  # DGX-1's V100 links
    assert classify_links(_types(8, cube_mesh), list(range(8))) == NVLINK_ALL  # the rest are NVB
    ring = {(i, (i + 1) % 8) for i in range(8)}  # GPU 0 and 4 share no neighbour: PCIe
    assert classify_links(_types(8, ring), list(range(8))) == NVLINK_RING
    chain = {(0, 1), (1, 2), (2, 3)}  # 0-3 is PCIe, but 0-2 and 1-3 are NVB: the ring 0-1-3-2-0
    assert classify_links(_types(4, chain), [0, 1, 2, 3]) == NVLINK_RING
    triangles = {(0, 1), (1, 2), (0, 2), (3, 4), (4, 5), (3, 5)}  # two NVLink islands
    assert classify_links(_types(6, triangles), list(range(6))) == NVLINK_PARTIAL
    assert classify_links([["LOC", None], [None, "LOC"]], [0, 1]) is None


@pytest.mark.parametrize(
    "links, caps, version, on",
    [
        (NVLINK_PARTIAL, (86,) * 4, "2.28.9", False),  # the bridged RTX 3090 box: some hop is PCIe
        (NO_NVLINK, (89, 89), "2.28.9", False),
        (NVLINK_RING, (70,) * 8, "2.28.9", None),  # depends on the ring NCCL's search picks
        (None, (90, 90), "2.28.9", None),
        (NVLINK_ALL, (86, 86), "2.24.3", False),  # switch (minCompCap): 70, 80, 90 only
        (NVLINK_ALL, (86, 86), "2.26.6", False),  # 2.25-2.26 add 100 and 120
        (NVLINK_ALL, (86, 86), "2.27.3", True),  # 2.27+: any sm70+
        (NVLINK_ALL, (100, 100), "2.24.3", False),
        (NVLINK_ALL, (100, 100), "2.25.1", True),
        (NVLINK_ALL, (120, 120), "2.26.2", True),
        (NVLINK_ALL, (80, 80), "2.21.5", True),
        (NVLINK_ALL, (80, 80), None, None),  # before 2.18.3 NVB pairs count as PCIe: not known
        (NVLINK_ALL, (86, 86), None, None),  # good only from 2.27
        (NVLINK_ALL, (60, 60), "2.28.9", False),  # older than Volta
        (NVLINK_ALL, (80, 90), "2.30.7", False),  # GPU types differ
        (NVLINK_ALL, (90, 100), "2.29.7", False),
        (NVLINK_ALL, (90, 100), "2.30.7", True),  # 2.30: mixed is fine from sm90 on
        (NVLINK_ALL, (90, 100), None, None),
        (NVLINK_ALL, None, "2.28.9", None),  # compute capability unknown
        (ONE_GPU, (90,), "2.28.9", True),
    ],
)
def test_when_nccl_keeps_ll128_on_by_itself(links, caps, version, on):
    verdict = ll128_default(
        NodeFacts(links=links, compute_capabilities=caps), parse_version(version)
    )
    assert verdict.on is on and verdict.why


def test_direct_nvlink_on_sm80_is_good_at_every_version():
    direct = NodeFacts(links=NVLINK_ALL, compute_capabilities=(80, 80), nvlink_direct=True)
    assert ll128_default(direct, None).on is True


def test_ranks_meeting_over_the_network_get_ll128_by_the_path_type_of_that_hop():
    """tuning.cc: the network hop within PXB, or within PXN on sm90+ (2.17+); a topology that does
    not give that hop's path type decides nothing (not known, never off)."""

    def over_net(net, caps=(90,)):
        node = NodeFacts(links=ONE_GPU, compute_capabilities=caps, over_network=True, net_path=net)
        return ll128_default(node, (2, 28, 9)).on

    assert over_net(None) is None  # the evidence lacks the hop: never an error
    assert over_net("PXB") is True and over_net("PXN") is True
    assert over_net("PXN", caps=(80,)) is False and over_net("PHB") is False
    assert ll128_default(None, (2, 28, 9)).on is None


def test_knobs_lint_takes_a_topology_and_refuses_forced_ll128_on_the_bridged_3090_box():
    """The issue's case: the file reads "NVLink yes", yet NCCL keeps LL128 off there."""
    from ncclprobe.cli import cli

    args = [
        "knobs",
        "--lint",
        "--topo",
        str(BRIDGED_3090),
        "--nccl-version",
        "2.28.9",
        "--format",
        "json",
    ]
    result = CliRunner().invoke(cli, args, env={"NCCL_PROTO": "^LL"})
    assert result.exit_code == 1, result.output
    assert '"ll128-without-nvlink"' in result.output and "some hop is PCIe" in result.output
    assert CliRunner().invoke(cli, args, env={"NCCL_PROTO": "^LL,LL128"}).exit_code == 0
    assert (
        CliRunner().invoke(cli, ["knobs", "--lint", "--nvlink"]).exit_code == 2
    )  # the old flag is gone


def test_every_row_records_the_nccl_tags_its_facts_were_read_at():
    for row in KNOBS.values():
        assert row.checked_at, row.name
        assert all(re.fullmatch(r"v2\.\d+\.\d+-1", tag) for tag in row.checked_at), row.name


def test_versions_read_in_nccls_source():
    assert (
        KNOBS["NCCL_TUNER_CONFIG_FILE"].since == "2.27.5"
        and "nNodes,nRanks" in KNOBS["NCCL_TUNER_CONFIG_FILE"].syntax
    )
    assert "2.23+" in KNOBS["NCCL_P2P_DISABLE"].log_proof
    assert (
        "(2.28+)" in KNOBS["NCCL_TUNER_PLUGIN"].summary
        and "stays failed" in KNOBS["NCCL_TUNER_PLUGIN"].risks[0]
    )
    assert KNOBS["NCCL_NO_CACHE"].since == "2.29.7"


def test_launch_mode_is_read_at_every_communicator_but_proven_once_per_process():
    row = explain("NCCL_LAUNCH_MODE")
    assert row["read"] == "communicator" and "only the first time" in row["read_when"]
    assert not row["case_sensitive"] and proof_scope("NCCL_LAUNCH_MODE") is Scope.PROCESS


def test_no_cache_lifts_only_nccl_param_caches_and_only_from_2_29_7():
    env = {"NCCL_NO_CACHE": "ALL"}
    assert effective_scope("NCCL_BUFFSIZE", env, (2, 29, 7)) is Scope.COMMUNICATOR
    assert (
        effective_scope("NCCL_BUFFSIZE", {"NCCL_NO_CACHE": "NCCL_BUFFSIZE"}, (2, 30, 7))
        is Scope.COMMUNICATOR
    )
    assert (
        effective_scope("NCCL_BUFFSIZE", {"NCCL_NO_CACHE": "BUFFSIZE"}, (2, 30, 7)) is Scope.PROCESS
    )
    assert effective_scope("NCCL_BUFFSIZE", env, (2, 29, 3)) is Scope.PROCESS
    assert effective_scope("NCCL_BUFFSIZE", env, None) is Scope.PROCESS  # unknown: the safe side
    assert effective_scope("NCCL_P2P_LEVEL", env, (2, 30, 7)) is Scope.PROCESS  # not an NCCL_PARAM


def test_the_planner_gives_each_value_logged_once_and_each_no_cache_value_its_own_pool():
    from ncclprobe.sweep.plan import build_grid, plan_pools

    pools = plan_pools(
        build_grid({"NCCL_LAUNCH_MODE": ("default", "GROUP"), "NCCL_PROTO": ("LL", "Simple")})
    )
    assert len(pools) == 2 and all(len(p.configs) == 2 for p in pools)
    assert (
        len(
            plan_pools(
                build_grid({"NCCL_NO_CACHE": ("default", "ALL"), "NCCL_BUFFSIZE": ("1", "2")})
            )
        )
        == 4
    )


PCIE = NodeFacts(links=NO_NVLINK)


def test_run_engine_settings_get_the_safety_rule_and_the_lint():
    def check(settings, node=PCIE, nccl_used=True, allow=False):
        return check_job_settings(
            settings,
            source="--env",
            node=node,
            nccl_version="2.28.9",
            nccl_used=nccl_used,
            allow_ll128=allow,
        )

    with pytest.raises(UsageProblem, match="unknown token 'LL129'"):
        check({"NCCL_PROTO": "LL129"}, nccl_used=False)  # rejected like sweep rejects it
    with pytest.raises(UsageProblem, match="--allow-ll128-without-nvlink"):
        check({"NCCL_PROTO": "LL128"})
    with pytest.raises(UsageProblem, match="nothing shows"):
        check({"NCCL_PROTO": "^LL"}, node=None)
    assert "check the run's correctness" in check({"NCCL_PROTO": "LL128"}, allow=True)[0]
    assert (
        check({"NCCL_PROTO": "LL128"}, nccl_used=False) == []
    )  # gloo: NCCL's links concern nothing
    bridged = node_facts(parse_topo(BRIDGED_3090.read_text()), compute_capabilities=[86] * 4)
    with pytest.raises(UsageProblem, match="some hop is PCIe"):
        check({"NCCL_PROTO": "LL,LL128,Simple"}, node=bridged)


def test_diagnose_names_unsafe_settings_once_across_runs():
    from ncclprobe.diagnose.settings.rules_safety import unsafe_settings
    from ncclprobe.evidence.bundle import Evidence

    runs = [
        {
            "label": "untuned",
            "mode": mode,
            "settings": {"NCCL_PROTO": "LL128", "NCCL_P2P_LEVEL": "sys"},
            "workers": [{"rank": r, "nccl_version": "2.28.9"} for r in range(2)],
        }
        for mode in ("baseline", "speculative")
    ]
    trace = {"config": {"backend": "nccl"}, "runs": runs, "node": PCIE.to_json()}
    found = unsafe_settings(Evidence.from_trace(trace))
    assert sorted((f.severity, f.evidence.get("lint", "ll128")) for f in found) == [
        ("error", "ll128"),
        ("error", "p2p-level-case"),
    ]
    assert "NCCL keeps LL128 off here" in next(f.title for f in found if "LL128" in f.title)
    clean = {**trace, "runs": [{**runs[0], "settings": {"NCCL_PROTO": "LL"}}]}
    assert type(unsafe_settings(Evidence.from_trace(clean))[0]).__name__ == "RuledOut"
