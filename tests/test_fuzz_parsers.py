"""Fuzz each evidence parser with mangled real inputs: it may reject with a UsageProblem (a clear
one-line error), never crash or hang. Bounded: few examples, a per-example deadline."""

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ncclprobe.errors import UsageProblem
from ncclprobe.evidence.nccl.nccl_log import parse_nccl_log
from ncclprobe.evidence.nccl.nccl_tests import parse_nccl_tests
from ncclprobe.evidence.nccl.nccl_tests_records import to_records
from ncclprobe.evidence.node.topo import equivalent_levels, parse_topo
from ncclprobe.evidence.text import clean_line

FIXTURES = Path(__file__).parent / "fixtures"


def _texts(folder: str) -> list[str]:
    # the first 300 lines keep each example fast; every fixture still contributes its format
    return [
        "\n".join(p.read_text(errors="replace").splitlines()[:300])
        for p in sorted((FIXTURES / folder).iterdir())
    ]


TOPO, LOGS, TESTS = _texts("topo"), _texts("nccl_logs"), _texts("nccl_tests")
# numbers that look right to a loose regex but break float()/int() (each once crashed a parser)
ODD_TOKENS = ("1.2.3", ".", "e", "1e999", "-", "nan", "99999999999999999999999", "NV", "GPU99")
NOISE = st.one_of(
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30),
    st.sampled_from(ODD_TOKENS),
)
OPS = st.lists(
    st.tuples(
        st.sampled_from(["drop", "dup", "cut", "insert", "swap", "tabs", "ansi", "token"]),
        st.integers(min_value=0, max_value=10_000),
        NOISE,
    ),
    max_size=6,
)


def mangle(text: str, ops) -> str:
    lines = text.splitlines()
    for kind, where, noise in ops:
        if not lines:
            lines = [noise]
        i = where % len(lines)
        if kind == "drop":
            del lines[i]
        elif kind == "dup":
            lines.insert(i, lines[i])
        elif kind == "cut":
            lines[i] = lines[i][: where % (len(lines[i]) + 1)]
        elif kind == "insert":
            lines.insert(i, noise)
        elif kind == "swap":
            words = lines[i].split()
            lines[i] = " ".join(reversed(words)) + noise
        elif kind == "token":  # one whitespace-separated token replaced, the line's layout kept
            words = lines[i].split(" ")
            words[where % len(words)] = noise
            lines[i] = " ".join(words)
        elif kind == "tabs":
            lines[i] = lines[i].replace(" ", "\t")
        else:
            lines[i] = "\x1b[4m" + lines[i] + "\x1b[0m"
    return "\n".join(lines)


FUZZ = settings(max_examples=40, deadline=2000, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(st.sampled_from(range(len(TOPO))), OPS)
def test_topo_parser_rejects_or_parses(index, ops):
    try:
        topo = parse_topo(mangle(TOPO[index], ops))
    except UsageProblem as exc:
        assert "\n" not in str(exc)
        return
    assert len(topo.gpu_links) == len(topo.gpus)
    assert all(len(row) == len(topo.gpus) for row in topo.gpu_links)
    equivalent_levels(topo)
    topo.to_json()


@FUZZ
@given(st.sampled_from(range(len(LOGS))), OPS)
def test_nccl_log_parser_never_raises(index, ops):
    log = parse_nccl_log(mangle(LOGS[index], ops))
    doc = log.to_json()
    assert all(isinstance(t["bytes"], int) and not t["algo"].isdigit() for t in doc["tuning"])


@FUZZ
@given(st.sampled_from(range(len(TESTS))), OPS)
def test_nccl_tests_parser_rejects_or_parses(index, ops):
    try:
        run = parse_nccl_tests(mangle(TESTS[index], ops))
    except UsageProblem as exc:
        assert "\n" not in str(exc)
        return
    # a table, or a run that measured nothing and says so, naming its failure where a line shows
    # one (issue 36 §3)
    assert run.rows or run.notes[0].startswith("measured nothing")
    records = to_records(run, source_file="fuzz")
    assert records[0]["record"] == "header" and len(records) == 2 + 2 * len(run.rows)


PLANTED = "host:1:1 [0] NCCL INFO NCCL_PROTO set by environment to LL128"


@settings(max_examples=30, deadline=2000)
@given(st.text(max_size=400))
def test_arbitrary_text(text):
    """Any text: the log reader counts every line and still finds an NCCL line planted after it;
    the table readers either parse a consistent table or refuse in one line."""
    log = parse_nccl_log(text + "\n" + PLANTED)
    assert log.total_lines == len((text + "\n" + PLANTED).splitlines())
    assert 1 <= log.nccl_lines <= log.total_lines and "LL128" in log.env_values["NCCL_PROTO"]
    assert 1 in log.pids and "host" in log.hosts
    for parser in (parse_topo, parse_nccl_tests):
        try:
            parsed = parser(text)
        except UsageProblem as exc:
            assert str(exc) and "\n" not in str(exc)
            continue
        if parser is parse_topo:  # only a text with a GPU0 header line parses as a matrix
            assert any(clean_line(line).split()[:1] == ["GPU0"] for line in text.splitlines())
            assert all(len(row) == len(parsed.gpus) for row in parsed.gpu_links)
        else:
            assert parsed.rows and all(row.size_bytes >= 0 for row in parsed.rows)
