"""A lever only where its mechanism ran (issue 36 §2): communication recognised by what it is, NCCL
settings named only where NCCL ran, each collective against the baseline's at the same operation
and size by the noise rule, and the late rank found by who arrives last, pinned at each boundary.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import replace
from pathlib import Path

import pytest

from ncclprobe.diagnose.run import levers
from ncclprobe.diagnose.run import rules_collective_baseline as CB
from ncclprobe.diagnose.run import rules_ranks as RR
from ncclprobe.evidence.bundle import Evidence
from ncclprobe.evidence.run.profile import align as A
from ncclprobe.evidence.run.profile import comm_names as names
from ncclprobe.evidence.run.view import Collective, EngineRun, Phase
from ncclprobe.stats import DEFAULT_MIN_GAIN

# names as the projects' sources write them (names.py cites each file)
KERNELS = {
    "void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*)": ("DeepEP", "dispatch"),
    "void deep_ep::internode_ll::combine<false, 7168>(void*, ...)": ("DeepEP", "combine"),
    "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, ...)": (
        "custom all-reduce",
        "all_reduce",
    ),
    "void vllm::cross_device_reduce_2stage<float, 4>(vllm::RankData*, ...)": (
        "custom all-reduce",
        "all_reduce",
    ),
    "void c10d::symmetric_memory::one_shot_all_reduce_kernel<c10::BFloat16, 8>(...)": (
        "symmetric memory",
        "all_reduce",
    ),
    "void (anonymous namespace)::multimem_all_gather_kernel<16>(...)": (
        "symmetric memory",
        "all_gather",
    ),
    "void tensorrt_llm::kernels::oneShotAllReduceKernel<half, 8, false>(...)": (
        "TensorRT-LLM all-reduce",
        "all_reduce",
    ),
    "void quickreduce::allreduce_prototype_twoshot<...>(...)": ("quick all-reduce", "all_reduce"),
    "nvshmemi_transfer_rma_kernel": ("NVSHMEM", "unknown"),
    "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)": (
        "NCCL",
        "all_reduce",
    ),
    "rcclKernel_AllGather_RING_LL_Sum_int8_t(x)": ("RCCL", "all_gather"),
}


@pytest.mark.parametrize("name", KERNELS)
def test_communication_is_recognised_by_what_it_is(name):
    found = names.communication_kernel(name)
    assert (found["library"], found["op"]) == KERNELS[name]


@pytest.mark.parametrize(
    "name,category",
    [
        ("void at::native::vectorized_elementwise_kernel<4>", "kernel"),
        ("void gemv_kernel_dispatch_combine_like<...>", "kernel"),  # words alone are not DeepEP
        ("Memcpy DtoD (Device -> Device)", "gpu_memcpy"),
        ("Memcpy PtoP (Device -> Device)", "kernel"),
    ],
)
def test_other_kernels_and_copies_are_not_communication(name, category):
    assert names.communication_kernel(name, category) is None


def test_a_peer_copy_is_the_copy_engines():
    found = names.communication_kernel("Memcpy PtoP (Device -> Device)", "gpu_memcpy")
    assert found["library"] == "copy engine"


def _ev(*libraries, kind="profile", config=None):
    run = EngineRun(
        label="p",
        mode=None,
        source="profile",
        collectives=[
            Collective(op="all_reduce", size_bytes=64, count=1.0, library=lib) for lib in libraries
        ],
    )
    return Evidence(runs=[run], kind=kind, config=config or {})


def test_nccl_settings_are_a_lever_only_where_nccl_ran():
    assert levers.nccl_ran(_ev("NCCL")) and levers.nccl_ran(_ev("RCCL", "DeepEP"))
    assert not levers.nccl_ran(_ev("gloo")) and not levers.nccl_ran(_ev("DeepEP"))
    assert not levers.nccl_ran(_ev(kind="engine-trace", config={"backend": "gloo"}))
    assert levers.nccl_ran(_ev(kind="engine-trace", config={"backend": "nccl"}))
    words = levers.lever_words({"DeepEP", "gloo"})
    assert "NCCL settings act on none of it (NCCL did not run)" in words
    assert "Buffer.set_num_sms" in words and "GLOO_SOCKET_IFNAME" in words
    assert "NCCL settings (protocol" in levers.lever_words({"NCCL", "DeepEP"})
    assert "symmetric memory: no lever on it is known" in levers.lever_words({"symmetric memory"})
    assert "not in this evidence" in levers.lever_words(set())


# ---- each collective against the baseline's ------------------------------------------------------


def _profile(calls_us, library="NCCL", size=16 << 20):
    phase = Phase(name="step", kind="other", count=10, total_ms=10_000.0, median_ms=1000.0)
    coll = Collective(
        op="all_reduce",
        size_bytes=size,
        count=float(len(calls_us)),
        time_us=sum(calls_us),
        library=library,
        calls_us=tuple(calls_us),
    )
    return EngineRun(
        label="p", mode=None, source="profile", phases={"step": phase}, collectives=[coll]
    )


def _compare(run_us, base_us, library="NCCL", size=16 << 20):
    ev = Evidence(
        runs=[_profile(run_us, library, size)],
        baseline=[_profile(base_us, library, size)],
        kind="profile",
    )
    return CB.against_baseline_calls(ev)


def test_forced_ll_on_16_mib_all_reduces_is_named_against_the_default():
    """The issue's case in numbers: 576 ms per call against 8.5 ms (68x)."""
    (found,) = _compare([576_000.0 + i for i in range(10)], [8_500.0 + i for i in range(10)])
    assert found.rule == "collective-vs-baseline" and "(67.7x)" in found.title
    assert "NCCL_PROTO" in found.detail and "NCCL_DEBUG_SUBSYS=INIT,ENV,TUNING" in found.detail
    assert "env-check" in found.detail and "not split out" in found.detail
    assert found.cost.kind == "measured" and found.cost.unit == "call"
    assert found.cost.high == pytest.approx((576_004.5 - 8_504.5) / 1000.0)
    assert found.next_command.startswith("# rerun both jobs with NCCL_DEBUG=INFO")


