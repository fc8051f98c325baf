"""--share-gpu on CPU: what can be checked without a GPU (spec checks, the pool's per-rank
environment, the worker's device choice, one-line refusals) and the tuning proof against the
real NCCL logs recorded on the one-GPU H200 in this mode."""

from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from ncclprobe.cli import cli
from ncclprobe.errors import UsageProblem
from ncclprobe.launch import worker_env
from ncclprobe.nccl.recipes import rank_log
from ncclprobe.sweep.plan import Config, Pool, SweepSpec
from ncclprobe.sweep.proof import prove, tuning_check
from ncclprobe.sweep.run import pool_spec as sweep_pool_spec

LOGS = Path(__file__).parent / "fixtures" / "nccl_logs"
EXCL_LL = (
    LOGS / "nccl_2.28.9_h200_2ranks_1gpu_hostid_proto_excl_ll_tuning.log"
)  # ^LL: LL128 x2, SIMPLE x2
LOWERCASE = (
    LOGS / "nccl_2.28.9_h200_2ranks_1gpu_hostid_p2p_level_lowercase.log"
)  # default: LL x1, SIMPLE x3
no_gpu = pytest.mark.skipif(
    torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA"
)


def _spec(grid=None, **kw):
    return SweepSpec(
        grid=grid or {"NCCL_PROTO": ("default", "LL")},
        sizes=(4096,),
        **{"nranks": 2, "backend": "nccl", "share_gpu": True, **kw},
    )


@pytest.mark.parametrize(
    "kw,message",
    [
        ({"backend": "gloo"}, "needs the NCCL backend"),
        ({"nranks": 1}, "at least 2 ranks"),
        ({"grid": {"NCCL_P2P_LEVEL": ("default", "SYS")}}, "NCCL_P2P_LEVEL cannot be swept"),
        ({"grid": {"NCCL_SHM_DISABLE": ("1",)}}, "NCCL_SHM_DISABLE cannot be swept"),
        ({"grid": {"NCCL_HOSTID": ("a", "b")}}, "sets a distinct NCCL_HOSTID"),
    ],
)
def test_spec_refuses_what_cannot_work_on_a_shared_gpu(kw, message):
    with pytest.raises(UsageProblem, match=message):
        _spec(**kw)


def test_spec_round_trips_and_old_files_mean_no_sharing():
    spec = _spec()
    assert SweepSpec.from_json(spec.to_json()) == spec
    old = {k: v for k, v in spec.to_json().items() if k != "share_gpu"}
    assert SweepSpec.from_json({**old, "backend": "gloo"}).share_gpu is False


def test_every_rank_gets_gpu_0_and_its_own_host_id(tmp_path, monkeypatch):
    monkeypatch.setenv("NCCL_HOSTID", "inherited")
    spec = _spec()
    pool_spec = sweep_pool_spec(spec, Pool({}, [Config({})]), tmp_path)
    envs = [worker_env(pool_spec, rank, tmp_path, 1234) for rank in range(3)]
    assert len({env["NCCL_HOSTID"] for env in envs}) == 3 and "inherited" not in {
        e["NCCL_HOSTID"] for e in envs
    }
    assert {env["NCCLPROBE_GPU"] for env in envs} == {"0"}
    assert {env["NCCL_NVLS_ENABLE"] for env in envs} == {"0"}
    assert {env["NCCL_DEBUG_FILE"] for env in envs} == {
        str(rank_log(tmp_path, r)) for r in range(3)
    }


def test_a_swept_nvls_setting_is_left_to_the_grid(tmp_path):
    spec = _spec(grid={"NCCL_NVLS_ENABLE": ("default", "1")})
    pool_spec = sweep_pool_spec(spec, Pool({}, [Config({})]), tmp_path)
    assert "NCCL_NVLS_ENABLE" not in worker_env(pool_spec, 0, tmp_path, 1234)


def test_without_sharing_the_gpu_follows_the_local_rank(tmp_path, monkeypatch):
    from ncclprobe.worker import context_from_env

    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.delenv("NCCLPROBE_RUN_DIR", raising=False)
    monkeypatch.delenv("NCCLPROBE_GPU", raising=False)
    assert context_from_env({}).gpu == 1
    monkeypatch.setenv("NCCLPROBE_GPU", "0")
    ctx = context_from_env({})
    ctx.backend = "nccl"
    assert ctx.gpu == 0 and ctx.device == torch.device("cuda", 0)


