"""Per-collective recommendations and the one environment they share (recommend/collectives.py)."""

import pytest

from ncclprobe.recommend.collectives import build_recommendations
from ncclprobe.recommend.emit import env_snippet, tuner_csv
from tests.data.resultsets import config, curve, scaled, write_set

BASE = curve(10.0, 1.0, spread=0.01)
TREE = {"NCCL_ALGO": "Tree", "NCCL_PROTO": "Simple"}
RING = {"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple"}


def _set(tmp_path, ar_tree, ag_tree, ar_ring=1.0, ag_ring=1.0, nccl="2.28.9"):
    tmp_path.mkdir(exist_ok=True)
    configs = []
    for coll, tree, ring in (("all_reduce", ar_tree, ar_ring), ("all_gather", ag_tree, ag_ring)):
        configs += [
            config({}, BASE, collective=coll),
            config(TREE, scaled(BASE, tree, tree), collective=coll),
            config(RING, scaled(BASE, ring, ring), collective=coll),
        ]
    return write_set(tmp_path / "r.jsonl", configs, nccl=nccl)


def test_each_collective_is_recommended_and_one_setting_that_helps_all_is_exported(tmp_path):
    recs = build_recommendations([_set(tmp_path, 1.0, 1.0, ar_ring=0.6, ag_ring=0.7)])
    assert [r.measurements.collective for r in recs.recs] == ["all_reduce", "all_gather"]
    # NCCL_ALGO for the collectives measured faster with it, in NCCL's function order (2.24+)
    both = {**RING, "NCCL_ALGO": "allgather:Ring;allreduce:Ring"}
    assert recs.env == both and recs.change and not recs.conflicts
    assert [r.env["NCCL_ALGO"] for r in recs.recs] == ["allreduce:Ring", "allgather:Ring"]
    assert "export NCCL_ALGO='allgather:Ring;allreduce:Ring'" in env_snippet(recs)  # `;` quoted
    doc = recs.to_json()
    assert doc["env"] == both and [c["collective"] for c in doc["collectives"]] == [
        "all_reduce",
        "all_gather",
    ]


def _algo_only(tmp_path, ar_tree, ag_tree, nccl="2.28.9"):
    """A sweep of --algo default,Tree over all_reduce and all_gather (ag_tree None: all_gather's
    calls failed under Tree, as on NCCL 2.24+, and left no result)."""
    configs = [config({}, BASE), config({}, BASE, collective="all_gather")]
    configs.append(config({"NCCL_ALGO": "Tree"}, scaled(BASE, ar_tree, ar_tree)))
    if ag_tree is not None:
        times = scaled(BASE, ag_tree, ag_tree)
        configs.append(config({"NCCL_ALGO": "Tree"}, times, collective="all_gather"))
    return write_set(tmp_path / f"algo-{nccl}-{ag_tree}.jsonl", configs, nccl=nccl)


@pytest.mark.parametrize("ag_tree", [None, 1.0, 0.6])
def test_tree_faster_for_all_reduce_is_exported_for_all_reduce_alone(tmp_path, ag_tree):
    """NCCL_ALGO=Tree job-wide on 2.28.9 fails every all-gather call: the export names allreduce,
    and all_gather, which the per-collective form leaves as it was, counts at its default time."""
    recs = build_recommendations([_algo_only(tmp_path, 0.6, ag_tree)])
    assert recs.change and recs.env == {"NCCL_ALGO": "allreduce:Tree"}
    assert recs.gain == pytest.approx(0.2, abs=0.01)  # 40 % of all_reduce, half the total
    assert any("Tree only for all_reduce, measured faster with it" in n for n in recs.notes)
    assert "export NCCL_ALGO=allreduce:Tree" in env_snippet(recs)
    if ag_tree is not None:  # a result NCCL 2.28.9 cannot have produced is refused
        (reasons,) = recs.recs[1].refused.values()
        assert "lint error: NCCL_ALGO=Tree leaves allgather no algorithm" in reasons[0]


def test_a_list_that_changes_more_than_the_algorithm_cannot_be_scoped_away(tmp_path):
    """Tree with Simple: all_gather would run Simple too, never measured without Tree: no global
    change (all_reduce's own recommendation still names allreduce:Tree)."""
    recs = build_recommendations([_set(tmp_path, ar_tree=0.6, ag_tree=1.0)])
    assert not recs.change and recs.env == {}
    assert recs.recs[0].env == {**TREE, "NCCL_ALGO": "allreduce:Tree"}


def test_only_collectives_faster_beyond_the_noise_get_the_list(tmp_path):
    """all_gather 6 % faster with Ring (past the 5 % floor) shares it; 4 % faster does not."""
    inside = build_recommendations([_set(tmp_path / "a", 1.0, 1.0, ar_ring=0.6, ag_ring=0.96)])
    assert inside.env["NCCL_ALGO"] == "allreduce:Ring"
    past = build_recommendations([_set(tmp_path / "b", 1.0, 1.0, ar_ring=0.6, ag_ring=0.94)])
    assert past.env["NCCL_ALGO"] == "allgather:Ring;allreduce:Ring"


def test_before_2_24_the_export_is_job_wide_and_says_what_it_strands(tmp_path):
    recs = build_recommendations([_set(tmp_path, ar_tree=0.6, ag_tree=1.0, nccl="2.23.4")])
    assert recs.env == TREE
    note = next(n for n in recs.notes if "job-wide" in n)
    assert note.startswith("NCCL_ALGO=Tree is job-wide on NCCL 2.23.4")
    assert "leaves broadcast, reduce, all_gather, reduce_scatter none they can run" in note
    old = build_recommendations([_algo_only(tmp_path, 0.6, None, nccl="2.23.4")])
    assert not old.change  # all_gather unmeasured under a list it would get job-wide
    at = build_recommendations([_algo_only(tmp_path, 0.6, None, nccl="2.24.0")])
    assert at.env == {"NCCL_ALGO": "allreduce:Tree"}


