"""The NCCL facts the knowledge table marks as verified, checked again from NCCL's own log on a GPU.

Two ranks share GPU 0 with a distinct NCCL_HOSTID each (the --share-gpu recipe): NCCL then runs its
tuning model, reads the per-communicator variables and logs what it read, as on two GPUs. Each case
is a fresh pool (most variables are read once per process). Run by the lead on the device; the
recorded logs of these cases are tests/fixtures/nccl_logs/nccl_2.28.9_h200_2ranks_1gpu_hostid_*.
"""

import pytest
import torch

from ncclprobe.evidence.nccl.nccl_log import parse_nccl_log
from ncclprobe.launch import PoolSpec, PoolStatus, run_pool
from ncclprobe.nccl.recipes import (
    NO_NVLS,
    PROOF_VARIABLES,
    SHARE_GPU_RANK_ENV,
    proof_env,
    rank_log,
    rank_log_env,
)

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def _case(tmp_path, env: dict, second_env: dict | None = None):
    """(pool status, rank 0's parsed NCCL log, its raw text) of two ranks on GPU 0 under `env`."""
    tmp_path.mkdir(parents=True, exist_ok=True)  # NCCL_DEBUG_FILE's folder: NCCL does not create it
    spec = PoolSpec(
        nranks=2,
        backend="nccl",
        entry="tests.nccl_facts_entries:all_reduce_twice",
        payload={"second_env": second_env or {}},
        env={**proof_env(), **NO_NVLS, **env},
        unset=PROOF_VARIABLES
        + tuple(SHARE_GPU_RANK_ENV)
        + ("NCCL_PROTO", "NCCL_ALGO", "NCCL_P2P_LEVEL", "NCCL_BUFFSIZE"),
        rank_env={**rank_log_env(tmp_path), **SHARE_GPU_RANK_ENV},
        gpu=0,
        timeout_s=120,
    )
    outcome = run_pool(spec)
    path = rank_log(tmp_path, 0)
    text = path.read_text(errors="replace") if path.exists() else ""
    return outcome, parse_nccl_log(text), text


def test_an_upper_case_p2p_level_is_read_and_a_lower_case_one_silently_ignored(tmp_path):
    outcome, log, _ = _case(tmp_path / "upper", {"NCCL_P2P_LEVEL": "SYS"})
    assert outcome.status is PoolStatus.OK and log.env.get("NCCL_P2P_LEVEL") == "SYS"
    outcome, log, text = _case(tmp_path / "lower", {"NCCL_P2P_LEVEL": "sys"})
    assert outcome.status is PoolStatus.OK and log.nccl_lines > 0, (
        "no NCCL log: the case proves nothing"
    )
    assert "NCCL_P2P_LEVEL" not in log.env and not any("P2P_LEVEL" in w for w in log.warnings), (
        text[-2000:]
    )


def test_an_excluded_protocol_is_never_chosen(tmp_path):
    outcome, log, text = _case(tmp_path, {"NCCL_PROTO": "^LL"})
    assert outcome.status is PoolStatus.OK and log.env.get("NCCL_PROTO") == "^LL"
    assert log.tuning and all(entry.proto != "LL" for entry in log.tuning), text[-2000:]


@pytest.mark.parametrize(
    "variable, value", [("NCCL_PROTO", "LL,Bogus"), ("NCCL_ALGO", "Ring,Bogus")]
)
def test_an_unknown_token_is_a_warning_and_the_communicator_is_not_created(
    tmp_path, variable, value
):
    outcome, log, text = _case(tmp_path, {variable: value})
    assert outcome.status is not PoolStatus.OK and not outcome.of_kind("completed")
    assert any('Unrecognized element token "Bogus"' in w for w in log.warnings), text[-2000:]


def test_without_env_in_the_subsystems_nothing_says_what_was_read(tmp_path):
    outcome, log, text = _case(tmp_path, {"NCCL_DEBUG_SUBSYS": "TUNING", "NCCL_PROTO": "LL"})
    assert outcome.status is PoolStatus.OK and "set by environment" not in text and not log.env


def test_a_new_communicator_rereads_the_protocol_but_not_the_buffer_size(tmp_path):
    outcome, log, text = _case(
        tmp_path,
        {"NCCL_PROTO": "LL", "NCCL_BUFFSIZE": "2097152"},
        second_env={"NCCL_PROTO": "Simple", "NCCL_BUFFSIZE": "8388608"},
    )
    assert outcome.status is PoolStatus.OK and outcome.of_kind("completed")
    assert log.env_values.get("NCCL_PROTO") == ["LL", "Simple"], text[-2000:]
    assert log.env_values.get("NCCL_BUFFSIZE") == ["2097152"], text[-2000:]
