"""report: figures and reports written, valid PNG/SVG/HTML, Markdown links resolve."""

from __future__ import annotations

import json
import re
import subprocess
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest

from ncclprobe.report import build_report
from tests.data.resultsets import SIZES, config, curve, engine_trace, scaled, write_set

DEFAULT = curve(20.0, 0.05)
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("report")
    eager = write_set(
        tmp / "eager.jsonl",
        [
            config({}, DEFAULT),
            config({"NCCL_PROTO": "LL"}, scaled(DEFAULT, 0.6, 1.3)),
            config({"NCCL_ALGO": "Tree"}, scaled(DEFAULT, 0.3, 0.3), wrong={1 << 14: 12}),
            config({"NCCL_PROTO": "LL128"}, scaled(DEFAULT, 0.5, 0.5)),
            config({"NCCL_P2P_LEVEL": "SYS"}, {}, status="hang", reason="silent for 60 s"),
        ],
    )
    graph = write_set(
        tmp / "graph.jsonl",
        [
            config({}, scaled(DEFAULT, 0.5, 0.9)),
            config({"NCCL_PROTO": "LL"}, scaled(DEFAULT, 0.35, 1.1)),
        ],
        mode="graph",
    )
    trace = tmp / "trace.json"
    trace.write_text(json.dumps(engine_trace({14336: 640, 1 << 20: 3})))
    return build_report([eager, graph], tmp / "out", trace_path=trace)


def test_every_figure_is_drawn_as_valid_png_and_svg(report):
    names = {f.name for f in report.figures}
    assert names == {"latency", "busbw", "speedup", "eager_vs_graph", "phases", "acceptance"}
    for fig in report.figures:
        assert fig.png.read_bytes()[:8] == PNG_MAGIC and fig.png.stat().st_size > 5000
        root = ET.parse(fig.svg).getroot()
        assert root.tag.endswith("svg")


def test_markdown_links_resolve_and_carry_the_recommendation(report):
    text = report.markdown.read_text()
    links = re.findall(r"\]\(([^)]+)\)", text)
    assert len(links) == 12
    for link in links:
        assert (report.out_dir / link).is_file(), link
    assert "Set `NCCL_PROTO=LL`" in text and "export NCCL_PROTO=LL" in text
    assert "| ALGO=Tree | wrong |" in text and "| P2P_LEVEL=SYS | hang |" in text
    assert "LL128 refused" in text and "2.28.9" in text


class _Checker(HTMLParser):
    """Counts images and checks that every opened element (but void ones) is closed in order."""

    VOID = {"meta", "img", "br", "hr", "link", "input"}

    def __init__(self):
        super().__init__()
        self.stack, self.images, self.errors = [], [], []

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.images.append(dict(attrs)["src"])
        elif tag not in self.VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        if not self.stack or self.stack.pop() != tag:
            self.errors.append(tag)


def test_html_is_well_formed_and_self_contained(report):
    checker = _Checker()
    checker.feed(report.html.read_text())
    assert checker.errors == [] and checker.stack == []
    assert len(checker.images) == 6 and all(
        src.startswith("data:image/svg+xml;base64,") for src in checker.images
    )


def test_recommendation_json_beside_the_report(report):
    doc = json.loads(report.recommendation.read_text())
    assert doc["kind"] == "recommendation" and doc["env"] == {"NCCL_PROTO": "LL"}


def test_report_without_a_default_still_writes_and_says_why(tmp_path):
    path = write_set(tmp_path / "r.jsonl", [config({"NCCL_PROTO": "LL"}, DEFAULT)])
    files = build_report([path], tmp_path / "out")
    assert files.recommendation is None
    assert (
        "No recommendation: no all-default all_reduce run and fewer than two"
        in files.markdown.read_text()
    )
    assert {f.name for f in files.figures} == {"latency", "busbw"}


