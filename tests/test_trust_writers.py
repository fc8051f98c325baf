"""No command destroys a file or leaves debris (issue 16 §1): one rule for every writer.

Each class is checked across every command that writes: an existing output (or one of the inputs)
is refused unless --force; --force replaces it whole and never wipes what ncclprobe did not write;
a failure or an interrupt leaves nothing; inputs are read before any output exists; Ctrl-C and
SIGTERM exit 130 and 143 with one line that says how to continue."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from ncclprobe.cli import cli
from ncclprobe.errors import UsageProblem
from ncclprobe.safe_output import atomic_directory, atomic_file, write_text
from tests.data.resultsets import config, curve, engine_trace, write_set

FIXTURE = Path(__file__).parent / "fixtures" / "nccl_tests"
PRECIOUS = "precious\n"


def _invoke(*args, cwd=None):
    old = os.getcwd()
    if cwd:
        os.chdir(cwd)
    try:
        return CliRunner().invoke(cli, list(args), prog_name="ncclprobe")
    finally:
        os.chdir(old)


@pytest.fixture()
def results(tmp_path):
    return write_set(
        tmp_path / "s.jsonl", [config({}, curve(10, 1)), config({"NCCL_PROTO": "LL"}, curve(5, 1))]
    )


def _nccl_tests_file():
    return FIXTURE / "allreduce_4x_rtx5090_pcie_genoa.txt"  # one run: one output file


# every command that writes a file: (arguments, the output path inside tmp_path)
WRITERS = {
    "recommend": lambda r, out: ["recommend", r, "--emit", "json", "--output", out],
    "import": lambda r, out: ["import", str(_nccl_tests_file()), "--output", out],
    "export": lambda r, out: ["export", r, "--output", out],
    "sweep": lambda r, out: [
        "sweep",
        "--backend",
        "gloo",
        "--sizes",
        "64",
        "--proto",
        "default",
        "--algo",
        "default",
        "--output",
        out,
    ],
    "run-engine": lambda r, out: [
        "run-engine",
        "--preset",
        "tiny",
        "--new-tokens",
        "2",
        "--trace",
        out,
    ],
    "train-draft": lambda r, out: ["train-draft", "--preset", "tiny", "--output", out],
}


@pytest.mark.parametrize("command", sorted(WRITERS))
def test_an_existing_output_is_refused_before_any_work(tmp_path, results, command):
    out = tmp_path / "taken.out"
    out.write_text(PRECIOUS)
    started = time.monotonic()
    result = _invoke(*WRITERS[command](results, str(out)), cwd=tmp_path)
    assert (
        result.exit_code == 2 and "already exists" in result.stderr and "--force" in result.stderr
    ), result.output
    assert len(result.stderr.strip().splitlines()) == 1 and out.read_text() == PRECIOUS
    assert time.monotonic() - started < 60  # refused up front (train-draft would train for minutes)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["taken.out", "s.jsonl"])


def test_an_input_is_never_an_output_even_with_force(tmp_path, results):
    before = Path(results).read_text()
    for extra in ([], ["--force"]):
        result = _invoke("recommend", results, "--emit", "json", "--output", results, *extra)
        assert result.exit_code == 2 and "also an input" in result.stderr
    trace = tmp_path / "t.json"
    trace.write_text(__import__("json").dumps(engine_trace({1 << 14: 10})))
    result = _invoke(
        "recommend",
        results,
        "--workload",
        str(trace),
        "--emit",
        "env",
        "--output",
        str(trace),
        "--force",
    )
    assert result.exit_code == 2 and "also an input" in result.stderr
    assert Path(results).read_text() == before


def test_no_file_of_a_checkpoint_or_prompts_input_is_replaced_even_with_force(tmp_path):
    """A checkpoint directory's files and a prompts file are inputs too: --force never replaces them."""
    checkpoint = tmp_path / "ck"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text(PRECIOUS)
    (checkpoint / "model.safetensors").write_text(PRECIOUS)
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(PRECIOUS)
    for args in (
        [
            "train-draft",
            "--checkpoint",
            str(checkpoint),
            "--output",
            str(checkpoint / "model.safetensors"),
        ],
        ["run-engine", "--checkpoint", str(checkpoint), "--trace", str(checkpoint / "config.json")],
        ["train-draft", "--prompts", str(prompts), "--output", str(prompts)],
        ["train-draft", "--eval-prompts", str(prompts), "--output", str(prompts)],
    ):
        result = _invoke(*args, "--force", cwd=tmp_path)
        assert result.exit_code == 2 and "also an input" in result.stderr, (args, result.output)
    assert all(p.read_text() == PRECIOUS for p in (prompts, *checkpoint.iterdir()))


