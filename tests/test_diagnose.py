"""diagnose: each scenario's top finding, the healthy trace's silence, the ruled-out list."""

import copy
import json

import pytest
from click.testing import CliRunner

from ncclprobe.cli import cli
from ncclprobe.diagnose import Evidence, diagnose
from ncclprobe.diagnose.run.expectations import (
    ModelShape,
    distinct_experts,
    expected_verify_ratio,
    step_bytes,
)
from ncclprobe.records_writer import ResultWriter
from tests import diagnose_scenarios as S

LL = {"NCCL_PROTO": "LL"}


def run_diagnosis(trace, **extra):
    return diagnose(Evidence.from_trace(trace, "t.json", **extra))


def rules_of(items):
    return [item.rule for item in items]


def test_healthy_trace_has_nothing_above_info():
    result = run_diagnosis(S.healthy_trace())
    assert result.actionable() == []
    assert result.verdict().exit_code == 0
    assert "nccl-settings" in rules_of(result.ruled_out)


def test_seed_case_top_finding_is_eager_verify_with_its_cost():
    trace = S.make_seed_case(S.healthy_trace())
    result = run_diagnosis(trace)
    top = result.top
    assert (top.rule, top.evidence["phase"], top.severity) == ("eager-phase", "verify", "error")
    decode = S.runs(trace, "baseline", "untuned")[0]["phases"]["decode"]["median_ms"]
    verify = S.runs(trace, "speculative", "untuned")[0]["phases"]["verify"]["median_ms"]
    expected = decode * expected_verify_ratio(trace["config"]).ratio
    assert top.evidence["cost_ms_per_cycle"] == pytest.approx(verify - expected, abs=1e-3)
    assert "verify-ratio" in rules_of(result.findings)
    assert "--graphs all" in top.next_command
    # NCCL settings are identical in both runs: ruled out, as in the seed story
    assert any(r.rule == "nccl-settings" and "identical" in r.reason for r in result.ruled_out)


def test_seed_case_against_a_separate_baseline_trace():
    seed = S.make_seed_case(S.healthy_trace())
    spec_only = copy.deepcopy(seed)
    spec_only["runs"] = S.runs(spec_only, "speculative")
    base_only = copy.deepcopy(seed)
    base_only["runs"] = S.runs(base_only, "baseline")
    result = run_diagnosis(spec_only, baseline=base_only, baseline_path="b.json")
    assert result.top.rule == "eager-phase"
    assert "--baseline" in result.top.detail


def test_graphed_verify_far_above_expectation():
    result = run_diagnosis(S.make_all_graphed(S.healthy_trace(), verify_factor=2.4))
    assert result.top.rule == "verify-ratio"
    assert "eager-phase" in rules_of(result.ruled_out)


def test_graphed_verify_at_expectation_is_ruled_out():
    result = run_diagnosis(S.make_all_graphed(S.healthy_trace(), verify_factor=1.05))
    assert "verify-ratio" in rules_of(result.ruled_out)
    assert "verify-ratio" not in rules_of(result.findings)


def test_settings_lost_on_one_rank():
    result = run_diagnosis(S.lose_settings_on_rank(S.recorded("tuned.json"), rank=1))
    top = result.top
    assert (top.rule, top.severity) == ("settings-propagation", "error")
    assert {p["rank"] for p in top.evidence["problems"]} == {1}
    assert all(
        p["kind"] == "not-propagated" and p["variable"] == "NCCL_PROTO"
        for p in top.evidence["problems"]
    )


def test_settings_set_after_communicator_creation():
    """Recorded: `run-engine --env-after-init NCCL_PROTO=LL` has every worker set it only after its
    communicator exists; the workers' exit-time snapshot shows the value, the creation-time one not."""
    trace = S.recorded("set-after-init.json")
    assert all(
        w["env_at_comm_init"].get("NCCL_PROTO") is None and w["env_at_exit"]["NCCL_PROTO"] == "LL"
        for run in trace["runs"]
        for w in run["workers"]
    )
    top = run_diagnosis(trace).top
    assert top.rule == "settings-propagation"
    assert "after NCCL created its communicator" in top.title
    assert "per communicator" in top.detail  # NCCL_PROTO is re-read at each communicator creation
    assert "--env NCCL_PROTO=LL" in top.next_command
    assert "2 workers (ranks 0, 1)" in top.title  # every worker, not only the first one found


