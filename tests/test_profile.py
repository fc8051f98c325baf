"""diagnose --profile / --server-log: the readers on real traces and logs, every rule on its case
and its healthy twin, and every bad input a one-line exit 2."""

import gzip
import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from ncclprobe.cli import cli
from ncclprobe.diagnose import diagnose, load_evidence
from ncclprobe.errors import UsageProblem
from ncclprobe.evidence.run import load_runs, sniff
from ncclprobe.evidence.run.profile import names
from ncclprobe.evidence.run.profile.stream import read_events
from tests import profile_scenarios as P

# the shipped traces this module diagnoses are parsed once per session (conftest.py)
pytestmark = pytest.mark.usefixtures("shared_timelines")


def rules(items):
    return [i.rule for i in items]


def run_cli(args):
    result = CliRunner().invoke(cli, args)
    return result.exit_code, result.output


@pytest.fixture(scope="module")
def engine_profiles(tmp_path_factory):
    """One CPU recording per session: our engine, tiny, --tp 2, both modes, profiled (8 tokens)."""
    out = tmp_path_factory.mktemp("engine-profile")
    code, output = run_cli(
        [
            "-q",
            "run-engine",
            "--preset",
            "tiny",
            "--tp",
            "2",
            "-k",
            "3",
            "--new-tokens",
            "8",
            "--repeats",
            "1",
            "--profile",
            str(out / "p"),
            "--trace",
            str(out / "trace.json"),
        ]
    )
    assert code == 0, output
    return out


# ---- the reader ----------------------------------------------------------------------------


@pytest.mark.parametrize("path", [P.VLLM, P.SGLANG, P.DDP, P.H200_NCCL])
def test_streamed_events_are_json_loads(path):
    seen = []
    header = read_events(path, seen.append)
    doc = P.load(path)
    assert seen == doc["traceEvents"]
    assert header == {k: v for k, v in doc.items() if k != "traceEvents"}


def test_nccl_and_rccl_kernel_names():
    assert names.collective_kernel(
        "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
    ) == {"library": "NCCL", "op": "all_reduce", "algo": "RING", "proto": "LL", "dtype": "bfloat16"}
    assert names.collective_kernel(
        "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"
    ) == {"library": "NCCL", "op": "all_reduce", "algo": "RING", "proto": "LL", "dtype": "float32"}
    assert (
        names.collective_kernel("ncclDevKernel_ReduceScatter_Sum_f16_RING_LL128(x)")["proto"]
        == "LL128"
    )
    # C type names split by "_": the first as quoted in ROCm/roctracer#101, the second built the same way
    assert (
        names.collective_kernel(
            "ncclKernel_ReduceScatter_RING_LL_Sum___nv_bfloat16(ncclDevComm*, unsigned long, "
            "ncclWork*)"
        )["dtype"]
        == "bfloat16"
    )
    assert (
        names.collective_kernel("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)")["dtype"]
        == "int8"
    )
    assert (
        names.collective_kernel("ncclDevKernel_Generic(ncclDevComm*, channelMasks, ncclWork*)")[
            "op"
        ]
        == "unknown"
    )
    assert names.collective_kernel("void at::native::vectorized_elementwise_kernel<4>") is None
    assert (
        names.launch_kind("hipExtModuleLaunchKernel") == "kernel"
        and names.launch_kind("hipGraphLaunch") == "graph"
    )
    assert (
        names.launch_kind("cuLaunchKernelEx") == "kernel"
        and names.launch_kind("cudaGraphLaunch") == "graph"
    )


def test_step_annotations_of_each_engine():
    assert names.step_annotation("step[DECODE bs=32]")["kind"] == "decode"
    extend = names.step_annotation("step[EXTEND bs=15 toks=15360]")
    assert (extend["kind"], extend["batch"], extend["tokens_per_seq"]) == ("prefill", 15, 1024.0)
    vllm = names.step_annotation(
        "execute_32_context_0(sq0sk0sqsq0sqsk0)_generation_32(sq128sk55086sqsq32sqsk55086)"
    )
    assert (vllm["kind"], vllm["tokens_per_seq"], vllm["batch"]) == ("verify", 4.0, 32)
    assert names.step_annotation("ncclprobe::draft_extend")["kind"] == "draft"


