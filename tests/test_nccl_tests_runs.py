"""nccl-tests files of several runs, interleaved processes, -J JSON and --settings labels, against
real outputs (tests/fixtures/INDEX.md), and recommend over imported runs without a default."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from ncclprobe.cli import cli
from ncclprobe.errors import UsageProblem
from ncclprobe.evidence.nccl.nccl_tests_json import parse_nccl_tests_json
from ncclprobe.evidence.nccl.nccl_tests_split import parse_runs, split_runs
from ncclprobe.importing import ImportOptions, import_text
from ncclprobe.recommend import build_recommendation
from ncclprobe.records import read_results

TESTS = Path(__file__).parent / "fixtures" / "nccl_tests"
SIX = TESTS / "allgather_6runs_2ranks_1x_rtx5090_socket_nccltests2.18_eunomia.txt"
JSON = TESTS / "allreduce_1x_h200_1rank_nccltests2.19.6_eager_J.json"
FOUR_RANK_RUNS = (
    "allreduce_4x_rtx5090_pcie_genoa.txt",
    "allreduce_2node_2x_l40s_each_nccl2.27.3.txt",
    "allreduce_4x_rtx5090_pcie_genoa.txt",
)
SIMPLE = {"NCCL_PROTO": "Simple"}


def _invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], prog_name="ncclprobe")


def test_six_real_runs_split_with_their_own_headers():
    runs, notes = parse_runs(SIX.read_text())
    assert len(runs) == 6 and notes == []
    assert {(r.collective, r.nranks, len(r.rows), r.nccl_tests_version) for r in runs} == {
        ("all_gather", 2, 8, "2.18.0")
    }
    assert [r.avg_busbw_gbps for r in runs] == [
        1.27827,
        0.669677,
        1.54607,
        1.56852,
        1.55612,
        1.55084,
    ]
    assert [d["pid"] for d in runs[1].devices] == [2989695, 2989696]  # each run's own device lines
    assert runs[1].rows[-1].out_of_place.time_us == 63473.4


def test_concatenated_real_four_rank_runs_stay_four_rank_runs():
    text = "".join((TESTS / name).read_text() for name in FOUR_RANK_RUNS)
    runs, _ = parse_runs(text)
    assert [(r.nranks, len(r.rows)) for r in runs] == [
        (4, 25),
        (4, 31),
        (4, 25),
    ]  # not one 12-rank run of 81 rows
    assert (
        runs[1].settings.get("NCCL_IB_DISABLE") == "0" and "NCCL_IB_DISABLE" not in runs[2].settings
    )


@pytest.mark.parametrize(
    "name,processes,each",
    [
        (
            "interleaved_2proc_1rank_v100_old_format_nccltests107.txt",
            2,
            "1 rank each (one rank: busbw 0)",
        ),
        ("interleaved_2proc_8gpu_h800_nccltests213.txt", 2, "2 ranks each"),
    ],
)  # 4 of 8 device lines survive the cut
def test_interleaved_processes_are_refused_with_the_reason(name, processes, each):
    with pytest.raises(UsageProblem) as info:
        split_runs((TESTS / name).read_text())
    message = str(info.value)
    assert f"interleaves {processes} nccl-tests processes" in message and each in message
    assert "MPI=1" in message
    result = _invoke("import", TESTS / name)
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("lag,match", [(0, "appears twice"), (5, "go back from")])
def test_rows_of_two_processes_mixed_under_one_header_are_refused(lag, match):
    """Two processes' rows as they mix when one header was lost: in step, or one ahead (nccl-tests #182)."""
    lines = (TESTS / "allreduce_2x_rtx2080ti_pcie_pix_no_p2p_autodl.txt").read_text().splitlines()
    rows = [i for i, line in enumerate(lines) if line.strip()[:1].isdigit() and "float" in line]
    first, second = [lines[i] for i in rows], [lines[i] for i in rows]
    mixed_rows = first[:lag] + [line for pair in zip(first[lag:], second) for line in pair]
    mixed = lines[: rows[0]] + mixed_rows + lines[rows[-1] + 1 :]
    with pytest.raises(UsageProblem, match=match):
        parse_runs("\n".join(mixed))