def test_text_report_shows_nested_evidence():
    """The per-rank problems and per-run speeds a finding rests on are dicts and lists: the text
    report must show them too, not only the flat numbers."""
    from ncclprobe.diagnose.render import text as render_text

    flat = lambda result: " ".join(render_text(result, 100).split())  # undo the line wrapping
    text = flat(run_diagnosis(S.recorded("set-after-init.json")))
    assert "rank=1, pid=" in text and "at_comm_init=<unset>" in text
    text = flat(run_diagnosis(S.recorded("untuned-inherits-settings.json")))
    assert "in_force_at_comm_init={NCCL_PROTO=LL}" in text
    assert "(76.1 vs 50.2 tok/s)" in text  # speeds rounded, not 16 digits


def test_recorded_untuned_run_inherited_the_tuned_settings():
    trace = S.recorded("untuned-inherits-settings.json")
    top = run_diagnosis(trace).top
    assert top.rule == "tuned-same-settings"
    assert top.evidence["in_force_at_comm_init"] == LL
    assert top.next_command.startswith("env -u NCCL_PROTO ")


def test_recorded_working_tuning_is_ruled_out():
    result = run_diagnosis(S.recorded("tuned.json"))
    assert not [
        f for f in result.findings if f.rule in ("tuned-same-settings", "settings-propagation")
    ]
    assert {"tuned-same-settings", "settings-propagation"} <= set(rules_of(result.ruled_out))


def test_recorded_collective_bound_run():
    result = run_diagnosis(S.recorded("collective-bound.json"))
    assert result.top.rule == "collective-bound"
    assert result.top.next_command.startswith("ncclprobe sweep --nranks 2 --sizes ")


def _sweep_file(tmp_path, time_us, sizes, settings=None):
    """A real results file (ResultWriter) with one eager all-reduce result per size."""
    path = tmp_path / "sweep.jsonl"
    with ResultWriter(path, {"kind": "sweep", "backend": "gloo", "nranks": 2}) as writer:
        for size in sizes:
            writer.write(
                {
                    "record": "result",
                    "config_id": "default",
                    "settings": settings or {},
                    "collective": "all_reduce",
                    "mode": "eager",
                    "in_place": True,
                    "dtype": "float32",
                    "size_bytes": size,
                    "count": size // 4,
                    "nranks": 2,
                    "status": "ok",
                    "reason": None,
                    "time_us": time_us,
                    "trials": 5,
                    "source": "sweep",
                }
            )
    from ncclprobe.evidence.bundle import load_sweep

    return load_sweep(path)


@pytest.mark.parametrize("time_us", [20.0, 20000.0])
def test_collectives_against_the_sweep(tmp_path, time_us):
    trace = S.recorded("collective-bound.json")
    sizes = sorted({s["size_bytes"] for run in trace["runs"] for s in run["collectives"]["sizes"]})
    result = run_diagnosis(
        trace, sweep=_sweep_file(tmp_path, time_us, sizes), sweep_path="sweep.jsonl"
    )
    for run in trace["runs"]:
        measured = run["collective_share"] * run["ms_per_token"]
        expected = (
            sum(s["count"] for s in run["collectives"]["sizes"])
            * time_us
            / 1000
            / run["new_tokens"]
        )
        name = f"{run['label']} {run['mode']}"
        found = [
            f
            for f in result.findings
            if f.rule == "collectives-vs-sweep" and f.title.startswith(name + ":")
        ]
        cleared = [
            r
            for r in result.ruled_out
            if r.rule == "collectives-vs-sweep" and r.hypothesis.startswith(name + ":")
        ]
        assert (len(found), len(cleared)) == ((1, 0) if measured / expected > 2.0 else (0, 1))
        if found:
            assert found[0].evidence["sweep_collective_ms_per_token"] == pytest.approx(
                expected, abs=1e-4
            )


def test_sweep_without_matching_settings_is_not_checked(tmp_path):
    trace = S.recorded("collective-bound.json")
    sweep = _sweep_file(tmp_path, 5.0, [256, 1024, 4096], settings={"NCCL_PROTO": "Simple"})
    result = run_diagnosis(trace, sweep=sweep, sweep_path="sweep.jsonl")
    assert "collectives-vs-sweep" in rules_of(result.not_checked)


