"""The readers' edges the mutation run found untested (issue 28 §4): the engine trace's size limit,
self-checks and labels, strings read from JSON compared by value, a model config's zero counts,
vLLM's acceptance rate in percent, nccl-tests rows that are not rows."""

import json
from pathlib import Path

import pytest

from ncclprobe.errors import UsageProblem
from ncclprobe.evidence.run import trace as T

FIX = Path(__file__).parent / "fixtures"
TRACE = FIX / "traces" / "handwritten_seed_case_tp2_h200.json"


def test_a_trace_of_a_few_megabytes_is_read(tmp_path):
    """Traces are kilobytes; the limit is 512 MiB, far above a 3 MB one."""
    doc = json.loads(TRACE.read_text())
    doc["padding"] = "x" * (3 << 20)
    path = tmp_path / "big.json"
    path.write_text(json.dumps(doc))
    assert T.load_trace(path)["padding"] == doc["padding"]
    assert T.MAX_BYTES == 512 << 20


def test_verify_is_linked_to_its_labels_decode_with_modes_read_from_json():
    runs = json.loads(TRACE.read_text())["runs"]  # mode strings as any reader gets them
    for run in runs:
        run.pop("verify_decode_ratio")
    T.link_verify_to_decode(runs)
    assert runs[1]["verify_decode_ratio"] == pytest.approx(29.0 / 12.0)
    assert "verify_decode_ratio" not in runs[0]


def test_tuned_comparison_reads_the_device_by_value():
    """A device string parsed from JSON is equal to "cuda", not the same object."""
    rows = [
        {"label": label, "mode": "baseline", "tokens_per_s": rate, "phases": {}}
        for label, rate in (("untuned", 100.0), ("tuned", 103.0))
    ]
    device = json.loads('{"device": "cuda"}')["device"]
    assert T.compare_tuned(rows, device=device)[0]["noise_rule"]["floor"] == 0.05
    assert T.compare_tuned(rows, device="cpu")[0]["noise_rule"]["floor"] == 0.5


def test_the_greedy_self_check_and_its_matched_prefix():
    a, b = [[1, 2, 3, 4]], [[1, 2, 9, 9]]
    runs = [
        {"label": "untuned", "mode": "baseline", "tokens": a, "ranks_agree": True, "settings": {}},
        {
            "label": "untuned",
            "mode": "speculative",
            "tokens": b,
            "ranks_agree": True,
            "settings": {},
        },
    ]
    checks = T.checks(0.0, runs)
    assert (checks["greedy_match"], checks["greedy_matched_prefix"]) == (False, 0.5)
    doc = {"checks": checks, "config": {"dtype": "float32"}}
    assert T.verdict(doc).exit_code == 1  # float32 greedy output must equal the baseline
    runs[1]["tokens"] = a
    doc["checks"] = T.checks(0.0, runs)
    assert doc["checks"]["greedy_matched_prefix"] == 1.0 and T.verdict(doc).exit_code == 0


def test_labels_of_traces_side_by_side_stay_apart():
    assert T._unique(["a", "a"], ["x", "x"]) == ["a (x) #1", "a (x) #2"]
    assert T._unique(["a", "a"], ["x", "y"]) == ["a (x)", "a (y)"]
    assert T._unique(["a", "b"], ["x", "x"]) == ["a", "b"]


def test_a_model_configs_zero_count_is_no_count(tmp_path):
    from ncclprobe.evidence.run.model_config import read_model_config

    config = tmp_path / "config.json"
    config.write_text(
        json.dumps(
            {
                "hidden_size": 64,
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "num_key_value_heads": 0,
            }
        )
    )
    model = read_model_config(config)
    assert model["hidden"] == 64 and model.get("kv_heads") is None
    config.write_text(json.dumps({"hidden_size": 64, "num_hidden_layers": 0}))
    with pytest.raises(UsageProblem, match="no hidden_size and num_hidden_layers"):
        read_model_config(config)


def test_vllm_acceptance_rate_in_percent():
    from ncclprobe.evidence.run.serverlog import read_log

    log = read_log(FIX / "server_logs" / "vllm_0.22_mtp_spec_decoding_dgx_spark.log")
    assert log["accept_rate"] == pytest.approx((85.4 + 65.4 + 87.8 + 77.6 + 62.9) / 500)


def test_a_row_with_a_word_in_a_number_column_is_no_row():
    from ncclprobe.evidence.nccl_tests import parse_nccl_tests

    text = (FIX / "nccl_tests" / "handwritten_allreduce_2ranks_cputime_C1.txt").read_text()
    broken = text.replace("     8.50   20.97", "     oops   20.97")
    run = parse_nccl_tests(broken)
    assert [row.size_bytes for row in run.rows] == [1024]


def test_json_cpu_time_without_bandwidth_has_no_completion_time():
    from ncclprobe.evidence.nccl_tests_json import _measurement

    m = _measurement({"cpu_time": 8.5, "alg_bw": 0.0, "bus_bw": 0.0, "nwrong": 0}, None, 8)
    assert (m.time_us, m.cpu_time_us) == (None, 8.5)


def test_json_per_iteration_timing_is_read():
    """nccl-tests -J with -I (recorded on the H200): the flag and every row's 100 samples."""
    from ncclprobe.evidence.nccl_tests_json import parse_nccl_tests_json

    path = FIX / "nccl_tests" / "allreduce_1x_h200_1rank_nccltests2.19.6_eager_I_same_run.json"
    run = parse_nccl_tests_json(path.read_text())
    assert run.params["per_iter"] == 1
    first = run.rows[0].out_of_place.iteration
    assert (first["samples"], first["min_us"], first["p99_us"]) == (100, 5.728, 10.08)


def test_a_text_of_runs_without_rows_says_why_the_first_failed():
    """Every run of the text refused: the first run's own reason is the error, not a generic one."""
    from ncclprobe.evidence.nccl_tests_split import parse_runs

    text = (FIX / "nccl_tests" / "handwritten_allreduce_2ranks_cputime_C1.txt").read_text()
    no_rows = "\n".join(
        line for line in text.splitlines() if not line.strip().startswith(("1024 ", "1048576 "))
    )
    for copies in (1, 2):
        with pytest.raises(UsageProblem, match="no result rows found"):
            parse_runs((no_rows + "\n") * copies)


def test_a_line_right_after_the_func_proto_algo_matrix_is_still_read():
    """The real 2.27.3 matrix, ended by the next NCCL line instead of a blank one: that line is read."""
    from ncclprobe.evidence.nccl_log import parse_nccl_log

    lines = (
        (FIX / "nccl_logs" / "nccl_2.27.3_4x_l40s_g6e48xlarge_1pod_shm.log")
        .read_text()
        .splitlines()
    )
    start = next(i for i, line in enumerate(lines) if "Func/Proto/Algo Matrix" in line)
    matrix = lines[start : start + 7]  # the announcement, the header, five functions
    env = "llama-3-8b-node-0-0:232:679 [0] NCCL INFO NCCL_ALGO set by environment to Ring"
    log = parse_nccl_log("\n".join([*matrix, env]) + "\n")
    assert log.enabled_matrix["AllReduce"]["protocols"] == ["SIMPLE"]
    assert log.env["NCCL_ALGO"] == "Ring"
