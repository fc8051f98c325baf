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
import zlib
from pathlib import Path

import pytest
from click.testing import CliRunner

from ncclprobe.cli import cli
from ncclprobe.records import config_id
from ncclprobe.secrets import MASK
from tests.data.resultsets import config, curve, write_set

FIXTURES = Path(__file__).parent / "fixtures"
FORMATS = ("table", "json", "csv")

# form -> how the credential appears; {m} is the form's marker (short: only its context can betray it)
FORMS = {
    "flag": "--password {m}",
    "flag_eq": "--token={m}",
    "flag_colon": "--password:{m}",
    "dashdash": "--api-key -- {m}",
    "login": "login admin:{m}",
    "java": "-Dpassword={m}",
    "passin": "-passin pass:{m}",
    "query_token": "https://hub.example/x?token={m}",
    "query_password": "https://hub.example/x?a=1&password={m}",
    "query_sig": "https://blob.example/c?sv=2022&sig={m}",
    "userinfo": "https://u:{m}@proxy.example",
    "bearer": "Authorization: Bearer {m}",
    "pair": "api_key={m}",
    "json": '{{"secret": "{m}", "model": "m7"}}',
}
ARGV_FORMS = {"redis": "redis-cli -a {m} ping", "mysql": "mysql -uroot -p{m} db"}
# in the NCCL settings themselves: a value with no spaces
VALUE_FORMS = ("query_token", "query_password", "query_sig", "userinfo")
HARMLESS = ("kernel.numa_balancing=0", "opId=0x7f3c2c000b70")


def marker(kind: str, form: str) -> str:
    """A distinct random-looking value per input kind and form, under 32 characters."""
    return f"Qz{zlib.crc32(f'{kind}/{form}'.encode()) % 10**8:08d}{kind[:3]}Vk"


def planted(kind: str, forms=FORMS) -> dict[str, str]:
    return {form: text.format(m=marker(kind, form)) for form, text in forms.items()}


ALL_MARKERS: set[str] = set()


def _markers(kind: str, forms=FORMS) -> list[str]:
    found = [marker(kind, form) for form in forms]
    ALL_MARKERS.update(found)
    return found


def _leaks(text: str) -> list[str]:
    return sorted(m for m in ALL_MARKERS if m in text)


class Walk:
    """Runs commands in-process, keeps every stdout/stderr and every file they wrote."""

    def __init__(self, out: Path, env: dict | None = None):
        self.runner = CliRunner()
        self.out = out
        self.env = env or {}
        self.seen: list[tuple[list[str], str]] = []

    def __call__(self, *args: str, codes=(0, 1)) -> str:
        result = self.runner.invoke(cli, list(args), prog_name="ncclprobe", env=self.env)
        text = result.stdout + result.stderr
        assert result.exit_code in codes, (args, result.exit_code, text[-800:])
        assert "Traceback" not in text or "-vv" in args, (args, text[-800:])
        self.seen.append((list(args), text))
        return text

    def written(self) -> str:
        return "".join(
            p.read_text(errors="replace") for p in sorted(self.out.rglob("*")) if p.is_file()
        )

    def check(self) -> None:
        leaks = [(args, _leaks(text)) for args, text in self.seen if _leaks(text)]
        files = {
            str(p): _leaks(p.read_text(errors="replace"))
            for p in sorted(self.out.rglob("*"))
            if p.is_file() and _leaks(p.read_text(errors="replace"))
        }
        assert leaks == [] and files == {}, (leaks, files)


