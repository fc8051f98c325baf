"""diagnose's cuts pinned at their boundaries, each on both sides: the severity of a cost's share
(10 % error, 2 % warning), collectives that bound the step (50 %) or cannot matter (below 15 %),
graph coverage (80 %), acceptance (1.5 tokens per cycle) and SGLang's graph lines (99 %, 90 %)."""

import copy

import pytest

from ncclprobe.diagnose import Evidence, diagnose, load_evidence
from ncclprobe.findings import severity_for_share
from tests import diagnose_scenarios as S


@pytest.mark.parametrize(
    "share,severity",
    [(0.10, "error"), (0.0999, "warning"), (0.02, "warning"), (0.0199, "info"), (None, "warning")],
)
def test_severity_follows_the_share_of_the_run(share, severity):
    assert severity_for_share(share) == severity


def _with_share(share: float) -> dict:
    trace = copy.deepcopy(S.recorded("collective-bound.json"))
    for run in trace["runs"]:
        run["collective_share"] = share
    return trace


@pytest.mark.parametrize(
    "share,bound,ruled_out",
    [(0.5, True, False), (0.4999, False, False), (0.15, False, False), (0.1499, False, True)],
)
def test_collective_share_cuts(share, bound, ruled_out):
    result = diagnose(Evidence.from_trace(_with_share(share), "t.json"))
    assert any(f.rule == "collective-bound" for f in result.findings) is bound
    assert ("collective-share" in [r.rule for r in result.ruled_out]) is ruled_out
    if bound:
        top = next(f for f in result.findings if f.rule == "collective-bound")
        costs = {0.5 * run["ms_per_token"] for run in _with_share(0.5)["runs"]}
        assert any(top.cost.high == pytest.approx(c) for c in costs)


@pytest.mark.parametrize("coverage,ruled_out", [(0.8, True), (0.7999, False)])
def test_graph_coverage_cut(coverage, ruled_out):
    trace = S.make_all_graphed(S.healthy_trace())
    for run in trace["runs"]:
        run["graph_coverage"] = coverage
    result = diagnose(Evidence.from_trace(trace, "t.json"))
    assert ("graph-coverage" in [r.rule for r in result.ruled_out]) is ruled_out
    assert any(f.rule == "graph-coverage" for f in result.findings) is not ruled_out


def _sglang(tmp_path, accept: float, graphs: list[bool]) -> str:
    lines = [
        f"[2026-01-01 00:00:{i:02d} TP0] Decode batch. #running-req: 1, #token: 90, token usage: 0.00, "
        f"accept len: {accept:.2f}, cuda graph: {flag}, gen throughput (token/s): 100.00, #queue-req: 0"
        for i, flag in enumerate(graphs)
    ]
    path = tmp_path / "sglang.log"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.mark.parametrize("accept,low", [(1.5, False), (1.49, True)])
def test_acceptance_cut(tmp_path, accept, low):
    result = diagnose(load_evidence(server_logs=[_sglang(tmp_path, accept, [True] * 4)]))
    assert any(f.rule == "acceptance" for f in result.findings) is low
    assert ("acceptance" in [r.rule for r in result.ruled_out]) is not low


@pytest.mark.parametrize(
    "graphed,outcome",
    [(99, "ruled out"), (98, "info"), (90, "info"), (89, "warning")],
)
def test_sglang_graph_lines_cuts(tmp_path, graphed, outcome):
    flags = [True] * graphed + [False] * (100 - graphed)
    result = diagnose(load_evidence(server_logs=[_sglang(tmp_path, 2.0, flags)]))
    found = [f for f in result.findings if f.rule == "log-graphs"]
    if outcome == "ruled out":
        assert not found and "log-graphs" in [r.rule for r in result.ruled_out]
    else:
        assert found[0].severity == outcome


# ---- the arithmetic behind the figures, checked by hand (what the mutation run asked for) -------


def _profile_run(mode, *phases):
    from ncclprobe.evidence.run.view import EngineRun

    return EngineRun(label="p", mode=mode, source="profile", phases={p.name: p for p in phases})


def test_a_profile_costs_share_is_per_cycle_without_a_token_count():
    """No token count (a profile): the share is the cost per cycle over the cycle's phases, each
    weighted by its steps per cycle (verify 10 steps: the cycles); without a verify every phase
    counts once."""
    from ncclprobe.evidence.run.view import Phase

    decode = Phase("decode", "decode", 20, 20.0, 1.0, graphed=True)
    verify = Phase("verify", "verify", 10, 40.0, 4.0, graphed=False, device_ms=1.0, idle_ms=3.0)
    draft = Phase("draft", "draft", 20, 20.0, 1.0, graphed=True)
    ev = Evidence(
        runs=[_profile_run("speculative", verify, draft)],
        kind="profile",
        baseline=[_profile_run("baseline", decode)],
    )
    [eager] = [f for f in diagnose(ev).findings if f.rule == "eager-phase"]
    # cost 3.0 ms per cycle over verify 4.0 x 1 + draft 1.0 x 2 = 6.0 ms per cycle
    assert eager.evidence["share_of_run_time"] == pytest.approx(0.5)
    only_draft = Phase("draft", "draft", 20, 20.0, 2.0, graphed=False, device_ms=1.0, idle_ms=1.0)
    ev.runs = [_profile_run("speculative", only_draft)]
    [eager] = [f for f in diagnose(ev).findings if f.rule == "eager-phase"]
    assert eager.evidence["share_of_run_time"] == pytest.approx(
        0.5
    )  # 1.0 of the draft's 2.0, counted once


