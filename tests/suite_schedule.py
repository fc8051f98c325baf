"""How the suite shares two cores: its tests' groups under pytest-xdist, and what each test costs.

`python -m pytest -n 2` (README, .ci/run) runs the suite in two worker processes. With -n and no
--dist of its own, a worker runs whole groups, one test after another; the two workers never split
one. The groups, each named from a test's id alone (`group`):
- a test module is one group: its module-scoped runs (one real sweep, one trained draft, one
  converted checkpoint) are made once, not once per worker that would get a share of its tests;
- modules that share one session-cached run are one group (`SHARED`);
- the tests in `TIMING` are one group: they wait on a timeout, race a signal against a start-up or
  bound their own wall time, so no two of them run at once (the other worker's test beside them is
  the load a serial run's 2-rank tests put beside them anyway).

Groups start heaviest first (`HEAVY`, CPU seconds measured with NCCLPROBE_TESTS_CPU, docs/LOG.md),
so the run does not end on one long group while the other worker idles. A serial run (no -n) keeps
the collection's order. xdist's own `--dist loadgroup` is not used: with pytest 9.2 it no longer
groups anything (it renames test ids, which pytest 9.2 no longer reads: pytest-xdist#1386), so the
groups are given to xdist's scope scheduler here. Nothing here imports xdist unless -n is given (a
`pytest -m gpu` where pytest-xdist is not installed still runs).

NCCLPROBE_TESTS_CPU=FILE appends one JSON line per test to FILE: wall time and CPU seconds, the
test process's own and its waited-for children's (setup and teardown included, so a module's
shared run counts on the test that first asks for it). Wall time on a loaded machine says little;
CPU seconds do not depend on the load, and the suite's time is planned from them.
"""

import json
import os
import resource
import time

import pytest

# one group: each waits on a timeout, races a signal or bounds its own wall time (a module, or a test
# of it; a stale entry is an error when its module is collected under -n)
TIMING = (
    "tests/test_stopped_worker.py",  # a 6 s timeout, and when it is declared
    "tests/test_read_pool.py",  # a reader's wall clock: 5 s of no CPU against slow CPU
    "tests/test_interrupted_startup.py",  # Ctrl-C at chosen moments of the start-up
    "tests/test_env_propagation_faults.py",  # Ctrl-C and SIGTERM while the drivers run
    "tests/test_sweep_resume.py",  # SIGKILL while the first pool runs
    "tests/test_sweep_e2e.py::test_a_hang_and_a_crash_are_recorded_and_the_sweep_goes_on",  # 3 s
    "tests/test_trust_faults.py::test_every_hang_is_killed_at_its_timeout_and_a_killed_rank_is_named",
    "tests/test_trust_writers.py::test_a_terminated_sweep_keeps_what_it_finished_and_says_how_to_continue",
    "tests/test_trust_writers.py::test_a_sweep_interrupted_before_any_result_leaves_no_file",
    "tests/test_trust_parsers.py::test_a_long_line_costs_linear_time",  # two wall times compared
    "tests/test_trust_parsers.py::test_the_audits_bombs_cost_linear_time",  # wall times compared
    "tests/test_engine_speculative.py::test_phase_timer_host_time_between_marks",  # 10 ms sleeps
    # a signal sent to the capture while its job starts, and whom it reaches
    "tests/test_capture_signals.py::test_kill_of_the_capture_reaches_the_job_once_and_its_code_is_the_capture_s",
    "tests/test_capture_signals.py::test_a_terminal_ctrl_c_reaches_the_job_once",
)

# modules that share one session-cached run: one group each
SHARED = {
    # the trained tiny drafts (tests/test_engine_draft.py's `_trained`)
    "tests/test_engine_draft.py": "trained-drafts",
    "tests/test_engine_tp.py": "trained-drafts",
    # SmolLM2's GGUF converted once per session (tests/smollm.py's `converted`)
    "tests/test_engine_gguf.py": "smollm2",
    "tests/test_capture_hf.py": "smollm2",
    # the shipped profiler traces, parsed once per worker (tests/conftest.py's `shared_timelines`)
    **dict.fromkeys(
        (
            "tests/test_cli_conventions.py",
            "tests/test_cost_ledger.py",
            "tests/test_next_commands.py",
            "tests/test_profile.py",
            "tests/test_profile_gloo.py",
            "tests/test_profile_h200.py",
            "tests/test_profile_hf.py",
            "tests/test_profile_ranks.py",
        ),
        "shipped-timelines",
    ),
}

