"""How the suite shares two cores: its tests' groups under pytest-xdist, and what each test costs.

`python -m pytest -n 2` (README, .ci/run) runs the suite in two worker processes; with -n and no
--dist of its own, the distribution is xdist's `loadgroup`, the groups in this module's order
(set here, not in setup.cfg's addopts: a `pytest -m gpu` where pytest-xdist is not installed
still runs). A worker runs a whole group, one test after another; the two workers never split
one. The groups:
- a test module is one group: its module-scoped runs (one real sweep, one trained draft, one
  converted checkpoint) are made once, not once per worker that would get a share of its tests;
- modules that share one such run are one group (`SHARED`);
- tests marked `timing` are one group, `timing`: they wait on a timeout, race a signal against a
  start-up or bound their own wall time, so no two of them run at once (the other worker's test
  beside them is the load of a serial run of a 2-rank test).

Groups start heaviest first (`HEAVY`, CPU seconds measured with NCCLPROBE_TESTS_CPU, docs/LOG.md),
so the run does not end on one long group while the other worker idles. A serial run (no `-n`)
keeps the collection's order and marks nothing.

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

# modules that share one session-cached run: one group each
SHARED = {
    # the trained tiny drafts (tests/test_engine_draft.py's `_trained`)
    "tests/test_engine_draft.py": "trained-drafts",
    "tests/test_engine_tp.py": "trained-drafts",
    # the shipped profiler traces, parsed once per worker (tests/conftest.py's `shared_timelines`)
    **dict.fromkeys(
        (
            "tests/test_cli_conventions.py",
            "tests/test_next_commands.py",
            "tests/test_profile.py",
            "tests/test_profile_h200.py",
            "tests/test_profile_hf.py",
            "tests/test_profile_ranks.py",
        ),
        "shipped-timelines",
    ),
}

# the costliest groups, CPU seconds (own + children) on the 2-core CPU machine, 2026-12-06
HEAVY = {
    "tests/test_engine_cli.py": 53,
    "tests/test_engine_gguf.py": 50,
    "timing": 48,
    "shipped-timelines": 44,
    "trained-drafts": 18,
    "tests/test_sweep_torchrun.py": 10,
    "tests/test_cli_basics.py": 10,
    "tests/test_sweep_e2e.py": 7,
    "tests/test_sweep_every_collective.py": 8,
    "tests/test_trust_mutations.py": 7,
}


@pytest.hookimpl(tryfirst=True)  # before xdist turns -n without --dist into --dist load
def pytest_cmdline_main(config):
    if getattr(config.option, "numprocesses", None) and config.option.dist == "no":
        config.option.dist = "loadgroup"
        config.option.loadscopereorder = False  # HEAVY's order, not xdist's (most tests first)


TERMINAL = ("COLUMNS", "LINES")


@pytest.hookimpl(optionalhook=True)  # xdist's hook, in the controller: what each worker is told
def pytest_configure_node(node):
    node.workerinput["terminal_env"] = {name: os.environ.get(name) for name in TERMINAL}


def pytest_configure(config):
    """A worker starts with COLUMNS=80 and LINES=24 in its environment where the suite was started
    without them (seen with pytest-xdist 3.8): tables, and every CLI a test starts, would wrap at
    80 columns instead of the 100 a run without a terminal gets (tests/test_failure_lines.py failed
    so). The workers get the environment the suite was started with."""
    for name, value in getattr(config, "workerinput", {}).get("terminal_env", {}).items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def _group(item: pytest.Item) -> str:
    if item.get_closest_marker("timing"):
        return "timing"
    module = item.nodeid.split("::", 1)[0]
    return SHARED.get(module, module)


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups into the test ids
def pytest_collection_modifyitems(config, items):
    if not hasattr(config, "workerinput"):  # not an xdist worker: the suite as collected
        return
    for item in items:
        if not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(_group(item)))
    # every worker sorts the same collection the same way, as xdist requires
    items.sort(key=lambda item: -HEAVY.get(_group(item), 0))


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
