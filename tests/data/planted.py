"""The planted inputs of tests/test_trust_secrets_walk.py: the family of credential forms issue 29
found printed, each with its own random-looking marker per input kind, written into copies of real
fixtures (an NCCL log, nccl-tests text and -J, collect-env, a results file, an engine trace, a
server log, a profile, a job's log); `Walk` runs commands in-process and finds any marker in what
they printed or wrote."""

from __future__ import annotations

import json
import zlib
from pathlib import Path

from click.testing import CliRunner

from ncclprobe.cli import cli
from tests.data.resultsets import config, curve, write_set

FIXTURES = Path(__file__).parents[1] / "fixtures"
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
    # issue 40 §7: token shapes with no context, and `user:password@host` without a scheme
    "hf": "hf_{m}abcd",
    "akia": "AKIA{M}X",
    "proxyjump": "-o ProxyJump=admin:{m}@bastion",
    "ssh": "ssh admin:{m}@bastion.example failed",
    # a flag or `login` inside a word, after punctuation (a URL-ish path, a query)
    "path_flag": "/tmp/x?--password:{m}",
    "path_login": "/tmp/x?login admin:{m}",
}
ARGV_FORMS = {"redis": "redis-cli -a {m} ping", "mysql": "mysql -uroot -p{m} db"}
# in the NCCL settings themselves: a value with no spaces
VALUE_FORMS = ("query_token", "query_password", "query_sig", "userinfo")
HARMLESS = ("kernel.numa_balancing=0", "opId=0x7f3c2c000b70")


def marker(kind: str, form: str) -> str:
    """A distinct random-looking value per input kind and form, under 32 characters."""
    return f"Qz{zlib.crc32(f'{kind}/{form}'.encode()) % 10**8:08d}{kind[:3]}Vk"


def planted(kind: str, forms=FORMS) -> dict[str, str]:
    """Each form with its marker (`{M}`: the marker in capitals, for an all-capitals shape)."""
    return {
        form: text.format(m=marker(kind, form), M=marker(kind, form).upper())
        for form, text in forms.items()
    }


ALL_MARKERS: set[str] = set()


def markers(kind: str, forms=FORMS) -> list[str]:
    found = [marker(kind, form) for form in forms]
    ALL_MARKERS.update(found)
    ALL_MARKERS.update(m.upper() for m in found)
    return found


def leaks(text: str) -> list[str]:
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
        printed = [(args, leaks(text)) for args, text in self.seen if leaks(text)]
        files = {
            str(p): leaks(p.read_text(errors="replace"))
            for p in sorted(self.out.rglob("*"))
            if p.is_file() and leaks(p.read_text(errors="replace"))
        }
        assert printed == [] and files == {}, (printed, files)


def plant_nccl_log(path: Path) -> Path:
    forms, values = planted("log"), planted("log", {f: FORMS[f] for f in VALUE_FORMS})
    markers("log")
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


def plant_nccl_tests_json(path: Path) -> Path:
    doc = json.loads(
        (
            FIXTURES / "nccl_tests" / "allreduce_1x_h200_1rank_nccltests2.19.6_eager_J.json"
        ).read_text()
    )
    values = planted("ntj", {f: FORMS[f] for f in VALUE_FORMS})
    forms = planted("ntj")
    markers("ntj")
    doc["env"] += [
        f"NCCL_IB_HCA=mlx5_0,{values['query_token']}",
        f"NCCL_NET_PLUGIN={values['query_sig']}",
        f"NCCL_SOCKET_IFNAME={values['userinfo']}",
        f"NCCL_TOPO_FILE={values['query_password']}",
        f"NCCL_NET_PLUGIN_AUTH={marker('ntj', 'flag')}",
        f"SLURM_JOB_COMMENT={forms['flag']} {forms['login']}",
        f"OMPI_MCA_plm_rsh_args={forms['proxyjump']}",  # a harmless family: shown, masked in place
    ]
    doc["args"] += ["--", *forms["flag"].split(), forms["json"]]
    path.write_text(json.dumps(doc))
    return path