def test_the_seed_cases_costs_add_up():
    from ncclprobe.diagnose.run.expectations import expected_verify_ratio

    trace = S.make_seed_case(S.healthy_trace())
    result = diagnose(Evidence.from_trace(trace, "t.json"))
    spec = S.runs(trace, "speculative")[0]
    top = result.top
    assert top.evidence["share_of_time"] == pytest.approx(
        top.cost.high / spec["ms_per_token"], abs=1e-4
    )
    ratio = next(f for f in result.findings if f.rule == "verify-ratio")
    decode = S.runs(trace, "baseline")[0]["phases"]["decode"]["median_ms"]
    expected = expected_verify_ratio(trace["config"]).ratio
    # one verify per cycle: the excess per cycle is (measured - expected ratio) x decode
    assert ratio.evidence["excess_ms_per_cycle"] == pytest.approx(
        (2.4 - expected) * decode, abs=1e-3
    )


def test_eager_phase_says_the_trace_graph_mode_when_both_sides_are_eager():
    result = diagnose(Evidence.from_trace(S.healthy_trace(), "t.json"))
    [ruled] = [r for r in result.ruled_out if r.rule == "eager-phase"]
    assert "(graphs: none)" in ruled.reason and "like for like" in ruled.reason


def test_the_slower_finding_writes_its_arithmetic_and_speedup_out():
    trace = S.as_gpu_run(S.healthy_trace())
    for run in trace["runs"]:
        run.pop("repeats", None)
        run["tokens_per_s"] = 100.0 if run["mode"] == "baseline" else 80.0
    result = diagnose(Evidence.from_trace(trace, "t.json"))
    [slower] = [f for f in result.findings if f.rule == "speculative-slower"]
    assert "A cycle costs" in slower.detail and "to break even" in slower.detail
    trace["runs"][1]["tokens_per_s"] = 120.0
    result = diagnose(Evidence.from_trace(trace, "t.json"))
    [ruled] = [r for r in result.ruled_out if r.rule == "speculative-slower"]
    assert "(1.20x)" in ruled.reason


def test_tuned_and_untuned_are_compared_mode_by_mode_only():
    """tuned.json: untuned/tuned x baseline/speculative; one comparison per mode, never a
    baseline against a speculative run."""
    result = diagnose(Evidence.from_trace(S.recorded("tuned.json"), "t.json"))
    compared = [r for r in result.ruled_out if r.rule == "tuned-same-settings"]
    assert len(compared) == 2
    assert all(("baseline" in r.hypothesis) != ("speculative" in r.hypothesis) for r in compared)


def test_a_workers_own_environment_is_linted_with_its_own_nccl_version():
    """A value exported in the shell reaches the workers without being asked for: each worker's
    environment is linted, by that worker's NCCL version (NCCL_PROTO=allreduce:LL is 2.24+)."""
    trace = S.as_gpu_run(S.recorded("tuned.json"))
    trace["runs"] = S.runs(trace, label="untuned")
    for run in trace["runs"]:
        for worker, version in zip(run["workers"], ("2.24.3", "2.23.4")):
            worker["env_at_comm_init"] = {
                **worker["env_at_comm_init"],
                "NCCL_PROTO": "allreduce:LL",
            }
            worker["nccl_version"] = version
    result = diagnose(Evidence.from_trace(trace, "t.json"))
    [unsafe] = [f for f in result.findings if f.rule == "unsafe-settings"]
    assert all(place.endswith("rank 1") for place in unsafe.evidence["found_in"])
    assert "more" not in unsafe.detail  # two places: both named


