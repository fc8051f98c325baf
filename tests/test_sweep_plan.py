"""The planner: a new pool only when a once-per-process setting changes (table-driven)."""

from pathlib import Path

import pytest

from ncclprobe.errors import UsageProblem
from ncclprobe.sweep.plan import Config, SweepSpec, build_grid, plan_pools, skip_equivalent_levels


def _pools(grid):
    return [[c.config_id for c in pool.configs] for pool in plan_pools(build_grid(grid))]


@pytest.mark.parametrize(
    "grid,expected",
    [
        # per-communicator variables only: one pool for everything
        (
            {"NCCL_PROTO": ("default", "LL", "Simple")},
            [["default", "NCCL_PROTO=LL", "NCCL_PROTO=Simple"]],
        ),
        (
            {"NCCL_PROTO": ("LL",), "NCCL_ALGO": ("Ring", "Tree")},
            [["NCCL_ALGO=Ring,NCCL_PROTO=LL", "NCCL_ALGO=Tree,NCCL_PROTO=LL"]],
        ),
        # a once-per-process variable splits pools by its value
        ({"NCCL_P2P_LEVEL": ("default", "SYS")}, [["default"], ["NCCL_P2P_LEVEL=SYS"]]),
        (
            {"NCCL_PROTO": ("default", "LL"), "NCCL_P2P_LEVEL": ("default", "PHB")},
            [
                ["default", "NCCL_PROTO=LL"],
                ["NCCL_P2P_LEVEL=PHB", "NCCL_P2P_LEVEL=PHB,NCCL_PROTO=LL"],
            ],
        ),
        # two process-scope variables: one pool per combination
        (
            {"NCCL_BUFFSIZE": ("default", "8388608"), "NCCL_SHM_DISABLE": ("0", "1")},
            [
                ["NCCL_SHM_DISABLE=0"],
                ["NCCL_SHM_DISABLE=1"],
                ["NCCL_BUFFSIZE=8388608,NCCL_SHM_DISABLE=0"],
                ["NCCL_BUFFSIZE=8388608,NCCL_SHM_DISABLE=1"],
            ],
        ),
        # unknown NCCL variables are assumed once per process (the safe side)
        ({"NCCL_SOMETHING_NEW": ("a", "b")}, [["NCCL_SOMETHING_NEW=a"], ["NCCL_SOMETHING_NEW=b"]]),
        ({}, [["default"]]),
    ],
)
def test_pools_follow_the_knowledge_table(grid, expected):
    assert _pools(grid) == expected


def test_grid_puts_all_default_first_and_has_every_combination():
    configs = build_grid({"NCCL_ALGO": ("Ring", "default"), "NCCL_PROTO": ("LL", "default", "LL")})
    assert configs[0].settings == {}
    assert len(configs) == 4  # duplicates in a value list count once
    assert {c.config_id for c in configs} == {
        "default",
        "NCCL_PROTO=LL",
        "NCCL_ALGO=Ring",
        "NCCL_ALGO=Ring,NCCL_PROTO=LL",
    }


def test_config_splits_scopes():
    config = Config({"NCCL_PROTO": "LL", "NCCL_P2P_LEVEL": "SYS", "NCCL_BUFFSIZE": "1048576"})
    assert config.comm_settings == {"NCCL_PROTO": "LL"}
    assert config.process_settings == {"NCCL_P2P_LEVEL": "SYS", "NCCL_BUFFSIZE": "1048576"}


def test_equivalent_levels_are_measured_once_with_a_reason():
    configs = build_grid(
        {"NCCL_P2P_LEVEL": ("default", "PIX", "PXB", "PHB", "SYS"), "NCCL_PROTO": ("default", "LL")}
    )
    keep, skips = skip_equivalent_levels(configs, [["LOC"], ["NVL", "PIX", "PXB"], ["PHB", "SYS"]])
    kept = {c.config_id for c in keep}
    assert "NCCL_P2P_LEVEL=PIX" in kept and "NCCL_P2P_LEVEL=PXB" not in kept
    assert (
        "NCCL_P2P_LEVEL=PHB,NCCL_PROTO=LL" in kept
        and "NCCL_P2P_LEVEL=SYS,NCCL_PROTO=LL" not in kept
    )
    assert "default" in kept and "NCCL_PROTO=LL" in kept
    by_id = {s.config.config_id: s for s in skips}
    assert set(by_id) == {
        "NCCL_P2P_LEVEL=PXB",
        "NCCL_P2P_LEVEL=SYS",
        "NCCL_P2P_LEVEL=PXB,NCCL_PROTO=LL",
        "NCCL_P2P_LEVEL=SYS,NCCL_PROTO=LL",
    }
    assert (
        by_id["NCCL_P2P_LEVEL=SYS,NCCL_PROTO=LL"].measured_as == "NCCL_P2P_LEVEL=PHB,NCCL_PROTO=LL"
    )
    assert "same GPU pairs" in by_id["NCCL_P2P_LEVEL=SYS"].reason


@pytest.mark.parametrize(
    "grid,needle",
    [
        ({"NCCL_PROTO": ("LL", "Fast")}, "unknown token 'Fast'"),
        ({"NCCL_ALGO": ("Ringg",)}, "Ringg"),
        ({"NCCL_P2P_LEVEL": ("sys",)}, "did you mean SYS"),
        ({"NCCL_SHM_DISABLE": ("2",)}, "NCCL_SHM_DISABLE='2'"),
        ({"GLOO_THING": ("1",)}, "only NCCL_"),
        ({"NCCL_DEBUG": ("WARN",)}, "cannot be swept"),  # would hide NCCL's proof lines
        ({"NCCL_DEBUG_SUBSYS": ("INIT",)}, "cannot be swept"),
        (
            {"NCCL_DEBUG_FILE": ("/tmp/x",)},
            "cannot be swept",
        ),  # the sweep reads each rank's own log
    ],
)
def test_spec_rejects_bad_values_before_anything_runs(grid, needle):
    with pytest.raises(UsageProblem) as info:
        SweepSpec(grid=grid, sizes=(8,))
    assert needle in str(info.value)


