"""NCCL_ALGO as recommend exports it (recommend/scope.py): only for the collectives measured faster
with it, in NCCL 2.24+'s per-collective form; job-wide before 2.24, saying what it strands. Each rule
on its version boundary and its healthy twin."""

import pytest

from ncclprobe.nccl.lint import lint_env
from ncclprobe.recommend.scope import scope_algorithm

TREE = {"NCCL_ALGO": "Tree", "NCCL_PROTO": "Simple"}
STRANDED = "broadcast, reduce, all_gather, reduce_scatter"


@pytest.mark.parametrize("version", ["2.24.0", "2.24.3", "2.28.9"])
def test_from_2_24_the_list_is_scoped_to_the_collectives_measured_faster(version):
    scoped = scope_algorithm(TREE, ["all_reduce"], version)
    assert scoped.env == {"NCCL_ALGO": "allreduce:Tree", "NCCL_PROTO": "Simple"}
    (note,) = scoped.notes
    assert note.startswith("NCCL_ALGO=allreduce:Tree: Tree only for all_reduce, measured faster")
    assert f"NCCL_ALGO=Tree would leave {STRANDED} no algorithm they can run" in note
    assert not [f for f in lint_env(scoped.env, nccl_version=version) if f.severity == "error"]


@pytest.mark.parametrize("version", ["2.23.4", "2.23.99", "2.19.3"])
def test_before_2_24_the_list_stays_job_wide_and_names_what_it_strands(version):
    scoped = scope_algorithm(TREE, ["all_reduce"], version)
    assert scoped.env == TREE
    (note,) = scoped.notes
    assert f"NCCL_ALGO=Tree is job-wide on NCCL {version.removesuffix('.0')}" in note
    assert "(the per-collective form, NCCL_ALGO=allreduce:Tree, needs 2.24+)" in note
    assert f"leaves {STRANDED} none they can run (before 2.24 NCCL runs them on Ring)" in note


def test_a_list_every_collective_can_run_strands_nobody():
    scoped = scope_algorithm({"NCCL_ALGO": "Ring"}, ["all_reduce", "all_gather"], "2.28.9")
    assert scoped.env == {"NCCL_ALGO": "allgather:Ring;allreduce:Ring"}  # NCCL's function order
    assert "would leave" not in scoped.notes[0]
    old = scope_algorithm({"NCCL_ALGO": "Ring"}, ["all_reduce"], "2.23.4")
    assert old.env == {"NCCL_ALGO": "Ring"} and "leaves" not in old.notes[0]
    excluded = scope_algorithm({"NCCL_ALGO": "^Tree"}, ["all_gather"], "2.28.9")
    assert excluded.env == {"NCCL_ALGO": "allgather:^Tree"}


def test_only_collectives_that_can_run_the_list_get_it():
    scoped = scope_algorithm(TREE, ["all_reduce", "all_gather"], "2.28.9")
    assert scoped.env["NCCL_ALGO"] == "allreduce:Tree"
    assert any(
        n.startswith("all_gather measured faster under NCCL_ALGO=Tree, which it cannot run")
        for n in scoped.notes
    )
    nobody = scope_algorithm(TREE, ["all_gather"], "2.28.9")
    assert nobody.dropped and nobody.env == {"NCCL_PROTO": "Simple"}


def test_collectives_nccl_does_not_tune_take_no_clause():
    scoped = scope_algorithm({"NCCL_ALGO": "Ring"}, ["sendrecv", "all_reduce"], "2.28.9")
    assert scoped.env == {"NCCL_ALGO": "allreduce:Ring"}
    assert scope_algorithm({"NCCL_ALGO": "Ring"}, ["alltoall"], "2.28.9").dropped


def test_without_a_version_the_form_is_2_24s_and_the_note_says_what_older_ones_read():
    scoped = scope_algorithm(TREE, ["all_reduce"], None)
    assert scoped.env["NCCL_ALGO"] == "allreduce:Tree"
    assert "do not name their NCCL version: before 2.24" in scoped.notes[0]