def test_real_vllm_and_sglang_decodes_are_graph_replays_with_nothing_to_fix():
    # vLLM's annotation counts the step's query tokens; SGLang schedules speculative steps as DECODE
    # too, and a graph replay records no input shapes: its tokens per sequence stay unknown
    for path, engine, label, tokens in (
        (P.VLLM, "vllm", "execute[generation]", 1.0),
        (P.SGLANG, "sglang", "step[DECODE]", None),
    ):
        ev = load_evidence(profiles=[path])
        phase = ev.runs[0].phases[label]
        assert (
            ev.config["engine"],
            ev.config["rocm"],
            phase.graphed,
            phase.batch,
            phase.tokens_per_seq,
        ) == (engine, True, True, 32, tokens)
        result = diagnose(ev)
        assert result.actionable() == [], [f.title for f in result.findings]
        assert {"eager-launches", "host-bound", "nccl-settings"} <= set(rules(result.ruled_out))


def test_eager_and_replayed_nccl_kernels():
    """Recorded on the H200: eager kernels carry their size; replayed ones do not, and say so."""
    run = load_runs(profiles=[P.H200_NCCL]).runs[0]
    by_mode = {bool(c.graph): c for c in run.collectives}
    assert (by_mode[False].size_bytes, by_mode[False].count, by_mode[False].size_source) == (
        7168 * 2,
        10,
        "kernel args",
    )
    assert (by_mode[True].size_bytes, by_mode[True].count, by_mode[True].size_source) == (
        None,
        10,
        "unknown",
    )
    assert {(c.algo, c.proto, c.dtype) for c in run.collectives} == {("RING", "LL", "bfloat16")}
    assert any("sizes are unknown" in n for n in run.notes)
    # steps from the gaps: the eager burst and the replayed one are different costs, kept apart
    assert {n: p.graphed for n, p in run.phases.items()} == {
        "burst (kernel by kernel)": False,
        "burst": True,
    }


def test_training_trace_steps_and_collectives():
    run = load_runs(profiles=[P.DDP]).runs[0]
    assert run.phases["ProfilerStep"].count == 3 and run.phases["ProfilerStep"].graphed is False
    sizes = {c.size_bytes for c in run.collectives if c.op == "all_reduce"}
    assert 6637568 * 4 in sizes and all(c.size_source == "kernel args" for c in run.collectives)
    assert rules(diagnose(load_evidence(profiles=[P.DDP])).findings)[0] == "host-bound"


# ---- the seed case from profiles, and its healthy twin -----------------------------------------


def test_seed_case_from_profiles_names_the_eager_verify_with_its_cost(tmp_path):
    spec = P.write(P.unrolled_verify(P.load(P.VLLM)), tmp_path / "spec.json.gz")
    ev = load_evidence(profiles=[spec], baseline_profiles=[P.VLLM])
    result = diagnose(ev)
    top = result.top
    verify = ev.runs[0].first_of_kind("verify")
    assert (top.rule, top.evidence["phase"], verify.graphed, verify.tokens_per_seq) == (
        "eager-phase",
        "execute[generation, several tokens]",
        False,
        4.0,
    )
    # what capture saves: the eager step's GPU idle above the replayed step's (its host work stays)
    decode = ev.baseline[0].first_of_kind("decode")
    assert top.cost.high == pytest.approx(verify.idle_ms - decode.idle_ms)
    assert top.cost.high > 2.0 and top.confidence == "medium"
    assert "vLLM" in top.next_command and "cudagraph_mode" in top.next_command
    assert any(
        r.rule == "nccl-settings" and "no NCCL/RCCL kernel" in r.reason for r in result.ruled_out
    )
    twin = diagnose(load_evidence(profiles=[P.VLLM], baseline_profiles=[P.VLLM]))
    assert "eager-phase" not in rules(twin.findings) and twin.actionable() == []


def test_cli_on_profiles_text_and_json(tmp_path):
    spec = P.write(P.unrolled_verify(P.load(P.VLLM)), tmp_path / "spec.json.gz")
    code, out = run_cli(["diagnose", "--profile", str(spec), "--baseline-profile", str(P.VLLM)])
    assert code == 1 and "1. [" in out and "ms/step" in out and "GPU busy" in out
    code, out = run_cli(["diagnose", "--profile", str(P.VLLM), "--format", "json"])
    doc = json.loads(out)
    assert code == 0 and doc["evidence_kind"] == "profile" and doc["runs"][0]["phases"]


# ---- our engine, recorded on CPU -----------------------------------------------------------------