def test_the_noise_rules_floor_decides_at_five_percent():
    base = [1000.0, 1001.0, 1002.0, 1003.0, 1004.0]
    at = 1002.0 / (1 - DEFAULT_MIN_GAIN) + 0.001  # the baseline's median saved by just over 5 %
    slower = _compare([at - 2, at - 1, at, at + 1, at + 2], base)
    assert [o.rule for o in slower] == ["collective-vs-baseline"] and hasattr(slower[0], "severity")
    under = 1002.0 / (1 - DEFAULT_MIN_GAIN) - 0.5
    (same,) = _compare([under - 2, under - 1, under, under + 1, under + 2], base)
    assert not hasattr(same, "severity") and "within noise" in same.reason


def test_too_few_calls_or_no_size_compare_nothing():
    assert _compare([2000.0] * (CB.MIN_CALLS - 1), [1000.0] * 5) == []
    assert _compare([2000.0] * 5, [1000.0] * (CB.MIN_CALLS - 1)) == []
    (at,) = _compare([2000.0] * CB.MIN_CALLS, [1000.0] * CB.MIN_CALLS)  # at the cut: judged
    assert at.rule == "collective-vs-baseline"
    assert _compare([2000.0] * 5, [1000.0] * 5, size=None) == []


def test_a_slower_gloo_call_names_gloos_lever_not_nccls():
    (found,) = _compare([2000.0 + i for i in range(5)], [1000.0 + i for i in range(5)], "gloo")
    assert "GLOO_SOCKET_IFNAME" in found.detail and "NCCL settings do not act on it" in found.detail
    assert "NCCL_PROTO" not in found.detail and found.next_command == ""


# ---- the rank that arrives last before every call -------------------------------------------------


def _call(starts):
    arrivals = tuple(A.Arrival(s, s + 50.0, None, "all_reduce", 64, None, None) for s in starts)
    return A.Call("all_reduce", None, 64, tuple(range(len(starts))), arrivals)


