"""No planted secret is ever printed, in any format or verbosity (issue 16 §5).

The corpus plants every form the issue found printed, in a real process's environment and command
line, in an NCCL log and in an nccl-tests `-J`-style environment; each secret is a unique string,
so a leak anywhere in stdout or stderr is caught whatever shape the output takes."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from ncclprobe.cli import cli
from ncclprobe.secrets import MASK, mask_argv, mask_env, mask_text

S = {
    name: f"Pl4nted{name}Secret9"
    for name in (
        "account",
        "sqlpw",
        "userpw",
        "otel",
        "urlslash",
        "dbpass2",
        "multi",
        "pem",
        "jwt",
        "hf",
        "bearer",
        "header",
        "curlu",
        "curluser",
        "conn",
        "dburl",
        "mysqlp",
        "tok1",
        "tok2",
        "stdinpw",
        "scheme",
        "nccl",
        "ncclml",
    )
}
S["jwt"] = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJQbDRudGVkand0In0.c2lnbmF0dXJlUGw0bnRlZA"
S["hf"] = (
    "hf_Pl4ntedHfTok3nX1y2"  # shorter than a random-looking run: only its own shape catches it
)

ENV = {
    "AZURE_STORAGE_CONNECTION_STRING": f"DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={S['account']};"
    "EndpointSuffix=core.windows.net",
    "MSSQL_CONN": f"Server=db;User Id=sa;Password={S['sqlpw']};",
    "PG_CONN": f"user=dave;password={S['userpw']}",
    "OTEL_EXPORTER_OTLP_HEADERS": f"Authorization=Bearer {S['otel']}",
    "DATABASE_URL": f"postgres://eve:{S['urlslash']}/with/slash@db.internal/app",
    "DB_PASS2": S["dbpass2"],
    "SERVICE_CFG": f"first line\nsecret={S['multi']}\n",
    "TLS_KEY": f"-----BEGIN PRIVATE KEY-----\n{S['pem']}\n-----END PRIVATE KEY-----",
    "SESSION_BLOB": S["jwt"],
    "NCCL_SOCKET_IFNAME": f"eth0,https://u:{S['nccl']}@proxy",  # even a harmless family is masked by shape
    "NCCL_DEBUG_SUBSYS": f"INIT\n{S['ncclml']}",  # no harmless value spans lines
    "NCCL_PROTO": "LL",
}
ARGV = [
    "-c",
    "import time; time.sleep(120)",
    "-H",
    f"Authorization: Bearer {S['bearer']}",
    f"--header=Authorization:Bearer_{S['header']}",
    "-u",
    f"admin:{S['curlu']}",
    f"--user=admin:{S['curluser']}",
    "--conn",
    f"Server=db;Password={S['conn']};",
    "--db-url",
    f"postgres://eve:{S['dburl']}/x@h/db",
    "-p",
    S["mysqlp"],
    "--token",
    S["tok1"],
    "--token",
    S["tok2"],
    "--password",
    "-",
    S["stdinpw"],
    "Bearer",
    S["scheme"],
    S["hf"],
]


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    env = {**os.environ, **ENV}
    proc = subprocess.Popen([sys.executable, *ARGV], env=env)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # until the child has exec'd python with our argv
        try:
            if open(f"/proc/{proc.pid}/cmdline", "rb").read().count(b"\0") > 10:
                break
        except OSError:
            pass
        time.sleep(0.05)
    rec = tmp_path_factory.mktemp("rec") / "rec.json"
    rec.write_text(
        json.dumps(
            {
                "schema_version": 1,
                "kind": "recommendation",
                "env": {"DB_PASS2": S["dbpass2"], "NCCL_PROTO": "LL"},
            }
        )
    )
    yield proc.pid, rec
    proc.kill()
    proc.wait()


def _leaks(text: str) -> list[str]:
    return [name for name, secret in S.items() if secret in text]


def test_env_check_prints_no_planted_secret_in_any_format_or_verbosity(job):
    pid, rec = job
    runner = CliRunner()
    runs = controls = 0
    for fmt in ("table", "json", "csv"):
        for verbosity in ([], ["-v"], ["-q"]):
            for extra in (
                ["--all"],
                [
                    "--expect",
                    f"PG_CONN=user=dave;password={S['userpw']}",
                    "--expect-from",
                    str(rec),
                ],
            ):
                result = runner.invoke(
                    cli, [*verbosity, "env-check", "--pid", str(pid), "--format", fmt, *extra]
                )
                assert result.exit_code in (0, 1), result.output
                assert str(pid) in result.stdout
                assert _leaks(result.stdout + result.stderr) == [], (fmt, verbosity, extra)
                if fmt == "json" and "--all" in extra:  # positive control: read, and shown masked
                    shown = json.loads(result.stdout)["processes"]
                    env = next(p["env"] for p in shown if p["pid"] == pid)
                    assert MASK in env["PG_CONN"] and env["NCCL_PROTO"] == "LL"
                    controls += 1
                runs += 1
    assert runs == 18 and controls == 3


def test_the_masks_keep_what_is_harmless():
    """Structure, not a blanket: the host of a URL, the user of -u, a header's name, NCCL values stay."""
    masked = mask_argv(["python", *ARGV[2:]])
    assert _leaks(" ".join(masked)) == []
    assert mask_argv(["curl", *ARGV[2:4]])[2] == "Authorization: " + MASK  # curl's -H: a header
    assert (
        f"Authorization: {MASK} {MASK}" in masked  # elsewhere -H is not a header (mpirun's hosts)
        and "admin:" + MASK in masked
        and f"postgres://{MASK}@h/db" in masked
    )
    assert masked[-1] == MASK and masked[
        masked.index("--password") + 1 : masked.index("--password") + 3
    ] == [MASK, MASK]
    assert mask_argv(
        ["python", "-u", "train.py", "--tokenizer", "meta-llama/Llama-3", "NCCL_PROTO=LL"]
    ) == ["python", "-u", "train.py", "--tokenizer", "meta-llama/Llama-3", "NCCL_PROTO=LL"]
    assert (
        mask_text("NCCL_IB_HCA==mlx5_0:1 /tmp/nccl.%h.%p.log eth0")
        == "NCCL_IB_HCA==mlx5_0:1 /tmp/nccl.%h.%p.log eth0"
    )
    env = mask_env(ENV)
    assert env["NCCL_PROTO"] == "LL" and env["NCCL_SOCKET_IFNAME"].startswith(
        "eth0,https://" + MASK
    )
    assert _leaks(json.dumps(env)) == []