def test_force_replaces_a_file_whole(tmp_path, results):
    out = tmp_path / "rec.json"
    out.write_text(PRECIOUS)
    result = _invoke("recommend", results, "--emit", "json", "--output", str(out), "--force")
    assert result.exit_code == 0, result.output
    assert '"kind": "recommendation"' in out.read_text()
    assert [
        p.name for p in tmp_path.iterdir() if p.name.startswith(".")
    ] == []  # no temporary file left


def test_a_report_directory_is_replaced_whole_and_never_one_of_the_users(tmp_path, results):
    out = tmp_path / "report"
    (out / "figures").mkdir(parents=True)  # an earlier report, as ncclprobe left it
    (out / ".ncclprobe-output").write_text("written by ncclprobe\n")
    (out / "figures" / "stale-from-an-earlier-run.png").write_bytes(b"old")
    again = _invoke("report", results, "--output", str(out))
    assert again.exit_code == 2 and "--force" in again.stderr
    assert _invoke("report", results, "--output", str(out), "--force").exit_code == 0
    assert not (
        out / "figures" / "stale-from-an-earlier-run.png"
    ).exists()  # never mixed with new files
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text(PRECIOUS)
    refused = _invoke("report", results, "--output", str(mine), "--force")
    assert refused.exit_code == 2 and "did not write" in refused.stderr
    assert (mine / "thesis.tex").read_text() == PRECIOUS
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize(
    "args",
    [
        ["report", "{results}", "--output", "{tmp}/new", "--trace", "{tmp}/missing.json"],
        ["report", "{tmp}/missing.jsonl", "--output", "{tmp}/new"],
        ["recommend", "{tmp}/missing.jsonl", "--emit", "json", "--output", "{tmp}/new"],
        ["import", "{tmp}/missing.txt", "--output", "{tmp}/new"],
        ["sweep", "--collect", "{tmp}", "--output", "{tmp}/new"],
        ["sweep", "--collect", "{tmp}"],
        ["sweep", "--p2p-level", "²"],
    ],
)
def test_bad_input_creates_no_output(tmp_path, results, args):
    """Every input is read and checked before an output (or ./runs/) exists."""
    argv = [a.format(results=results, tmp=tmp_path) for a in args]
    result = _invoke(*argv, cwd=tmp_path)
    assert result.exit_code == 2, result.output
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.jsonl"]


@pytest.mark.parametrize("failure", [RuntimeError("planted"), KeyboardInterrupt()])
def test_a_failed_or_interrupted_write_leaves_nothing(tmp_path, failure):
    with pytest.raises(type(failure)):
        with atomic_file(tmp_path / "out.json") as handle:
            handle.write("half")
            raise failure
    with pytest.raises(type(failure)):
        with atomic_directory(tmp_path / "dir") as work:
            (work / "a").write_text("half")
            raise failure
    (tmp_path / "kept.txt").write_text(PRECIOUS)
    with pytest.raises(type(failure)):
        with atomic_file(tmp_path / "kept.txt", force=True) as handle:
            handle.write("half")
            raise failure
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.txt"]
    assert (tmp_path / "kept.txt").read_text() == PRECIOUS


def test_a_file_that_appears_meanwhile_is_kept(tmp_path):
    with pytest.raises(UsageProblem, match="appeared"):
        with atomic_file(tmp_path / "race.txt") as handle:
            handle.write("new")
            (tmp_path / "race.txt").write_text(PRECIOUS)
    assert (tmp_path / "race.txt").read_text() == PRECIOUS
    write_text(tmp_path / "race.txt", "replaced\n", force=True)
    assert (tmp_path / "race.txt").read_text() == "replaced\n"


