"""recommend on hand-made result sets whose right answer is known."""

from __future__ import annotations

from pathlib import Path

import pytest

from ncclprobe.errors import UsageProblem
from ncclprobe.nccl.values import forcing_ll128
from ncclprobe.recommend import build_recommendation
from ncclprobe.recommend.workload import from_sizes, from_trace
from tests.data.resultsets import SIZES, config, curve, engine_trace, scaled, write_set

DEFAULT = curve(20.0, 0.05)
LL = {"NCCL_PROTO": "LL"}


def test_clear_winner_small_sizes_global_follows_the_workload(tmp_path):
    path = write_set(
        tmp_path / "r.jsonl", [config({}, DEFAULT), config(LL, scaled(DEFAULT, 0.6, 1.3))]
    )
    small = build_recommendation([path], workload=from_sizes("4K,16K"))
    assert small.env == LL
    assert small.overall.gain == pytest.approx(0.4)
    chosen = {c.size_bytes: c.chosen for c in small.per_size}
    assert chosen == {s: ("NCCL_PROTO=LL" if s <= 1 << 16 else "default") for s in SIZES}
    assert [(r.min_size_bytes, r.max_size_bytes, r.config_id) for r in small.ranges] == [
        (1 << 10, 1 << 16, "NCCL_PROTO=LL"),
        (1 << 18, 1 << 20, "default"),
    ]
    large = build_recommendation([path], workload=from_sizes("1M"))
    assert large.env == {} and large.overall.best_config_id == "default"


def test_noisy_tie_recommends_nothing(tmp_path):
    noisy_default = scaled(DEFAULT, 1, 1, spread=0.10)
    path = write_set(
        tmp_path / "r.jsonl",
        [config({}, noisy_default), config(LL, scaled(DEFAULT, 0.96, 0.96, spread=0.10))],
    )
    rec = build_recommendation([path])
    assert rec.overall.best_config_id == "NCCL_PROTO=LL"
    assert rec.env == {} and not rec.overall.significant
    assert all(c.fastest == "NCCL_PROTO=LL" and not c.significant for c in rec.per_size)
    assert any("inside the noise" in note for note in rec.notes)


def test_tight_spread_but_below_the_floor_is_not_a_change(tmp_path):
    path = write_set(
        tmp_path / "r.jsonl",
        [
            config({}, scaled(DEFAULT, 1, 1, spread=0.001)),
            config(LL, scaled(DEFAULT, 0.97, 0.97, spread=0.001)),
        ],
    )
    assert build_recommendation([path]).env == {}
    assert build_recommendation([path], min_gain=0.02).env == LL


def test_wrong_result_winner_is_excluded_with_its_reason(tmp_path):
    tree = {"NCCL_ALGO": "Tree"}
    path = write_set(
        tmp_path / "r.jsonl",
        [
            config({}, DEFAULT),
            config(LL, scaled(DEFAULT, 0.8, 0.8)),
            config(tree, scaled(DEFAULT, 0.3, 0.3), wrong={1 << 14: 12}),
        ],
    )
    rec = build_recommendation([path])
    assert rec.env == LL
    (excluded,) = rec.measurements.excluded
    assert excluded.config_id == "NCCL_ALGO=Tree" and excluded.status == "wrong"
    assert "16K" in excluded.reason and "12 wrong elements" in excluded.reason
    assert "NCCL_ALGO=Tree" not in rec.measurements.curves


def test_hung_and_ignored_configurations_are_excluded(tmp_path):
    path = write_set(
        tmp_path / "r.jsonl",
        [
            config({}, DEFAULT),
            config(
                LL,
                scaled(DEFAULT, 0.5, 0.5),
                status="ignored",
                reason="NCCL_PROTO not seen by rank 1",
            ),
            config({"NCCL_ALGO": "Tree"}, {}, status="hang", reason="silent for 60 s"),
        ],
    )
    rec = build_recommendation([path])
    assert rec.env == {}
    reasons = {e.config_id: (e.status, e.reason) for e in rec.measurements.excluded}
    assert reasons == {
        "NCCL_PROTO=LL": (
            "ignored",
            "the settings did not take effect: NCCL_PROTO not seen by rank 1",
        ),
        "NCCL_ALGO=Tree": ("hang", "hung: silent for 60 s"),
    }


LL128 = {"NCCL_PROTO": "LL128"}