def test_engine_profile_steps_shapes_and_collectives(engine_profiles):
    trace = json.loads((engine_profiles / "trace.json").read_text())
    spec = sorted((engine_profiles / "p").glob("untuned-speculative-rank*.trace.json.gz"))
    base = sorted((engine_profiles / "p").glob("untuned-baseline-rank*.trace.json.gz"))
    assert len(spec) == len(base) == 2 and trace["profiles"]
    ev = load_evidence(profiles=spec, baseline_profiles=base)
    run, baseline = ev.runs[0], ev.baseline[0]
    recorded = next(r for r in trace["runs"] if r["mode"] == "speculative")
    assert run.phases["verify"].count == recorded["phases"]["verify"]["count"]
    assert (run.phases["verify"].tokens_per_seq, baseline.phases["decode"].tokens_per_seq) == (
        4.0,
        1.0,
    )
    assert baseline.phases["decode"].count == 7 and len(run.ranks) == 2
    decode_sizes = {c.size_bytes for c in baseline.collectives if c.phase == "decode"}
    trace_sizes = {
        s["size_bytes"]
        for r in trace["runs"]
        if r["mode"] == "baseline"
        for s in r["collectives"]["sizes"]
        if s["phase"] == "decode"
    }
    assert decode_sizes == trace_sizes
    result = diagnose(ev)
    # the CPU-only profile's host ops name what ran: gloo, on which no NCCL setting acts
    nccl = next(r.reason for r in result.ruled_out if r.rule == "nccl-settings")
    assert "ran on gloo" in nccl and "not NCCL" in nccl
    assert any("no GPU events" in n for n in result.notes)
    assert "eager-phase" in rules(result.not_checked)  # graphs cannot be known from a CPU profile


def test_profiles_of_different_jobs_are_refused(engine_profiles):
    rank1 = next((engine_profiles / "p").glob("untuned-baseline-rank1.trace.json.gz"))
    with pytest.raises(UsageProblem, match="different jobs"):
        load_runs(profiles=[P.H200_NCCL, rank1])
    with pytest.raises(UsageProblem, match="rank 0 appears in more than one"):
        load_runs(profiles=[P.H200_NCCL, P.DDP])


def test_profile_feeds_recommend_and_report(engine_profiles, tmp_path):
    base = sorted((engine_profiles / "p").glob("untuned-baseline-rank*.trace.json.gz"))
    from ncclprobe.recommend.workload import from_files

    workload = from_files(base)
    assert set(workload.counts) == {256, 4096} and workload.source.startswith("profile")
    from ncclprobe.recommend.workload import from_runs

    replayed = load_runs(profiles=[P.H200_NCCL]).runs[0]
    replayed.collectives = [
        c for c in replayed.collectives if c.graph
    ]  # only the graph replay's calls
    with pytest.raises(UsageProblem, match="unknown size"):
        from_runs([replayed])
    assert from_files([P.H200_NCCL]).unknown_calls == 10
    assert sniff(base[0]) == "profile" and sniff(engine_profiles / "trace.json") == "engine-trace"


def test_torch_1_8_category_names_read_as_today(tmp_path):
    """Old Kineto spelled the categories `Kernel`/`Runtime`/`Memcpy`/`Operator` and recorded
    `ProfilerStep#N` as an operator: the same steps, launches and collectives come out."""
    old = P.write(P.torch18_categories(P.load(P.DDP)), tmp_path / "ddp_torch18.json.gz")
    today, then = load_evidence(profiles=[P.DDP]).runs[0], load_evidence(profiles=[old]).runs[0]
    assert then.phases and {n: (p.count, p.launches) for n, p in then.phases.items()} == {
        n: (p.count, p.launches) for n, p in today.phases.items()
    }
    assert then.collective_share == pytest.approx(today.collective_share) and today.collective_share


def test_ranks_of_different_engines_are_refused_without_headers(tmp_path):
    """Without distributedInfo and a wall clock, the step annotations still tell two jobs apart."""
    bare = []
    for name, path in (("sglang", P.SGLANG), ("vllm", P.VLLM)):
        doc = P.load(path)
        for key in ("distributedInfo", "baseTimeNanoseconds"):
            doc.pop(key, None)
        bare.append(P.write(doc, tmp_path / f"{name}.json.gz"))
    with pytest.raises(UsageProblem, match="different engines"):
        load_evidence(profiles=bare)
    code, output = run_cli(["diagnose", "--profile", str(bare[0]), "--profile", str(bare[1])])
    assert code == 2 and len(output.strip().splitlines()) == 1