def test_places_beyond_four_are_counted():
    """The unsafe-settings finding names up to four places, grouped by run, and counts the rest."""
    import copy

    def found_in(runs: int, versions=("2.24.3", "2.23.4")) -> str:
        trace = S.as_gpu_run(S.recorded("tuned.json"))
        one = S.runs(trace, label="untuned", mode="baseline")[0]
        trace["runs"] = [copy.deepcopy(one) for _ in range(runs)]
        for i, run in enumerate(trace["runs"]):
            run["label"] = f"run{i}"
            for worker, version in zip(run["workers"], versions):
                worker["env_at_comm_init"] = {
                    **worker["env_at_comm_init"],
                    "NCCL_PROTO": "allreduce:LL",  # unsafe before 2.24
                }
                worker["nccl_version"] = version
        result = diagnose(Evidence.from_trace(trace, "t.json"))
        [unsafe] = [f for f in result.findings if f.rule == "unsafe-settings"]
        return unsafe.detail.split("Found in ")[1].split(". ")[0]

    four = ", ".join(f"run{i} baseline (rank 1)" for i in range(4))
    assert found_in(4) == four
    assert found_in(5) == four + " and 1 more"
    assert found_in(1, ("2.23.4", "2.23.4")) == "run0 baseline (ranks 0, 1)"


def test_a_profiles_per_call_time_against_the_sweep():
    """Three calls in 100 us: 33.333 us per call, 1.67x a sweep time of 20 us (ruled out)."""
    from ncclprobe.evidence.run.view import Collective, EngineRun, Phase
    from ncclprobe.records import ResultRecord

    run = EngineRun(
        label="p",
        mode="baseline",
        source="profile",
        phases={"decode": Phase("decode", "decode", 3, 3.0, 1.0, graphed=False, device_ms=0.9)},
        collectives=[Collective("all_reduce", 16384, 3, time_us=100.0, phase="decode")],
    )
    sweep = [
        ResultRecord.from_record(
            {
                "config_id": "default",
                "collective": "all_reduce",
                "size_bytes": 16384,
                "mode": "graph",
                "settings": {},
                "nranks": 2,
                "time_us": 20.0,
            }
        )
    ]
    ev = Evidence(runs=[run], kind="profile", sweep=sweep, config={"tp": 2})
    [ruled] = [r for r in diagnose(ev).ruled_out if r.rule == "collectives-vs-sweep"]
    assert (
        "33.33 us per call in the profile, 1.67x the sweep's default 20.00 us (graph)"
        in ruled.reason
    )


def test_head_dim_from_the_config_wins_over_hidden_over_heads():
    """Gemma's shape: head_dim 256 while hidden/heads is 192."""
    from ncclprobe.diagnose.run.expectations import ModelShape

    shape = ModelShape.from_config(
        {
            "hidden": 3072,
            "layers": 28,
            "vocab": 256000,
            "heads": 16,
            "kv_heads": 16,
            "head_dim": 256,
            "intermediate": 24576,
        }
    )
    assert shape.kv_dim == 16 * 256 and shape.attention_params() == 2 * 3072 * 4096 * 2
    assert (
        ModelShape.from_config({"hidden": 3072, "layers": 28, "heads": 16, "kv_heads": 16}).kv_dim
        == 3072
    )


def test_next_commands_per_engine_and_repeats():
    from ncclprobe.diagnose.commands import engine_command, profile_command

    assert "VLLM_TORCH_PROFILER_DIR" in profile_command("vllm")
    assert "SGLANG_TORCH_PROFILER_DIR" in profile_command("sglang")
    assert "--repeats" not in engine_command({"preset": "tiny", "repeats": 1})
    assert "--repeats 3" in engine_command({"preset": "tiny", "repeats": 3})


def test_env_check_counts_the_findings_it_does_not_explain():
    from tests.test_diagnose_claims import _env_check

    doc = _env_check("NCCL_PROTO", "LL")
    doc["verdict"]["findings"] = [
        "pid 7: NCCL_ALGO missing",
        "pid 8: NCCL_ALGO missing",
        "pid 9: x",
    ]
    result = diagnose(
        Evidence.from_trace(S.healthy_trace(), "t.json", env_check=doc, env_check_path="e")
    )
    [found] = [f for f in result.findings if f.rule == "env-check"]
    assert found.title.endswith("(and 2 more)")


@pytest.mark.parametrize(
    "engine,says",
    [("sglang", "SGLang: keep CUDA graphs on"), ("vllm", "vLLM: serve with --compilation-config")],
)
def test_the_graphs_command_is_the_profiled_engines_own(engine, says):
    from ncclprobe.diagnose.commands import graphs_command

    ev = Evidence(runs=[], kind="profile", config={"engine": engine})
    assert graphs_command(ev, "verify").removeprefix("# ").startswith(says)


@pytest.mark.parametrize(
    ("source", "mode", "name"),
    [
        ("profile", "baseline", "p without speculation"),
        ("profile", "speculative", "p speculative"),
        ("engine-trace", "baseline", "p baseline"),  # the engine's own baseline run keeps its name
        ("server-log", "baseline", "p baseline"),
        ("profile", None, "p run"),
    ],
)
def test_only_a_profile_without_speculation_is_not_called_a_baseline(source, mode, name):
    from ncclprobe.evidence.run.view import EngineRun

    run = EngineRun(label="p", mode=mode, source=source)
    assert run.name() == name
    assert run.name("baseline") == f"baseline: {name}"
