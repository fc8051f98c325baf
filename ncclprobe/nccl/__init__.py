"""Everything ncclprobe knows about NCCL, in one place.

  knobs     the knowledge table: one row per NCCL variable (when NCCL reads it, values, risks, proof),
            and the questions asked of it; its rows are written in `knobs_datapath` (what the
            collectives run with) and `knobs_tooling` (cache, debug log, files, plugins), the row
            type in `knob_row`;
  values    how NCCL reads a value: validation, NCCL_PROTO/NCCL_ALGO lists, debug subsystems;
  p2p       P2P level names, the legacy integers and NCCL's default level;
  version   NCCL version strings;
  node      what the topology says about the GPUs a job uses (how NVLink joins them, their types);
  ll128     when NCCL keeps LL128 on by itself (its rule in src/graph/tuning.cc, per version);
  lint      findings over an environment, from the table's rules (the rules in `lint_datapath` and
            `lint_tooling`, the finding type `SettingFinding` in `lint_finding`);
  safety    the one safety rule for settings a job runs with (recommend, run-engine, diagnose);
  recipes   how ncclprobe runs NCCL: the environment that makes NCCL prove what it read, each rank's
            log file, the --share-gpu recipe, the variables that are ncclprobe's own, the default grid.

Every other module imports these facts from here; none writes them again.
"""
