"""The readers' edges the mutation run found untested (issue 28 §4): the engine trace's size limit,
self-checks and labels, strings read from JSON compared by value, a model config's zero counts,
vLLM's acceptance rate in percent, nccl-tests rows that are not rows."""

import json
from pathlib import Path

import pytest

from ncclprobe.errors import UsageProblem
from ncclprobe.evidence.run import trace as T
from ncclprobe.evidence.run import trace_checks as TC

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
    TC.link_verify_to_decode(runs)
    assert runs[1]["verify_decode_ratio"] == pytest.approx(29.0 / 12.0)
    assert "verify_decode_ratio" not in runs[0]


def test_verify_is_linked_with_modes_as_the_engine_writes_them():
    """In process the engine's runner writes Mode members, not strings: the same link."""
    from ncclprobe.evidence.run.modes import Mode

    runs = json.loads(TRACE.read_text())["runs"]
    runs[0]["mode"], runs[1]["mode"] = Mode.BASELINE, Mode.SPECULATIVE
    TC.link_verify_to_decode(runs)
    assert runs[1]["verify_decode_ratio"] == pytest.approx(29.0 / 12.0)


def test_tuned_comparison_reads_the_device_by_value():
    """A device string parsed from JSON is equal to "cuda", not the same object."""
    rows = [
        {"label": label, "mode": "baseline", "tokens_per_s": rate, "phases": {}}
        for label, rate in (("untuned", 100.0), ("tuned", 103.0))
    ]
    device = json.loads('{"device": "cuda"}')["device"]
    assert TC.compare_tuned(rows, device=device)[0]["noise_rule"]["floor"] == 0.05
    assert TC.compare_tuned(rows, device="cpu")[0]["noise_rule"]["floor"] == 0.5


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
    checks = TC.checks(0.0, runs)
    assert (checks["greedy_match"], checks["greedy_matched_prefix"]) == (False, 0.5)
    doc = {"checks": checks, "config": {"dtype": "float32"}}
    assert TC.verdict(doc).exit_code == 1  # float32 greedy output must equal the baseline
    runs[1]["tokens"] = a
    doc["checks"] = TC.checks(0.0, runs)
    assert doc["checks"]["greedy_matched_prefix"] == 1.0 and TC.verdict(doc).exit_code == 0


def test_labels_of_traces_side_by_side_stay_apart(tmp_path):
    """Each trace's tag names what differs between the configs; a tag several traces share gets
    the file's name, then its position: no two traces' runs carry one label."""
    from tests.data.resultsets import engine_trace

    def tags(*files):  # (folder/name, graphs) per trace -> the tag each trace's runs carry
        paths = []
        for name, graphs in files:
            trace = engine_trace({14336: 640})
            trace["config"]["graphs"] = graphs
            path = tmp_path / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(trace))
            paths.append(path)
        runs = TC.side_by_side(paths)["runs"]
        per = len(runs) // len(files)
        own = engine_trace({14336: 640})["runs"][0].get("label", "")
        return [runs[i * per]["label"].removeprefix(own).strip() for i in range(len(files))]

    assert tags(("1/x.json", "all"), ("2/x.json", "all")) == ["x #1", "x #2"]
    assert tags(("x.json", "decode"), ("y.json", "decode"), ("z.json", "all")) == [
        "graphs=decode (x)",
        "graphs=decode (y)",
        "graphs=all",
    ]
    assert tags(("3/x.json", "decode"), ("4/x.json", "all")) == ["graphs=decode", "graphs=all"]


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
    assert model["hidden"] == 64 and "num_key_value_heads" not in model  # 0 heads is no count
    config.write_text(json.dumps({"hidden_size": 64, "num_hidden_layers": 0}))
    with pytest.raises(UsageProblem, match="no hidden_size and num_hidden_layers"):
        read_model_config(config)


def test_vllm_acceptance_rate_in_percent():
    from ncclprobe.evidence.run.serverlog import read_log

    log = read_log(FIX / "server_logs" / "vllm_0.22_mtp_spec_decoding_dgx_spark.log")
    assert log["accept_rate"] == pytest.approx((85.4 + 65.4 + 87.8 + 77.6 + 62.9) / 500)


def test_a_row_with_a_word_in_a_number_column_is_no_row():
    from ncclprobe.evidence.nccl.nccl_tests import parse_nccl_tests

    text = (FIX / "nccl_tests" / "handwritten_allreduce_2ranks_cputime_C1.txt").read_text()
    broken = text.replace("     8.50   20.97", "     oops   20.97")
    run = parse_nccl_tests(broken)
    assert [row.size_bytes for row in run.rows] == [1024]


