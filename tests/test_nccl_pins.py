"""ncclprobe.nccl's cuts the mutation run found untested (issue 28 §4), each on both sides."""

import json

import pytest

from ncclprobe.nccl.lint import lint_env
from ncclprobe.nccl.node import NodeFacts


def _codes(env, version=None):
    return {f.code for f in lint_env(env, nccl_version=version)}


@pytest.mark.parametrize("version,too_old", [("2.22.3", True), ("2.23.4", False)])
def test_pat_needs_nccl_2_23_with_a_name_read_at_run_time(version, too_old):
    """PAT joined ncclAlgoStr at v2.23.4-1; the variable's name comes from JSON, as any reader's."""
    env = json.loads('{"NCCL_ALGO": "PAT"}')
    found = [f for f in lint_env(env, nccl_version=version) if "needs NCCL 2.23+" in f.message]
    assert bool(found) is too_old


@pytest.mark.parametrize("low,high,error", [("8", "4", True), ("4", "8", False), ("4", "4", False)])
def test_a_channel_minimum_above_its_maximum(low, high, error):
    assert (
        "min-above-max" in _codes({"NCCL_MIN_NCHANNELS": low, "NCCL_MAX_NCHANNELS": high})
    ) is error
    assert ("min-above-max" in _codes({"NCCL_MIN_CTAS": low, "NCCL_MAX_CTAS": high})) is error


def test_an_older_header_without_links_but_no_nvlink_is_pcie():
    assert NodeFacts.from_json({"nvlink": False}).links == "no-nvlink"
    assert NodeFacts.from_json({"nvlink": True}).links is None  # some NVLink: how is not known
    assert NodeFacts.from_json({"links": "nvlink-all", "nvlink": False}).links == "nvlink-all"