def test_run_cycles_and_several_ops_are_not_interleaving():
    text = (TESTS / "allreduce_4x_rtx5090_pcie_genoa.txt").read_text()
    head, _, tail = text.partition("# Out of bounds")
    table = [line for line in head.splitlines() if line.strip()[:1].isdigit()]
    cycled = head + "\n".join(table) + "\n# Out of bounds" + tail  # -N 2: the sweep again
    assert len(parse_runs(cycled)[0][0].rows) == 50
    other_op = (
        head
        + "\n".join(line.replace(" sum ", " max ") for line in table)
        + "\n# Out of bounds"
        + tail
    )
    assert len(parse_runs(other_op)[0][0].rows) == 50


def test_settings_label_each_run_and_never_contradict_the_file(tmp_path):
    out = tmp_path / "ag.jsonl"
    labels = ["default"] * 3 + ["NCCL_PROTO=Simple"] * 3
    result = _invoke(
        "import", SIX, "--output", out, *[a for label in labels for a in ("--settings", label)]
    )
    assert result.exit_code == 0, result.stderr
    files = [read_results(tmp_path / f"ag-{k}.jsonl") for k in range(1, 7)]
    assert [f.configs[0]["settings"] for f in files] == [{}] * 3 + [SIMPLE] * 3
    assert files[3].configs[0]["proof"]["labelled"] == SIMPLE and files[3].header["nranks"] == 2
    assert "labelled by --settings" in result.stdout
    bad = _invoke(
        "import",
        TESTS / "allreduce_2node_1x_l40s_each_socket_nccl2.27.3.txt",
        "--settings",
        "NCCL_ALGO=tree",
    )
    assert bad.exit_code == 2 and "contradicts the file, which shows NCCL_ALGO=ring" in bad.stderr
    assert (
        _invoke("import", SIX, "--settings", "default", "--settings", "default").exit_code == 2
    )  # 2 labels, 6 runs
    again = _invoke("import", SIX, "--output", out, "--settings", "default")
    assert again.exit_code == 2 and "never overwritten" in again.stderr


@pytest.fixture()
def imported(tmp_path):
    """The six real runs as six results files: 3 default, then 3 NCCL_PROTO=Simple."""
    paths = []
    for k, label in enumerate([{}] * 3 + [SIMPLE] * 3, 1):
        imported = import_text(SIX.read_text(), ImportOptions(source=str(SIX), labels=[label]))
        records = imported.data["record_sets"][k - 1]
        path = tmp_path / f"run{k}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
        paths.append(str(path))
    return paths


def test_recommend_over_imported_runs_with_the_default_sees_the_spread(imported):
    rec = build_recommendation(imported, collective="all_gather")
    assert rec.comparison == "default" and rec.overall.best_config_id == "NCCL_PROTO=Simple"
    # Simple is 40 % faster on average, but the default's three runs range from 2.1 to 4.6 GB/s at 128M:
    # inside that spread nothing is recommended
    assert not rec.change and rec.env == {} and rec.per_size[-1].noise > 0.2


def test_recommend_without_a_default_needs_a_baseline_or_says_it_compared_candidates(imported):
    simple_only = imported[3:]
    with pytest.raises(UsageProblem, match="fewer than two safe candidates"):
        build_recommendation(simple_only, collective="all_gather")
    rec = build_recommendation(simple_only, collective="all_gather", baseline=SIMPLE)
    assert rec.comparison == "baseline" and rec.env == SIMPLE and not rec.change
    with pytest.raises(UsageProblem, match="--baseline NCCL_PROTO=LL was not measured"):
        build_recommendation(simple_only, collective="all_gather", baseline={"NCCL_PROTO": "LL"})
    relabelled = []
    for path in imported[:3]:  # the default runs relabelled as a candidate: no all-default run left
        text = (
            Path(path)
            .read_text()
            .replace('"settings": {}', '"settings": {"NCCL_ALGO": "Ring"}')
            .replace('"config_id": "default"', '"config_id": "NCCL_ALGO=Ring"')
        )
        Path(path).write_text(text)
        relabelled.append(path)
    rec = build_recommendation(relabelled + simple_only, collective="all_gather")
    assert rec.comparison == "candidates" and "next best candidate" in rec.against
    assert any("compared with each other" in note for note in rec.notes)