def test_json_cpu_time_without_bandwidth_has_no_completion_time():
    from tests.test_nccl_tests_cputime import _read_row

    m = _read_row({"cpu_time": 8.5, "alg_bw": 0.0, "bus_bw": 0.0, "nwrong": 0}, 8)
    assert (m.time_us, m.cpu_time_us) == (None, 8.5)


def test_json_per_iteration_timing_is_read():
    """nccl-tests -J with -I (recorded on the H200): the flag and every row's 100 samples."""
    from ncclprobe.evidence.nccl.nccl_tests_json import parse_nccl_tests_json

    path = FIX / "nccl_tests" / "allreduce_1x_h200_1rank_nccltests2.19.6_eager_I_same_run.json"
    run = parse_nccl_tests_json(path.read_text())
    assert run.params["per_iter"] == 1
    first = run.rows[0].out_of_place.iteration
    assert (first["samples"], first["min_us"], first["p99_us"]) == (100, 5.728, 10.08)


def test_a_text_of_runs_without_rows_reads_each_as_measuring_nothing():
    """Runs whose header came and no row after it are nccl-tests runs that measured nothing (a hang,
    a paste cut there): each is read and says so, none is refused as another format."""
    from ncclprobe.evidence.nccl.nccl_tests_split import parse_runs

    text = (FIX / "nccl_tests" / "handwritten_allreduce_2ranks_cputime_C1.txt").read_text()
    no_rows = "\n".join(
        line for line in text.splitlines() if not line.strip().startswith(("1024 ", "1048576 "))
    )
    for copies in (1, 2):
        runs, _ = parse_runs((no_rows + "\n") * copies)
        assert len(runs) == copies
        assert all(not r.rows and r.notes[0].startswith("measured nothing: the run") for r in runs)


def test_a_line_right_after_the_func_proto_algo_matrix_is_still_read():
    """The real 2.27.3 matrix, ended by the next NCCL line instead of a blank one: that line is read."""
    from ncclprobe.evidence.nccl.nccl_log import parse_nccl_log

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


@pytest.mark.parametrize(
    "listed,visible,total,indices",
    [
        (None, 4, 4, [0, 1, 2, 3]),
        (None, 2, 4, None),  # fewer visible than present, no list: which ones is not known
        ("0,2", 2, 4, [0, 2]),
        ("0", 1, 4, [0]),  # device 0 is a device
        ("3,4", 2, 4, None),  # 4 does not exist
        ("GPU-4f3a2b1c", 1, 4, None),  # a UUID: the mapping needs NVML
    ],
)
def test_cuda_visible_devices_map_to_nvidia_smi_indices(
    monkeypatch, listed, visible, total, indices
):
    # kept private (issue 38 §4): its caller, live_node_facts, needs CUDA devices to reach it
    from ncclprobe.evidence.live.topo_live import _physical_indices

    if listed is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", listed)
    assert _physical_indices(visible, total) == indices


def test_a_topology_is_within_one_node_unless_told():
    from ncclprobe.evidence.node.topo import node_facts, parse_topo

    topo = parse_topo((FIX / "topo" / "aws_p5_8x_h100_nv18_no_nic_rows.txt").read_text())
    assert node_facts(topo).over_network is False
    assert node_facts(topo, over_network=True).over_network is True


def test_an_empty_matrix_names_itself_or_says_matrix():
    from ncclprobe.evidence.node.matrix import Matrix, validate

    with pytest.raises(UsageProblem, match=r"^matrix: no rows or no columns"):
        validate(Matrix(metric="bandwidth", rows=[], cols=[], values=[]))
    with pytest.raises(UsageProblem, match=r"^p2p test: no rows or no columns"):
        validate(Matrix(metric="bandwidth", rows=[], cols=[], values=[], source="p2p test"))


def test_a_cut_p2p_matrix_names_the_exact_line():
    from ncclprobe.evidence.node.p2p_test_output import parse_p2p_test

    lines = (
        (FIX / "p2p" / "p2p_4x_a100_pcie_nvlink_pairs_can_cannot_sushruta.txt")
        .read_text()
        .splitlines()
    )
    at = lines.index("Bidirectional P2P=Disabled Bandwidth Matrix (GB/s)")
    for kept in (1, 2):  # the title, the column header, rows 0.. kept-1: row `kept` is missing
        cut = lines[: at + 2 + kept]
        notes = " ".join(parse_p2p_test("\n".join(cut)).notes)
        assert f"it ends at line {at + 2 + kept}, inside " in notes
        assert f"({kept} of 4 rows read; the rest left empty)" in notes