# ---- server logs --------------------------------------------------------------------------------


def test_sglang_log_says_what_it_cannot_prove():
    ev = load_evidence(server_logs=[P.LOGS / "sglang_eagle3_cuda_graph_true_issue11948.log"])
    run = ev.runs[0]
    assert (run.engine, run.mode, run.log["graph_true"], run.log["graph_lines"]) == (
        "sglang",
        "speculative",
        5,
        5,
    )
    assert run.acceptance.mean_length == pytest.approx((2.17 + 1.95 + 1.80 + 2.05 + 1.80) / 5)
    result = diagnose(ev)
    verify = next(n for n in result.not_checked if n.rule == "verify-captured")
    assert (
        "does not show whether the verify" in verify.missing
        and "SGLANG_TORCH_PROFILER_DIR" in verify.next_command
    )
    assert "log-graphs" in rules(result.ruled_out)


def test_sglang_batches_without_graphs_and_the_break_even():
    result = diagnose(
        load_evidence(server_logs=[P.LOGS / "sglang_spec_cuda_graph_false_fastrl_pr4.log"])
    )
    found = next(f for f in result.findings if f.rule == "log-graphs")
    assert found.severity == "warning" and "100% of decode batches" in found.title
    assert (
        next(f for f in result.findings if f.rule == "acceptance").evidence[
            "mean_acceptance_length"
        ]
        == 1.0
    )
    faster = diagnose(
        load_evidence(
            server_logs=[P.LOGS / "sglang_eagle3_cuda_graph_true_issue11948.log"],
            baseline_server_logs=[P.LOGS / "sglang_plain_decode_issue6949.log"],
        )
    )
    assert "speculative-slower" in rules(faster.ruled_out)
    slower = diagnose(
        load_evidence(
            server_logs=[P.LOGS / "sglang_spec_cuda_graph_false_fastrl_pr4.log"],
            baseline_server_logs=[P.LOGS / "sglang_eagle3_cuda_graph_true_issue11948.log"],
        )
    )
    assert not any(
        f.rule == "speculative-slower" for f in slower.findings
    )  # that "baseline" is speculative too


def test_vllm_logs_acceptance_capture_sizes_and_lowered_graph_mode():
    ev = load_evidence(server_logs=[P.LOGS / "vllm_0.22_mtp_spec_decoding_dgx_spark.log"])
    log = ev.runs[0].log
    assert (log["cudagraph_mode"], log["capture_sizes"], log["num_spec_tokens"]) == (
        "FULL_AND_PIECEWISE",
        [1, 2, 4, 8, 16, 24],
        2,
    )
    # each interval weighed by its drafted tokens, as the acceptance length is (engine_facts)
    drafted = (198, 26, 246, 1038, 1680)
    rates = (0.919, 0.769, 0.927, 0.850, 0.751)
    assert ev.runs[0].acceptance.per_position[0] == pytest.approx(
        sum(r * d for r, d in zip(rates, drafted)) / sum(drafted)
    )
    result = diagnose(ev)
    assert "capture-sizes" in rules(result.ruled_out) and "acceptance" in rules(result.ruled_out)
    lowered = diagnose(
        load_evidence(server_logs=[P.LOGS / "vllm_cudagraph_mode_lowered_tritonmla_tp2.log"])
    )
    top = lowered.top
    assert (top.rule, top.evidence["cudagraph_mode"], top.severity) == (
        "cudagraph-mode",
        "PIECEWISE",
        "warning",
    )