def test_ll128_without_nvlink_stays_refused_against_a_baseline(tmp_path):
    from tests.data.resultsets import config, curve, write_set

    fast = {s: (t * 0.5, lo * 0.5, hi * 0.5) for s, (t, lo, hi) in curve(10.0, 1.0).items()}
    path = write_set(
        tmp_path / "r.jsonl",
        [
            config({"NCCL_ALGO": "Ring"}, curve(10.0, 1.0)),
            config({"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL128"}, fast),
        ],
        nvlink=False,
        kind="nccl-tests",
    )
    rec = build_recommendation([path], baseline={"NCCL_ALGO": "Ring"})
    assert not rec.change and "NCCL_ALGO=Ring,NCCL_PROTO=LL128" in rec.refused
    assert "LL128 refused" in rec.refused["NCCL_ALGO=Ring,NCCL_PROTO=LL128"][0]


def test_json_run_facts_settings_and_masked_environment():
    doc = json.loads(JSON.read_text())
    doc["env"] += [
        "HF_TOKEN=hf_abcdefghijklmnopqrstuvwx",
        "CUDA_VISIBLE_DEVICES=0",
        "HOME=/root",
        "NCCL_TESTS_DEVICE=0",
        "NCCL_IB_HCA=mlx5_0",
    ]
    run = parse_nccl_tests_json(json.dumps(doc))
    assert (run.collective, run.nranks, run.nccl_version, len(run.rows)) == (
        "all_reduce",
        1,
        "2.28.9",
        13,
    )
    assert run.settings == {
        "NCCL_NVLS_ENABLE": "0",
        "NCCL_IB_HCA": "mlx5_0",
    }  # not NCCL_VERSION, NCCL_TESTS_*
    assert (
        "HF_TOKEN" not in run.env
        and "HOME" not in run.env
        and run.env["CUDA_VISIBLE_DEVICES"] == "0"
    )
    assert "hf_abcdef" not in json.dumps(run.to_json()) + json.dumps(run.env)
    first = run.rows[0]
    assert (first.size_bytes, first.out_of_place.time_us, first.in_place.time_us) == (
        8,
        6.59603,
        0.37906,
    )
    assert run.params["iters"] == 100 and run.params["warmup"] == 20 and run.params["graph"] == 0


@pytest.mark.parametrize(
    "mutate,match",
    [
        (lambda d: d.pop("results"), "not nccl-tests -J output"),
        (lambda d: d.update(version=9), "JSON version 9"),
        (lambda d: d["results"][0].update(size="big"), r"results\[0\] has no integer size"),
    ],
)
def test_malformed_json_is_one_line_naming_the_problem(mutate, match):
    doc = json.loads(JSON.read_text())
    mutate(doc)
    with pytest.raises(UsageProblem, match=match):
        parse_nccl_tests_json(json.dumps(doc))


def test_json_import_equals_the_text_of_the_same_values(tmp_path):
    """The -J run, exported as nccl-tests text and imported again, gives the same rows to the
    precision nccl-tests prints (the lead records a real text/JSON pair of one run on the H200:
    see examples/agreement_nccl_tests.py)."""
    out = tmp_path / "j.jsonl"
    assert _invoke("import", JSON, "--output", out).exit_code == 0
    text = _invoke("export", out, "--to", "nccl-tests").stdout
    back = parse_runs(text)[0][0]
    run = parse_nccl_tests_json(JSON.read_text())
    assert (
        back.nranks == run.nranks == 1
        and back.settings == run.settings
        and back.collective == "all_reduce"
    )
    for a, b in zip(run.rows, back.rows):
        assert a.size_bytes == b.size_bytes and a.count == b.count
        for (_, m), (_, n) in zip(a.measurements(), b.measurements()):
            assert n.time_us == pytest.approx(m.time_us, abs=0.006) and n.wrong == m.wrong


