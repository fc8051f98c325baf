"""Every engine fact (ncclprobe/engine_facts/) read in a pinned excerpt of the engine's source
(tests/fixtures/engine_source/, README there), and the readers and rules that use the table, each
on its boundary and its healthy twin (issue 36 §4)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ncclprobe.diagnose import diagnose, load_evidence
from ncclprobe.engine_facts import FACTS
from ncclprobe.engine_facts.spec_logs import aggregate
from ncclprobe.engine_facts.vllm_cudagraph import MODES, mode
from ncclprobe.evidence.run.serverlog import read_log

SOURCE = Path(__file__).parent / "fixtures" / "engine_source"
LOGS = Path(__file__).parent / "fixtures" / "server_logs"
HEADER = re.compile(r"# (?P<repo>[\w.-]+/[\w.-]+) (?P<commit>[0-9a-f]{40}) (?P<path>\S+)$")


def excerpt(name: str) -> tuple[re.Match, list[str]]:
    lines = (SOURCE / name).read_text().splitlines()
    header = HEADER.fullmatch(lines[0])
    assert header, f"{name}: no header line"
    return header, [line.strip() for line in lines[1:]]


@pytest.mark.parametrize("fact", FACTS, ids=[f.name for f in FACTS])
def test_every_fact_is_read_in_its_pinned_excerpt(fact):
    header, lines = excerpt(fact.excerpt)
    assert f"{header['repo']} {header['path']}" in fact.source
    assert header["commit"] in fact.read_at
    for line in fact.lines:
        assert line.strip() in lines, (fact.name, line)


def test_the_modes_are_the_enums_tuples():
    """decode_mode is value[0], mixed_mode value[1] of the tuple members; the plain ones are both."""
    _, lines = excerpt("vllm_compilation.py.txt")
    members = dict(
        re.fullmatch(r"([A-Z_]+) = (.+)", line).groups()
        for line in lines
        if re.fullmatch(r"[A-Z_]+ = .+", line)
    )
    for name, value in members.items():
        parts = re.findall(r"[A-Z_]+", value) or [name]
        assert (MODES[name].decode, MODES[name].mixed) == (parts[0], parts[-1]), name
    assert set(members) == set(MODES)


def test_full_decode_only_keeps_decode_and_verify_in_full_graphs():
    """The issue's wrong claim: FULL_DECODE_ONLY was read as PIECEWISE's behaviour."""
    assert not mode("FULL_DECODE_ONLY").attention_outside and mode("PIECEWISE").attention_outside
    assert "verify" in mode("FULL_DECODE_ONLY").captures
    assert "without graphs" in mode("FULL_DECODE_ONLY").captures
    assert mode("full_decode_only") is mode("FULL_DECODE_ONLY") and mode("BOGUS") is None


@pytest.mark.parametrize(
    "lowered, severity, outside",
    [
        ("PIECEWISE", "warning", True),
        ("FULL_DECODE_ONLY", "info", False),
        ("FULL_AND_PIECEWISE", "info", False),
        ("NONE", "error", None),
    ],
)
def test_a_lowered_mode_is_told_by_what_vllm_captures_in_it(tmp_path, lowered, severity, outside):
    """The real log of vllm_cudagraph_mode_lowered_tritonmla_tp2.log, its lowering line naming
    each mode in turn (vLLM prints the mode it sets in that line)."""
    text = (LOGS / "vllm_cudagraph_mode_lowered_tritonmla_tp2.log").read_text()
    text = re.sub(r"setting cudagraph_mode=[A-Z_]+", f"setting cudagraph_mode={lowered}", text)
    log = tmp_path / "vllm.log"
    log.write_text(text)
    [found] = [
        f for f in diagnose(load_evidence(server_logs=[log])).findings if f.rule == "cudagraph-mode"
    ]
    assert found.severity == severity and found.evidence["cudagraph_mode"] == lowered
    if outside is not None:  # do decode steps (the verify included) lose their full graphs?
        assert ("keep their full graphs" not in found.detail) is outside
    if lowered == "FULL_DECODE_ONLY":
        assert "runs outside the graphs, between" not in found.detail
        assert "keep their full graphs" in found.detail


def test_acceptance_is_weighted_by_what_each_interval_counted():
    """vLLM's DGX Spark log: five SpecDecoding lines; weighted by drafted tokens the run's
    acceptance is the engine's own ratio, below the plain mean of the lines."""
    log = read_log(LOGS / "vllm_0.22_mtp_spec_decoding_dgx_spark.log")
    assert log["tokens_per_cycle_weighted_by"] == "drafted tokens"
    assert log["tokens_per_cycle"] == pytest.approx(2.4213613, rel=1e-6)
    assert log["tokens_per_cycle_plain_mean"] == pytest.approx(2.518)
    drafted = [
        int(m)
        for m in re.findall(
            r"Drafted: (\d+) tokens",
            (LOGS / "vllm_0.22_mtp_spec_decoding_dgx_spark.log").read_text(),
        )
    ]
    means = [
        float(m)
        for m in re.findall(
            r"Mean acceptance length: ([0-9.]+)",
            (LOGS / "vllm_0.22_mtp_spec_decoding_dgx_spark.log").read_text(),
        )
    ]
    expected = sum(m * d for m, d in zip(means, drafted)) / sum(drafted)
    assert log["tokens_per_cycle"] == pytest.approx(expected)


