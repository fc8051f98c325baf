"""Server-log thresholds pinned at their boundaries, on hand-written logs in the engines' own line
formats (tests/fixtures/server_logs/handwritten_*, INDEX.md says what each plants): the capture-size
cut (`>`: a batch equal to the largest captured size fits), in vLLM's unit (tokens: requests x
(1 + k) with speculative decoding), SGLang's warm-up interval, vLLM V1's 1 + accepted x k / drafted."""

import re

import pytest

from ncclprobe.diagnose import diagnose, load_evidence
from ncclprobe.evidence.run.serverlog import read_log

LOGS = __import__("pathlib").Path(__file__).parent / "fixtures" / "server_logs"
VLLM_K3 = LOGS / "handwritten_vllm_v1_spec_k3_capture_tokens.log"
SGLANG = LOGS / "handwritten_sglang_warmup_interval.log"


def _capture(result, kind):
    items = {
        "finding": result.findings,
        "ruled out": result.ruled_out,
        "not checked": result.not_checked,
    }
    return [i for i in items[kind] if i.rule == "capture-sizes"]


def test_vllm_counts_capture_sizes_in_tokens_of_every_speculative_request():
    """4 requests x (1 + 3) = 16 tokens fit the largest captured size 16 (the boundary); 5 x 4 = 20
    do not, although 5 requests are far below 16."""
    result = diagnose(load_evidence(server_logs=[VLLM_K3]))
    [found] = _capture(result, "finding")
    assert "1 of 2 logged intervals" in found.title and "(16 tokens)" in found.title
    assert "5 requests (20 tokens)" in found.detail and "4 requests" not in found.detail
    assert found.evidence["step_sizes"] == {4: 16, 5: 20}
    assert not _capture(result, "ruled out")


def test_vllm_speculative_without_k_does_not_rule_capture_sizes_out(tmp_path):
    text = VLLM_K3.read_text().replace("num_spec_tokens=3", "draft_tokens_unknown")
    log = tmp_path / "no_k.log"
    log.write_text(text)
    result = diagnose(load_evidence(server_logs=[log]))
    assert not _capture(result, "ruled out") and not _capture(result, "finding")
    [missing] = _capture(result, "not checked")
    assert "1 + k tokens per request" in missing.missing


def test_a_plain_vllm_server_counts_one_token_per_request(tmp_path):
    plain = tmp_path / "plain.log"
    plain.write_text(
        "\n".join(
            line.replace("Running: 5 reqs", "Running: 16 reqs")
            for line in VLLM_K3.read_text().splitlines()
            if "SpecDecoding" not in line
        ).replace(
            "speculative_config=SpeculativeConfig(method='eagle3', model='example/draft', num_spec_tokens=3), ",
            "",
        )
    )
    result = diagnose(load_evidence(server_logs=[plain]))
    assert read_log(plain)["speculative"] is False
    [ruled] = _capture(result, "ruled out")  # 16 requests = 16 tokens: the boundary fits
    assert "up to 16 requests) is within the largest captured size 16" in ruled.reason
    plain.write_text(plain.read_text().replace("Running: 16 reqs", "Running: 17 reqs"))
    assert _capture(diagnose(load_evidence(server_logs=[plain])), "finding")


def test_sglang_capture_boundary_is_batch_size():
    """cuda_graph_max_bs=4: the four intervals at batch 4 fit (equal is within), the one at 5 not."""
    result = diagnose(load_evidence(server_logs=[SGLANG]))
    [found] = _capture(result, "finding")
    assert (
        "1 of 5 logged intervals" in found.title and "Batches of 5 requests exceed" in found.detail
    )


def test_sglang_first_interval_is_warm_up_and_counts_for_no_throughput():
    log = read_log(SGLANG)
    assert log["gen_tokens_per_s"] == 103.0  # median of 100, 104, 106, 102: not the 2.00 warm-up
    assert log["tokens_per_s_values_by_batch"] == {4: [100.0, 104.0, 106.0], 5: [102.0]}
    assert log["tokens_per_s_by_batch"] == {4: 104.0, 5: 102.0}
    assert log["batch_sizes"] == {4: 4, 5: 1}  # the warm-up batch still ran at batch 4


def test_sglang_single_interval_is_kept(tmp_path):
    one = tmp_path / "one.log"
    one.write_text(
        "[2026-01-01 10:00:05 TP0] Decode batch. #running-req: 4, #token: 400, token usage: 0.01, "
        "cuda graph: True, gen throughput (token/s): 2.00, #queue-req: 0\n"
    )
    assert read_log(one)["gen_tokens_per_s"] == 2.0


def test_vllm_v1_counts_give_one_plus_accepted_k_over_drafted():
    run = load_evidence(server_logs=[VLLM_K3]).runs[0]
    assert run.acceptance.mean_length == pytest.approx(1 + 240 * 3 / 300)  # 3.4
    assert read_log(VLLM_K3)["tokens_per_cycle_from"] == "accepted and drafted counts"


def test_a_graph_mode_lowered_to_none_is_an_error(tmp_path):
    """vLLM's start-up warning that switches graphs off entirely: no step runs from a graph."""
    log = tmp_path / "none.log"
    log.write_text(
        VLLM_K3.read_text()
        + "(EngineCore pid=282) WARNING 01-01 10:00:01 [compilation.py:455] cudagraph_mode is not "
        "supported with spec-decode for this backend; setting cudagraph_mode=NONE\n"
    )
    [lowered] = [
        f for f in diagnose(load_evidence(server_logs=[log])).findings if f.rule == "cudagraph-mode"
    ]
    assert (lowered.severity, lowered.evidence["cudagraph_mode"]) == ("error", "NONE")
    assert "no step runs from a graph" in lowered.detail