def test_an_nccl_tests_json_environment_is_masked_whole():
    """nccl-tests -J records the whole environment: `mask_env` is the one call its importer makes."""
    recorded = {
        **ENV,
        "HF_TOKEN": S["hf"],
        "NCCL_ALGO": "Ring",
        "HOME": "/home/u",
        "AWS_SECRET_ACCESS_KEY": S["tok1"],
    }
    masked = mask_env(recorded)
    assert (
        _leaks(json.dumps(masked)) == []
        and masked["NCCL_ALGO"] == "Ring"
        and masked["HOME"] == "/home/u"
    )
    assert set(masked) == set(recorded)


def test_nccl_logs_print_no_planted_secret_on_read_or_import(tmp_path):
    log = tmp_path / "nccl.log"
    log.write_text(
        "h:11:11 [0] NCCL INFO NCCL version 2.28.9+cuda13.0\n"
        f"h:11:11 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth0,https://u:{S['nccl']}@proxy\n"
        f"h:11:11 [0] NCCL INFO NCCL_COMM_ID set by environment to Password={S['conn']}\n"
        f"h:11:22 [0] misc/socket.cc:50 NCCL WARN Net : connect to https://svc:{S['urlslash']}@10.0.0.1 failed, "
        f"Authorization: Bearer {S['bearer']} or Bearer {S['scheme']}\n"
    )
    runner = CliRunner()
    for fmt in ("table", "json", "csv"):
        result = runner.invoke(cli, ["nccl-log", str(log), "--format", fmt])
        assert result.exit_code in (0, 1) and _leaks(result.stdout + result.stderr) == [], (
            result.output
        )
        # positive control: the planted line was read, its value shown masked
        assert "NCCL_SOCKET_IFNAME" in result.stdout and MASK in result.stdout, fmt
    tests_out = tmp_path / "perf.txt"
    tests_out.write_text(
        f"# nThread 1 nGpus 1 minBytes 8 maxBytes 8 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 "
        "validation: 1 graph: 0\n"
        f"$ NCCL_SOCKET_IFNAME=https://u:{S['dburl']}@x ./all_reduce_perf -b 8 -e 8\n"
        + log.read_text()
        + "#  size  count  type  redop  root  time  algbw  busbw  #wrong  time  algbw  busbw  #wrong\n"
        "8  2  float  sum  -1  9.5  0.00  0.00  0  9.4  0.00  0.00  0\n"
    )
    out = tmp_path / "imported.jsonl"
    for fmt in ("table", "json"):
        result = runner.invoke(
            cli,
            [
                "import",
                str(tests_out),
                "--format",
                fmt,
                "--collective",
                "all_reduce",
                *(["--output", str(out)] if fmt == "json" else []),
            ],
        )
        # exit 1: the planted NCCL WARN line is a failure line, shown (masked) as not explained
        assert result.exit_code == 1 and _leaks(result.stdout + result.stderr) == [], result.output
    assert _leaks(out.read_text()) == []
    assert "NCCL_SOCKET_IFNAME" in out.read_text() and MASK in out.read_text()  # read, masked


