"""Behaviours whose mutants the whole suite once let through (issue 17 §6), each tested against what
a user sees, not against the code that does it: a Hugging Face token shown by env-check under a
name and a flag that say nothing about secrets, and recommend's rule that a gain counts only when
the two spreads do not overlap. (The third, run-engine's exit code on a float32 greedy mismatch,
is tests/test_engine_cli.py::test_a_greedy_mismatch_fails_the_exit_code_in_float32_only.)"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from ncclprobe.cli import cli
from ncclprobe.recommend import build_recommendation
from tests.data.resultsets import SIZES, config, curve, scaled, write_set

# the shape of a Hugging Face access token: hf_ and 34 letters and digits (37 characters: also a
# random-looking run of 32+, which another rule masks), and a shorter one that only the hf_ shape catches
TOKENS = ("hf_" + "QmTk8vPz2LxW9rYc4NbJd7HsFq1GaE5uRo", "hf_" + "QmTk8vPz2LxW9rYc4NbJd")


@pytest.mark.parametrize("fmt, TOKEN", [("table", TOKENS[0]), ("json", TOKENS[1])])
def test_a_hugging_face_token_is_masked_by_its_shape_alone(fmt, TOKEN):
    """Inside a shown variable's value and inside a command-line argument (no TOKEN/KEY word, no
    credential flag, and not a whole random-looking value), only the token's own shape can tell: it
    must still never be printed. The short token is what kills the mutant that drops the hf_ pattern
    (the full-length one is a 37-character random-looking run, masked by that rule as well)."""
    env = {
        **os.environ,
        "NOTES": f"pull the weights with {TOKEN} from the hub",
        "NCCL_DEBUG_FILE": f"/tmp/{TOKEN}.%h.%p.log",
    }  # a name whose values are shown: only the shape hides it
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; time.sleep(60)", f"hub:{TOKEN}@main"], env=env
    )
    try:
        result = CliRunner().invoke(
            cli, ["env-check", "--pid", str(child.pid), "--all", "--format", fmt]
        )
    finally:
        child.kill()
        child.wait()
    assert result.exit_code in (0, 1), result.output
    assert (
        "NOTES" in result.output
        and "NCCL_DEBUG_FILE" in result.output
        and TOKEN not in result.output
    )
    if fmt == "json":  # complete (a table may wrap a path): the rest of the value is shown
        assert ".%h.%p.log" in result.output
    assert TOKEN[:12] not in result.output  # not even a prefix long enough to search for


def test_a_faster_median_inside_overlapping_spreads_is_no_recommendation(tmp_path):
    """20 % faster at every size, far above the 5 % floor, but each trial spread (+/-30 %) overlaps
    the default's: the gain is not shown to be real, so nothing changes. With tight spreads the same
    medians are a recommendation: the spread rule, not the floor, decides here."""
    default = curve(20.0, 0.5)
    noisy = write_set(
        tmp_path / "noisy.jsonl",
        [
            config({}, scaled(default, 1, 1, spread=0.3)),
            config({"NCCL_PROTO": "LL"}, scaled(default, 0.8, 0.8, spread=0.3)),
        ],
    )
    rec = build_recommendation([noisy])
    assert rec.overall.best_config_id == "NCCL_PROTO=LL" and rec.overall.gain == pytest.approx(0.2)
    assert rec.env == {} and not rec.overall.significant
    assert not any(choice.significant for choice in rec.per_size) and len(rec.per_size) == len(
        SIZES
    )
    tight = write_set(
        tmp_path / "tight.jsonl",
        [
            config({}, scaled(default, 1, 1, spread=0.02)),
            config({"NCCL_PROTO": "LL"}, scaled(default, 0.8, 0.8, spread=0.02)),
        ],
    )
    assert build_recommendation([tight]).env == {"NCCL_PROTO": "LL"}
