"""Costs say what they are and add up (issue 36 §1): the `Cost` type, the time ledger, and the
property over every shipped profile, engine trace and server log that the ranked costs never add
past the run, nor past the measured difference from a baseline.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from ncclprobe.diagnose import diagnose, load_evidence
from ncclprobe.diagnose.report import rank_key
from ncclprobe.diagnose.run import ledger as L
from ncclprobe.diagnose.run.profile_costs import run_ms
from ncclprobe.evidence.run.view import EngineRun, Phase
from ncclprobe.findings import BOUND, Cost, Finding

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "tests" / "fixtures"
PROFILES = FIX / "profiles"


# ---- the Cost type -------------------------------------------------------------------------------


def test_the_header_says_what_kind_of_figure_a_cost_is():
    assert Cost.bound(3.1, "step", "x").header() == "at most 3.1 ms/step (bound)"
    assert Cost.measured(2.0, "token", "x", high=2.6).header() == "costs 2-2.6 ms/token (measured)"
    assert Cost.measured(2.0, "call", "x").header() == "costs 2 ms/call (measured)"
    assert (
        Cost.profiled(2.3, "token", "x", inflation=2.3).header()
        == "costs 1-2.3 ms/token (profiled, up to 2.3x inflated)"
    )
    assert Cost.profiled(2.3, "cycle", "x").header() == "costs 2.3 ms/cycle (profiled)"
    assert Cost.modelled(18.33, "token", "x").header() == "about 18.3 ms/token (modelled)"
    assert Cost.measured(1234.5, "step", "x").header() == "costs 1234 ms/step (measured)"
    assert Cost.measured(0.0004, "step", "x").header() == "costs 0 ms/step (measured)"
    # an upper bound is never printed as a cost, and surely wins nothing
    bound = Cost.bound(51.0, "step", "x", share=0.7)
    assert not bound.header().startswith("costs") and bound.sure == 0 and bound.sure_share == 0


@pytest.mark.parametrize(
    "make",
    [
        lambda: Cost(low=1.0, high=0.5, unit="step", kind="measured", basis="b"),
        lambda: Cost(low=-0.1, high=0.5, unit="step", kind="measured", basis="b"),
        lambda: Cost(low=0.0, high=math.inf, unit="step", kind="measured", basis="b"),
        lambda: Cost(low=0.0, high=1.0, unit="second", kind="measured", basis="b"),
        lambda: Cost(low=0.0, high=1.0, unit="step", kind="guessed", basis="b"),
        lambda: Cost(low=0.5, high=1.0, unit="step", kind=BOUND, basis="b"),
        lambda: Cost.profiled(1.0, "step", "b", inflation=0.99),
        lambda: Cost.measured(1.0, "step", ""),  # every cost says which time it covers
        lambda: Cost.bound(1.0, "step", None),
        lambda: Cost.modelled(1.0, "step", ""),
    ],
)
def test_a_cost_that_cannot_be_is_refused(make):
    with pytest.raises(ValueError):
        make()


def test_a_profiled_cost_spans_the_profilers_inflation():
    cost = Cost.profiled(4.6, "token", "x", inflation=2.3, total_ms=46.0, share=0.5)
    assert (cost.low, cost.high) == (pytest.approx(2.0), 4.6)
    assert cost.sure_share == pytest.approx(0.5 * 2.0 / 4.6)
    capped = cost.capped(2.3, "why")
    assert (capped.high, capped.total_ms, capped.share) == (2.3, 23.0, 0.25)
    assert capped.low == pytest.approx(2.0) and capped.basis == "x; why"
    assert cost.capped(4.6, "why") is cost  # nothing taken: the same cost


def test_ranking_puts_what_is_surely_won_first_and_a_bound_last():
    def finding(cost):
        return Finding(
            rule="r", severity="warning", confidence="high", title="", detail="", cost=cost
        )

    measured = finding(Cost.measured(1.0, "step", "x", share=0.10))
    profiled = finding(Cost.profiled(4.6, "step", "x", inflation=2.3, share=0.20))  # surely 0.087
    bound = finding(Cost.bound(40.0, "step", "x", share=0.96))
    none = finding(None)
    ordered = sorted([bound, none, profiled, measured], key=rank_key)
    assert ordered[:2] == [measured, profiled] and set(map(id, ordered[2:])) == {
        id(bound),
        id(none),
    }


# ---- the ledger ----------------------------------------------------------------------------------


def _phase(name, kind, count, median, idle=None):
    return Phase(
        name=name, kind=kind, count=count, total_ms=count * median, median_ms=median, idle_ms=idle
    )


def _run(**phases):
    return EngineRun(label="p", mode=None, source="profile", phases=phases)


class _Ev:
    def __init__(self, run):
        self.run = run

    def all_runs(self):
        return [("trace", self.run)]


def _claim(rule, cost, severity="warning"):
    return Finding(rule=rule, severity=severity, confidence="high", title="", detail="", cost=cost)


def test_the_same_time_is_counted_once_and_the_surest_claim_keeps_it():
    run = _run(verify=_phase("verify", "verify", 10, 20.0, idle=19.0))
    name = run.name("trace")
    kw = {"run": name, "covers": ("verify", "idle")}
    bound = _claim("a-bound", Cost.bound(19.0, "step", "b", total_ms=190.0, **kw))
    measured = _claim("b-measured", Cost.measured(15.0, "step", "m", total_ms=150.0, **kw))
    out, (account,) = L.settle(_Ev(run), [bound, measured])
    assert out[1].cost.high == 15.0  # settled first, whatever the order given
    assert out[0].cost.high == pytest.approx(4.0) and "b-measured" in out[0].cost.basis
    assert account["attributed_ms"] == pytest.approx(190.0)  # the idle node: 10 x 19 ms
    assert account["unexplained_ms"] == pytest.approx(10.0) and account["total_ms"] == 200.0
    assert "10 ms (5%) is not explained" in account["note"]


def test_a_node_of_unknown_size_is_as_large_as_its_largest_claim():
    run = _run(verify=_phase("verify", "verify", 10, 20.0))
    kw = {"run": run.name("trace"), "covers": ("verify", "excess")}
    cause = _claim("eager-phase", Cost.modelled(10.0, "step", "b", total_ms=100.0, **kw), "error")
    symptom = _claim("verify-ratio", Cost.modelled(10.5, "step", "b", total_ms=105.0, **kw))
    out, _ = L.settle(_Ev(run), [symptom, cause])
    # the more serious finding keeps the time; the other is left what its larger claim adds
    assert out[1].cost.high == 10.0 and out[0].cost.high == pytest.approx(0.5)


def test_a_measured_difference_is_the_pool_and_no_claim_passes_it():
    run = _run(draft=_phase("draft", "draft", 10, 5.0), verify=_phase("verify", "verify", 10, 20.0))
    name = run.name("trace")
    whole = _claim(
        "speculative-slower",
        Cost.measured(6.0, "token", "b", run=name, covers=L.WHOLE, total_ms=60.0),
    )
    a = _claim("x", Cost.measured(5.0, "token", "b", run=name, covers=("verify",), total_ms=50.0))
    b = _claim("y", Cost.bound(4.0, "token", "b", run=name, covers=("draft",), total_ms=40.0))
    out, (account,) = L.settle(_Ev(run), [whole, a, b])
    assert account["total_ms"] == 60.0 and out[1].cost.high == 5.0
    assert out[2].cost.high == pytest.approx(1.0)  # the pool's last 10 ms
    assert out[0].cost.high == 6.0 and "time ledger" in out[0].detail  # the whole stays itself
    assert sum(f.cost.total_ms for f in out[1:]) <= 60.0 + 1e-9


def test_a_claim_of_nothing_or_of_an_unknown_run_is_left_as_it_is():
    run = _run(verify=_phase("verify", "verify", 10, 20.0))
    other = _claim("z", Cost.bound(1.0, "step", "b", run="not a run", total_ms=10.0))
    unpriced = _claim("w", Cost.bound(1.0, "step", "b", run=run.name("trace")))
    out, accounts = L.settle(_Ev(run), [other, unpriced])
    assert out == [other, unpriced] and accounts == []


# ---- the property over every shipped input ---------------------------------------------------------


def _inputs() -> dict[str, dict]:
    out = {}
    for path in sorted(PROFILES.glob("*.json*")) + sorted((PROFILES / "h200").glob("*.json.gz")):
        out[f"profile {path.name}"] = {"profiles": [path]}
    for path in sorted((PROFILES / "hf").glob("*.json.gz")):
        out[f"profile {path.name}"] = {"profiles": [path]}
    for folder in ("ranks", "gloo"):
        for scenario in sorted(
            {p.name.rsplit("_rank", 1)[0] for p in (PROFILES / folder).glob("*_rank*.json.gz")}
        ):
            out[f"ranks {scenario}"] = {
                "profiles": sorted((PROFILES / folder).glob(f"{scenario}_rank*.json.gz"))
            }
    h = PROFILES / "h200"
    for kind in ("decode", "all"):
        spec = h / (
            f"engine_small_graphs_{kind}_speculative"
            + ("_trimmed" if kind == "decode" else "")
            + ".json.gz"
        )
        out[f"h200 {kind} vs baseline"] = {
            "profiles": [spec],
            "baseline_profiles": [h / f"engine_small_graphs_{kind}_baseline.json.gz"],
        }
    hf = PROFILES / "hf"
    for run, base in (
        ("hf_qwen2-6l_lookup_shapes", "hf_qwen2-6l_static_shapes"),
        ("hf_llama8l_assisted_noshapes", "hf_llama8l_static_noshapes"),
        ("hf_llama2l_assisted_shapes", "hf_llama2l_plain_shapes"),
    ):
        out[f"{run} vs {base}"] = {
            "profiles": [hf / f"{run}.json.gz"],
            "baseline_profiles": [hf / f"{base}.json.gz"],
        }
    ranks = PROFILES / "ranks"
    out["ranks host_late vs healthy"] = {
        "profiles": sorted(ranks.glob("ranks_host_late_rank*.json.gz")),
        "baseline_profiles": sorted(ranks.glob("ranks_healthy_rank*.json.gz")),
    }
    traces = sorted((ROOT / "examples" / "traces").glob("*.json")) + sorted(
        (FIX / "traces").glob("*.json")
    )
    for path in traces:
        if path.name != "proto-ll.json":
            out[f"trace {path.name}"] = {"trace": path}
    out["trace collective-bound + sweep"] = {
        "trace": ROOT / "examples" / "traces" / "collective-bound.json",
        "sweep": ROOT / "examples" / "traces" / "collective-bound.sweep.jsonl",
    }
    for path in sorted((FIX / "server_logs").glob("*.log")):
        out[f"log {path.name}"] = {"server_logs": [path]}
    # the held-out corpus too (an invariant, not a reading: nothing here is tuned to them)
    unseen = FIX / "unseen"
    for path in sorted((unseen / "profiles").glob("*.json.gz")):
        out[f"unseen profile {path.name}"] = {"profiles": [path]}
    for folder in sorted(p for p in (unseen / "gloo").glob("*") if p.is_dir()):
        out[f"unseen gloo {folder.name}"] = {"profiles": sorted(folder.glob("*.json.gz"))}
    for path in sorted((unseen / "server_logs").glob("*.log")):
        out[f"unseen log {path.name}"] = {"server_logs": [path]}
    return out


INPUTS = _inputs()


@pytest.fixture(scope="module")
def diagnosed(shared_timelines):
    done = {}

    def get(name):
        if name not in done:
            kwargs = dict(INPUTS[name])
            trace = kwargs.pop("trace", None)
            ev = load_evidence(trace, **kwargs)
            done[name] = (ev, diagnose(ev))
        return done[name]

    return get


@pytest.mark.parametrize("name", sorted(INPUTS))
def test_costs_never_add_past_the_run_nor_past_the_measured_difference(diagnosed, name):
    ev, result = diagnosed(name)
    accounts = {a["run"]: a for a in result.to_json()["ledger"]}
    runs = {run.name(src): run for src, run in ev.all_runs()}
    for f in result.findings:
        cost = f.cost
        if cost is None:
            continue
        assert 0 <= cost.low <= cost.high, f.title
        if cost.kind == BOUND:  # an upper bound never reads as a cost
            assert f.cost_header() == "" or f.cost_header().startswith(", at most "), f.title
        if f.severity != "info" and cost.kind == BOUND:
            assert f.rule != "collective-bound", f.title  # a bound on a healthy run is info
    by_run: dict[str, float] = {}
    for f in result.findings:
        if (
            f.cost
            and f.cost.total_ms is not None
            and f.cost.covers != L.WHOLE
            and f.cost.run in accounts
        ):
            by_run[f.cost.run] = by_run.get(f.cost.run, 0.0) + f.cost.total_ms
    for run_name, claimed in by_run.items():
        account = accounts[run_name]
        run = runs[run_name]
        whole = run_ms(run) if run.source == "profile" else None
        assert claimed <= account["total_ms"] + 1e-3, (name, run_name)  # rounded to 4 places
        if whole is not None:
            assert account["total_ms"] <= whole + 1e-3  # never past the run (rounded to 4 places)
        differences = [
            f.cost.total_ms
            for f in result.findings
            if f.cost and f.cost.covers == L.WHOLE and f.cost.run == run_name
        ]
        for difference in differences:  # never past the measured difference from the baseline
            assert claimed <= difference * (1 + 1e-9) + 1e-9, (name, run_name)
        shares = sum(
            f.cost.share or 0.0
            for f in result.findings
            if f.cost and f.cost.run == run_name and f.cost.covers != L.WHOLE
        )
        assert shares <= 1.0 + 1e-9


def test_the_engine_traces_costs_no_longer_add_past_the_measured_slowdown(diagnosed):
    """The seed case on the H200: eager verify, draft and draft extend and the verify ratio priced
    22.8 + 18.3 ms per token against a 21.8 ms slowdown before the ledger (docs/LOG.md)."""
    _, result = diagnosed("trace seed-graphs-decode.h200.json")
    slower = next(f for f in result.findings if f.rule == "speculative-slower")
    causes = [f for f in result.findings if f.cost and f.cost.covers != L.WHOLE]
    assert sum(f.cost.high for f in causes) <= slower.cost.high + 1e-9
    ratio = next(f for f in result.findings if f.rule == "verify-ratio")
    assert ratio.cost.high == 0 and "eager-phase" in ratio.cost.basis and ratio.cost_header() == ""


def test_a_costs_json_is_every_field_it_has():
    cost = Cost.profiled(
        2.3, "cycle", "b", inflation=2.3, run="r", covers=("verify", "idle"), total_ms=23.0
    )
    assert cost.to_json() == {
        "low": 1.0,
        "high": 2.3,
        "unit": "cycle",
        "kind": "profiled",
        "basis": "b",
        "inflation": 2.3,
        "run": "r",
        "covers": ["verify", "idle"],
        "total_ms": 23.0,
        "share": None,
    }
    finding = _claim("x", cost)
    assert finding.to_json()["cost"] == cost.to_json() and finding.to_json()["rule"] == "x"
    assert _claim("y", None).to_json()["cost"] is None and _claim("y", None).cost_header() == ""
    # a cost the ledger left nothing of has no header: no "costs 0 ms"
    assert _claim("z", cost.capped(0.0, "all counted elsewhere")).cost_header() == ""
    assert finding.cost_header() == ", costs 1-2.3 ms/cycle (profiled, up to 2.3x inflated)"


def test_an_engine_traces_ledger_is_its_generation_time_and_phases():
    run = EngineRun(
        label="untuned",
        mode="speculative",
        source="engine-trace",
        ms_per_token=10.0,
        new_tokens=50,
        collective_share=0.4,
        phases={
            "verify": _phase("verify", "verify", 20, 15.0),
            "none": _phase("none", "x", 0, 1.0),
        },
    )
    account = L.account_for("trace", run)
    assert account.run == "untuned speculative" and account.total_ms == 500.0
    assert account.sizes == {(): 500.0, ("verify",): 300.0, ("collective",): 200.0}
    assert account.basis == "its generation time"
    bare = EngineRun(label="b", mode="baseline", source="engine-trace", phases=run.phases)
    assert L.account_for("baseline", bare).total_ms == 300.0  # its phases' time
    assert L.account_for("trace", EngineRun(label="e", mode=None, source="server-log")) is None
    prof = _run(verify=_phase("verify", "verify", 4, 10.0, idle=9.0))
    sizes = L.account_for("trace", prof).sizes
    assert sizes == {(): 40.0, ("verify",): 40.0, ("verify", "idle"): 36.0}


def test_the_ledgers_summary_and_note_say_each_figure():
    account = L.Account("r", 200.0, "its steps")
    assert account.claim(("a",), 50.0, "one") == (50.0, [])
    assert account.claim(("a",), 80.0, "two") == (30.0, ["one"])  # the unknown node grew to 80
    assert account.claim((), 500.0, "three") == (120.0, ["one", "two"])
    assert account.summary() == {
        "run": "r",
        "total_ms": 200.0,
        "basis": "its steps",
        "attributed_ms": 200.0,
        "by_rule": {"one": 50.0, "two": 30.0, "three": 120.0},
        "unexplained_ms": 0.0,
    }
    assert account.note() == (
        "time ledger, r: of its steps (200 ms), the findings' costs account for 200 ms (100%: one "
        "50 ms, two 30 ms, three 120 ms); 0 ms (0%) is not explained by any finding (each "
        "millisecond counted once)"
    )
    empty = L.Account("e", 0.0, "nothing")
    assert empty.note() == "time ledger, e: nothing is 0 ms: nothing to attribute"


def test_each_constructor_keeps_what_it_is_given():
    assert (
        Cost.measured(1.0, "step", "m").basis == "m" and Cost.bound(2.0, "call", "b").basis == "b"
    )
    modelled = Cost.modelled(2.0, "token", "x", low=1.0, high=3.0)
    assert (modelled.low, modelled.high, modelled.basis) == (1.0, 3.0, "x")
    assert (Cost.modelled(2.0, "token", "x").low, Cost.modelled(2.0, "token", "x").high) == (2, 2)
    # a cost without a place in the ledger keeps none when capped
    assert Cost.bound(4.0, "step", "b").capped(2.0, "w").total_ms is None
    # the smallest figures the header prints, and the largest in three digits
    assert Cost.measured(0.001, "step", "x").header() == "costs 0.001 ms/step (measured)"
    assert Cost.measured(0.00099, "step", "x").header() == "costs 0 ms/step (measured)"
    assert Cost.measured(99.94, "step", "x").header() == "costs 99.9 ms/step (measured)"
    # a cost under a millisecond still has its header
    assert (
        _claim("c", Cost.measured(0.5, "step", "x")).cost_header()
        == ", costs 0.5 ms/step (measured)"
    )


@pytest.mark.parametrize(
    "share,severity",
    [(None, "warning"), (0.10, "error"), (0.0999, "warning"), (0.02, "warning"), (0.0199, "info")],
)
def test_the_severity_of_a_share_at_its_cuts(share, severity):
    from ncclprobe.findings import severity_for_share

    assert severity_for_share(share) == severity


def test_what_was_not_checked_or_ruled_out_is_all_in_its_json():
    from ncclprobe.findings import NotChecked, RuledOut

    assert NotChecked(rule="r", hypothesis="h", missing="m", next_command="n").to_json() == {
        "rule": "r",
        "hypothesis": "h",
        "missing": "m",
        "next_command": "n",
    }
    assert RuledOut(rule="r", hypothesis="h", reason="why").to_json() == {
        "rule": "r",
        "hypothesis": "h",
        "reason": "why",
    }