def test_a_collect_env_environment_is_masked_on_import_and_lint(tmp_path):
    """`vllm collect-env` prints the shell's environment: its values go through the same masks."""
    fixture = (
        Path(__file__).parent
        / "fixtures"
        / "collect_env"
        / "vllm_0.6.3_collect_env_8x_h100_nv18_indented_dstack.txt"
    )
    planted = tmp_path / "collect_env.txt"
    planted.write_text(
        fixture.read_text()
        + f"    HF_TOKEN={S['hf']}\n    NCCL_SOCKET_IFNAME=https://u:{S['nccl']}@p\n"
    )
    runner = CliRunner()
    for args in (
        ["import", str(planted), "--format", "json"],
        ["knobs", "--lint", "--collect-env", str(planted), "--format", "json"],
    ):
        result = runner.invoke(cli, args)
        assert result.exit_code in (0, 1) and _leaks(result.stdout + result.stderr) == [], (
            result.output
        )
        assert "NCCL_SOCKET_IFNAME" in result.stdout and MASK in result.stdout, args  # read, masked


def test_an_error_line_that_quotes_the_input_masks_what_it_quotes(tmp_path):
    for value in (
        f"https://u:{S['dburl']}@h",
        S["hf"],
    ):  # an invalid NCCL_PROTO: the error quotes it
        result = CliRunner().invoke(
            cli, ["sweep", "--proto", value, "--output", str(tmp_path / "o.jsonl")]
        )
        assert result.exit_code == 2 and _leaks(result.stdout + result.stderr) == [], result.output
        assert MASK in result.stderr  # positive control: the value was quoted, masked
    result = CliRunner().invoke(cli, ["run-engine", "--env", "NOEQUALS"])
    assert result.exit_code == 2 and "NAME=VALUE" in result.stderr  # a message stays readable


def test_a_results_file_or_trace_from_another_writer_is_masked_on_read(tmp_path):
    """ncclprobe writes headers masked; a file from an older version, another tool or a hand may not.
    Every command that echoes a header or a trace's provenance (recommend, report, diagnose) reads it
    through the one loader of its kind, which masks it."""
    from tests.data.resultsets import config, curve, engine_trace, write_set

    results = write_set(
        tmp_path / "s.jsonl", [config({}, curve(10, 1)), config({"NCCL_PROTO": "LL"}, curve(5, 1))]
    )
    lines = Path(results).read_text().splitlines()
    header = {**json.loads(lines[0]), "env": ENV, "argv": ARGV}  # what our writer would have masked
    Path(results).write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n")
    trace = engine_trace({1 << 14: 10})
    trace["provenance"].update(env=ENV, argv=ARGV)
    (tmp_path / "t.json").write_text(json.dumps(trace))
    runner, t, shown = CliRunner(), str(tmp_path / "t.json"), 0
    for args in (
        ["recommend", results, "--format", "json"],
        ["recommend", results, "--emit", "json"],
        ["recommend", results, "--trace", t, "--format", "csv"],
        ["-vv", "diagnose", "--trace", t, "--sweep", results, "--format", "json"],
        ["report", results, "--trace", t, "--output", str(tmp_path / "rep"), "--format", "json"],
    ):
        result = runner.invoke(cli, args, prog_name="ncclprobe")
        assert result.exit_code in (0, 1) and _leaks(result.output) == [], (
            args,
            _leaks(result.output),
        )
        shown += MASK in result.output
    written = "".join(
        p.read_text(errors="replace") for p in (tmp_path / "rep").rglob("*") if p.is_file()
    )
    assert written and _leaks(written) == []
    # positive control: the planted header was read and is shown, masked, somewhere it is echoed
    assert shown or MASK in written, "no output echoes the planted header: the test proves nothing"