def test_nvbandwidth_without_a_column_header_names_the_line():
    from ncclprobe.evidence.node.nvbandwidth import parse_nvbandwidth

    lines = (
        (FIX / "nvbandwidth" / "nvbandwidth_v0.10_2gpu_h2d_d2h_d2d_read_azurehpc.txt")
        .read_text()
        .splitlines()
    )
    header = next(i for i, line in enumerate(lines) if line.split() == ["0", "1"])
    broken = lines[:header] + ["x y"] + lines[header + 1 :]
    with pytest.raises(UsageProblem, match=rf"no column header at line {header + 1}"):
        parse_nvbandwidth("\n".join(broken))


def test_collect_env_notes_and_a_topology_header_sharing_its_line():
    from ncclprobe.evidence.node.collect_env import parse_collect_env

    sgl = parse_collect_env(
        (FIX / "collect_env" / "sglang_check_env_8x_h20_nv18_8nic_issue24966.txt").read_text()
    )
    vllm_text = (
        FIX / "collect_env" / "vllm_dev_collect_env_8x_nv18_tabs_issue22372.txt"
    ).read_text()
    vllm = parse_collect_env(vllm_text)
    assert any("prints no environment variables" in n for n in sgl.notes)
    assert not any("prints no environment variables" in n for n in vllm.notes)
    joined = vllm_text.replace(
        "GPU Topology:\n  \t", "GPU Topology:\t", 1
    )  # the header line holds the columns
    assert parse_collect_env(joined).topology.summary["gpu_count"] == 8


def test_an_env_check_document_of_pid_1_is_read(tmp_path):
    """A container's job is often pid 1: the smallest pid a document can name."""
    from ncclprobe.evidence.live.env_check_document import load_document

    doc = {"schema_version": 1, "kind": "env-check", "root_pid": 1, "processes": [], "verdict": {}}
    path = tmp_path / "ec.json"
    path.write_text(json.dumps(doc))
    assert load_document(path).root_pid == 1
    path.write_text(json.dumps({**doc, "root_pid": 0}))
    with pytest.raises(UsageProblem):
        load_document(path)


def test_mpirun_tags_go_and_list_values_keep_their_commas():
    from ncclprobe.evidence.labels import parse_labels
    from ncclprobe.evidence.text import clean_line

    assert clean_line("[1,0]<stdout>:host:1:1 [0] NCCL INFO x") == "host:1:1 [0] NCCL INFO x"
    assert parse_labels("NCCL_IB_HCA=mlx5_0,mlx5_1,NCCL_ALGO=Ring") == {
        "NCCL_IB_HCA": "mlx5_0,mlx5_1",
        "NCCL_ALGO": "Ring",
    }


def test_a_recommendation_files_bad_name_is_quoted_cut_to_40_characters(tmp_path):
    from ncclprobe.evidence.recommendation_file import load_recommendation_file

    bad = "NOT A NAME " * 8
    path = tmp_path / "rec.json"
    path.write_text(json.dumps({"schema_version": 1, "kind": "recommendation", "env": {bad: "1"}}))
    with pytest.raises(UsageProblem) as caught:
        load_recommendation_file(path, "--tuned")
    assert repr(bad[:40]) in str(caught.value) and repr(bad[:41]) not in str(caught.value)


def test_a_p2p_output_cut_after_a_title_past_line_256_says_so():
    """A long paste (8 GPUs is 194 lines; more GPUs or a log around it go past 256) cut right after a
    matrix's title: one line naming it, never an IndexError."""
    from ncclprobe.evidence.node.p2p_test_output import parse_p2p_test

    lines = (
        (FIX / "p2p" / "p2p_8x_titan_rtx_p2p_read_cannot_access_gpu_micro.txt")
        .read_text()
        .splitlines()
    )
    titles = [i for i, line in enumerate(lines) if "Matrix" in line]
    text = "\n".join(["application output"] * 250 + lines[: titles[3] + 1])
    notes = parse_p2p_test(text).notes
    assert (
        f"the output is cut: it ends at line 353, right after the title '{lines[titles[3]]}'"
        in notes
    )