PAIR = sorted(TESTS.glob("*_same_run.txt"))


@pytest.mark.skipif(
    not PAIR, reason="no text/JSON pair of one run recorded yet (examples/agreement_nccl_tests.py)"
)
def test_json_and_text_of_one_real_run_agree():
    for text_path in PAIR:
        text_run = parse_runs(text_path.read_text())[0][0]
        json_run = parse_nccl_tests_json(
            text_path.with_name(
                text_path.name.replace("_same_run.txt", "_same_run.json")
            ).read_text()
        )
        assert [r.size_bytes for r in text_run.rows] == [r.size_bytes for r in json_run.rows]
        for a, b in zip(text_run.rows, json_run.rows):
            for (_, m), (_, n) in zip(a.measurements(), b.measurements()):
                assert m.time_us == pytest.approx(n.time_us, rel=0.01, abs=0.01)


def test_perf_csv_for_nccls_optimizer(tmp_path):
    from tests.data.resultsets import SIZES, config, curve, write_set

    tuning = [
        {"collective": "AllReduce", "size_bytes": s, "algo": "RING", "proto": "SIMPLE", "calls": 1}
        for s in SIZES
    ]
    path = write_set(
        tmp_path / "r.jsonl",
        [
            config({}, curve(10.0, 1.0), tuning=tuning),
            config({"NCCL_ALGO": "Tree", "NCCL_PROTO": "LL"}, curve(8.0, 1.0)),
            config({"NCCL_PROTO": "LL128"}, curve(5.0, 1.0)),
            config({}, curve(9.0, 1.0), collective="alltoall"),
        ],
        nvlink=False,
    )
    out = tmp_path / "perf.csv"
    result = _invoke("export", path, "--to", "perf-csv", "--output", out)
    assert result.exit_code == 0
    import csv

    rows = list(csv.DictReader(out.open()))
    header = out.read_text().splitlines()[0].split(",")
    assert header == [
        "collective",
        "size_bytes",
        "algorithm",
        "protocol",
        "channels",
        "nodes",
        "ranks",
        "pipeOps",
        "regBuff",
        "cost_metric",
        "bandwidth_gbps",
        "latency_us",
    ]
    assert {(r["algorithm"], r["protocol"]) for r in rows} == {("ring", "simple"), ("tree", "ll")}
    assert all(
        r["collective"] == "allreduce" and r["ranks"] == "2" and r["nodes"] == "1" for r in rows
    )
    assert all(float(r["latency_us"]) > 0 and float(r["bandwidth_gbps"]) > 0 for r in rows)
    assert "LL128 refused" in result.stderr and "point-to-point" in result.stderr


SINGLE_RUNS = [p for p in sorted(TESTS.glob("allreduce_*.txt"))] + [
    TESTS.parent / "nccl_logs" / name
    for name in (
        "nccl_2.8.3_2node_16x_a100_p4d_efa_mpirun_tagged_old_tests_format.log",
        "nccl_2.22.3_2node_16x_h100_p5_efa_ofi_tuner_mpirun_tagged.log",
        "nccl_2.22.3_2x_a100_sxm64_nvlink_sendrecv_leonardo.log",
    )
]


@pytest.mark.parametrize("path", SINGLE_RUNS, ids=lambda p: p.name)
def test_every_real_single_run_stays_one_run(path):
    from ncclprobe.evidence.nccl.nccl_tests import parse_nccl_tests

    runs, notes = parse_runs(path.read_text())
    whole = parse_nccl_tests(path.read_text())
    assert len(runs) == 1 and notes == []
    assert [r.size_bytes for r in runs[0].rows] == [r.size_bytes for r in whole.rows]
    assert runs[0].settings == whole.settings and runs[0].nranks == whole.nranks