def plant_collect_env(path: Path) -> Path:
    fixture = FIXTURES / "collect_env" / "vllm_0.6.3_collect_env_8x_h100_nv18_indented_dstack.txt"
    values = planted("cev", {f: FORMS[f] for f in VALUE_FORMS})
    markers("cev", {**{f: FORMS[f] for f in VALUE_FORMS}, "flag": ""})
    path.write_text(
        fixture.read_text()
        + f"    NCCL_NET_PLUGIN_AUTH={marker('cev', 'flag')}\n"
        + f"    NCCL_IB_HCA={values['userinfo']}\n"
        + f"    NCCL_SOCKET_IFNAME=eth0{values['query_token'][5:]}\n"
        + f"    NCCL_NET_PLUGIN={values['query_sig']}\n"
        + f"    NCCL_TOPO_FILE={values['query_password']}\n"
    )
    return path


def plant_nccl_tests_text(path: Path) -> Path:
    """nccl-tests' stdout with its command line (as launch scripts echo it) and NCCL WARN lines."""
    fixture = FIXTURES / "nccl_tests" / "allreduce_1x_h200_1rank_nccltests2.19.6_eager_same_run.txt"
    values, forms = planted("ntt", {f: FORMS[f] for f in VALUE_FORMS}), planted("ntt")
    markers("ntt")
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


def plant_profile(path: Path) -> Path:
    """A profiler trace whose recorded arguments quote a launcher's command line."""
    doc = json.loads(
        (FIXTURES / "profiles" / "handwritten_graph_share_cut_4steps.json").read_text()
    )
    forms = planted("prf")
    markers("prf")
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


def plant_job_log(path: Path) -> Path:
    """A job's log: each rank's last exception quoting its command line, torchrun's summary."""
    forms = planted("job")
    markers("job")
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


def plant_results(path: Path) -> Path:
    """A sweep results file whose header env and config records' seen_env hold what a worker saw."""
    values = planted("res", {f: FORMS[f] for f in VALUE_FORMS})
    forms = planted("res")
    markers("res")
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
    lines[0]["env"] = {
        **seen,
        "SLURM_JOB_COMMENT": " ".join(forms.values()),
        "OMPI_MCA_plm_rsh_args": forms["proxyjump"],
    }
    lines[0]["argv"] = ["python", "-c", " ".join(forms.values())]
    for record in lines[1:]:
        if record.get("record") == "config":
            record["proof"]["seen_env"] = {"0": {**seen, **record["settings"]}}
            record["proof"]["read_by_rank"] = {"0": dict(seen)}
            record["proof"]["set_by_environment"] = dict(seen)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def plant_trace(path: Path) -> Path:
    doc = json.loads((FIXTURES / "traces" / "handwritten_seed_case_tp2_h200.json").read_text())
    values = planted("trc", {f: FORMS[f] for f in VALUE_FORMS})
    forms = planted("trc")
    markers("trc")
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


def plant_server_log(path: Path) -> Path:
    fixture = FIXTURES / "server_logs" / "handwritten_sglang_warmup_interval.log"
    forms = planted("srv")
    markers("srv")
    text = fixture.read_text().replace(
        "speculative_algorithm=None)",
        f"speculative_algorithm=None, api_key='{marker('srv', 'pair')}', "
        f"served_model_name='{forms['query_token']}')",
    )
    path.write_text(text)
    return path


def plant_flight_recorder(folder: Path) -> Path:
    """The recorded NCCL dumps (pickles) with every form in the group descriptions (pg_config and
    each entry's process_group), the frames' file and function names and a dtype."""
    import pickle

    from ncclprobe.evidence.hang.safe_pickle import loads_data

    forms = planted("frd")
    markers("frd")
    texts = list(forms.values())
    folder.mkdir(parents=True, exist_ok=True)
    source = FIXTURES / "flight_recorder" / "nccl" / "groups" / "dumps"
    for dump in sorted(source.iterdir()):
        doc = loads_data(dump.read_bytes(), str(dump))
        for index, pg in enumerate(doc["pg_config"].values()):
            pg["desc"] = f"{pg['desc']} {texts[index % len(texts)]}"
        for index, entry in enumerate(doc["entries"]):
            name, desc = entry["process_group"]
            entry["process_group"] = (name, f"{desc} {texts[index % len(texts)]}")
            entry["input_dtypes"] = [f"Float {texts[(index + 1) % len(texts)]}"]
            for k, frame in enumerate(entry["frames"]):
                text = texts[(index + k) % len(texts)]
                frame["filename"] = f"{frame['filename']}?{text}"
                frame["name"] = f"{frame['name']} {text}"
        (folder / dump.name).write_bytes(pickle.dumps(doc, protocol=2))
    return folder