def test_spec_round_trips_through_json():
    spec = SweepSpec(
        grid={"NCCL_PROTO": ("default", "LL")}, sizes=(8, 1024), in_place=(True,), modes=("eager",)
    )
    assert SweepSpec.from_json(spec.to_json()) == spec


TOPO = Path(__file__).parent / "fixtures" / "topo"


@pytest.mark.parametrize(
    "fixture,measured,skipped",
    [
        # 4 PCIe GPUs: a PIX pair, a PXB pair, SYS across sockets, no PHB path: PHB = PXB, NVL = LOC
        (
            "4gpu_pxb_pix_sys_tabs_no_legend_nccl667.txt",
            ["LOC", "PIX", "PXB", "SYS"],
            ["NVL", "PHB"],
        ),
        # 2 GPUs behind one host bridge: only "below PHB" and "PHB or further" differ
        ("rtx5090_2gpu_phb_tabs.txt", ["LOC", "PHB"], ["NVL", "PIX", "PXB", "SYS"]),
        # 8 H100 on NVSwitch: every level from NVL up connects all pairs
        ("aws_p5_8x_h100_nv18_no_nic_rows.txt", ["LOC", "NVL"], ["PIX", "PXB", "PHB", "SYS"]),
    ],
)
def test_real_topologies_measure_each_distinct_level_once(fixture, measured, skipped):
    from ncclprobe.evidence.node.topo import parse_topo
    from ncclprobe.sweep.setup import describe_topology

    path = TOPO / fixture
    head, groups = describe_topology(parse_topo(path.read_text()))
    assert head["gpu_count"] >= 2
    levels = ("default", "LOC", "NVL", "PIX", "PXB", "PHB", "SYS")
    keep, skips = skip_equivalent_levels(build_grid({"NCCL_P2P_LEVEL": levels}), groups)
    assert [c.settings.get("NCCL_P2P_LEVEL", "default") for c in keep] == ["default"] + measured
    assert sorted(s.config.settings["NCCL_P2P_LEVEL"] for s in skips) == sorted(skipped)


def test_unknown_links_measure_every_level():
    from ncclprobe.evidence.node.topo import GpuInfo, Topology
    from ncclprobe.sweep.setup import describe_topology

    topo = Topology(gpus=[GpuInfo(0), GpuInfo(1)], gpu_links=[["X", None], [None, "X"]])
    assert describe_topology(topo)[1] is None


def test_lint_runs_over_every_configuration_before_the_sweep():
    from ncclprobe.nccl.node import NO_NVLINK, NVLINK_ALL, NodeFacts
    from ncclprobe.sweep.setup import lint_findings

    configs = build_grid(
        {
            "NCCL_PROTO": ("default", "LL128", "^LL"),
            "NCCL_BUFSIZE": ("1024",),
            "NCCL_P2P_LEVEL": ("P2C",),
        }
    )

    def flagged(backend, node, version="2.28.9"):
        out = {}
        for finding in lint_findings(configs, backend, node, version):
            out.setdefault((finding["code"], finding["severity"]), []).extend(finding["config_ids"])
        return out

    on_pcie = flagged("nccl", NodeFacts(links=NO_NVLINK))
    assert sorted(on_pcie[("ll128-without-nvlink", "error")]) == [  # named, and through ^LL
        "NCCL_BUFSIZE=1024,NCCL_P2P_LEVEL=P2C,NCCL_PROTO=LL128",
        "NCCL_BUFSIZE=1024,NCCL_P2P_LEVEL=P2C,NCCL_PROTO=^LL",
    ]
    assert len(on_pcie[("unknown-variable", "warning")]) == 3  # the typo, in every configuration
    hopper = NodeFacts(links=NVLINK_ALL, compute_capabilities=(90, 90))
    assert set(flagged("nccl", hopper)) == {("unknown-variable", "warning")}
    assert set(flagged("gloo", None)) == {("unknown-variable", "warning")}  # no NCCL links on gloo
    assert (
        len(flagged("nccl", hopper, "2.26.6")[("p2p-level-too-new", "error")]) == 3
    )  # the version in use


def test_lint_findings_reach_the_results_header_and_its_notes(tmp_path):
    from ncclprobe.sweep import session

    spec = SweepSpec(grid={"NCCL_BUFSIZE": ("default", "1024")}, sizes=(8,), backend="gloo")
    job = session.new_job(spec, {}, str(tmp_path / "r.jsonl"), ["ncclprobe", "sweep"])
    assert [(f["code"], f["config_ids"]) for f in job.header["lint"]] == [
        ("unknown-variable", ["NCCL_BUFSIZE=1024"])
    ]
    assert any("did you mean NCCL_BUFFSIZE" in note for note in job.header["notes"])
    assert not (tmp_path / "r.jsonl").exists()  # nothing written before the run


def test_sizes_must_be_whole_elements_so_size_bytes_is_what_moved():
    SweepSpec(grid={}, sizes=(2, 6), dtypes=("bfloat16",))
    with pytest.raises(
        UsageProblem, match="size 6 bytes is not a whole number of float32 elements"
    ):
        SweepSpec(grid={}, sizes=(8, 6), dtypes=("float32",))