def test_no_collectives_at_tp1_rules_out_the_sweep_comparison():
    assert "collectives-vs-sweep" in rules_of(run_diagnosis(S.healthy_trace()).ruled_out)


def test_step_bytes_by_hand():
    shape = ModelShape(hidden=4, layers=1, vocab=8, intermediate=8, heads=1, kv_heads=1)
    # attention 2*16 + 2*16 = 64, MLP 3*4*8 = 96, head 8*4 = 32 -> 192 weights; KV 2*4*10 = 80;
    # activations per token 8*4 + 3*8 = 56
    decode = step_bytes(shape, batch=1, tokens_per_seq=1, context=10, dtype_bytes=1)
    verify = step_bytes(shape, batch=1, tokens_per_seq=4, context=10, dtype_bytes=1)
    assert sum(decode.values()) == 192 + 80 + 56
    assert sum(verify.values()) == 192 + 80 + 4 * 56


def test_moe_verify_expectation_grows_with_experts():
    assert distinct_experts(384, 8, 1) == pytest.approx(8.0)
    assert distinct_experts(4, 4, 3) == pytest.approx(4.0)
    dense = {
        "hidden": 4096,
        "layers": 32,
        "vocab": 128256,
        "intermediate": 14336,
        "heads": 32,
        "kv_heads": 8,
    }
    moe = {
        "hidden": 7168,
        "layers": 4,
        "vocab": 163840,
        "heads": 64,
        "kv_heads": 8,
        "moe": True,
        "experts": 384,
        "top_k": 8,
        "expert_intermediate": 2048,
        "dense_layers": 1,
    }
    config = {"batch": 1, "k": 3, "prompt_len": 64, "new_tokens": 64, "dtype": "bfloat16"}
    dense_ratio = expected_verify_ratio({**config, "model": dense}).ratio
    moe_exp = expected_verify_ratio({**config, "model": moe})
    assert 1.0 < dense_ratio < 1.05
    routed = moe_exp.verify_bytes["routed_experts"] / moe_exp.decode_bytes["routed_experts"]
    assert routed == pytest.approx(
        distinct_experts(384, 8, 4) / 8
    )  # ~31 of 384 experts instead of 8
    assert moe_exp.ratio > 1.5


def write(tmp_path, name, doc):
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return str(path)


def test_cli_exit_codes_and_json(tmp_path):
    runner = CliRunner()
    healthy = write(tmp_path, "healthy.json", S.healthy_trace())
    seed = write(tmp_path, "seed.json", S.make_seed_case(S.healthy_trace()))
    ok = runner.invoke(cli, ["diagnose", "--trace", healthy])
    assert ok.exit_code == 0, ok.output
    assert "no findings" in ok.output and "ruled out:" in ok.output
    bad = runner.invoke(cli, ["diagnose", "--trace", seed, "--format", "json"])
    assert bad.exit_code == 1
    doc = json.loads(bad.output)
    assert doc["schema_version"] == 2 and doc["findings"][0]["rule"] == "eager-phase"
    cost = doc["findings"][0]["cost"]  # what kind of figure it is, and what time it covers
    assert cost["kind"] == "modelled" and cost["unit"] == "token" and cost["low"] <= cost["high"]
    assert doc["ledger"] and doc["ledger"][0]["attributed_ms"] <= doc["ledger"][0]["total_ms"]


def test_cli_rejects_a_file_that_is_not_a_trace(tmp_path):
    path = write(tmp_path, "other.json", {"kind": "sweep"})
    result = CliRunner().invoke(cli, ["diagnose", "--trace", path])
    assert result.exit_code == 2
    assert result.output.count("\n") == 1 and "not an engine trace" in result.output