def test_ll128_on_pcie_refused_without_the_flag(tmp_path):
    path = write_set(
        tmp_path / "r.jsonl",
        [config({}, DEFAULT), config(LL128, scaled(DEFAULT, 0.5, 0.5))],
        nvlink=False,
    )
    rec = build_recommendation([path])
    assert rec.env == {}
    assert "NCCL_PROTO=LL128" in rec.refused and "no NVLink" in rec.refused["NCCL_PROTO=LL128"][0]
    assert build_recommendation([path], allow_ll128=True).env == LL128


def test_ll128_with_the_flag_still_needs_verified_results(tmp_path):
    path = write_set(
        tmp_path / "r.jsonl",
        [config({}, DEFAULT), config(LL128, scaled(DEFAULT, 0.5, 0.5), checked=False)],
        nvlink=None,
    )
    rec = build_recommendation([path], allow_ll128=True)
    assert rec.env == {} and "did not verify" in rec.refused["NCCL_PROTO=LL128"][0]


HOPPER_NVSWITCH = {"links": "nvlink-all", "compute_capabilities": [90, 90]}


def test_ll128_where_nccl_keeps_it_on_needs_no_flag(tmp_path):
    path = write_set(
        tmp_path / "r.jsonl",
        [config({}, DEFAULT), config(LL128, scaled(DEFAULT, 0.5, 0.5))],
        nvlink=True,
        node=HOPPER_NVSWITCH,
    )
    assert build_recommendation([path]).env == LL128


@pytest.mark.parametrize(
    "node, why",
    [
        (
            {"links": "nvlink-partial", "compute_capabilities": [86, 86]},
            "some hop is PCIe",
        ),  # bridged RTX 3090 pairs
        ({"links": "nvlink-all", "compute_capabilities": [80, 90]}, "the GPUs differ"),
        (None, "nothing shows"),  # an older file: "NVLink yes" says nothing about every hop
    ],
)
def test_ll128_refused_where_nccl_keeps_it_off_although_nvlink_is_there(tmp_path, node, why):
    path = write_set(
        tmp_path / "r.jsonl",
        [config({}, DEFAULT), config(LL128, scaled(DEFAULT, 0.5, 0.5))],
        nvlink=True,
        node=node,
    )
    rec = build_recommendation([path])
    assert rec.env == {} and why in rec.refused["NCCL_PROTO=LL128"][0]


@pytest.mark.parametrize(
    "value, forced",
    [
        ("LL128", True),
        ("LL,LL128,Simple", True),
        ("^LL", True),
        ("^LL128", False),
        ("LL", False),
        ("Simple", False),
        ("^LL128;allreduce:LL128", True),
        ("ll128", True),
    ],
)
def test_which_proto_values_force_ll128(value, forced):
    assert bool(forcing_ll128(value)) is forced


def test_lint_errors_are_refused(tmp_path):
    bad = {
        "NCCL_P2P_LEVEL": "sys"
    }  # lowercase: NCCL ignores it silently, the knowledge table says so
    path = write_set(
        tmp_path / "r.jsonl", [config({}, DEFAULT), config(bad, scaled(DEFAULT, 0.5, 0.5))]
    )
    rec = build_recommendation([path])
    assert rec.env == {} and any("lint error" in r for r in rec.refused["NCCL_P2P_LEVEL=sys"])


def test_trace_workload_weighs_the_global_choice(tmp_path):
    path = write_set(
        tmp_path / "r.jsonl", [config({}, DEFAULT), config(LL, scaled(DEFAULT, 0.6, 1.3))]
    )
    workload = from_trace(engine_trace({14336: 640, 1 << 20: 1}))
    assert workload.counts == {
        14336: 640.0,
        1 << 20: 1.0,
    }  # the baseline run's 1M x 1000 is not the workload
    assert build_recommendation([path], workload=workload).env == LL
    heavy = from_trace(engine_trace({14336: 1, 1 << 20: 640}))
    assert build_recommendation([path], workload=heavy).env == {}


def test_weighted_totals_interpolate_between_measured_sizes(tmp_path):
    path = write_set(
        tmp_path / "r.jsonl", [config({}, DEFAULT), config(LL, scaled(DEFAULT, 0.6, 1.3))]
    )
    rec = build_recommendation([path], workload=from_sizes("2K"))
    t1, t4 = DEFAULT[1 << 10][0], DEFAULT[1 << 12][0]
    assert rec.overall.totals_us["default"][0] == pytest.approx(
        (t1 * t4) ** 0.5
    )  # halfway in log-log