def test_a_full_file_system_is_one_line_and_leaves_nothing(tmp_path):
    """RLIMIT_FSIZE makes the kernel refuse the write, like a full disk (EFBIG for ENOSPC)."""
    code = (
        "import resource, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
        "resource.setrlimit(resource.RLIMIT_FSIZE, (2000, 2000)); from ncclprobe.cli import main; "
        "sys.argv = ['ncclprobe'] + sys.argv[1:]; main()"
    )
    out = tmp_path / "imported.jsonl"
    done = subprocess.run(
        [sys.executable, "-c", code, "import", str(_nccl_tests_file()), "--output", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert (
        done.stderr.count("\n") == 1
        and "cannot write" in done.stderr
        and "Traceback" not in done.stderr
    )
    assert list(tmp_path.iterdir()) == []


def test_a_read_only_results_file_is_not_resumed(tmp_path):
    """A sweep's journal the process cannot write is not resumed. Root writes any mode, so as root
    the command runs in a forked child that dropped to the unprivileged `nobody` (CI runs as root:
    the test used to skip there, and so never noticed that its file, not a sweep's, was refused
    for another reason). The journal is a real recorded sweep (examples/traces)."""
    import shutil

    results = tmp_path / "sweep.jsonl"
    shutil.copyfile(
        Path(__file__).resolve().parent.parent / "examples/traces/collective-bound.sweep.jsonl",
        results,
    )
    if os.geteuid() != 0:
        os.chmod(results, 0o444)
        try:
            result = _invoke("sweep", "--resume", str(results))
            assert result.exit_code == 2 and "read-only" in result.stderr
        finally:
            os.chmod(results, 0o644)
        return
    import json
    import pwd
    import tempfile

    from ncclprobe.cli import sweep as _loaded  # noqa: F401
    from ncclprobe.records import read_results
    from ncclprobe.sweep import session

    # everything the command imports before it opens the file, imported here: the child cannot
    # read the interpreter's own library once it is nobody (it lives under /root)
    session._resumable_spec(str(results), read_results(results).header)  # its imports, no more

    nobody = pwd.getpwnam("nobody")
    home = Path(tempfile.mkdtemp(prefix="ncclprobe-ro-"))  # under /tmp: nobody can reach it
    try:
        os.chmod(home, 0o755)
        copy = home / "s.jsonl"
        shutil.copyfile(results, copy)
        os.chmod(copy, 0o444)  # readable, not writable, by nobody
        reader, writer = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child drops to nobody, then runs the command in this process
            try:
                os.close(reader)
                os.setgid(nobody.pw_gid)
                os.setuid(nobody.pw_uid)
                result = _invoke("sweep", "--resume", str(copy), cwd=home)
                report = {"code": result.exit_code, "stderr": result.stderr}
            except BaseException as exc:  # noqa: BLE001  (any failure is the parent's to report)
                report = {"code": -1, "stderr": repr(exc)}
            os.write(writer, json.dumps(report).encode())
            os._exit(0)
        os.close(writer)
        with os.fdopen(reader) as pipe:
            report = json.loads(pipe.read())
        os.waitpid(pid, 0)
        assert report["code"] == 2 and "read-only" in report["stderr"], report
        assert copy.read_bytes() == Path(results).read_bytes()  # untouched
    finally:
        shutil.rmtree(home, ignore_errors=True)


ARGS = [
    "--sizes",
    "8",
    "--iters",
    "1",
    "--trials",
    "1",
    "--warmup",
    "0",
    "--proto",
    "default",
    "--algo",
    "default",
    "--p2p-level",
    "default,SYS",
    "--backend",
    "gloo",
    "--nranks",
    "2",
    "--placement",
    "in",
]


def _sweep(tmp_path, out):
    return subprocess.Popen(
        [sys.executable, "-m", "ncclprobe", "sweep", *ARGS, "--output", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )


def _wait_for(predicate, proc, limit_s=90):
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and proc.poll() is None:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def test_a_terminated_sweep_keeps_what_it_finished_and_says_how_to_continue(tmp_path):
    """SIGTERM after the first configuration (the second pool is starting): the finished
    configuration stays, the last line says --resume, no pool or log directory is left."""
    out = tmp_path / "sweep.jsonl"
    proc = _sweep(tmp_path, out)
    assert _wait_for(lambda: out.exists() and '"record": "config"' in out.read_text(), proc), (
        proc.communicate()
    )
    os.kill(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("ncclprobe: terminated") and f"--resume {out}" in last, err
    assert '"record": "config"' in out.read_text()
    assert not list(tmp_path.glob("ncclprobe-*"))


def test_a_sweep_interrupted_before_any_result_leaves_no_file(tmp_path):
    """Ctrl-C before the first configuration ends: exit 130, and no file that would block the rerun."""
    out = tmp_path / "sweep.jsonl"
    proc = _sweep(tmp_path, out)
    assert _wait_for(out.exists, proc), proc.communicate()
    os.kill(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    last = err.strip().splitlines()[-1]
    assert proc.returncode == 130 and last.startswith("ncclprobe: interrupted"), err
    assert "no output file was left behind" in last
    left = {
        p.name: sorted(q.name for q in p.iterdir()) if p.is_dir() else "file"
        for p in tmp_path.iterdir()
    }
    assert (
        left == {}
    )  # a Ctrl-C just after a creation left one (tests/test_interrupt_at_creation.py)


def test_a_device_is_never_replaced_by_a_file(results):
    """`--output /dev/null --force` must not turn the device node into a regular file."""
    result = _invoke("recommend", results, "--emit", "json", "--output", "/dev/null", "--force")
    assert result.exit_code == 2 and "not a regular file" in result.stderr
    assert not Path("/dev/null").is_file()


# --- symbolic links (issue 40 §2): never written through, never replaced, --force or not -----------


def _links(tmp_path):
    """(link, what it points at) for a dangling link and a link to the user's file, each in the
    output's own directory and in a sticky world-writable one (/tmp's kind), and the victim file."""
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)
    elsewhere = tmp_path / "else"
    elsewhere.mkdir()
    victim = elsewhere / "victim.out"
    victim.write_text(PRECIOUS)
    links = []
    for where in (tmp_path, sticky):
        for name, target in (("dangling", elsewhere / "new.out"), ("to-file", victim)):
            link = where / f"{name}.out"
            link.symlink_to(target)
            links.append((link, target))
    return links, elsewhere


@pytest.mark.parametrize("command", sorted(WRITERS))
def test_no_writer_writes_through_or_replaces_a_symbolic_link(tmp_path, results, command):
    links, elsewhere = _links(tmp_path)
    for link, target in links:
        for force in ([], ["--force"]):
            result = _invoke(*WRITERS[command](results, str(link)), *force, cwd=tmp_path)
            where = (command, link.name, link.parent.name, force)
            assert result.exit_code == 2, (where, result.output[-400:])
            assert "is a symbolic link" in result.stderr and repr(str(target)) in result.stderr
            assert "appeared while" not in result.stderr and len(result.stderr.splitlines()) == 1
            assert link.is_symlink() and os.readlink(link) == str(target), where
    assert sorted(p.name for p in elsewhere.iterdir()) == ["victim.out"]
    assert (elsewhere / "victim.out").read_text() == PRECIOUS
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "dangling.out",
        "else",
        "s.jsonl",
        "sticky",
        "to-file.out",
    ]
    assert sorted(p.name for p in (tmp_path / "sticky").iterdir()) == [
        "dangling.out",
        "to-file.out",
    ]


def test_the_links_target_named_itself_is_written(tmp_path, results):
    """The refusal's way out works: the file the link pointed at, named, is written (with --force
    where it exists)."""
    links, elsewhere = _links(tmp_path)
    for link, target in links[:2]:
        force = ["--force"] if target.exists() else []
        result = _invoke("recommend", results, "--emit", "json", "--output", str(target), *force)
        assert result.exit_code == 0, result.output
        assert '"kind": "recommendation"' in target.read_text() and link.is_symlink()


def test_a_results_file_resumed_through_a_link_is_refused(tmp_path):
    import shutil

    real = tmp_path / "real.jsonl"
    shutil.copyfile(
        Path(__file__).resolve().parent.parent / "examples/traces/collective-bound.sweep.jsonl",
        real,
    )
    before = real.read_bytes()
    link = tmp_path / "link.jsonl"
    link.symlink_to(real)
    result = _invoke("sweep", "--resume", str(link))
    assert result.exit_code == 2 and "is a symbolic link" in result.stderr, result.output
    assert real.read_bytes() == before and link.is_symlink()


def test_a_journal_never_opens_a_link_planted_after_the_check(tmp_path):
    """The last step follows no link either: a link that appears between the check and the open
    is refused by O_NOFOLLOW/O_EXCL, and one that appears before --force's rename is kept."""
    from ncclprobe.records_writer import ResultWriter
    from ncclprobe.safe_output import OutputProblem, commit_file

    victim = tmp_path / "victim"
    victim.write_text(PRECIOUS)
    link = tmp_path / "journal.jsonl"
    link.symlink_to(victim)
    for force in (False, True):
        with pytest.raises(OutputProblem):
            ResultWriter(link, {"x": 1}, force=force)
        with pytest.raises(OutputProblem, match="symbolic link"):
            ResultWriter(link, None, resume=True)
    temp = tmp_path / "temp"
    temp.write_text("new\n")
    with pytest.raises(OutputProblem, match="became a symbolic link"):
        commit_file(temp, link, True, "output")
    assert victim.read_text() == PRECIOUS and link.is_symlink() and not temp.exists()


def test_no_directory_writer_writes_through_a_symbolic_link(tmp_path, results):
    from tests.test_trust_walk import DIR_OUTPUTS

    empty = tmp_path / "empty"
    empty.mkdir()
    for name, args in sorted(DIR_OUTPUTS.items()):
        for target in (empty, tmp_path / "nowhere"):
            link = tmp_path / "out"
            link.symlink_to(target)
            argv = [results if a == "RESULTS" else a for a in args] + [str(link)]
            result = _invoke(*argv, cwd=tmp_path)
            assert result.exit_code == 2 and "is a symbolic link" in result.stderr, (
                name,
                result.output[-400:],
            )
            assert link.is_symlink() and list(empty.iterdir()) == []
            link.unlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "s.jsonl"]


def test_a_relative_output_directory_reaches_every_process_that_fills_it(tmp_path):
    """env-propagation's drivers run in the directory being filled: given relative, it was
    relative to them too, and every mechanism failed (exit 3, specs left) (issue 40 §8)."""
    result = _invoke(
        "probe",
        "env-propagation",
        "--mechanism",
        "spawn",
        "--output",
        "rel",
        "--format",
        "json",
        cwd=tmp_path,
    )
    assert result.exit_code == 0, result.output[-600:]
    doc = __import__("json").loads(result.stdout)
    assert [row["mechanism"] for row in doc["rows"]] == ["spawn"] and "error" not in result.stderr
    assert (tmp_path / "rel" / "spawn.result.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rel"]  # nothing beside it


def test_open_nofollow_opens_a_file_and_refuses_a_link_in_one_line(tmp_path):
    """The journal's last step on its own (the checks before it refuse a link first, so only a
    link planted in between reaches it): a regular file opens, a link is refused, not followed."""
    from ncclprobe.safe_output import OutputProblem, open_nofollow

    real = tmp_path / "real.jsonl"
    real.write_text(PRECIOUS)
    fd = open_nofollow(real, os.O_WRONLY | os.O_APPEND, "results file")
    os.write(fd, b"more\n")
    os.close(fd)
    assert real.read_text() == PRECIOUS + "more\n"
    link = tmp_path / "link.jsonl"
    link.symlink_to(real)
    with pytest.raises(OutputProblem, match="is a symbolic link"):
        open_nofollow(link, os.O_WRONLY | os.O_APPEND, "results file")
    with pytest.raises(FileNotFoundError):  # any other refusal of the system is its own
        open_nofollow(tmp_path / "absent" / "x", os.O_WRONLY, "results file")
    assert real.read_text() == PRECIOUS + "more\n"


def test_a_links_refusal_says_what_to_do_by_what_it_points_at(tmp_path):
    from ncclprobe.safe_output import OutputProblem, refuse_link

    hints = {
        "/dev/null": "leave the option out to print to stdout",  # a device, as /dev/stdout's
        str(tmp_path / "nowhere"): "it points nowhere (dangling); name the file itself",
        str(tmp_path): "name the file itself to write there",
    }
    for index, (target, hint) in enumerate(hints.items()):
        link = tmp_path / f"link{index}"
        link.symlink_to(target)
        with pytest.raises(OutputProblem) as refused:
            refuse_link(link, "--output")
        assert hint in str(refused.value) and repr(target) in str(refused.value), refused.value
    refuse_link(tmp_path / "plain", "--output")  # not a link: nothing to say
