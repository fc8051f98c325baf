"""`ncclprobe diagnose`: turn an engine run (ncclprobe's engine trace, PyTorch profiler traces of any
engine, or an SGLang/vLLM server log; plus optional sweep results, env-check output and a baseline
run) into ranked causes, each with the numbers it rests on, a confidence and the next
command, and a list of the hypotheses it ruled out and why.

The reasoning mirrors what a careful engineer does with the seed case (verify 29 ms against a
12 ms decode step; hours spent on NCCL variables): check where the step time goes before touching
NCCL settings, compare every phase with what the model shape says it should cost, and prove that
the settings being compared were in force when the collectives were created or captured.

The evidence is `ncclprobe.evidence.bundle.Evidence` (the run as the normalized view of
`ncclprobe.evidence.run`, plus sweep results, env-check, collect-env and the ranks' NCCL logs, all
typed, and small accessors). Modules: `expectations` (what a verify step should cost), `rules`
(eager phases, the verify ratio, graph coverage), `rules_speed` (speculative against its
baseline), `rules_collectives` (the collectives' share, and their cost against the sweep),
`rules_settings`, `rules_safety`, `rules_envcheck`, `rules_draft`, `rules_profile`, `rules_ranks`,
`rules_log` and `rules_nccl_run` (one pure function per hypothesis; they read only the bundle's
records), `run_costs` (a speculative run's cost per token and as a share of its time), `report`
(the one `Report` every judging command returns, rule sets as data, `judge` that runs them and
ranks), `render` (the one renderer: table, JSON, CSV), `rank` (diagnose's rule sets and report).
"""

from ncclprobe.diagnose.rank import RULE_SETS, diagnose
from ncclprobe.diagnose.report import Report, RuleSet, judge
from ncclprobe.evidence.bundle import Evidence, load_evidence
from ncclprobe.findings import Finding, NotChecked, RuledOut

__all__ = [
    "Evidence",
    "load_evidence",
    "Finding",
    "RuledOut",
    "NotChecked",
    "Report",
    "RuleSet",
    "RULE_SETS",
    "judge",
    "diagnose",
]