def _alignment(calls, n=2):
    al = A.Alignment(list(range(n)), A.BY_ORDER, "one clock", "high", calls=calls, on_host=True)
    al.typical_spread_us = sorted(c.spread for c in calls)[len(calls) // 2]
    return al


def _late_every(margin, n_calls=20, period=1000.0, late_at=None):
    """Rank 1 arrives `margin` µs after rank 0 at the calls in `late_at` (all by default), rank 0
    `margin` after rank 1 at the others."""
    late_at = range(n_calls) if late_at is None else late_at
    return [
        _call(
            [i * period, i * period + margin] if i in late_at else [i * period + margin, i * period]
        )
        for i in range(n_calls)
    ]


def test_a_rank_late_before_every_call_is_named_though_no_call_stands_out():
    al = _alignment(_late_every(100.0))
    assert not al.late_calls()  # every call's spread is the typical one
    late, share = RR.straggler(al)
    assert late.rank == 1 and late.calls == 20 and late.median_spread_us == 100.0
    assert late.chance == pytest.approx(0.5**20) and share == pytest.approx(
        2000.0 / 19_150.0
    )  # the window ends at the last call's end


def _chance(calls: int, last: int) -> float:
    """P(X >= last) for X ~ Binomial(calls, 1/2): two ranks arriving last at random."""
    return sum(math.comb(calls, i) for i in range(last, calls + 1)) / 2**calls


@pytest.mark.parametrize("margin,named", [(10.0, False), (10.001, True)])
def test_its_margin_must_be_over_launch_jitter(margin, named):
    late, _ = RR.straggler(_alignment(_late_every(margin, period=100.0)))
    assert (late is not None) is named


def test_arriving_last_by_chance_is_no_straggler():
    """Rank 1 last at k of 20 calls of two ranks: chance P(X >= k) for p = 1/2; 1 in 1000 is the cut
    (at k = 17 it is 0.0013, at 18 0.0002)."""
    assert _chance(20, 17) > RR.ALWAYS_LAST_CHANCE > _chance(20, 18)  # the premise, by hand
    for k, named in ((17, False), (18, True)):
        al = _alignment(_late_every(100.0, late_at=set(range(k))))
        late, _ = RR.straggler(al)
        assert (late is not None and late.chance is not None) is named


def test_the_straggler_words_say_how_it_was_found():
    al = _alignment(_late_every(100.0))
    run = EngineRun(
        label="p",
        mode=None,
        source="profile",
        phases={"step": Phase(name="step", kind="other", count=20, total_ms=20.0, median_ms=1.0)},
    )
    [out] = RR.ranks_skew(Evidence(runs=[replace(run, alignment=al, ranks=[{}, {}])]))
    assert out.title.startswith("rank 1 arrives late at 20 of 20 collective calls: the others wait")
    assert "after the next-latest rank each time" in out.title
    assert "where each of the 2 ranks would arrive last at 1 in 2 by chance" in out.detail
    assert "a CPU-only profile" in out.detail and out.evidence["found_by"].startswith(
        "arrives last"
    )
    assert out.cost.covers == ("collective", "wait") and out.cost.kind == "profiled"


@pytest.mark.parametrize("k,named", [(149, False), (150, True)])
def test_last_at_most_calls_by_a_slight_bias_is_no_straggler(k, named):
    """200 calls of 2 ranks: last at 149 is far beyond chance (1e-12) but under the cut, halfway
    between chance and every call (75 %: ranks taking turns on one GPU keep an order); 150 is at it."""
    assert RR.always_last_cut(2) == 0.75 and RR.always_last_cut(4) == 0.625
    al = _alignment(_late_every(100.0, n_calls=200, late_at=set(range(k))))
    late, _ = RR.straggler(al)
    assert _chance(200, k) < 1e-9  # the premise: far beyond chance, so the cut decides
    assert (late is not None) is named


GOLDEN = Path(__file__).parent / "data" / "collective_baseline.golden.json"


def test_the_baseline_comparisons_words_are_the_reviewed_ones():
    """Titles, details, evidence, costs and next commands of the comparison, word for word
    (NCCLPROBE_UPDATE_GOLDEN=1 rewrites the record; read its diff before committing it)."""
    got = {
        "nccl slower": _compare(
            [576_000.0 + i for i in range(10)], [8_500.0 + i for i in range(10)]
        ),
        "gloo slower": _compare(
            [2000.0 + i for i in range(5)], [1000.0 + i for i in range(5)], "gloo"
        ),
        "same": _compare([1000.0 + i for i in range(5)], [1000.0 + i for i in range(5)]),
    }
    got = json.loads(json.dumps({k: v[0].to_json() for k, v in got.items()}))
    if os.environ.get("NCCLPROBE_UPDATE_GOLDEN"):
        GOLDEN.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    assert got == json.loads(GOLDEN.read_text())


def test_matched_ranks_give_the_transfer_and_one_library_names_them():
    """With the ranks' calls matched, a call's time is its transfer (last arrival to last end) and
    the run's one library names them; two libraries name none; a side not matched on both runs
    makes both sides whole call times."""
    calls = [_call([i * 1000.0, i * 1000.0 + 30.0]) for i in range(5)]  # each moves 50 - 30 + 30
    al = _alignment(calls)
    run = _profile([100.0] * 5)
    aligned = EngineRun(**{**run.__dict__, "alignment": al})
    times, split = CB.per_call_times(aligned)
    assert split is True and times == {("all_reduce", 64, "NCCL"): [50.0] * 5}
    assert CB.per_call_times(run) == ({("all_reduce", 16 << 20, "NCCL"): [100.0] * 5}, False)
    two = EngineRun(
        **{
            **aligned.__dict__,
            "collectives": aligned.collectives
            + [Collective(op="alltoall", size_bytes=8, count=1.0, library="DeepEP")],
        }
    )
    assert list(CB.per_call_times(two)[0]) == [("all_reduce", 64, None)]  # no one library
    # one side matched, the other not: both compared by their whole call times, said so
    ev = Evidence(runs=[aligned], baseline=[_profile([50.0] * 5)], kind="profile")
    (out,) = CB.against_baseline_calls(ev)
    assert "each call's whole time" in out.detail and "not split out" in out.detail
    assert out.evidence["wait_split_out"] is False


@pytest.mark.parametrize(
    "us,shown",
    [(999.94, "999.9 us"), (1000.0, "1 ms"), (8504.5, "8.5 ms"), (576_004.5, "576 ms")],
)
def test_a_calls_time_reads_in_us_under_a_millisecond(us, shown):
    calls = [us - 0.02, us - 0.01, us, us + 0.01, us + 0.02]  # median `us`
    (same,) = _compare(calls, calls)
    assert same.reason.startswith(f"{shown} per call against the baseline's {shown} ")


def test_the_levers_words_exactly():
    assert levers.lever_words(set()) == (
        "what moved the data is not in this evidence, so no lever on it is named"
    )
    assert levers.lever_words({"NCCL"}) == f"NCCL: {levers.LEVERS['NCCL']}"
    assert levers.lever_words({"MSCCL++"}) == (
        "MSCCL++: no lever on it is known to ncclprobe; NCCL settings act on none of it "
        "(NCCL did not run)"
    )


def test_a_run_without_phases_has_no_share_and_its_library_unknown_is_said():
    phaseless = EngineRun(
        **{**_profile([2000.0 + i for i in range(5)], None).__dict__, "phases": {}}
    )
    ev = Evidence(
        runs=[phaseless], baseline=[_profile([1000.0 + i for i in range(5)], None)], kind="profile"
    )
    (out,) = CB.against_baseline_calls(ev)
    assert out.severity == "warning"  # no share of a run to weigh: a warning, as every unknown
    assert "what moved the data (not recorded): no lever on it is known to ncclprobe" in out.detail
    assert "NCCL_PROTO" not in out.detail and out.next_command == ""


def test_a_matched_comparison_is_said_split_and_surer():
    calls = [_call([i * 1000.0, i * 1000.0 + 30.0]) for i in range(5)]
    slow = [
        A.Call(
            "all_reduce",
            None,
            64,
            (0, 1),
            tuple(
                A.Arrival(s, s + 150.0, None, "all_reduce", 64, None, None)
                for s in (i * 1000.0, i * 1000.0 + 30.0)
            ),
        )
        for i in range(5)
    ]
    run = EngineRun(**{**_profile([100.0] * 5).__dict__, "alignment": _alignment(slow)})
    base = EngineRun(**{**_profile([100.0] * 5).__dict__, "alignment": _alignment(calls)})
    (out,) = CB.against_baseline_calls(Evidence(runs=[run], baseline=[base], kind="profile"))
    assert out.confidence == "high" and out.evidence["wait_split_out"] is True
    assert (
        "The wait for other ranks is split out: these are the transfer times after the last rank arrived."
        in out.detail
    )
    assert out.cost.covers == ("collective", "transfer")
    assert (out.evidence["us_per_call"], out.evidence["baseline_us_per_call"]) == (150.0, 50.0)
    odd = _compare([1000.12345 + i for i in range(5)], [500.06789 + i for i in range(5)])[0]
    assert (odd.evidence["us_per_call"], odd.evidence["baseline_us_per_call"]) == (
        1002.123,
        502.068,
    )


def test_the_moving_part_sentence_of_each_branch_exactly():
    """rank-skew's split of a collective-bound step (rules_ranks.with_wait_split): plain sentences
    whatever moved the data, NCCL settings offered only where NCCL ran."""
    head = "The moving part is at most 1.500 ms of the 10.000 ms per step. "
    assert levers.moving_part_words(set(), 1.5, 10.0, "step") == head + (
        "Fewer or larger collectives act on it; what moved the data is not in this evidence, so "
        "no lever of its own is named."
    )
    assert levers.moving_part_words({"gloo"}, 1.5, 10.0, "step") == head + (
        "Fewer or larger collectives act on it, and so do the levers of what moved the data: for "
        "gloo, the host network interface its TCP connections use (GLOO_SOCKET_IFNAME), or a GPU "
        "backend (NCCL) for GPU tensors. NCCL settings act on none of it: NCCL did not run."
    )
    assert levers.moving_part_words({"MSCCL++"}, 1.5, 10.0, "token") == (
        "The moving part is at most 1.500 ms of the 10.000 ms per token. Fewer or larger "
        "collectives act on it, and so do the levers of what moved the data: for MSCCL++, none "
        "that ncclprobe knows. NCCL settings act on none of it: NCCL did not run."
    )
    assert levers.moving_part_words({"NCCL", "DeepEP"}, 1.5, 10.0, "step") == head + (
        "Fewer or larger collectives act on it, and so do the levers of what moved the data: for "
        f"DeepEP, {levers.LEVERS['DeepEP']}; for NCCL, {levers.LEVERS['NCCL']}."
    )