def test_vllm_logs_of_every_metrics_format_give_the_tokens_per_cycle():
    """The spec-decode line changed three times: V0's cumulative `Speculative metrics` counts, V1's
    first `Draft acceptance rate: 100.0%, Accepted: N tokens` (no mean length, no k), and the
    later lines with `Mean acceptance length` (vLLM's own, bonus included)."""
    v0 = load_evidence(
        server_logs=[P.LOGS / "vllm_0.6.3_v0_speculative_metrics_issue9539.log"]
    ).runs[0]
    # emitted / (drafted / k) = 10616 / (13311 / 3); vLLM's system efficiency 0.598 = that / (k + 1)
    assert (v0.engine, v0.mode) == ("vllm", "speculative")
    assert v0.acceptance.mean_length == pytest.approx(
        10616 * 3 / 13311
    ) and v0.acceptance.mean_length / 4 == pytest.approx(0.598, abs=1e-3)
    medusa = diagnose(
        load_evidence(server_logs=[P.LOGS / "vllm_0.5_v0_medusa_zero_acceptance_issue6768.log"])
    )
    low = next(f for f in medusa.findings if f.rule == "acceptance")
    assert (
        low.severity == "warning" and low.evidence["mean_acceptance_length"] == 1.0
    )  # the last (cumulative) line
    medusa_log = (
        load_evidence(server_logs=[P.LOGS / "vllm_0.5_v0_medusa_zero_acceptance_issue6768.log"])
        .runs[0]
        .log
    )
    assert (medusa_log["gen_tokens_per_s"], medusa_log["tokens_per_cycle_from"]) == (
        pytest.approx(118.9),
        "V0 counts",
    )
    newer = load_evidence(
        server_logs=[P.LOGS / "vllm_0.10_v1_specdecoding_throughput_pr24127.log"]
    ).runs[0]
    assert newer.acceptance.mean_length == 5.44 and newer.acceptance.per_position[-1] == 0.712
    first_v1 = load_evidence(
        server_logs=[P.LOGS / "vllm_0.8_v1_specdecoding_rate_only_pr15902.log"]
    )
    assert first_v1.runs[0].mode == "speculative" and first_v1.runs[0].acceptance is None
    result = diagnose(first_v1)
    assert "acceptance" in rules(result.not_checked) and not result.findings


def test_sglang_log_alone_shows_the_batch_that_outgrew_the_graphs():
    result = diagnose(
        load_evidence(
            server_logs=[P.LOGS / "sglang_decode_comma_graph_false_above_capture_pr13023.log"]
        )
    )
    top = result.top
    assert top.rule == "log-graphs" and "36, 46" in top.title and "(28)" in top.title
    assert "for the decode step" in top.next_command


def test_log_adds_acceptance_to_the_profile(tmp_path):
    ev = load_evidence(
        profiles=[P.VLLM], server_logs=[P.LOGS / "vllm_0.22_mtp_spec_decoding_dgx_spark.log"]
    )
    # weighted by the drafted tokens each log interval counted (engine_facts), not the lines' plain
    # mean of 2.518 (tests/test_engine_facts_source.py pins both)
    assert ev.runs[0].acceptance.mean_length == pytest.approx(2.421, abs=1e-3)
    assert ev.inputs["server_log"]


# ---- bad input: one line, exit 2 ----------------------------------------------------------------


def _bad_inputs(tmp_path):
    truncated = tmp_path / "truncated.json.gz"
    truncated.write_bytes(P.VLLM.read_bytes()[:5000])
    cut_json = tmp_path / "cut.json"
    cut_json.write_text(gzip.decompress(P.VLLM.read_bytes()).decode()[:20000])
    (tmp_path / "other.json").write_text('{"rows": [1, 2]}')
    (tmp_path / "empty.json").write_text('{"traceEvents": []}')
    (tmp_path / "text.json").write_text("hello")
    (tmp_path / "array.json").write_text('[{"ph": "X"}]')
    return [
        ("--profile", truncated, "truncated"),
        ("--profile", cut_json, "truncated"),
        ("--profile", tmp_path / "other.json", 'no "traceEvents"'),
        ("--profile", tmp_path / "empty.json", "no events"),
        ("--profile", tmp_path / "text.json", "not JSON"),
        ("--profile", tmp_path / "array.json", "array"),
        (
            "--server-log",
            P.PROFILES.parent / "nccl_logs" / "nccl_2.28.9_1x_h200_1rank_debug_subsys_all.log",
            "not an SGLang or vLLM server log",
        ),
    ]