def _nccl_log(path: Path) -> Path:
    forms, values = planted("log"), planted("log", {f: FORMS[f] for f in VALUE_FORMS})
    _markers("log")
    lines = [
        "h:11:11 [0] NCCL INFO NCCL version 2.28.9+cuda13.0",
        f"h:11:11 [0] NCCL INFO NCCL_IB_HCA set by environment to mlx5_0,{values['query_token']}",
        f"h:11:11 [0] NCCL INFO NCCL_NET_PLUGIN set by environment to {values['query_sig']}",
        f"h:11:11 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to {values['userinfo']}",
        f"h:11:11 [0] NCCL INFO NCCL_COLLNET_ENABLE set by environment to {values['query_password']}",
        *(
            f"h:11:22 [0] misc/socket.cc:50 NCCL WARN Net : {text} failed"
            for text in forms.values()
        ),
        f'h:11:22 [0] init.cc:115 NCCL WARN NUMA auto balancing enabled. Disable by "sudo sysctl {HARMLESS[0]}"',
        f"h:11:22 [0] proxy.cc:72 NCCL WARN Storing response for already completed {HARMLESS[1]}",
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def _nccl_tests_json(path: Path) -> Path:
    doc = json.loads(
        (
            FIXTURES / "nccl_tests" / "allreduce_1x_h200_1rank_nccltests2.19.6_eager_J.json"
        ).read_text()
    )
    values = planted("ntj", {f: FORMS[f] for f in VALUE_FORMS})
    forms = planted("ntj")
    _markers("ntj")
    doc["env"] += [
        f"NCCL_IB_HCA=mlx5_0,{values['query_token']}",
        f"NCCL_NET_PLUGIN={values['query_sig']}",
        f"NCCL_SOCKET_IFNAME={values['userinfo']}",
        f"NCCL_TOPO_FILE={values['query_password']}",
        f"NCCL_NET_PLUGIN_AUTH={marker('ntj', 'flag')}",
        f"SLURM_JOB_COMMENT={forms['flag']} {forms['login']}",
    ]
    doc["args"] += ["--", *forms["flag"].split(), forms["json"]]
    path.write_text(json.dumps(doc))
    return path


def _collect_env(path: Path) -> Path:
    fixture = FIXTURES / "collect_env" / "vllm_0.6.3_collect_env_8x_h100_nv18_indented_dstack.txt"
    values = planted("cev", {f: FORMS[f] for f in VALUE_FORMS})
    _markers("cev", {**{f: FORMS[f] for f in VALUE_FORMS}, "flag": ""})
    path.write_text(
        fixture.read_text()
        + f"    NCCL_NET_PLUGIN_AUTH={marker('cev', 'flag')}\n"
        + f"    NCCL_IB_HCA={values['userinfo']}\n"
        + f"    NCCL_SOCKET_IFNAME=eth0{values['query_token'][5:]}\n"
        + f"    NCCL_NET_PLUGIN={values['query_sig']}\n"
        + f"    NCCL_TOPO_FILE={values['query_password']}\n"
    )
    return path


def _nccl_tests_text(path: Path) -> Path:
    """nccl-tests' stdout with its command line (as launch scripts echo it) and NCCL WARN lines."""
    fixture = FIXTURES / "nccl_tests" / "allreduce_1x_h200_1rank_nccltests2.19.6_eager_same_run.txt"
    values, forms = planted("ntt", {f: FORMS[f] for f in VALUE_FORMS}), planted("ntt")
    _markers("ntt")
    command = (
        f"$ NCCL_IB_HCA=mlx5_0,{values['query_token']} NCCL_NET_PLUGIN={values['query_sig']} "
        f"./all_reduce_perf -b 8 -e 128M {forms['flag']} {forms['login']} {forms['passin']}\n"
    )
    warns = "".join(
        f"vm:2705:2705 [0] misc/socket.cc:50 NCCL WARN Net : {text} failed\n"
        for text in forms.values()
    )
    text = fixture.read_text().replace(
        "# nccl-tests version", command + warns + "# nccl-tests version"
    )
    path.write_text(text)
    return path


def _profile(path: Path) -> Path:
    """A profiler trace whose recorded arguments quote a launcher's command line."""
    doc = json.loads(
        (FIXTURES / "profiles" / "handwritten_graph_share_cut_4steps.json").read_text()
    )
    forms = planted("prf")
    _markers("prf")
    doc["traceName"] = f"serve {forms['flag']}"
    doc["distributedInfo"] = {
        "backend": "nccl",
        "rank": 0,
        "world_size": 1,
        "pg_config": forms["json"],
    }
    doc["traceEvents"].append(
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::to",
            "pid": 1,
            "tid": 1,
            "ts": 1001.0,
            "dur": 1.0,
            "args": {"Concrete Inputs": [forms["query_token"], forms["login"]]},
        }
    )
    path.write_text(json.dumps(doc))
    return path


def _job_log(path: Path) -> Path:
    """A job's log: each rank's last exception quoting its command line, torchrun's summary."""
    forms = planted("job")
    _markers("job")
    exceptions = "".join(
        f'[rank0]: Traceback (most recent call last):\n[rank0]:   File "train.py", line 9\n'
        f"[rank0]: RuntimeError: launch failed: {text}\n"
        for text in forms.values()
    )
    summary = (
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
        + "=" * 60
        + "\ntrain.py FAILED\n"
        + "-" * 60
        + "\nRoot Cause (first observed failure):\n[0]:\n  time      : 2026-12-02_10:00:00\n"
        "  host      : node1\n  rank      : 0 (local_rank: 0)\n  exitcode  : 1 (pid: 1234)\n"
        f"  error_file: <N/A>\n  traceback : python train.py {forms['flag']} {forms['dashdash']}\n"
        + "=" * 60
        + "\n"
    )
    path.write_text(exceptions + summary)
    return path


