"""Every parser runs in linear time on any line (issue 16 §4): bounded, not timed.

Each parser reads lines of 10K and of 40K characters in shapes that make a backtracking pattern
quadratic (runs without spaces, repeated separators, prefixes that almost match). Linear work
grows 4x; quadratic 16x (the NCCL prefix pattern took 0.36 s at 10K and 5.5 s at 40K). The bound,
8x on the best of three plus 0.1 s for a busy machine's noise, tells the two apart (a quadratic
pattern costs seconds at 40K). Absolute
speed lives in examples/bench_parsers.py."""

import tempfile
import time
from pathlib import Path

import pytest

from ncclprobe.errors import UsageProblem
from ncclprobe.evidence.hang.job_log import parse_job_log
from ncclprobe.evidence.live.environ import parse_environ_block
from ncclprobe.evidence.live.logcheck import lines_by_process
from ncclprobe.evidence.nccl.nccl_log import parse_nccl_log
from ncclprobe.evidence.nccl.nccl_tests import parse_nccl_tests
from ncclprobe.evidence.node.collect_env import looks_like_collect_env, parse_collect_env
from ncclprobe.evidence.node.lspci import parse_lspci
from ncclprobe.evidence.node.nvbandwidth import looks_like_nvbandwidth, parse_nvbandwidth
from ncclprobe.evidence.node.p2p_test_output import looks_like_p2p_test, parse_p2p_test
from ncclprobe.evidence.node.topo import parse_topo
from ncclprobe.evidence.text import clean_line
from ncclprobe.hosts.run import problem_line
from ncclprobe.launch import error_summary
from ncclprobe.records import read_results
from ncclprobe.secrets import mask_argv, mask_env_value, mask_text


def _quiet(parse):
    def run(text):
        try:
            parse(text)
        except UsageProblem:  # "no table found" is an answer too; only the time matters here
            pass

    return run


_FOLDER = tempfile.TemporaryDirectory(prefix="ncclprobe-parsers-")  # removed at exit
_RESULTS = Path(_FOLDER.name) / "r.jsonl"


def _results_file(text):
    """The results reader through its public door: the two lines written as a file, then read."""
    _RESULTS.write_text(f"{text}\n{text}\n")
    read_results(_RESULTS)


PARSERS = {
    "nccl-log": parse_nccl_log,
    "nccl-tests": _quiet(parse_nccl_tests),
    "topo": _quiet(parse_topo),
    "clean_line": clean_line,
    "env-check log pids": lambda t: lines_by_process(t, clean_line),
    "environ block": lambda t: parse_environ_block(t.encode()),
    "mask_text": mask_text,
    "mask_argv": lambda t: mask_argv(t.split(" ") + [t]),
    "mask_env_value": lambda t: mask_env_value("NCCL_SOCKET_IFNAME", t),
    "error_summary": error_summary,
    "launch problem_line": problem_line,
    "results lines": _quiet(_results_file),
    "p2pBandwidthLatencyTest": _quiet(parse_p2p_test),
    "nvbandwidth": _quiet(parse_nvbandwidth),
    "collect-env": _quiet(parse_collect_env),
    "lspci": _quiet(parse_lspci),
    "job log": _quiet(parse_job_log),
    "sniffers": lambda t: (
        looks_like_collect_env(t),
        looks_like_nvbandwidth(t),
        looks_like_p2p_test(t),
    ),
}
SHAPES = [
    "a",
    "a:",
    "[",
    "x:1:",
    "h:1:1 [0] ",
    "h:1:1 [0] NCCL INFO ",
    "h:1:1 [0] NCCL INFO a:1 ",
    "eyJ",
    "://a:",
    "a=b;",
    "# ",
    "#  size  count ",
    "1 ",
    "NCCL_X=",
    "Bearer ",
    "-----BEGIN",
    '{"a": ',
    "aB3+/",
    "Speed 8GT/s ",
    "Running a_ce.",
    "   D\\D  ",
    "Device: 0, ",
    # issue 29's masking by context: flags, pairs by key, quoted keys, an unclosed quoted value
    "--password ",
    "login a:",
    "a.b-c=",
    "x?token=",
    "-Dpassword=",
    "'k': ",
    '"a":"',
    '"password": "x',
    "/aB3",
]


# issue 40 §3: what the audit of every pattern (examples/bench_regex_bombs.py) found quadratic,
# each as (what starts the line, what repeats): a repeated name before `(?:.*\s)?`, a lazy key
# before `\s*`, a hex run before `.*`, unclosed parentheses, a lazy `.*?` to a word that never
# comes, blank lines under `^\s*` with re.M, letters before `[+-]`
BOMBS = [  # (head, piece repeated, tail)
    ("", "p2pBandwidthLatencyTest ", ""),
    ("PyTorch version: 2.1\naa", " ", "b: c"),
    ("h:1:1 [0] NCCL INFO comm 0xa rank 0 nranks 0 cudaDev 0 busId ", "a", " - Init x"),
    ("", "[PG ID 0 PG GUID a(", ""),
    ("", "work sequence id: 0a:", ""),
    ("", "Connection closed by peer [", ""),
    ("01:00.0 3D controller: NVIDIA Corporation\n\tLnkSta:\t", "Speed 8GT/s ", ""),
    ("01:00.0 3D controller: NVIDIA Corporation\n\tDevCtl:\t", "a", ""),
    ("", "\n", ""),
    ("", " \n", ""),
]


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_the_audits_bombs_cost_linear_time(name):
    parse = PARSERS[name]
    slow = []
    for head, piece, tail in BOMBS:
        short, long = (head + piece * (n // len(piece)) + tail for n in (10_000, 40_000))
        t_short, t_long = _best(parse, short), _best(parse, long)
        if t_long > 8 * t_short + 0.1:
            slow.append(f"{head!r} + {piece!r}: {t_short * 1e3:.1f} ms -> {t_long * 1e3:.1f} ms")
    assert slow == [], f"{name} grows faster than linearly: {slow}"


def _best(parse, text, repeats=3) -> float:
    """The parse's least CPU time: the process's own seconds, which a loaded host does not stretch
    (its wall time once went from 2.9 to 124.6 ms at load 9 with nothing superlinear)."""
    times = []
    for _ in range(repeats):
        started = time.process_time()
        parse(text)
        times.append(time.process_time() - started)
    return min(times)


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_a_long_line_costs_linear_time(name):
    parse = PARSERS[name]
    slow = []
    for shape in SHAPES:
        short, long = (shape * (n // len(shape)) for n in (10_000, 40_000))
        t_short, t_long = _best(parse, short), _best(parse, long)
        if t_long > 8 * t_short + 0.1:
            slow.append(f"{shape!r}: {t_short * 1e3:.1f} ms -> {t_long * 1e3:.1f} ms")
    assert slow == [], f"{name} grows faster than linearly: {slow}"