def test_no_default_configuration_is_a_usage_problem(tmp_path):
    path = write_set(tmp_path / "r.jsonl", [config(LL, DEFAULT)])
    with pytest.raises(UsageProblem, match="no all-default all_reduce run and fewer than two"):
        build_recommendation([path])


def test_two_files_merge_and_widen_the_spread(tmp_path):
    a = write_set(
        tmp_path / "a.jsonl", [config({}, DEFAULT), config(LL, scaled(DEFAULT, 0.6, 0.6))]
    )
    b = write_set(tmp_path / "b.jsonl", [config(LL, scaled(DEFAULT, 0.7, 0.7))])
    rec = build_recommendation([a, b])
    point = rec.measurements.curves["NCCL_PROTO=LL"].points[1 << 10]
    assert point.p10_us == pytest.approx(DEFAULT[1 << 10][1] * 0.6)
    assert point.p90_us == pytest.approx(DEFAULT[1 << 10][2] * 0.7)
    assert rec.env == LL


def test_files_with_different_rank_counts_are_not_merged(tmp_path):
    """A 2-rank and an 8-rank default averaged into one curve describe neither job."""
    a = write_set(
        tmp_path / "a.jsonl", [config({}, DEFAULT), config(LL, scaled(DEFAULT, 0.6, 0.6))]
    )
    b = write_set(tmp_path / "b.jsonl", [config({}, DEFAULT)], nranks=8)
    with pytest.raises(
        UsageProblem, match=r"different rank counts: .*a.jsonl \(2 ranks\), .*b.jsonl \(8 ranks\)"
    ):
        build_recommendation([a, b])


def test_gloo_measurements_never_recommend_an_nccl_setting(tmp_path):
    path = write_set(
        tmp_path / "r.jsonl",
        [config({}, DEFAULT), config(LL, scaled(DEFAULT, 0.5, 0.5))],
        backend="gloo",
    )
    rec = build_recommendation([path])
    assert rec.env == {} and "gloo" in rec.refused["NCCL_PROTO=LL"][0]


def test_imported_nccl_tests_runs_have_no_spread_so_the_floor_decides(tmp_path):
    """nccl-tests prints one time per size: no p10/p90. Two imported runs (default and LL)."""
    flat = {s: (t, t, t) for s, (t, _, _) in DEFAULT.items()}
    default = write_set(tmp_path / "d.jsonl", [config({}, flat)], kind="nccl-tests", trials=1)
    close = write_set(
        tmp_path / "c.jsonl", [config(LL, scaled(flat, 0.96, 0.96))], kind="nccl-tests", trials=1
    )
    rec = build_recommendation([default, close])
    assert rec.env == {} and any("no trial spread" in n for n in rec.notes)
    clear = write_set(
        tmp_path / "l.jsonl", [config(LL, scaled(flat, 0.8, 0.8))], kind="nccl-tests", trials=1
    )
    assert build_recommendation([default, clear]).env == LL


def test_a_graphed_workload_measured_eagerly_says_so(tmp_path):
    path = write_set(
        tmp_path / "r.jsonl", [config({}, DEFAULT), config(LL, scaled(DEFAULT, 0.6, 1.3))]
    )
    trace = engine_trace({14336: 64})
    for run in trace["runs"]:
        for entry in run["collectives"]["sizes"]:
            entry["graph"] = "verify"
    rec = build_recommendation([path], workload=from_trace(trace))
    assert rec.workload.graphed_share == 1.0
    assert any("ran inside CUDA graphs" in note and "--mode graph" in note for note in rec.notes)


def test_share_gpu_results_from_the_h200_never_recommend_a_setting():
    """A real `sweep --share-gpu 2` on the H200: the proofs are real, the timings are two processes
    time-slicing one GPU over sockets. Before this rule, recommend suggested Tree/LL at 4K from them."""
    path = (
        Path(__file__).resolve().parent.parent
        / "examples"
        / "results"
        / "h200_share_gpu2_sweep.jsonl"
    )
    rec = build_recommendation([path])
    assert rec.env == {}
    assert len(rec.refused) == 8 and all(
        "--share-gpu" in reasons[0] for reasons in rec.refused.values()
    )
