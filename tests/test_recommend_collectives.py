"""Per-collective recommendations and the one environment they share (recommend/collectives.py)."""

from ncclprobe.recommend.collectives import build_recommendations
from ncclprobe.recommend.emit import env_snippet, tuner_csv
from tests.data.resultsets import config, curve, scaled, write_set

BASE = curve(10.0, 1.0, spread=0.01)
TREE = {"NCCL_ALGO": "Tree", "NCCL_PROTO": "Simple"}
RING = {"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple"}


def _set(tmp_path, ar_tree, ag_tree, ar_ring=1.0, ag_ring=1.0):
    configs = []
    for coll, tree, ring in (("all_reduce", ar_tree, ar_ring), ("all_gather", ag_tree, ag_ring)):
        configs += [
            config({}, BASE, collective=coll),
            config(TREE, scaled(BASE, tree, tree), collective=coll),
            config(RING, scaled(BASE, ring, ring), collective=coll),
        ]
    return write_set(tmp_path / "r.jsonl", configs)


def test_each_collective_is_recommended_and_one_setting_that_helps_all_is_exported(tmp_path):
    recs = build_recommendations([_set(tmp_path, 0.6, 0.7)])
    assert [r.measurements.collective for r in recs.recs] == ["all_reduce", "all_gather"]
    assert (
        all(r.env == TREE for r in recs.recs)
        and recs.env == TREE
        and recs.change
        and not recs.conflicts
    )
    doc = recs.to_json()
    assert doc["env"] == TREE and [c["collective"] for c in doc["collectives"]] == [
        "all_reduce",
        "all_gather",
    ]


def test_a_conflict_prefers_the_tuner_csv_and_no_global_change_when_it_would_hurt(tmp_path):
    recs = build_recommendations(
        [_set(tmp_path, ar_tree=0.3, ag_tree=1.4, ar_ring=1.3, ag_ring=0.7)]
    )
    assert (
        recs.recs[0].env == TREE and recs.recs[1].env == RING
    )  # Tree saves 15 % summed, Ring saves none
    assert recs.conflicts and "all_reduce NCCL_ALGO=Tree" in recs.conflicts[0]
    assert recs.env == {} and not recs.change  # Tree slows all_gather by 40 %
    assert any("slower beyond the noise" in n and "tuner CSV" in n for n in recs.notes)
    text = tuner_csv(recs)
    rows = [line.split(",") for line in text.splitlines() if line and not line.startswith("#")]
    assert {(r[0], r[3]) for r in rows} == {("allreduce", "tree"), ("allgather", "ring")}
    assert "tuner CSV" in env_snippet(recs) and "export" not in env_snippet(recs).split("#")[0]


def test_a_conflict_that_hurts_no_one_still_exports_and_says_prefer_the_csv(tmp_path):
    recs = build_recommendations([_set(tmp_path, ar_tree=0.5, ag_tree=1.4, ag_ring=0.7)])
    assert recs.recs[0].env == TREE and recs.recs[1].env == RING
    assert recs.conflicts and recs.env == RING and recs.change  # Ring leaves all_reduce as it was
    assert any("prefer the tuner CSV" in n for n in recs.notes)


def test_one_collective_keeps_the_single_recommendation_json(tmp_path):
    recs = build_recommendations([_set(tmp_path, 0.6, 0.7)], collectives=["all_reduce"])
    doc = recs.to_json()
    assert doc["collective"] == "all_reduce" and doc["env"] == TREE and "collectives" not in doc


def test_cli_recommend_every_collective(tmp_path):
    from click.testing import CliRunner

    from ncclprobe.cli import cli

    path = _set(tmp_path, ar_tree=0.3, ag_tree=1.4, ar_ring=1.3, ag_ring=0.7)
    result = CliRunner().invoke(cli, ["recommend", path], prog_name="ncclprobe")
    assert result.exit_code == 0, result.output
    assert "all_gather" in result.stdout and "all collectives: no global change" in result.stdout
    assert "best settings differ" in result.stdout
