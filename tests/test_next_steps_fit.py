"""Next steps that fit the evidence (review of 2026-12-07): each rule asks for what is missing and
nothing the evidence already rules out, each pinned on its healthy twin. Evidence built in memory
(the view's own dataclasses, no mock); the same on a real capture is tests/test_capture_own_cost.py."""

from __future__ import annotations

from ncclprobe.diagnose import commands as K
from ncclprobe.diagnose.run import rules_host as RH
from ncclprobe.diagnose.run import rules_profile_steps as RS
from ncclprobe.evidence.bundle import Evidence
from ncclprobe.evidence.run.view import EngineRun, Phase

CPU = {"device": "cpu", "gpus": [], "record_shapes": True, "backend": "gloo"}
GPU = {"device": "cuda", "gpus": ["NVIDIA L40S"], "record_shapes": True}


def _step(idle=None):
    return Phase(
        name="ProfilerStep",
        kind="other",
        count=4,
        total_ms=40.0,
        median_ms=10.0,
        graphed=False,
        device_ms=None if idle is None else 10.0 - idle,
        idle_ms=idle,
    )


def _ev(config, idle=None, engine="unknown"):
    run = EngineRun(
        label="profile", mode=None, source="profile", engine=engine, phases={"s": _step(idle)}
    )
    return Evidence(runs=[run], kind="profile", config=dict(config))


def _rules(items):
    return {i.rule for i in items}


def test_a_cpu_profile_with_shapes_is_not_asked_for_gpu_or_verify_evidence():
    ev = _ev(CPU)
    assert "host-bound" not in _rules(RS.host_bound(ev))
    assert "decode-or-verify" not in _rules(RS.profile_limits(ev))


def test_the_twins_still_ask():
    # a GPU job profiled without CUDA activity: its idle GPU time is unknown, said
    (gpu,) = RS.host_bound(_ev({**GPU, "device": "cpu"}))
    assert gpu.rule == "host-bound" and gpu.next_command
    # shapes not recorded: recording them tells decode from verify
    (shapes,) = RS.profile_limits(_ev({**CPU, "record_shapes": False}))
    assert shapes.rule == "decode-or-verify" and "record_shapes=True" in shapes.next_command
    # a GPU profile with shapes and no embedding lookup: still not known, still said
    assert "decode-or-verify" in _rules(RS.profile_limits(_ev(GPU, idle=5.0)))


def test_the_host_call_step_asks_for_stacks_not_shapes():
    (step,) = RH.host_call_findings(_ev(CPU))
    assert step.rule == "host-call"
    assert "with_stack=True" in step.next_command and "record_shapes" not in step.next_command
    for engine, word in (("sglang", '"with_stack": true'), ("vllm", "torch_profiler_with_stack")):
        assert word in K.profile_command(engine, with_stack=True)
        assert word not in K.profile_command(engine)
    assert "record_shapes=True" in K.profile_command(None)


def test_a_many_rank_job_s_sweep_runs_on_one_host_and_says_so():
    many = Evidence(kind="profile", config={"tp": 300, "backend": "gloo"})
    text = K.sweep_next(many, [16384])
    *remarks, command = text.splitlines()
    assert "--nranks 8 " in command and "300" not in command
    assert remarks and "300 ranks" in remarks[0] and "--launcher" in remarks[0]
    at_edge = K.sweep_next(Evidence(kind="profile", config={"tp": K.ONE_HOST_RANKS}), [16384])
    assert f"--nranks {K.ONE_HOST_RANKS} " in at_edge and "\n" not in at_edge
    past = K.sweep_next(Evidence(kind="profile", config={"tp": K.ONE_HOST_RANKS + 1}), [16384])
    assert f"--nranks {K.ONE_HOST_RANKS} " in past and "\n" in past


def test_a_capture_s_own_ranks_on_this_host_bound_the_sweep():
    from ncclprobe.evidence.live.capture_dir import CapturedProcess, CaptureRecord

    def rank(r):
        return CapturedProcess(
            pid=100 + r, ppid=1, command="python train.py", role="worker", python=True,
            libnccl=None, injob=True, rank=r, readable=True, empty_block=False, missing=(),
            changed={}, capture_missing=(),
        )  # fmt: skip

    record = CaptureRecord(
        directory="cap", command="torchrun train.py", exit_code=0, ended_by="exit", settings={},
        added={}, replaced={}, collected={}, missing={}, notes=(),
        processes=(rank(0), rank(1)), nccl_loaded=False,
    )  # fmt: skip
    two = Evidence(kind="profile", config={"tp": 300, "backend": "gloo"}, capture=record)
    *_, command = K.sweep_next(two, [16384]).splitlines()
    assert "--nranks 2 " in command
    whole = Evidence(kind="profile", config={"tp": 2, "backend": "gloo"}, capture=record)
    assert "--nranks 2 " in K.sweep_next(whole, [16384]) and "\n" not in K.sweep_next(
        whole, [16384]
    )