def _results(path: Path) -> Path:
    """A sweep results file whose header env and config records' seen_env hold what a worker saw."""
    values = planted("res", {f: FORMS[f] for f in VALUE_FORMS})
    forms = planted("res")
    _markers("res")
    seen = {
        "NCCL_IB_HCA": f"mlx5_0,{values['query_token']}",
        "NCCL_NET_PLUGIN": values["query_sig"],
        "NCCL_SOCKET_IFNAME": values["userinfo"],
        "NCCL_TOPO_FILE": values["query_password"],
        "NCCL_NET_PLUGIN_AUTH": marker("res", "flag"),
    }
    typed = {"NCCL_IB_HCA": f"mlx5_0?token={marker('res', 'pair')}"}  # an older writer's setting
    write_set(
        path,
        [
            config({}, curve(10, 1)),
            config({"NCCL_PROTO": "LL"}, curve(5, 1)),
            config(typed, curve(6, 1)),
        ],
    )
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    for record in lines[1:]:
        if (
            record.get("settings") == typed
        ):  # its id raw too, as a writer without the digest made it
            record["config_id"] = f"NCCL_IB_HCA={typed['NCCL_IB_HCA']}"
    lines[0]["env"] = {**seen, "SLURM_JOB_COMMENT": " ".join(forms.values())}
    lines[0]["argv"] = ["python", "-c", " ".join(forms.values())]
    for record in lines[1:]:
        if record.get("record") == "config":
            record["proof"]["seen_env"] = {"0": {**seen, **record["settings"]}}
            record["proof"]["read_by_rank"] = {"0": dict(seen)}
            record["proof"]["set_by_environment"] = dict(seen)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def _trace(path: Path) -> Path:
    doc = json.loads((FIXTURES / "traces" / "handwritten_seed_case_tp2_h200.json").read_text())
    values = planted("trc", {f: FORMS[f] for f in VALUE_FORMS})
    forms = planted("trc")
    _markers("trc")
    env = {
        "NCCL_PROTO": "LL",
        "NCCL_IB_HCA": f"mlx5_0,{values['query_token']}",
        "NCCL_NET_PLUGIN": values["query_sig"],
        "NCCL_SOCKET_IFNAME": values["userinfo"],
        "NCCL_TOPO_FILE": values["query_password"],
        "NCCL_NET_PLUGIN_AUTH": marker("trc", "flag"),
    }
    doc["provenance"]["argv"] = ["python", "serve.py", *" ".join(forms.values()).split(" ")]
    doc["provenance"]["env"] = {**env, "SLURM_JOB_COMMENT": forms["login"]}
    for run in doc["runs"]:
        for worker in run["workers"]:
            worker["env_at_comm_init"] = dict(env)
            worker["env_at_exit"] = dict(env)
            worker["nccl_read"] = dict(env)
            worker["nccl_warnings"] = [f"NCCL WARN {text}" for text in forms.values()]
    path.write_text(json.dumps(doc))
    return path


def _server_log(path: Path) -> Path:
    fixture = FIXTURES / "server_logs" / "handwritten_sglang_warmup_interval.log"
    forms = planted("srv")
    _markers("srv")
    text = fixture.read_text().replace(
        "speculative_algorithm=None)",
        f"speculative_algorithm=None, api_key='{marker('srv', 'pair')}', "
        f"served_model_name='{forms['query_token']}')",
    )
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    base = tmp_path_factory.mktemp("in")
    return {
        "log": str(_nccl_log(base / "nccl.log")),
        "ntj": str(_nccl_tests_json(base / "nt.json")),
        "cev": str(_collect_env(base / "collect_env.txt")),
        "res": str(_results(base / "results.jsonl")),
        "trc": str(_trace(base / "trace.json")),
        "srv": str(_server_log(base / "server.log")),
        "ntt": str(_nccl_tests_text(base / "nt.txt")),
        "prf": str(_profile(base / "profile.json")),
        "job": str(_job_log(base / "job.log")),
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
    text = "".join(t for _, t in walk.seen) + walk.written()
    assert MASK in text and "NCCL_IB_HCA" in text
    assert "IB_HCA=<masked:" in text  # the typed setting was read and named by its digest


def test_arguments_quoted_by_errors_and_settings_print_no_credential(inputs, tmp_path):
    walk = Walk(tmp_path)
    secret = planted("arg", {f: FORMS[f] for f in VALUE_FORMS})
    _markers("arg", {**{f: FORMS[f] for f in VALUE_FORMS}, "flag": "", "pair": ""})
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
    _markers("rank")
    for text in forms.values():
        reason = error_summary(f"Traceback\n  File x\nRuntimeError: connect {text} failed\n")
        assert _leaks(reason) == [] and reason.startswith("RuntimeError: connect"), reason
        assert MASK in reason, reason


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
    _markers("env")
    _markers("env", ARGV_FORMS)
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
    _markers("edoc")
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
    _markers("knb", {f: FORMS[f] for f in VALUE_FORMS})
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
    _markers("swp", {f: FORMS[f] for f in VALUE_FORMS})
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
