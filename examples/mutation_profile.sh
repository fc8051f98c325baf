#!/usr/bin/env bash
# Mutation check of the profile step finder and the profile step rules (issue 26; not in CI: slow).
# mutmut from the package index, in the venv only:  pip install mutmut
# Runs on a copy of the committed tree (the repository's setup.cfg is left alone), with the fast
# test set that pins these modules' thresholds, branches and words on inputs built in memory (about
# 15 minutes on two shared cores). The real traces (tests/test_profile_hf.py, test_profile_h200.py)
# are left out: mutmut runs every test that reaches a function for each of its mutants, and those take
# about a minute each, so the step finder's mutants alone would take hours.
#   bash examples/mutation_profile.sh [OUT_DIR]      # then: cd OUT_DIR && mutmut results
# Rerun some mutants only:  cd OUT_DIR && mutmut run "ncclprobe.evidence.run.profile.forwards.*"
# One function's:  mutmut run "ncclprobe.evidence.run.profile.forwards.x__lookups_among__mutmut_*"
# The rank alignment (align.py, rules_ranks.py) is checked apart: docs/LOG.md 2026-12-02 "unseen-trace
# code and the rank alignment" gives its setup.cfg section (forkserver, NCCLPROBE_TESTS_UNCACHED=1).
# The score and every survivor's reason are in docs/LOG.md (2026-12-01, 2026-12-02).
set -euo pipefail
root=$(git rev-parse --show-toplevel)
out=${1:-$(mktemp -d /tmp/mutation-profile.XXXXXX)}
mkdir -p "$out"
git -C "$root" archive HEAD | tar -x -C "$out"
cat >> "$out/setup.cfg" <<'CFG'

[mutmut]
source_paths = ncclprobe
only_mutate =
    ncclprobe/evidence/run/profile/forwards.py
    ncclprobe/evidence/run/profile/kinds.py
    ncclprobe/evidence/run/profile/steps.py
    ncclprobe/diagnose/run/profile_costs.py
    ncclprobe/diagnose/run/rules_profile_eager.py
    ncclprobe/diagnose/run/rules_profile_steps.py
    ncclprobe/diagnose/run/rules_profile_baseline.py
pytest_add_cli_args_test_selection =
    tests/test_profile_unseen.py
    tests/test_profile_new_boundaries.py
    tests/test_profile_steps_unit.py
    tests/test_profile_steps_boundaries.py
    tests/test_profile_steps_found.py
    tests/test_profile_forwards_boundaries.py
CFG
cd "$out"
mutmut run --max-children "${MUTMUT_CHILDREN:-2}" || true
mutmut results --all true > mutmut-results.txt || mutmut results > mutmut-results.txt
echo "results: $out/mutmut-results.txt"