def test_bad_inputs_are_one_line_exit_2(tmp_path):
    cases = _bad_inputs(tmp_path)
    for flag, path, message in cases:
        code, output = run_cli(["diagnose", flag, str(path)])
        assert code == 2 and message in output and output.count("\n") == 1, (path, output)
    flag, path, message = cases[0]  # and once as a real process: stderr only, nothing on stdout
    proc = subprocess.run(
        [sys.executable, "-m", "ncclprobe", "diagnose", flag, str(path)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and message in proc.stderr and proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1


def test_report_draws_a_profiled_run(engine_profiles, tmp_path):
    """report --trace takes the profiles of one run (one per rank): its engine section and step figure."""
    from ncclprobe.report import build_report

    sweep = P.PROFILES.parent.parent.parent / "examples" / "traces" / "collective-bound.sweep.jsonl"
    spec = sorted((engine_profiles / "p").glob("untuned-speculative-rank*.trace.json.gz"))
    files = build_report([sweep], tmp_path / "report", trace_path=spec)
    text = files.markdown.read_text()
    assert "profile:" in text and "verify" in text and "GPU busy" in text
    assert any(f.name == "phases" for f in files.figures)


def _sweep(tmp_path, time_us, size=7168 * 2):
    from ncclprobe.records_writer import ResultWriter

    path = tmp_path / f"sweep-{time_us}.jsonl"
    with ResultWriter(path, {"kind": "sweep", "backend": "nccl", "nranks": 2}) as writer:
        writer.write(
            {
                "record": "result",
                "config_id": "default",
                "settings": {},
                "collective": "all_reduce",
                "mode": "graph",
                "in_place": True,
                "dtype": "bfloat16",
                "size_bytes": size,
                "count": size // 2,
                "nranks": 2,
                "status": "ok",
                "reason": None,
                "time_us": time_us,
                "trials": 5,
                "source": "sweep",
            }
        )
    return path


@pytest.mark.parametrize("time_us,verdict", [(4500.0, "ruled out"), (1000.0, "finding")])
def test_profile_collectives_against_the_sweep(tmp_path, time_us, verdict):
    """The H200 eager all-reduce kernels (4.3 ms per call: two ranks time-slicing one GPU) against a
    sweep of the same size; the replayed calls of unknown size are not compared."""
    result = diagnose(load_evidence(profiles=[P.H200_NCCL], sweep=_sweep(tmp_path, time_us)))
    found = [f for f in result.findings if f.rule == "collectives-vs-sweep"]
    cleared = [r for r in result.ruled_out if r.rule == "collectives-vs-sweep"]
    assert (len(found), len(cleared)) == ((0, 1) if verdict == "ruled out" else (1, 0))
    if found:
        assert found[0].evidence["profile_us_per_call"] == pytest.approx(4300, rel=0.01)
        assert (
            found[0].evidence["launched"] == "RING/LL"
            and found[0].evidence["sweep_mode"] == "graph"
        )


def test_shared_gpu_sweep_of_other_sizes_is_not_a_match():
    sweep = P.PROFILES.parent.parent.parent / "examples" / "results" / "h200_share_gpu2_sweep.jsonl"
    result = diagnose(load_evidence(profiles=[P.H200_NCCL], sweep=sweep))
    missing = next(n for n in result.not_checked if n.rule == "collectives-vs-sweep")
    assert "within 2x of 14K" in missing.missing and "--sizes 14K" in missing.next_command


def test_model_config_gives_a_profile_the_expected_verify_cost(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps(
            {
                "model_type": "llama",
                "hidden_size": 4096,
                "num_hidden_layers": 32,
                "vocab_size": 128256,
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
                "intermediate_size": 14336,
            }
        )
    )
    spec = P.write(P.unrolled_verify(P.load(P.VLLM)), tmp_path / "spec.json.gz")
    ev = load_evidence(profiles=[spec], baseline_profiles=[P.VLLM], model_config=config)
    assert ev.config["k"] == 3 and ev.config["model"]["hidden"] == 4096
    top = diagnose(ev).top
    assert top.rule == "eager-phase" and top.evidence["expected_ratio"] > 1.0
    decode = ev.baseline[0].first_of_kind("decode").median_ms
    assert top.evidence["expected_graphed_verify_ms"] == pytest.approx(
        decode * top.evidence["expected_ratio"], rel=1e-3
    )


def _as_rank(doc: dict, rank: int, stretch: float = 1.0) -> dict:
    """The vLLM trace as rank `rank` of 2 (distributedInfo edited), its kernels `stretch` x longer."""
    t = json.loads(json.dumps(doc))
    t["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": 2}
    for e in t["traceEvents"]:
        if e.get("cat") == "kernel":
            e["ts"] = e["ts"] + (e["ts"] - 6520618861901.0) * (stretch - 1.0)
            e["dur"] *= stretch
    return t


@pytest.mark.parametrize(
    "stretch,slow,words",
    [
        (1.3, True, "rank 1's execute[generation] steps take 30% longer than rank 0's"),
        (1.112, True, "take 11% longer"),  # skew 1 - 1/1.112 = 0.1007: at SKEW_WARN
        (1.110, False, None),  # skew 0.0991: under it
        (1.0, False, None),
    ],
    ids=[
        "30pct",
        "at-threshold",
        "under-threshold",
        "same",
    ],  # plain ids: node ids a tool can pass on
)
def test_a_lagging_rank_is_named(tmp_path, stretch, slow, words):
    """The vLLM trace has no collective kernels to match: the step-time skew decides, titled with
    the arithmetic it shows ((slow - fast) / fast longer; the threshold is on (slow - fast) / slow)."""
    doc = P.load(P.VLLM)
    ranks = [
        P.write(_as_rank(doc, 0), tmp_path / "r0.json.gz"),
        P.write(_as_rank(doc, 1, stretch), tmp_path / "r1.json.gz"),
    ]
    result = diagnose(load_evidence(profiles=ranks))
    if slow:
        found = next(f for f in result.findings if f.rule == "rank-skew")
        assert words in found.title and found.severity == "warning"
        assert found.confidence == "low"  # waiting cannot be told from working without collectives
    else:
        # alike step times rule no late rank out (ranks that synchronise take the same time):
        # who arrives last would tell, and no collective is there to show it
        assert "rank-skew" in rules(result.not_checked)
        assert "rank-skew" not in rules(result.ruled_out)


def test_run_engine_refuses_an_existing_profile_before_running(tmp_path):
    """An earlier profile, or any file: a stale rank beside new ones would be read as this run's."""
    (tmp_path / "p").mkdir()
    for name in ("untuned-baseline-rank0.trace.json.gz", "notes.txt"):
        (tmp_path / "p" / name).write_bytes(b"x")
        code, output = run_cli(["run-engine", "--preset", "tiny", "--profile", str(tmp_path / "p")])
        assert (
            code == 2 and "is not empty" in output and (tmp_path / "p" / name).read_bytes() == b"x"
        )
        (tmp_path / "p" / name).unlink()


def test_a_decode_annotated_step_with_a_multi_token_forward_is_speculative(
    engine_profiles, tmp_path
):
    """SGLang schedules a speculative step as DECODE; the recorded shapes show its k+1-token verify.
    Edit: our engine's CPU profile with each `ncclprobe::verify` annotation renamed `step[DECODE bs=1]`
    and the other phases' annotations dropped (one SGLang-like step per cycle)."""
    path = next((engine_profiles / "p").glob("untuned-speculative-rank0.trace.json.gz"))
    doc = P.load(path)
    events = []
    for e in doc["traceEvents"]:
        if e.get("cat") == "user_annotation" and e["name"].startswith("ncclprobe::"):
            if e["name"] != "ncclprobe::verify":
                continue
            e = {**e, "name": "step[DECODE bs=1]"}
        events.append(e)
    doc["traceEvents"] = events
    run = load_runs(profiles=[P.write(doc, tmp_path / "sglang-like.json.gz")]).runs[0]
    phase = run.phases["step[DECODE] (4 tokens/seq: speculative)"]
    assert (phase.kind, phase.tokens_per_seq, run.mode, run.engine) == (
        "verify",
        4.0,
        "speculative",
        "sglang",
    )


def test_a_baseline_of_unknown_step_kind_still_counts_when_it_replays_graphs(tmp_path):
    """A compiled, graph-replayed baseline (Hugging Face static cache + reduce-overhead) records no
    input shapes, so its steps keep the kind `other`: its graph replay is still the reference.
    Edit: the vLLM trace's annotation renamed `ProfilerStep#3`."""
    spec = P.write(P.unrolled_verify(P.load(P.VLLM)), tmp_path / "spec.json.gz")
    base = P.load(P.VLLM)
    for e in base["traceEvents"]:
        if e.get("cat") == "user_annotation":
            e["name"] = "ProfilerStep#3"
    result = diagnose(
        load_evidence(profiles=[spec], baseline_profiles=[P.write(base, tmp_path / "base.json.gz")])
    )
    assert (result.top.rule, result.top.evidence["reference_phase"]) == (
        "eager-launches",
        "ProfilerStep",
    )
    assert result.top.cost.high > 2.0 and "nccl-settings" in rules(result.ruled_out)
