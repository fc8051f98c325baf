"""No planted credential in any output of any command (issue 29 §1).

The whole family of forms the adversarial run found printed (`--password X` inside an `sh -c`
string, a setproctitle title, `--login admin:X`, `redis-cli -a X`, `openssl -passin pass:X`,
`-Dpassword=X`, `--password:X`, `--api-key -- X`, a JSON config, `?token=`/`?password=`/`?sig=`
queries, URL userinfo, `Authorization: Bearer X`, `api_key=X`, mysql's `-pX`) is planted, each form
with its own random-looking marker, in every input kind: a live process's environment and command
line (env-check), an NCCL log, an nccl-tests `-J` file, a collect-env text, a results file (its
header and its config records' `proof.seen_env`), an engine trace (provenance and each worker's
`env_at_comm_init`), a server log, the environment knobs --lint reads, and the arguments a usage
error quotes. Every command that reads them runs in every `--format`, with its outputs written to
files; stdout, stderr and every file written are searched for every marker: none may appear.

Positive controls: every marker was read (the masked form `<masked>` is in the output and the
words that introduce the credentials are there too, unmasked), and what is not a secret
(`kernel.numa_balancing=0`, `opId=0x...`) is printed as it was.

Commands run in-process (click's CliRunner); env-check reads a live process, and one real gloo
sweep's workers inherit planted NCCL_* variables (about 7 s; the module about 20 s on the shared
2-core machine).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from ncclprobe.records import config_id
from ncclprobe.secrets import MASK
from tests.data.planted import (
    ARGV_FORMS,
    FORMATS,
    FORMS,
    HARMLESS,
    VALUE_FORMS,
    Walk,
    leaks,
    marker,
    markers,
    plant_collect_env,
    plant_flight_recorder,
    plant_job_log,
    plant_nccl_log,
    plant_nccl_tests_json,
    plant_nccl_tests_text,
    plant_profile,
    plant_results,
    plant_server_log,
    plant_trace,
    planted,
)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    base = tmp_path_factory.mktemp("in")
    return {
        "log": str(plant_nccl_log(base / "nccl.log")),
        "ntj": str(plant_nccl_tests_json(base / "nt.json")),
        "cev": str(plant_collect_env(base / "collect_env.txt")),
        "res": str(plant_results(base / "results.jsonl")),
        "trc": str(plant_trace(base / "trace.json")),
        "srv": str(plant_server_log(base / "server.log")),
        "ntt": str(plant_nccl_tests_text(base / "nt.txt")),
        "prf": str(plant_profile(base / "profile.json")),
        "job": str(plant_job_log(base / "job.log")),
        "frd": str(plant_flight_recorder(base / "dumps")),
    }


def test_nccl_logs_nccl_tests_and_collect_env_print_no_credential(inputs, tmp_path):
    walk, shown = Walk(tmp_path), []
    for fmt in FORMATS:
        shown.append(walk("nccl-log", inputs["log"], "--format", fmt))
        shown.append(walk("diagnose", "--nccl-log", inputs["log"], "--format", fmt))
        out = tmp_path / f"nt-{fmt}.jsonl"
        shown.append(walk("import", inputs["ntj"], "--format", fmt, "--output", str(out)))
        shown.append(walk("-vv", "import", inputs["cev"], "--format", fmt))
        shown.append(walk("knobs", "--lint", "--collect-env", inputs["cev"], "--format", fmt))
        shown.append(walk("recommend", str(out), "--format", fmt, codes=(0, 1, 2)))  # 1 config
        text_out = tmp_path / f"ntt-{fmt}.jsonl"
        shown.append(
            walk("-vv", "import", inputs["ntt"], "--format", fmt, "--output", str(text_out))
        )
    imported = tmp_path / "nt-json.jsonl"
    walk("export", str(imported), "--output", str(tmp_path / "nt.txt"))
    walk(
        "export",
        str(imported),
        "--to",
        "perf-csv",
        "--output",
        str(tmp_path / "p.csv"),
        codes=(0, 1, 2),
    )
    walk.check()
    text = "".join(shown)
    # positive controls: read, shown masked, the harmless neighbours as they were
    assert MASK in walk.seen[0][1] and "NCCL_IB_HCA" in walk.seen[0][1]
    assert all(h in walk.seen[0][1] for h in HARMLESS), walk.seen[0][1]
    assert "--password" in text and "login admin:" in text and "?token=" in text
    assert "NCCL_NET_PLUGIN_AUTH" in text and MASK in walk.written()


def test_results_traces_and_server_logs_print_no_credential(inputs, tmp_path):
    walk, res, trc = Walk(tmp_path), inputs["res"], inputs["trc"]
    for fmt in FORMATS:
        walk("recommend", res, "--trace", trc, "--format", fmt)
        walk("-vv", "diagnose", "--trace", trc, "--sweep", res, "--format", fmt)
        walk("diagnose", "--server-log", inputs["srv"], "--format", fmt)
        walk("diagnose", "--trace", trc, "--collect-env", inputs["cev"], "--format", fmt)
        walk("diagnose", "--trace", trc, "--log", inputs["job"], "--format", fmt)
        walk("diagnose", "--log", inputs["job"], "--format", fmt, codes=(0, 1, 2, 3))
        walk("-vv", "diagnose", "--profile", inputs["prf"], "--format", fmt, codes=(0, 1, 3))
    walk("recommend", res, "--emit", "json", "--output", str(tmp_path / "rec.json"))
    walk("recommend", res, "--emit", "env", "--output", str(tmp_path / "rec.sh"))
    walk("export", res, "--output", str(tmp_path / "nt.txt"))
    walk("export", res, "--to", "perf-csv", "--output", str(tmp_path / "perf.csv"))
    walk("report", res, "--trace", trc, "--output", str(tmp_path / "rep"), "--format", "json")
    walk.check()
    report = (tmp_path / "rep" / "report.md").read_text()
    assert f"ProxyJump=admin:{MASK}@bastion" in report  # a harmless family's value, masked in place
    text = "".join(t for _, t in walk.seen) + walk.written()
    assert MASK in text and "NCCL_IB_HCA" in text
    assert "IB_HCA=<masked:" in text  # the typed setting was read and named by its digest


def test_arguments_quoted_by_errors_and_settings_print_no_credential(inputs, tmp_path):
    walk = Walk(tmp_path)
    secret = planted("arg", {f: FORMS[f] for f in VALUE_FORMS})
    markers("arg", {**{f: FORMS[f] for f in VALUE_FORMS}, "flag": "", "pair": ""})
    for fmt in FORMATS:
        walk(
            "recommend",
            inputs["res"],
            "--baseline",
            f"NCCL_PASSWORD={marker('arg', 'flag')}",
            "--format",
            fmt,
            codes=(0, 1, 2),
        )
        walk(
            "import",
            inputs["ntj"],
            "--settings",
            f"HF_TOKEN={marker('arg', 'pair')}",
            "--format",
            fmt,
            codes=(0, 1, 2),
        )
        walk(
            "import",
            inputs["ntj"],
            "--settings",
            f"NCCL_IB_HCA={secret['query_token']}",
            "--format",
            fmt,
            codes=(0, 1, 2),
        )
    walk("sweep", "--proto", secret["userinfo"], "--output", str(tmp_path / "o.jsonl"), codes=(2,))
    walk(
        "sweep",
        "--set",
        f"NCCL_IB_HCA={secret['query_sig']}",
        "--nranks",
        "2",
        "--backend",
        "gloo",
        "--torchrun-dir",
        str(tmp_path / "plan"),
        codes=(0, 1, 2),
    )
    for flag, command in (
        ("--settings", ["import", inputs["ntj"]]),
        ("--baseline", ["recommend", inputs["res"]]),
    ):  # a credential-shaped NCCL setting would name results and files: refused, shown masked
        text = walk(*command, flag, f"NCCL_ALGO={secret['userinfo']}", codes=(2,))
        assert "looks like a credential" in text and "<masked:" in text, text
    walk.check()
    assert MASK in "".join(t for _, t in walk.seen)


def test_a_ranks_error_line_is_masked_before_it_becomes_a_reason():
    """A worker's last error line becomes a result's reason (results file, tables)."""
    from ncclprobe.launch import error_summary

    forms = planted("rank")
    markers("rank")
    for text in forms.values():
        reason = error_summary(f"Traceback\n  File x\nRuntimeError: connect {text} failed\n")
        assert leaks(reason) == [] and reason.startswith("RuntimeError: connect"), reason
        assert MASK in reason, reason


def test_a_topology_jobs_stderr_is_masked_before_it_is_saved():
    """topo --check's NCCL job (GPU only): its stderr lines become the saved result's reasons."""
    from ncclprobe.gather.p2p import mask_messages

    forms = planted("topo")
    markers("topo")
    result = {"reason": " ".join(forms.values()), "failed": [f"rank 1 exited 1: {forms['login']}"]}
    mask_messages(result)
    assert leaks(json.dumps(result)) == [] and f"login admin:{MASK}" in result["failed"][0]


def test_a_config_id_never_holds_a_credential():
    """The id names the configuration in tables, files and --resume: distinct and stable, no secret."""
    one = config_id({"NCCL_IB_HCA": "mlx5_0?token=QzAbc123Vk", "NCCL_PROTO": "LL"})
    two = config_id({"NCCL_IB_HCA": "mlx5_0?token=QzXyz789Vk", "NCCL_PROTO": "LL"})
    assert "QzAbc123Vk" not in one and one != two and one.startswith("NCCL_IB_HCA=<masked:")
    assert one == config_id({"NCCL_PROTO": "LL", "NCCL_IB_HCA": "mlx5_0?token=QzAbc123Vk"})
    assert config_id({"NCCL_IB_HCA": "mlx5_0:1", "NCCL_PROTO": "LL"}) == (
        "NCCL_IB_HCA=mlx5_0:1,NCCL_PROTO=LL"
    )


@pytest.fixture
def job(tmp_path):
    """A live process whose command line and environment hold every form: an `sh -c`-style string,
    a setproctitle title (argv[0] holding spaces), the forms as separate words, and --all's
    harmless families carrying credentials."""
    forms, words = planted("env"), planted("env", ARGV_FORMS)
    markers("env")
    markers("env", ARGV_FORMS)
    title = f"python train.py {forms['flag']} {forms['login']}"
    argv = [
        title,
        "-c",
        "import time; time.sleep(60)",
        "sh",
        "-c",
        " ".join(forms.values()),
        *words["redis"].split(),
        *words["mysql"].split(),
        *forms["dashdash"].split(),
        forms["json"],
        forms["passin"].split()[0],
        forms["passin"].split()[1],
    ]
    env = {
        **os.environ,
        "SLURM_JOB_COMMENT": f"{forms['flag']} {forms['login']}",
        "OMPI_MCA_plm_rsh_args": f"-o ProxyCommand='sshpass {forms['flag']} ssh gw' {forms['java']}",
        "PYTHONPATH": f"{os.environ.get('PYTHONPATH', '')}:{forms['query_token']}",
        "NCCL_IB_HCA": f"mlx5_0,{forms['query_sig']}",
        "NCCL_NET_PLUGIN_AUTH": marker("env", "pair"),
    }
    proc = subprocess.Popen(argv, executable=sys.executable, env=env)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # until the child has exec'd python with our argv
        try:
            if open(f"/proc/{proc.pid}/cmdline", "rb").read().count(b"\0") > 10:
                break
        except OSError:
            pass
        time.sleep(0.05)
    yield proc.pid
    proc.kill()
    proc.wait()


def test_env_check_prints_no_credential_of_a_live_process(job, tmp_path, inputs):
    walk = Walk(tmp_path)
    expect = ["--expect", f"NCCL_IB_HCA=mlx5_0,{planted('env')['query_sig']}"]
    for fmt in FORMATS:
        for before, after in (([], ["--all"]), (["-v"], expect), ([], [])):
            walk(*before, "env-check", "--pid", str(job), "--format", fmt, *after)
    walk.check()
    # a document from another writer, its values raw: diagnose masks what it reads
    raw = json.loads(_json_of(walk, "--all"))
    forms = planted("edoc")
    markers("edoc")
    raw["expectations"] = [
        {"variable": "NCCL_IB_HCA", "value": forms["query_token"], "source": "x"}
    ]
    raw["verdict"]["findings"] = [f"pid 1: {text}" for text in forms.values()]
    for proc in raw["processes"]:
        proc["env"] = {"NCCL_IB_HCA": forms["query_token"], "NCCL_NET_PLUGIN_AUTH": forms["flag"]}
    document = tmp_path / "raw-env-check.json"
    document.write_text(json.dumps(raw))
    for fmt in FORMATS:
        walk("diagnose", "--trace", inputs["trc"], "--env-check", str(document), "--format", fmt)
    document.unlink()  # an input, not an output: planted raw on purpose
    walk.check()
    assert f"--password {MASK}" in walk.seen[-1][1]  # its findings were read and echoed, masked
    doc = json.loads(_json_of(walk, "--all"))
    proc = next(p for p in doc["processes"] if p["pid"] == job)
    assert MASK in proc["command"] and "--password" in proc["command"]  # read, masked in place
    assert "redis-cli -a" in proc["command"] and "-p" + MASK in proc["command"]
    assert proc["env"]["SLURM_JOB_COMMENT"] == MASK  # free text: never shown
    assert MASK in proc["env"]["NCCL_IB_HCA"] and "mlx5_0," in proc["env"]["NCCL_IB_HCA"]
    rsh, path = proc["env"]["OMPI_MCA_plm_rsh_args"], proc["env"]["PYTHONPATH"]
    assert f"sshpass --password {MASK} ssh gw" in rsh and f"-Dpassword={MASK}" in rsh, rsh
    assert f"?token={MASK}" in path, path  # the harmless family's value shown, masked in place


def _json_of(walk: Walk, flag: str) -> str:
    for args, text in walk.seen:
        if "json" in args and flag in args:
            return text[text.index("{") :]
    raise AssertionError("no JSON run")


def test_knobs_lint_prints_no_credential_of_this_environment(tmp_path):
    values = planted("knb", {f: FORMS[f] for f in VALUE_FORMS})
    markers("knb", {f: FORMS[f] for f in VALUE_FORMS})
    env = {
        "NCCL_IB_HCA": f"mlx5_0,{values['query_token']}",
        "NCCL_NET_PLUGIN": values["query_sig"],
        "NCCL_SOCKET_IFNAME": values["userinfo"],
        "NCCL_TOPO_FILE": values["query_password"],
    }
    walk = Walk(tmp_path, env=env)
    for fmt in FORMATS:
        walk("knobs", "--lint", "--nccl-version", "2.28.9", "--format", fmt)
    walk.check()
    assert MASK in "".join(t for _, t in walk.seen)


def test_a_real_sweep_records_no_inherited_credential(tmp_path):
    """Workers inherit the user's NCCL_* variables: what each rank saw (`proof.seen_env`) and the
    header's env are recorded masked, and -v's progress and worker lines print none of them."""
    values = planted("swp", {f: FORMS[f] for f in VALUE_FORMS})
    markers("swp", {f: FORMS[f] for f in VALUE_FORMS})
    env = {
        "NCCL_NET_PLUGIN": values["query_token"],
        "NCCL_TOPO_DUMP_FILE": values["query_sig"],
        "NCCL_SOCKET_IFNAME": values["userinfo"],
        "NCCL_COMM_ID": values["query_password"],
    }
    walk, out = Walk(tmp_path, env=env), tmp_path / "sweep.jsonl"
    walk("-v", "sweep", "--backend", "gloo", "--nranks", "2", "--sizes", "1K", "--output", str(out))
    walk.check()
    records = [json.loads(line) for line in out.read_text().splitlines()]
    seen = next(r for r in records if r.get("record") == "config")["proof"]["seen_env"]["0"]
    assert seen["NCCL_NET_PLUGIN"] == values["query_token"].replace(
        marker("swp", "query_token"), MASK
    )  # read by the workers, recorded masked


def test_flight_recorder_dumps_print_no_credential(inputs, tmp_path):
    """Group descriptions, frame file and function names and dtypes of a dump: masked as read
    (issue 40 §7: `hf_...`, `AKIA...`, URL userinfo and `?token=` printed raw before)."""
    walk = Walk(tmp_path)
    for fmt in FORMATS:
        for extra in ([], ["-v"], ["--wide"]):
            walk(
                *extra,
                "diagnose",
                "--flight-recorder",
                inputs["frd"],
                "--format",
                fmt,
                codes=(0, 1),
            )
    walk.check()
    text = "".join(t for _, t in walk.seen)
    assert MASK in text and "group_a" in text, text[-2000:]  # read, shown, masked in place


def test_masking_keeps_what_is_no_secret():
    """The healthy twins of the new shapes: names and references that look close, kept whole."""
    from ncclprobe.secrets import mask_env_value, mask_text

    kept = [
        "git@github.com:NVIDIA/nccl.git",
        "nvcr.io/nvidia/pytorch:24.05-py3@sha256:0123abcd",
        "ssh -p 2222 admin@bastion",
        "mlx5_0:1,mlx5_1:1",
        "%h.%p.nccl.log",
        "kernel.numa_balancing=0",
        "opId=0x7f3c2c000b70",
        "commit 3f2a9c1d8e7b6a5f4e3d2c1b0a9f8e7d6c5b4a39",
    ]
    assert [mask_text(t) for t in kept] == kept
    assert mask_env_value("RCCL_MSCCL_ENABLE", "1") == "1"  # issue 36: ROCm's NCCL family
    assert mask_text("root:Qz1@10.0.0.1") == f"root:{MASK}@10.0.0.1"