# a test asking for one of these fixtures must be in its group (checked under -n)
FIXTURE_GROUPS = {
    "shared_timelines": "shipped-timelines",
    "trained_tiny_draft": "trained-drafts",
    "trained_tiny_moe_draft": "trained-drafts",
}

# the costliest groups, CPU seconds (own + children) on the 2-core CPU machine, 2026-12-07 (3288 tests)
HEAVY = {
    "shipped-timelines": 58,
    "smollm2": 94,  # test_engine_gguf 54, test_capture_hf 40 (its generate and serve captures)
    "tests/test_engine_cli.py": 49,
    "tests/test_capture_own_cost.py": 35,  # one capture of 2 gloo ranks, stacks profiled (2026-12-07)
    "timing": 44,
    "trained-drafts": 21,
    "tests/test_hosts_netns.py": 20,
    "tests/test_sweep_e2e.py": 12,
    "tests/test_cli_basics.py": 9,
    "tests/test_sweep_torchrun.py": 8,
    "tests/test_trust_mutations.py": 6,
    "tests/test_sweep_every_collective.py": 6,
}
TERMINAL = ("COLUMNS", "LINES")
GROUPED = pytest.StashKey[bool]()  # set where -n came without a --dist: these groups, not xdist's


def _in(nodeid: str, entry: str) -> bool:
    return nodeid == entry or nodeid.startswith((f"{entry}::", f"{entry}["))


def group(nodeid: str) -> str:
    """The group of a test, from its id alone (xdist's scheduler sees ids, not markers)."""
    if any(_in(nodeid, entry) for entry in TIMING):
        return "timing"
    module = nodeid.split("::", 1)[0]
    return SHARED.get(module, module)


@pytest.hookimpl(tryfirst=True)  # before xdist turns -n without --dist into --dist load
def pytest_cmdline_main(config):
    if getattr(config.option, "numprocesses", None) and config.option.dist == "no":
        config.option.dist = "loadscope"  # its scheduler, given this module's groups below
        config.option.loadscopereorder = False  # HEAVY's order, not xdist's (most tests first)
        config.stash[GROUPED] = True


@pytest.hookimpl(optionalhook=True)  # xdist's hooks, in the controller
def pytest_xdist_make_scheduler(config, log):
    if not config.stash.get(GROUPED, False):
        return None
    from xdist.scheduler import LoadScopeScheduling

    class Groups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group(nodeid)

    return Groups(config, log)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    node.workerinput["terminal_env"] = {name: os.environ.get(name) for name in TERMINAL}


def pytest_configure(config):
    """A worker starts with COLUMNS=80 and LINES=24 in its environment where the suite was started
    without them (pytest-xdist 3.8): tables, and every CLI a test starts, would wrap at 80 columns
    instead of the 100 a run without a terminal gets (tests/test_failure_lines.py failed so). The
    workers get the environment the suite was started with."""
    for name, value in getattr(config, "workerinput", {}).get("terminal_env", {}).items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def pytest_collection_modifyitems(config, items):
    if not hasattr(config, "workerinput"):  # not an xdist worker: the suite as collected
        return
    ids = [item.nodeid for item in items]
    modules = {nodeid.split("::", 1)[0] for nodeid in ids}
    for entry in TIMING:
        if entry.split("::", 1)[0] in modules and not any(_in(nodeid, entry) for nodeid in ids):
            raise pytest.UsageError(f"tests/suite_schedule.py: TIMING's {entry} names no test")
    for item in items:
        for fixture, shared in FIXTURE_GROUPS.items():
            if fixture in getattr(item, "fixturenames", ()) and group(item.nodeid) != shared:
                raise pytest.UsageError(
                    f"tests/suite_schedule.py: {item.nodeid} uses {fixture}; add its module to "
                    f"SHARED as {shared!r} (or its run is made again in the other worker)"
                )
    # every worker sorts the same collection the same way, as xdist requires
    items.sort(key=lambda item: -HEAVY.get(group(item.nodeid), 0))


def _cpu_seconds() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    path = os.environ.get("NCCLPROBE_TESTS_CPU")
    if not path:
        yield
        return
    start_wall, (start_own, start_children) = time.perf_counter(), _cpu_seconds()
    yield
    own, children = _cpu_seconds()
    line = {
        "test": item.nodeid,
        "wall": round(time.perf_counter() - start_wall, 3),
        "own": round(own - start_own, 3),
        "children": round(children - start_children, 3),
        "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
    }
    with open(path, "a", encoding="utf-8") as out:  # one short line per write: appends do not mix
        out.write(json.dumps(line) + "\n")