def test_cli_lists_files_and_rejects_a_bad_trace(tmp_path):
    path = write_set(tmp_path / "r.jsonl", [config({}, DEFAULT)])
    proc = subprocess.run(
        [
            "python",
            "-m",
            "ncclprobe",
            "report",
            path,
            "--output",
            str(tmp_path / "o"),
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert Path(doc["html"]).is_file() and doc["kind"] == "report"
    (tmp_path / "bad.json").write_text('{"kind": "other"}')
    proc = subprocess.run(
        [
            "python",
            "-m",
            "ncclprobe",
            "report",
            path,
            "--output",
            str(tmp_path / "o2"),
            "--trace",
            str(tmp_path / "bad.json"),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and "is not an engine trace" in proc.stderr and proc.stdout == ""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    proc = subprocess.run(
        ["python", "-m", "ncclprobe", "report", path, "--output", str(blocker / "sub")],
        capture_output=True,
        text=True,
    )
    assert (
        proc.returncode == 2 and "cannot create the directory" in proc.stderr and proc.stdout == ""
    )
    assert len(proc.stderr.strip().splitlines()) == 1


def test_two_traces_are_drawn_side_by_side_with_what_differs_in_their_labels():
    """The seed story in one picture: the H200 `--graphs decode` and `--graphs all` traces merged."""
    from ncclprobe.evidence.run.trace_checks import side_by_side

    traces = Path(__file__).resolve().parent.parent / "examples" / "traces"
    merged = side_by_side(
        [traces / "seed-graphs-decode.h200.json", traces / "graphs-all.h200.json"]
    )
    labels = [(run["mode"], run["label"]) for run in merged["runs"]]
    assert labels == [
        ("baseline", "untuned graphs=decode"),
        ("speculative", "untuned graphs=decode"),
        ("baseline", "untuned graphs=all"),
        ("speculative", "untuned graphs=all"),
    ]


def _tick_labels(figure, axes: int) -> list[str]:
    """The y tick labels drawn in one axes of a figure's SVG (written with text as text)."""
    svg = figure.svg.read_text()
    part = svg.split(f'<g id="axes_{axes}">')[1].split('<g id="axes_')[0]
    ticks = re.findall(r'<g id="ytick_\d+">.*?</text>', part, re.S)
    return [re.sub(r"<[^>]+>", "", tick).strip() for tick in ticks]


def _drawn(plot, configs, tmp_path, name):
    import matplotlib

    from ncclprobe.recommend.load import load_measurements

    ev = load_measurements([write_set(tmp_path / f"{name}.jsonl", configs)])
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        [figure] = plot(ev, tmp_path / name)
    return figure


def test_speedup_colour_ticks_are_symmetric_powers_of_two(tmp_path):
    """The heatmap's colour scale is log and centred on 1, so 2x faster and 2x slower sit equally
    far from neutral; its ticks must name those ratios, not crowd on one side."""
    from ncclprobe.report.plots import speedup_heatmap

    base = curve(20.0, 0.05)
    for factor, ticks in ((0.24, ["0.25", "0.5", "1", "2", "4"]), (0.77, ["0.77", "1", "1.3"])):
        configs = [config({}, base), config({"NCCL_PROTO": "LL"}, scaled(base, factor, factor))]
        figure = _drawn(speedup_heatmap, configs, tmp_path, f"speedup{factor}")
        assert _tick_labels(figure, 2) == ticks  # axes 2: the colour bar


def test_latency_axis_has_several_labelled_ticks_inside_one_decade(tmp_path):
    """A sweep whose times span less than a decade (one rank, or a flat curve) still gets a
    readable time axis: several labelled ticks inside the plotted range; a wide span gets 1-2-5."""
    from ncclprobe.report.plots import latency

    def flat(low, high):  # one configuration whose times rise evenly from low to high
        return {s: (low + (high - low) * i / (len(SIZES) - 1),) * 3 for i, s in enumerate(SIZES)}

    narrow = _drawn(latency, [config({}, flat(26.0, 120.0))], tmp_path, "narrow")
    assert _tick_labels(narrow, 1) == ["30", "40", "50", "60", "80", "100"]
    wide = _drawn(latency, [config({}, flat(10.0, 1000.0))], tmp_path, "wide")
    assert _tick_labels(wide, 1) == ["10", "20", "50", "100", "200", "500", "1000"]


def test_environment_section_masks_secret_values(tmp_path):
    """A results header's env ends up in a report people pass around: secrets there are masked
    the way env-check masks them, ordinary NCCL values are shown."""
    secret = "hf_ReportPlantedToken0123456789"
    path = write_set(
        tmp_path / "r.jsonl",
        [config({}, DEFAULT)],
        env={"NCCL_SOCKET_IFNAME": "eth0", "NCCL_NET_PLUGIN_TOKEN": secret},
    )
    files = build_report([path], tmp_path / "out")
    for written in (files.markdown, files.html):
        text = written.read_text()
        assert secret not in text and "eth0" in text and "NCCL_NET_PLUGIN_TOKEN" in text


def test_eight_traces_of_one_configuration_keep_eight_runs_apart(tmp_path):
    """`report --trace` x 8 of runs alike: every run keeps a label of its own (8 runs drew 6 bars
    when two traces' labels met), and every table cell is rounded (a mean over ranks is 3.556)."""
    from ncclprobe.evidence.run.trace_checks import side_by_side
    from ncclprobe.report.content import cell_text

    paths = []
    for i in range(8):
        path = tmp_path / ("a" if i < 4 else "b") / f"run{i % 4}.json"
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps(engine_trace({14336: 640})))
        paths.append(path)
    merged = side_by_side(paths)
    labels = [(run["mode"], run["label"]) for run in merged["runs"]]
    assert len(labels) == len(set(labels)) == 8 * len(json.loads(paths[0].read_text())["runs"])
    assert cell_text(32 / 9) == "3.556" and cell_text(None) == "-" and cell_text(7) == "7"


def test_figures_of_gloo_timings_carry_the_caveat_the_text_carries(tmp_path):
    import matplotlib

    from ncclprobe.recommend.load import load_measurements
    from ncclprobe.recommend.safety import timing_caveat
    from ncclprobe.report import plots

    results = write_set(
        tmp_path / "gloo.jsonl",
        [config({}, DEFAULT), config({"NCCL_PROTO": "LL"}, DEFAULT)],
        backend="gloo",
    )
    ev = load_measurements([results])
    with matplotlib.rc_context({"svg.fonttype": "none"}):  # text as text, to be read back
        [figure] = plots.latency(ev, tmp_path / "figs")
    assert timing_caveat(ev.headers).split(":")[0] in figure.svg.read_text()


@pytest.mark.parametrize(
    "args",
    [
        ["report", "RESULTS", "--output", "OUT"],
        ["topo", "--check", "--no-nccl-job", "--output", "OUT"],
    ],
)
def test_a_command_that_draws_names_the_report_extra_when_matplotlib_is_missing(
    tmp_path, monkeypatch, args
):
    """The light install has no matplotlib: the command says which extra brings it (exit 3, one line),
    before it reads or measures anything, and writes nothing."""
    import sys

    from click.testing import CliRunner

    from ncclprobe.cli import cli

    results = write_set(tmp_path / "r.jsonl", [config({}, DEFAULT)])
    argv = [{"RESULTS": str(results), "OUT": str(tmp_path / "out")}.get(a, a) for a in args]
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # how Python marks a module as absent
    result = CliRunner().invoke(cli, argv, prog_name="ncclprobe")
    assert result.exit_code == 3, result.output
    assert (
        "needs matplotlib" in result.stderr and "pip install 'ncclprobe[report]'" in result.stderr
    )
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "out").exists()