@pytest.mark.parametrize("has,expect_finding", [("Simple", True), ("LL", False)])
def test_env_check_of_a_live_process(tmp_path, has, expect_finding):
    """A real `ncclprobe env-check --format json` of a live process with NCCL_PROTO=`has`."""
    import os
    import subprocess
    import sys

    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], env={**os.environ, "NCCL_PROTO": has}
    )
    try:
        out = CliRunner().invoke(
            cli,
            ["env-check", "--pid", str(child.pid), "--expect", "NCCL_PROTO=LL", "--format", "json"],
        )
    finally:
        child.kill()
        child.wait()
    env_check = json.loads(out.output)
    result = run_diagnosis(S.healthy_trace(), env_check=env_check, env_check_path="ec.json")
    found = [f for f in result.findings if f.rule == "env-check"]
    assert bool(found) == expect_finding
    if found:
        assert found[0].severity == "error" and "NCCL_PROTO different" in found[0].title
        assert f"--pid {child.pid}" in found[0].next_command
    else:
        assert "env-check" in rules_of(result.ruled_out)


def test_low_graph_coverage_with_graphs_on():
    trace = S.make_all_graphed(S.healthy_trace())
    for run in trace["runs"]:
        run["graph_coverage"] = 0.95
    assert "graph-coverage" in rules_of(run_diagnosis(trace).ruled_out)
    S.runs(trace, "speculative")[0]["graph_coverage"] = 0.4
    found = [f for f in run_diagnosis(trace).findings if f.rule == "graph-coverage"]
    assert len(found) == 1 and found[0].evidence["graph_coverage"] == 0.4


def test_low_graph_coverage_is_informational_when_every_capturable_phase_is_graphed():
    """Recorded on the H200 with --graphs all: 79% coverage because a 48-token run's prefill,
    the accept step and host time are eager by design; nothing is left to capture. The same run
    with its verify phase eager again is a warning."""
    trace = S.recorded("graphs-all.h200.json")
    found = [f for f in run_diagnosis(trace).findings if f.rule == "graph-coverage"]
    assert [(f.severity, f.evidence["eager_phases"]) for f in found] == [("info", ["accept"])]
    S.runs(trace, "speculative")[0]["phases"]["verify"]["graphed"] = False
    found = [f for f in run_diagnosis(trace).findings if f.rule == "graph-coverage"]
    assert [(f.severity, f.evidence["eager_phases"]) for f in found] == [
        ("warning", ["verify", "accept"])
    ]


@pytest.mark.parametrize(
    "nccl_read,kind",
    [
        ({"NCCL_PROTO": "LL"}, None),
        ({"NCCL_PROTO": "Simple"}, "read-other-value"),
        ({"NCCL_DEBUG_FILE": "/tmp/x"}, "not-read"),
    ],
)
def test_what_nccl_reported_reading(nccl_read, kind):
    """GPU traces carry NCCL's own `set by environment` lines per worker (workers[].nccl_read);
    this edit puts them into the recorded tuned trace's tuned runs, as NCCL would log them."""
    trace = copy.deepcopy(S.recorded("tuned.json"))
    for run in S.runs(trace, label="tuned"):
        for worker in run["workers"]:
            worker["nccl_read"] = dict(nccl_read)
    found = [f for f in run_diagnosis(trace).findings if f.rule == "settings-propagation"]
    if kind is None:
        assert found == []
    else:
        assert {p["kind"] for f in found for p in f.evidence["problems"]} == {kind}
        assert found[0].severity == ("warning" if kind == "not-read" else "error")


def test_recorded_sweep_against_recorded_engine_run():
    """Both inputs recorded on this machine (examples/traces/README.md): every run gets a verdict,
    and a finding exactly where the engine paid more than twice the sweep's time."""
    from ncclprobe.diagnose import load_evidence

    result = diagnose(
        load_evidence(
            S.TRACES / "collective-bound.json", sweep=S.TRACES / "collective-bound.sweep.jsonl"
        )
    )
    verdicts = [v for v in result.findings + result.ruled_out if v.rule == "collectives-vs-sweep"]
    assert len(verdicts) == 2
    for verdict in verdicts:
        if hasattr(verdict, "evidence"):
            assert verdict.evidence["ratio"] > 2.0
        else:
            assert "what the sweep measured" in verdict.reason