def test_a_collective_measured_under_a_list_it_cannot_run_dates_the_results_before_2_24():
    """2.24+ fails all_gather's call under NCCL_ALGO=Tree: a measured one comes from an older NCCL."""
    scoped = scope_algorithm(TREE, ["all_reduce", "all_gather"], None)
    assert scoped.env == TREE
    assert "all_gather ran under NCCL_ALGO=Tree, which NCCL 2.24+ refuses them" in scoped.notes[0]
    assert "NCCL_ALGO=allreduce:Tree, needs 2.24+" in scoped.notes[0]


@pytest.mark.parametrize(
    "settings",
    [
        {"NCCL_PROTO": "LL"},
        {"NCCL_ALGO": "allreduce:Tree"},
        {"NCCL_ALGO": "Tree;allgather:Ring"},
        {},
    ],
)
def test_settings_without_a_plain_algorithm_list_are_exported_as_they_are(settings):
    scoped = scope_algorithm(settings, ["all_reduce"], "2.28.9")
    assert scoped.env == settings and not scoped.notes


def test_the_scoped_note_word_for_word():
    (note,) = scope_algorithm({"NCCL_ALGO": "Tree"}, ["all_reduce"], "2.28.9").notes
    assert note == (
        "NCCL_ALGO=allreduce:Tree: Tree only for all_reduce, measured faster with it, in NCCL "
        "2.24+'s per-collective form; every other collective keeps NCCL's own choice (job-wide, "
        "NCCL_ALGO=Tree would leave broadcast, reduce, all_gather, reduce_scatter no algorithm they "
        "can run, and NCCL 2.24+ fails their calls)"
    )
    (ring,) = scope_algorithm({"NCCL_ALGO": "Ring"}, ["all_reduce"], "2.28.9").notes
    assert ring.endswith("every other collective keeps NCCL's own choice")


def test_the_job_wide_note_word_for_word_names_the_form_of_the_collectives_measured_faster():
    ring = scope_algorithm({"NCCL_ALGO": "Ring"}, ["all_gather", "all_reduce"], "2.23.4")
    assert ring.notes == (
        "NCCL_ALGO=Ring is job-wide on NCCL 2.23.4 (the per-collective form, "
        "NCCL_ALGO=allgather:Ring;allreduce:Ring, needs 2.24+): it sets the algorithm of every "
        "collective, measured faster with it or not",
    )
    untuned = scope_algorithm({"NCCL_ALGO": "Ring"}, ["sendrecv"], "2.23.4")
    assert "(the per-collective form, NCCL_ALGO=allreduce:Ring, needs 2.24+)" in untuned.notes[0]


@pytest.mark.parametrize(
    "faster, words",
    [
        (
            ["all_gather"],
            "which it cannot run (NCCL 2.24+ fails such a call): that is not a "
            "measurement of Tree, which is not set for it",
        ),
        (
            ["all_gather", "reduce_scatter"],
            "which they cannot run (NCCL 2.24+ fails such a "
            "call): that is not a measurement of Tree, which is not set for them",
        ),
    ],
)
def test_what_cannot_run_the_list_is_said_in_number(faster, words):
    scoped = scope_algorithm({"NCCL_ALGO": "Tree"}, faster, "2.28.9")
    assert scoped.dropped and scoped.notes == (
        f"{', '.join(faster)} measured faster under NCCL_ALGO=Tree, {words}",
    )


def test_a_known_version_says_nothing_of_unknown_ones():
    (note,) = scope_algorithm({"NCCL_ALGO": "Tree"}, ["all_reduce"], "2.24.3").notes
    assert "do not name their NCCL version" not in note


@pytest.mark.parametrize("value", ["Tree;", ""])
def test_a_value_no_plain_clause_governs_or_with_clauses_is_left_as_written(value):
    assert scope_algorithm({"NCCL_ALGO": value}, ["all_reduce"], "2.28.9").env == {
        "NCCL_ALGO": value
    }
