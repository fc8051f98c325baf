"""Values compared as NCCL parses them (`ncclprobe.nccl.values.as_logged`): NCCL_PARAM reads every
integer with strtoll(str, NULL, 0) and logs it `%lld.` (src/misc/param.cc, ncclLoadParam, at
v2.13.4-1, v2.18.5-1, v2.21.5-1, v2.24.3-1, v2.27.3-1 and v2.28.9-1: the same two lines), so
`NCCL_BUFFSIZE=0x400000` is logged `NCCL_BUFFSIZE set by environment to 4194304.`; ncclGetLevel
(src/graph/paths.cc) logs a level's path name; NCCL_PROTO/NCCL_ALGO are logged as given."""

import ctypes
import ctypes.util
import random

import pytest

from ncclprobe.nccl.values import as_logged, reads_the_same, strtoll

LIBC = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
LIBC.strtoll.restype = ctypes.c_longlong
LIBC.strtoll.argtypes = (ctypes.c_char_p, ctypes.c_void_p, ctypes.c_int)


def c_strtoll(text: str) -> int | None:
    """The C library's own strtoll(text, NULL, 0), None where it sets errno (overflow)."""
    ctypes.set_errno(0)
    value = LIBC.strtoll(text.encode(), None, 0)
    return None if ctypes.get_errno() else value


CASES = [
    "0x400000",
    "4194304",
    "010",
    "08",
    "09",
    "0",
    "-1",
    "+7",
    " 12",
    "\t0x1F",
    "4M",
    "1e3",
    "0x",
    "0xg",
    "0X1f",
    "-0x10",
    "abc",
    "",
    " ",
    "--1",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775808",
    "-9223372036854775809",
    "0777",
    "12 ",
    "1_000",
    "٣",
]


@pytest.mark.parametrize("text", CASES)
def test_strtoll_is_the_c_librarys(text):
    assert strtoll(text) == c_strtoll(text)


def test_strtoll_on_random_text_is_the_c_librarys():
    rng = random.Random(28)
    alphabet = "0123456789abcdefxX+- \t.9zZ"
    for _ in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 8)))
        assert strtoll(text) == c_strtoll(text), repr(text)


@pytest.mark.parametrize(
    "name,value,logged,same",
    [
        ("NCCL_BUFFSIZE", "0x400000", "4194304", True),
        ("NCCL_BUFFSIZE", "0x400000", "4194304.", True),  # the log's period
        ("NCCL_BUFFSIZE", "010", "8", True),  # octal, as strtoll reads a leading 0
        ("NCCL_BUFFSIZE", "4194304", "4194305", False),
        (
            "NCCL_BUFFSIZE",
            "4M",
            "4",
            True,
        ),  # NCCL read 4: what it was given, parsed (the lint's matter)
        ("NCCL_NTHREADS", "0x100", "512", False),
        ("NCCL_P2P_LEVEL", "2", "PXB", True),
        ("NCCL_P2P_LEVEL", "NVL", "NVL", True),
        ("NCCL_P2P_LEVEL", "PXB", "SYS", False),
        ("NCCL_PROTO", "ll", "LL", True),  # parseList: strcasecmp
        ("NCCL_PROTO", "LL", "Simple", False),
        ("NCCL_LAUNCH_MODE", "group", "GROUP", True),
        ("NCCL_IB_TIMEOUT", "0x10", "16", True),  # an integer the table does not list
        ("NCCL_SOCKET_IFNAME", "eth0", "eth1", False),
        ("NCCL_SOCKET_IFNAME", "Eth0", "eth0", False),  # strings are compared as written
    ],
)
def test_values_compare_as_nccl_parses_them(name, value, logged, same):
    assert reads_the_same(name, value, logged) is same


def test_as_logged_keeps_what_nccl_could_not_read():
    assert as_logged("NCCL_BUFFSIZE", "99999999999999999999") == "99999999999999999999"
    assert as_logged("NCCL_SOCKET_IFNAME", "eth0") == "eth0"


def _read_as(trace: dict, asked: dict, nccl_read: dict) -> dict:
    for run in trace["runs"]:
        run["settings"] = dict(asked)
        for worker in run["workers"]:
            worker["env_at_comm_init"] = {**worker["env_at_comm_init"], **asked}
            worker["nccl_read"] = dict(nccl_read)
    return trace


@pytest.mark.parametrize(
    "asked,logged,finding",
    [("0x400000", "4194304", False), ("4194304", "4194304", False), ("0x400000", "2097152", True)],
)
def test_diagnose_reads_a_normalised_integer_as_the_value_asked(asked, logged, finding):
    """NCCL logs integers normalised: the worker's hex value and the log's decimal one are the same
    reading; a real other value is still the finding, saying what NCCL would have logged."""
    from ncclprobe.diagnose import Evidence, diagnose
    from tests import diagnose_scenarios as S

    trace = _read_as(
        S.as_gpu_run(S.recorded("tuned.json")),
        {"NCCL_BUFFSIZE": asked},
        {"NCCL_BUFFSIZE": logged, "NCCL_NVLS_ENABLE": "0"},
    )
    doc = Evidence.from_trace(trace, "t.json")
    found = [
        f
        for f in diagnose(doc).findings
        if f.rule == "settings-propagation"
        and any(p["kind"] == "read-other-value" for p in f.evidence["problems"])
    ]
    assert bool(found) is finding
    if found:
        assert f"NCCL_BUFFSIZE={logged}, not {asked}" in found[0].title
        assert "which NCCL would log as 4194304" in found[0].detail


def test_run_engine_checks_read_values_as_nccl_parses_them():
    from ncclprobe.evidence.run.trace_checks import settings_check

    def run(logged):
        return {
            "label": "tuned",
            "mode": "baseline",
            "settings": {"NCCL_BUFFSIZE": "0x400000"},
            "workers": [
                {
                    "env_at_comm_init": {"NCCL_BUFFSIZE": "0x400000"},
                    "nccl_read": {"NCCL_BUFFSIZE": logged},
                }
            ],
        }

    assert settings_check(run("4194304"))["read_by_nccl"] == {"NCCL_BUFFSIZE": True}
    assert settings_check(run("2097152"))["read_by_nccl"] == {"NCCL_BUFFSIZE": False}