def test_slower_speculative_above_break_even_does_not_blame_the_draft():
    """Regression: on CPU the rule used to suggest train-draft whenever speculative was slower, even
    when each cycle already yielded more tokens than break-even (3.08 against 2.94 on a tiny trace).
    Then the loss is outside the cycle, and the next command must say so."""

    def slower_with(histogram):  # the healthy CPU trace, its speculative run made slower
        trace = S.healthy_trace()
        for run in trace["runs"]:
            run.pop("repeats", None)
            if run["mode"] == "speculative":
                run["tokens_per_s"], run["acceptance"]["histogram"] = 30.0, histogram
        result = diagnose(Evidence.from_trace(trace, "t.json"))
        [slower] = [f for f in result.findings if f.rule == "speculative-slower"]
        return slower

    below = slower_with([47, 0, 0, 0])  # nothing accepted: 1 token a cycle, break-even 2.20
    assert below.evidence["tokens_per_cycle"] < below.evidence["breakeven_tokens_per_cycle"]
    assert "a trained draft" in below.next_command
    above = slower_with([0, 0, 0, 47])  # all 3 accepted: 4 tokens a cycle
    assert above.evidence["tokens_per_cycle"] > above.evidence["breakeven_tokens_per_cycle"]
    # the draft the trace used is trained first only because it is not here; the advice is a longer run
    assert "a trained draft" not in above.next_command and "longer run" in above.next_command
    assert (
        above.next_command.split(" && ")[-1].startswith("ncclprobe run-engine")
        and "--new-tokens 512" in above.next_command
    )


def test_engine_traces_carry_the_shape_the_expectation_needs():
    """The trace's config.model (a preset's summary) must give every width and MoE count, so the
    expected verify/decode ratio uses the real shape: with Llama's MLP rule standing in for
    kimi-k2-slice's expert width (19200 instead of 2048) the expectation was 3.5x (flagged only
    above 5.2x) where the real shape gives 1.75x (flagged above 2.6x)."""
    from ncclprobe.engine.config import PRESETS, preset

    for name in PRESETS:
        config = {
            "model": preset(name).summary(),
            "batch": 1,
            "k": 3,
            "prompt_len": 128,
            "new_tokens": 128,
        }
        assert expected_verify_ratio(config).assumptions == (), name
    cfg = preset("kimi-k2-slice")
    exact = ModelShape(
        hidden=7168,
        layers=3,
        vocab=163840,
        intermediate=18432,
        heads=64,
        kv_heads=8,
        moe=True,
        experts=384,
        top_k=8,
        expert_intermediate=2048,
        shared_experts=1,
        dense_layers=1,
        head_dim=112,
    )
    config = {
        "model": cfg.summary(),
        "batch": 1,
        "k": 3,
        "prompt_len": 128,
        "new_tokens": 128,
        "dtype": "bfloat16",
    }
    common = dict(batch=1, context=192, dtype_bytes=2)
    ratio = sum(step_bytes(exact, tokens_per_seq=4, **common).values()) / sum(
        step_bytes(exact, tokens_per_seq=1, **common).values()
    )
    assert expected_verify_ratio(config).ratio == pytest.approx(ratio)
    assert expected_verify_ratio(config).ratio < 2.0