@pytest.mark.parametrize(
    "args,message",
    [
        (["--share-gpu", "1"], "at least 2 ranks"),
        (["--share-gpu", "2", "--nranks", "3"], "contradicts --share-gpu 2"),
        (
            ["--share-gpu", "2", "--nranks", "2", "--torchrun-dir", "plan"],
            "cannot be planned for torchrun",
        ),
        pytest.param(["--share-gpu", "2"], "needs a CUDA GPU", marks=no_gpu),
        pytest.param(["--share-gpu", "2", "--backend", "gloo"], "needs a CUDA GPU", marks=no_gpu),
    ],
)
def test_cli_refusals_are_one_line_exit_2(tmp_path, args, message):
    result = CliRunner().invoke(
        cli, ["sweep", *args, "--output", str(tmp_path / "o.jsonl")], prog_name="ncclprobe"
    )
    assert result.exit_code == 2, result.output
    assert message in result.output and len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "o.jsonl").exists() and not (tmp_path / "plan").exists()


def test_tuning_check_counts_nccls_real_choices():
    from ncclprobe.evidence.nccl.nccl_log import parse_nccl_log

    entries = parse_nccl_log(LOWERCASE.read_text()).tuning  # 1K: RING/LL, 64K..64M: RING/SIMPLE
    assert tuning_check("NCCL_PROTO", "LL", entries) == {
        "allowed": "LL",
        "calls": 4,
        "matching": 1,
        "choices": ["LL", "SIMPLE"],
    }
    assert tuning_check("NCCL_PROTO", "simple", entries)["matching"] == 3
    assert tuning_check("NCCL_PROTO", "^LL", entries)["matching"] == 3
    assert tuning_check("NCCL_PROTO", "LL,Simple", entries)["matching"] == 4
    assert tuning_check("NCCL_ALGO", "Ring", entries)["matching"] == 4
    assert tuning_check("NCCL_ALGO", "Tree", entries)["matching"] == 0
    assert (
        tuning_check("NCCL_ALGO", "allreduce:tree", entries) is None
    )  # per-collective form: not checked
    assert tuning_check("NCCL_BUFFSIZE", "8388608", entries) is None
    assert tuning_check("NCCL_PROTO", "LL", [])["calls"] == 0  # one rank: no evidence either way


def test_proof_on_a_real_shared_gpu_log_confirms_an_exclusion_by_every_choice():
    text = EXCL_LL.read_text()
    settings = {"NCCL_PROTO": "^LL"}
    status, reason, proof = prove(
        settings, ["NCCL_PROTO"], {0: settings, 1: settings}, "nccl", {0: (text, text)}
    )
    assert status == "ok", reason
    chosen = proof["chosen"]["NCCL_PROTO"]
    assert {k: chosen[k] for k in ("allowed", "calls", "matching", "choices")} == {
        "allowed": "all but LL",
        "calls": 4,
        "matching": 4,
        "choices": ["LL128", "SIMPLE"],
    }
    assert chosen["observable"] and chosen["chosen"]
    assert proof["proven"]["NCCL_PROTO"].startswith(
        "read and chosen: read by rank 0; rank 0's TUNING lines"
    )
    assert set(proof["transports"]) == {"NET"}


def test_a_setting_nccl_read_but_did_not_choose_is_ignored():
    # the real log read NCCL_PROTO (^LL); had it been forced to LL128 only, SIMPLE calls contradict it
    text = EXCL_LL.read_text().replace(
        "NCCL_PROTO set by environment to ^LL", "NCCL_PROTO set by environment to LL128"
    )
    settings = {"NCCL_PROTO": "LL128"}
    status, reason, proof = prove(
        settings, ["NCCL_PROTO"], {0: settings}, "nccl", {0: (text, text)}
    )
    assert (
        status == "ignored" and "2 of 4 calls chose LL128 (the calls chose LL128, SIMPLE)" in reason
    )
    assert proof["proven"]["NCCL_PROTO"].startswith("read, not chosen")