def test_only_the_runs_own_log_is_judged_for_acceptance(tmp_path):
    """The baseline log's acceptance is not the run's: only the speculative log is judged."""
    low = tmp_path / "base.log"
    low.write_text(
        SGLANG.read_text().replace("cuda graph: True", "accept len: 1.00, cuda graph: True")
    )
    result = diagnose(load_evidence(server_logs=[VLLM_K3], baseline_server_logs=[low]))
    assert not [f for f in result.findings if f.rule == "acceptance"]
    assert [r.rule for r in result.ruled_out].count("acceptance") == 1  # the run's 3.4


def test_sglang_gives_k_from_its_server_args_and_only_from_a_number(tmp_path):
    """SGLang logs `speculative_num_steps=3` among its ServerArgs: the draft tokens per cycle the
    verify step's size follows (diagnose.expectations); a value that is no number gives no k."""
    args = (
        "[2026-01-01 10:00:00] server_args=ServerArgs(model_path='example/model', tp_size=1, "
        "speculative_algorithm='EAGLE3', speculative_num_steps={}, speculative_eagle_topk=1, "
        "speculative_num_draft_tokens=4)\n"
    )
    decode = SGLANG.read_text().split("\n", 3)[3]  # the hand-written decode lines
    for value, k in (("3", 3), ("'x3'", None)):
        log = tmp_path / f"k_{k}.log"
        log.write_text(args.format(value) + decode)
        ev = load_evidence(server_logs=[log])
        assert ev.config.get("k") == k
        assert read_log(log)["speculative_algorithm"] == "EAGLE3"


_SPEC_LINE = (
    "(APIServer pid=1) INFO 01-01 10:00:{s:02d} [metrics.py:101] SpecDecoding metrics: Mean "
    "acceptance length: {mean:.2f}, Accepted throughput: 1.00 tokens/s, Drafted throughput: 1.00 "
    "tokens/s, Accepted: {acc} tokens, Drafted: {drafted} tokens, Per-position acceptance rate: "
    "{rates}, Avg Draft acceptance rate: 50.0%\n"
)


def _k3_log(tmp_path, intervals, counts=True):
    """A vLLM V1 log (k=3) of SpecDecoding lines: each interval (drafts, its accepted per position)."""
    text = ""
    for s, (drafts, accepted) in enumerate(intervals):
        line = _SPEC_LINE.format(
            s=s,
            mean=1 + sum(accepted) / drafts,
            acc=sum(accepted),
            drafted=3 * drafts,
            rates=", ".join(f"{a / drafts:.3f}" for a in accepted),
        )
        text += line if counts else line.replace(f"Drafted: {3 * drafts} tokens, ", "")
    path = tmp_path / "k3.log"
    path.write_text(text)
    return path


def test_per_position_rates_weigh_each_interval_by_its_drafts_as_the_length_does(tmp_path):
    """A short interval (1 draft, both first positions kept) beside a long one (200 drafts): the
    run's per-position rates are the engine's own ratios, accepted at each position over all drafts,
    so 1 + their sum is the run's acceptance length, also as both are printed."""
    log = read_log(_k3_log(tmp_path, [(200, (60, 30, 10)), (1, (1, 1, 0))]))
    assert log["per_position"] == pytest.approx([61 / 201, 31 / 201, 10 / 201], abs=1e-6)
    assert 1 + sum(log["per_position"]) == pytest.approx(log["tokens_per_cycle"], abs=1e-6)
    [ruled] = [
        r
        for r in diagnose(
            load_evidence(server_logs=[_k3_log(tmp_path, [(200, (60, 30, 10)), (1, (1, 1, 0))])])
        ).ruled_out
        if r.rule == "acceptance"
    ]
    assert ruled.reason == "1.51 tokens per cycle (per position 0.30, 0.15, 0.05)"
    length, *rates = (float(x) for x in re.findall(r"[0-9]+\.[0-9]+", ruled.reason))
    assert abs(1 + sum(rates) - length) <= 0.005 * (1 + len(rates))  # as printed, within rounding


def test_per_position_rates_of_equal_intervals_or_without_counts_are_their_mean(tmp_path):
    """The healthy twin: intervals of equal drafts weigh the same (the plain mean); without the
    counts no weight is known, and the acceptance length falls back to the plain mean with them."""
    even = read_log(_k3_log(tmp_path, [(100, (50, 20, 10)), (100, (30, 20, 0))]))
    assert even["per_position"] == pytest.approx([0.4, 0.2, 0.05])
    bare = read_log(_k3_log(tmp_path, [(200, (60, 30, 10)), (1, (1, 1, 0))], counts=False))
    assert bare["tokens_per_cycle_weighted_by"] is None
    assert bare["per_position"] == pytest.approx([0.65, 0.575, 0.025])
    assert 1 + sum(bare["per_position"]) == pytest.approx(bare["tokens_per_cycle"], abs=0.01)


def test_per_position_rates_of_a_real_log_add_up_to_its_acceptance_length():
    """vLLM's DGX Spark log (five intervals of 26 to 246 drafted tokens): 1 + the weighted rates is
    the weighted length, within the rounding of the printed values (2 and 3 decimals)."""
    log = read_log(LOGS / "vllm_0.22_mtp_spec_decoding_dgx_spark.log")
    assert 1 + sum(log["per_position"]) == pytest.approx(log["tokens_per_cycle"], abs=0.01)