def _readme_rows():
    """(trace file, what diagnose must say) from the tables of examples/traces/README.md."""
    import re

    for line in (S.TRACES / "README.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        match = re.fullmatch(r"`([\w.-]+\.json)`", cells[0]) if len(cells) >= 3 else None
        if match:
            yield match.group(1), cells[-1]


def test_every_trace_gives_what_the_readme_says():
    """The README's claims, checked: `top finding X`, `nothing above informational`, and
    `A` and `B` ruled out, for every trace it lists (the recorded H200 ones included)."""
    import re

    from ncclprobe.diagnose import load_evidence

    rows = list(_readme_rows())
    assert {name for name, _ in rows} >= {
        "healthy.json",
        "collective-bound.json",
        "tuned.json",
        "set-after-init.json",
        "untuned-inherits-settings.json",
        "seed-graphs-decode.h200.json",
        "graphs-all.h200.json",
    }
    for name, claim in rows:
        result = diagnose(load_evidence(S.TRACES / name))
        top = re.search(r"top finding `([\w-]+)`", claim)
        if top:
            assert result.top is not None and result.top.rule == top.group(1), (name, claim)
        if "nothing above informational" in claim:
            assert result.actionable() == [], name
        ruled = re.search(r"((?:`[\w-]+`(?:,| and| or)? *)+) ruled out", claim)
        for rule in re.findall(r"`([\w-]+)`", ruled.group(1)) if ruled else []:
            assert rule in rules_of(result.ruled_out) and rule not in rules_of(
                result.actionable()
            ), (name, rule)
        assert top or ruled or "nothing above" in claim, (
            f"README row for {name} makes no checkable claim"
        )


def test_a_run_past_the_drafts_trained_positions():
    """The H200 run with the synthetic-chain target (examples/results/): its draft came from
    train-draft's defaults, 8 + 56 tokens, and the run reached position 272 with an acceptance of
    2.50 (4.00 in a 64-token run). The trace predates the config field, so the test sets it to those
    64 positions; then the field moved past the run, and away."""
    trace = json.loads(
        (S.TRACES.parent / "results" / "h200_small_synthetic_target_trace.json").read_text()
    )
    assert "draft_trained_positions" not in trace["config"]
    assert rules_of(run_diagnosis(trace).not_checked).count("draft-positions") == 1
    trace["config"]["draft_trained_positions"] = 64
    top = run_diagnosis(trace).top
    assert (top.rule, top.severity) == ("draft-positions", "warning")
    assert top.evidence["run_positions"] == 272 and top.evidence["mean_acceptance_length"] == {
        "untuned speculative": pytest.approx(2.50, abs=0.005)
    }
    assert "--checkpoint /tmp/ncclprobe-small-chain --gen-len 272" in top.next_command
    trace["config"]["draft_trained_positions"] = 272
    assert "draft-positions" in rules_of(run_diagnosis(trace).ruled_out)
    trace["config"]["draft"] = None  # no draft file: nothing to say
    result = run_diagnosis(trace)
    assert "draft-positions" not in rules_of(
        result.ruled_out + result.not_checked + result.actionable()
    )


def _with_settings(trace: dict, settings: dict, nccl_read: dict) -> dict:
    """Every run asked for `settings`, every worker had them at communicator creation, and NCCL's log
    (workers[].nccl_read) lists `nccl_read`: what a GPU run records."""
    for run in trace["runs"]:
        run["settings"] = dict(settings)
        for worker in run["workers"]:
            worker["env_at_comm_init"] = {**worker["env_at_comm_init"], **settings}
            worker["nccl_read"] = dict(nccl_read)
    return trace


def test_an_invalid_value_is_named_as_the_cause_first_once_for_every_run_and_rank():
    """NCCL_P2P_LEVEL=sys in all four runs of a tp 2 trace: one finding, first, saying why NCCL ignored
    it and what to write, confirmed by NCCL's own log; no second finding about the symptom."""
    trace = _with_settings(
        S.as_gpu_run(S.recorded("tuned.json")), {"NCCL_P2P_LEVEL": "sys"}, {"NCCL_NVLS_ENABLE": "0"}
    )
    result = run_diagnosis(trace)
    top = result.findings[0]
    assert (
        top.rule == "unsafe-settings"
        and "`sys` is not a level name" in top.title
        and "write `SYS`" in top.title
    )
    assert "NCCL's own log confirms it" in top.detail
    assert {place.partition(" rank ")[0] for place in top.evidence["found_in"]} == {
        "untuned baseline",
        "untuned speculative",
        "tuned baseline",
        "tuned speculative",
    }
    about = [f for f in result.findings if "NCCL_P2P_LEVEL" in f.title]
    assert about == [top]


def test_one_rank_says_nccl_never_reads_a_peer_setting_instead_of_not_read():
    trace = _with_settings(
        S.as_gpu_run(S.healthy_trace()), {"NCCL_PROTO": "LL"}, {"NCCL_NVLS_ENABLE": "0"}
    )
    [finding] = [f for f in run_diagnosis(trace).findings if f.rule == "settings-propagation"]
    assert (
        finding.severity == "info"
        and "cannot act on one rank, and NCCL did not read it there" in finding.title
    )
    assert "--tp 2" in finding.next_command
    assert "The same in 2 runs" in finding.detail  # baseline and speculative: one finding


LAUNCHER = """
import os, subprocess, sys, time
sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
early = subprocess.Popen(sleep)                      # started before the launcher set the variable
os.environ["NCCL_PROTO"] = "LL"                      # in-process: /proc of the launcher never shows it
late = [subprocess.Popen(sleep) for _ in range(2)]
print(early.pid, flush=True)
time.sleep(60)
"""


def test_env_check_names_the_worker_that_lacks_what_its_siblings_have(tmp_path):
    """A real launcher that sets NCCL_PROTO in-process after starting its first worker: that worker is
    named first, with the mechanism; the launcher's /proc is a caveat, not a finding."""
    import os
    import subprocess
    import sys
    import time

    import psutil

    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER],
        stdout=subprocess.PIPE,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "NCCL_PROTO"},
    )
    try:
        early = int(launcher.stdout.readline())
        while len(psutil.Process(launcher.pid).children()) < 3:
            time.sleep(0.05)
        out = CliRunner().invoke(
            cli,
            [
                "env-check",
                "--pid",
                str(launcher.pid),
                "--expect",
                "NCCL_PROTO=LL",
                "--format",
                "json",
            ],
        )
    finally:
        for child in psutil.Process(launcher.pid).children():
            child.kill()
        launcher.kill()
        launcher.wait()
    doc = json.loads(out.output)
    result = run_diagnosis(S.healthy_trace(), env_check=doc, env_check_path="ec.json")
    top = result.findings[0]
    assert (
        top.rule == "env-check-sibling"
        and f"pid {early}" in top.title
        and "1 of 3 workers" in top.title
    )
    assert "started before the launcher set the variable" in top.detail
    caveat = [f for f in result.findings if f.rule == "env-check-launcher"]
    assert caveat and caveat[0].severity == "info" and caveat[0].evidence["pid"] == launcher.pid
    assert not [
        f for f in result.findings if f.rule == "env-check"
    ]  # both missing lines are explained