def test_one_collective_exports_its_list_for_itself(tmp_path):
    recs = build_recommendations([_set(tmp_path, 0.6, 1.0)], collectives=["all_reduce"])
    doc = recs.to_json()
    assert doc["env"] == {**TREE, "NCCL_ALGO": "allreduce:Tree"}
    assert any("Tree only for all_reduce" in n for n in doc["notes"])
    assert "Tree only for all_reduce" in env_snippet(recs)


def test_a_conflict_prefers_the_tuner_csv_and_no_global_change_when_it_would_hurt(tmp_path):
    ring_ll = {"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL"}
    configs = []
    for coll, tree, ring, other in (("all_reduce", 0.3, 0.5, 1.3), ("all_gather", 1.4, 1.3, 0.7)):
        configs += [
            config({}, BASE, collective=coll),
            config(TREE, scaled(BASE, tree, tree), collective=coll),
            config(RING, scaled(BASE, ring, ring), collective=coll),
            config(ring_ll, scaled(BASE, other, other), collective=coll),
        ]
    recs = build_recommendations([write_set(tmp_path / "r.jsonl", configs)])
    assert recs.recs[0].env == {**TREE, "NCCL_ALGO": "allreduce:Tree"}
    assert recs.recs[1].env == {**ring_ll, "NCCL_ALGO": "allgather:Ring"}
    assert recs.conflicts and "all_reduce NCCL_ALGO=Tree" in recs.conflicts[0]
    assert recs.env == {} and not recs.change  # Ring saves 10 % summed but slows all_gather 30 %
    assert any("slower beyond the noise" in n and "tuner CSV" in n for n in recs.notes)
    text = tuner_csv(recs)
    rows = [line.split(",") for line in text.splitlines() if line and not line.startswith("#")]
    assert {(r[0], r[3]) for r in rows} == {("allreduce", "tree"), ("allgather", "ring")}
    assert "tuner CSV" in env_snippet(recs) and "export" not in env_snippet(recs).split("#")[0]


def test_a_conflict_that_hurts_no_one_still_exports_and_says_prefer_the_csv(tmp_path):
    recs = build_recommendations([_set(tmp_path, ar_tree=0.5, ag_tree=1.4, ag_ring=0.7)])
    assert recs.recs[0].env["NCCL_ALGO"] == "allreduce:Tree"
    assert recs.recs[1].env["NCCL_ALGO"] == "allgather:Ring"
    # Ring leaves all_reduce as it was: the export names all_gather alone
    assert recs.conflicts and recs.env == {**RING, "NCCL_ALGO": "allgather:Ring"} and recs.change
    assert any("prefer the tuner CSV" in n for n in recs.notes)


def test_one_collective_keeps_the_single_recommendation_json(tmp_path):
    recs = build_recommendations([_set(tmp_path, 1.0, 1.0, 0.6, 0.7)], collectives=["all_reduce"])
    doc = recs.to_json()
    assert doc["collective"] == "all_reduce" and "collectives" not in doc
    assert doc["env"] == {**RING, "NCCL_ALGO": "allreduce:Ring"}


def test_cli_recommend_every_collective(tmp_path):
    from click.testing import CliRunner

    from ncclprobe.cli import cli

    path = _set(tmp_path, ar_tree=0.3, ag_tree=1.4, ar_ring=1.3, ag_ring=0.7)
    result = CliRunner().invoke(cli, ["recommend", path], prog_name="ncclprobe")
    assert result.exit_code == 0, result.output
    assert "all_gather" in result.stdout and "all collectives: no global change" in result.stdout
    assert "best settings differ" in result.stdout


def test_a_list_no_collective_gains_from_on_its_own_is_no_global_change(tmp_path):
    """Ring saves 6.5 % summed beyond the noise, yet all_reduce's 10 % lies inside its spread and
    all_gather's 3 % under the floor: no collective was measured faster with it, none gets it."""
    configs = []
    for coll, factor, spread in (("all_reduce", 0.9, 0.115), ("all_gather", 0.97, 0.001)):
        configs += [
            config({}, BASE, collective=coll),
            config(RING, scaled(BASE, factor, factor, spread=spread), collective=coll),
        ]
    recs = build_recommendations([write_set(tmp_path / "r.jsonl", configs)])
    assert not recs.change and recs.env == {} and not recs.conflicts
    assert any(
        "made no collective its NCCL_ALGO governs faster on its own" in n for n in recs.notes
    )
    # its twin: all_reduce's spread clear of the default's, so it alone was measured faster
    configs[1] = config(RING, scaled(BASE, 0.9, 0.9, spread=0.05), collective="all_reduce")
    twin = build_recommendations([write_set(tmp_path / "twin.jsonl", configs)])
    assert twin.change and twin.env == {**RING, "NCCL_ALGO": "allreduce:Ring"}


def test_a_list_only_a_collective_that_cannot_run_it_gained_from_is_no_global_change(tmp_path):
    """2.28.9 fails all-gather calls under NCCL_ALGO=Tree: its "gain" is no measurement of Tree."""
    recs = build_recommendations([_algo_only(tmp_path, 1.0, 0.6)])
    assert not recs.change and recs.env == {}
    assert "NCCL_ALGO=Tree" in recs.recs[1].refused
