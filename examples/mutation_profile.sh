#!/usr/bin/env bash
# Mutation check of the profile step finder and the profile step rules (issue 26; not in CI: slow).
# mutmut from the package index, in the venv only:  pip install mutmut
# Runs on a copy of the committed tree (the repository's setup.cfg is left alone), with the fast
# test set that pins these modules' thresholds and branches plus three real traces:
#   bash examples/mutation_profile.sh [OUT_DIR]      # then: cd OUT_DIR && mutmut results
# The score and every survivor's reason are in docs/LOG.md (2026-12-01).
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
    ncclprobe/diagnose/profile_costs.py
    ncclprobe/diagnose/rules_profile_steps.py
    ncclprobe/diagnose/rules_profile_baseline.py
pytest_add_cli_args_test_selection =
    tests/test_profile_steps_unit.py
    tests/test_profile_hf.py::test_one_step_per_forward_with_its_phase
    tests/test_profile_h200.py::test_our_engine_without_its_annotations_gives_the_same_steps
CFG
cd "$out"
mutmut run --max-children "${MUTMUT_CHILDREN:-2}" || true
mutmut results --all true > mutmut-results.txt || mutmut results > mutmut-results.txt
echo "results: $out/mutmut-results.txt"