def test_aggregate_boundaries():
    assert aggregate([], [], "w").value is None
    even = aggregate([2.0, 4.0], [1, 1], "w")
    assert (even.value, even.weighted_by, even.plain_mean) == (3.0, "w", 3.0)
    skewed = aggregate([2.0, 4.0], [3, 1], "w")
    assert skewed.value == 2.5 and skewed.plain_mean == 3.0
    missing = aggregate([2.0, 4.0], [3, None], "w")  # one interval without its count: plain mean
    assert (missing.value, missing.weighted_by) == (3.0, None)
    assert aggregate([2.0, 4.0], [0, 0], "w").weighted_by is None


def test_aggregate_counts_its_intervals_and_a_zero_weight_is_a_weight():
    assert aggregate([], [], "w").intervals == 0
    assert aggregate([2.0, 4.0], [3, None], "w").intervals == 2
    assert aggregate([2.0, 4.0], [-1, 1], "w").weighted_by is None  # a negative count is no count
    # an interval that drafted nothing counts for nothing (vLLM logs none such, but 0 is a count)
    zero = aggregate([2.0, 4.0], [0, 2], "w")
    assert (zero.value, zero.weighted_by, zero.intervals) == (4.0, "w", 2)


def test_the_field_names_the_readers_match_are_the_engines_own():
    from ncclprobe.engine_facts import spec_logs as S

    _, vllm = excerpt("vllm_spec_decode_metrics.py.txt")
    assert f'"{S.VLLM_MEAN}: %.2f, "' in vllm
    assert (
        f'"{S.VLLM_ACCEPTED}: %d tokens, "' in vllm and f'"{S.VLLM_DRAFTED}: %d tokens, "' in vllm
    )
    _, sglang = excerpt("sglang_scheduler_metrics_mixin.py.txt")
    assert any(f'f"{S.SGLANG_ACCEPT_LEN}: {{spec_accept_length:.2f}}' in line for line in sglang)


def test_aggregate_says_how_it_fell_back():
    """Without usable weights the value is the plain mean, said so (weighted_by None), with the
    intervals counted and the plain mean kept for comparison."""
    for weights in ([3, None], [0, 0], [-1, 1]):
        fell = aggregate([2.0, 4.0], weights, "w")
        assert (fell.value, fell.intervals, fell.weighted_by, fell.plain_mean) == (
            3.0,
            2,
            None,
            3.0,
        )
    one = aggregate([2.0, 4.0], [0, 1], "w")  # a total weight of 1 is a weight
    assert (one.value, one.weighted_by) == (4.0, "w")