def test_log_lines_and_tracebacks_are_masked_by_shape(capsys):
    """-v/-vv print log lines and an internal error's traceback: both go through the one formatter."""
    import logging

    def logging_as_set_by(*flags):  # the group's options configure logging before any command
        with pytest.raises(SystemExit):
            cli.main([*flags, "import", "--help"], prog_name="ncclprobe")

    logging_as_set_by("-vv")
    try:
        raise ValueError(f"connect postgres://eve:{S['dburl']}@db/app {S['hf']}")
    except ValueError as exc:
        logging.getLogger("ncclprobe").error(
            "internal error at %s", f"https://u:{S['nccl']}@proxy", exc_info=exc
        )
    logging_as_set_by()
    err = capsys.readouterr().err
    assert "Traceback" in err and "postgres://" in err and _leaks(err) == []
    assert (
        f"postgres://{MASK}@db/app" in err
    )  # positive control: the planted value, masked in place


# --- boundaries of the shapes (the sampled mutation run of issue 40 left these unpinned) ---------


def test_a_pem_block_is_masked_whole_and_only_it():
    from ncclprobe.secrets.shapes import mask_pem

    pem = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0B\n-----END PRIVATE KEY-----"
    assert mask_pem(f"before {pem} after") == f"before {MASK} after"
    assert mask_pem(f"{pem} mid {pem} end") == f"{MASK} mid {MASK} end"  # the second found too
    assert mask_pem(f"x {pem[:40]}") == f"x {MASK}"  # cut: masked to the end
    assert mask_pem("a -----BEGIN X-----\nQ\n-----END X----- b -----BEGIN Y-----\nR") == (
        f"a {MASK} b {MASK}"
    )
    assert mask_pem("no block ----- here") == "no block ----- here"


def test_a_random_run_after_a_dot_is_judged_by_its_segments():
    run = "Ab3Cd4Ef5Gh6Ij7KLm8No9Pq0Rs1Tu2Vw3"  # 34 characters, random-looking
    assert mask_text(f"Qwen2.5/{run}") == f"Qwen2.5/{MASK}"  # the `5/` before it stays
    assert mask_text(f"/data/{run}Xy9Z") == f"/data/{MASK}"  # a 38-character segment


def test_a_random_piece_of_16_characters_is_random_and_of_15_a_name():
    assert mask_text("x Ab3Cd4Ef5Gh6Ij7K_abcdefghijklmnop y") == f"x {MASK} y"
    kept = "x Ab3Cd4Ef5Gh6Ij7_abcdefghijklmnopq y"
    assert mask_text(kept) == kept


def test_a_url_segment_is_masked_from_16_characters_that_change_kind_as_random_text_does():
    base = "https://h.example/some/longer/path/"
    assert mask_text(f"{base}Ab1Cd2Ef3Gh4Ij5/y") == f"{base}Ab1Cd2Ef3Gh4Ij5/y"  # 15: kept
    assert mask_text(f"{base}Ab1Cd2Ef3Gh4Ij5K/y") == f"{base}{MASK}/y"  # 16
    assert mask_text(f"{base}AAAaaa11AAaa11AAaa11/y") == f"{base}{MASK}/y"  # 8 changes in 20
    assert mask_text(f"{base}AAAAaaa111AAaa11AAaa/y") == f"{base}AAAAaaa111AAaa11AAaa/y"  # 7