def test_an_env_check_that_read_no_process_rules_nothing_out():
    doc = {
        "kind": "env-check",
        "root_pid": 1,
        "processes": [{"pid": 1, "readable": False, "env": None}],
        "verdict": {"checked_pids": [], "findings": []},
    }
    result = run_diagnosis(S.healthy_trace(), env_check=doc, env_check_path="ec.json")
    assert "env-check" not in rules_of(result.ruled_out)
    [missing] = [n for n in result.not_checked if n.rule == "env-check"]
    assert "env-check read 0 of the job's processes" in missing.missing


def _speeds(trace: dict, baseline: list, speculative: list) -> dict:
    """Repeats as `run-engine --repeats` records them, each run's tokens/s their median."""
    for run in trace["runs"]:
        rates = baseline if run["mode"] == "baseline" else speculative
        run["repeats"] = {"n": len(rates), "tokens_per_s": list(rates)}
        run["tokens_per_s"] = sorted(rates)[len(rates) // 2]
    return trace


@pytest.mark.parametrize(
    "baseline,speculative,verdict",
    [
        (
            [60.0, 120.0, 198.0],
            [90.0, 130.0, 150.0],
            "inconclusive",
        ),  # the shared machine's 60-198 tok/s
        ([60.0, 70.0, 80.0], [90.0, 130.0, 150.0], "ruled out"),
        ([160.0, 170.0, 180.0], [90.0, 130.0, 150.0], "slower"),
    ],
)
def test_speculative_against_baseline_is_judged_by_the_spread_of_the_repeats(
    baseline, speculative, verdict
):
    result = run_diagnosis(_speeds(S.healthy_trace(), baseline, speculative))
    found = [f for f in result.findings if f.rule == "speculative-slower"]
    ruled_out = "speculative-slower" in rules_of(result.ruled_out)
    if verdict == "inconclusive":
        assert not ruled_out and found[0].severity == "info" and "inconclusive" in found[0].title
        assert "--repeats 7" in found[0].next_command
    elif verdict == "ruled out":
        assert ruled_out and not found
    else:
        assert not ruled_out and found[0].severity == "warning" and found[0].confidence == "high"


def test_one_measurement_faster_never_rules_slower_out():
    trace = S.healthy_trace()
    for run in trace["runs"]:
        run["tokens_per_s"] = 100.0 if run["mode"] == "baseline" else 120.0
    result = run_diagnosis(trace)
    assert "speculative-slower" not in rules_of(result.ruled_out)
    [missing] = [n for n in result.not_checked if n.rule == "speculative-slower"]
    assert "one measurement each" in missing.missing and "--repeats 5" in missing.next_command
