"""Many ranks' profiler traces: read in reader workers and reduced there, several hosts' clocks
lined up from the collectives' end times, and a sample above ALIGN_ALL_UP_TO ranks (issue 37 §2).
The traces are GENERATED from the real H200 recording `graph_host_late` and from the real CPU-only
gloo job `gloo_ddp2` (tests/profile_job.py: rank 5 gets the late rank's events), so a gloo job of
many ranks is aligned by its host collective ops (issue 36) however it is read; time and memory
are the benchmark's, not asserted here."""

import pytest

from ncclprobe.diagnose import diagnose, load_evidence
from ncclprobe.evidence.run import profile_dir
from ncclprobe.evidence.run.profile import align as A
from tests.profile_job import write_job

OFFSET_US = 5000.0


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    base = tmp_path_factory.mktemp("profiles")
    return {
        "one": write_job(base / "one", 16, late=5, scenario="graph_host_late", hosts=1),
        "two": write_job(
            base / "two", 16, late=5, scenario="graph_host_late", hosts=2, offset_us=OFFSET_US
        ),
        "two_same": write_job(base / "same", 16, late=5, scenario="graph_host_late", hosts=2),
        "gloo_one": write_job(base / "g1", 16, late=5, scenario="host_late", recording="gloo_ddp2"),
        "gloo_two": write_job(
            base / "g2",
            16,
            late=5,
            scenario="host_late",
            hosts=2,
            offset_us=OFFSET_US,
            recording="gloo_ddp2",
        ),
    }


@pytest.fixture(scope="module")
def read(jobs):
    out = {}
    for name, paths in jobs.items():
        ev = load_evidence(profiles=[str(p) for p in paths])
        out[name] = (ev, diagnose(ev))
    return out


def test_a_second_hosts_clock_offset_is_found_taken_off_and_said(read):
    (ev, result), (_, alone) = read["two"], read["one"]
    al = ev.runs[0].alignment
    assert set(al.clock_shifts_us) == set(range(8, 16))
    assert all(abs(m - OFFSET_US) < 5.0 for m in al.clock_shifts_us.values())
    assert "host1 +5.000 ms" in " ".join(ev.notes)
    shifts = {r["rank"]: r.get("clock_shift_ms") for r in ev.runs[0].ranks}
    assert shifts[0] is None and shifts[15] == pytest.approx(5.0, abs=0.005)  # in --format json
    # the waits come out as on one clock: the same findings, the same late rank
    assert [f.title for f in result.findings] == [f.title for f in alone.findings]
    assert result.top.rule == "rank-skew" and result.top.evidence["straggler_rank"] == 5


def test_a_gloo_job_read_in_workers_is_aligned_by_its_host_ops_on_its_hosts_clocks(read):
    """16 CPU-only ranks, read in reader workers: their Tracks carry gloo's host collective ops,
    so the calls are matched by them; a second host's clock 5 ms ahead is found from the host ops'
    end times and taken off, and the late rank is named as on one host."""
    (ev, result), (alone_ev, alone) = read["gloo_two"], read["gloo_one"]
    al = ev.runs[0].alignment
    assert al.on_host and alone_ev.runs[0].alignment.on_host
    assert len(al.calls) + len(al.opening) == 12  # every step's all-reduce (the README's 12 steps)
    assert al.clock_shifts_us == {rank: pytest.approx(OFFSET_US, abs=5.0) for rank in range(8, 16)}
    assert alone_ev.runs[0].alignment.clock_shifts_us == {}
    assert [f.title for f in result.findings] == [f.title for f in alone.findings]
    late = next(f for f in result.findings if f.rule == "rank-skew")
    assert late.evidence["straggler_rank"] == 5


def test_hosts_whose_clocks_agree_move_nothing(read):
    ev, _ = read["two_same"]
    assert ev.runs[0].alignment.clock_shifts_us == {}
    assert "nothing moved" in " ".join(ev.notes)


@pytest.mark.parametrize("job", ["one", "gloo_two"])
def test_the_workers_reduced_reading_diagnoses_as_the_whole_reading(jobs, read, monkeypatch, job):
    """16 ranks are read in reader workers (POOL_FROM); the same files read here, whole, give the
    same findings and the same per-rank figures (a gloo job's waits and clock shifts included)."""
    assert len(jobs[job]) >= profile_dir.POOL_FROM
    monkeypatch.setattr(profile_dir, "POOL_FROM", 10**6)
    ev = load_evidence(profiles=[str(p) for p in jobs[job]])
    pooled_ev, pooled = read[job]
    assert [f.title for f in diagnose(ev).findings] == [f.title for f in pooled.findings]
    assert ev.runs[0].ranks == pooled_ev.runs[0].ranks


def test_the_header_names_the_folder_not_every_trace(jobs):
    from ncclprobe.diagnose.render import text

    ev = load_evidence(profiles=[str(p) for p in jobs["one"]])
    first = text(diagnose(ev), None).splitlines()[0]
    assert first.startswith("# diagnosis of profile 16 files in ")


def test_end_offset_lines_up_ends_and_refuses_a_guess():
    ref = [i * 1000.0 + (i % 7) * 13.0 for i in range(100)]
    ahead = [e + 2500.0 for e in ref]
    offset, lined = A.end_offset(ahead, ref)
    assert offset == pytest.approx(2500.0) and lined == 100
    assert A.end_offset([1.0, 2.0], ref) is None  # two ends line up nothing worth a clock


def _views(count):
    from types import SimpleNamespace

    return [
        {
            "phases": {"decode": SimpleNamespace(median_ms=10.0 + (i == 7) * 5 - (i == 9) * 2)},
            "track": A.Track(path=f"node{i // 8}_{i}.1.pt.trace.json", rank=i, base=0, gpu=True),
        }
        for i in range(count)
    ]


def test_up_to_the_limit_every_rank_is_aligned_and_above_it_a_sample_said_so(monkeypatch):
    monkeypatch.setattr(profile_dir, "ALIGN_ALL_UP_TO", 32)
    assert profile_dir.sample(_views(32)) == (list(range(32)), None)
    picked, how = profile_dir.sample(_views(33))
    assert 7 in picked and 9 in picked  # the slowest and the fastest
    assert {0, 8, 16, 24, 32} <= set(picked)  # one per host (node0..node4)
    assert how.startswith(
        f"sampled: {len(picked)} of 33 ranks aligned call by call (one per host of 5"
    )
