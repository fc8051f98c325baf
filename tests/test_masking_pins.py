"""Over-masking pins (issue 28 §4): what is not a secret stays visible. The RCCL line is copied
from a public RCCL log (rccl/hipify/src/init.cc's WARN, as a user posted it); the opId line is the
format of NCCL's proxy.cc WARN (`... opId=%p`, v2.28.9-1). Issue 29 masks a key=value pair by its key, so
both stay readable."""

import pytest

from ncclprobe.secrets import MASK, mask_text

RCCL_NUMA = (
    "node01:5646:5646 [0] /data/jenkins_workspace/workspace/rccl_release/build/hipify/src/init.cc:115 "
    "NCCL WARN NUMA auto balancing enabled which can lead to variability in the RCCL performance! "
    'Disable by "sudo sysctl kernel.numa_balancing=0"'
)
NCCL_OPID = "gpu-node:2817:2901 [3] proxy.cc:72 NCCL WARN Storing response for already completed opId=0x7f3c2c000b70"


@pytest.mark.parametrize(
    "run",
    [
        "ABCDEF0123456789ABCDEF0123456789",  # 32 upper-case letters and digits: a hex id, no secret
        "GPU-4F3A2B1C-0D9E-8F7A-6B5C-4D3E2F1A0B9C",  # a GPU UUID
    ],
)
def test_an_upper_case_and_digit_run_stays_visible(run):
    assert mask_text(f"device {run} ready") == f"device {run} ready"


def test_rccls_numa_balancing_warning_stays_visible():
    assert mask_text(RCCL_NUMA) == RCCL_NUMA


def test_nccls_opid_stays_visible():
    assert mask_text(NCCL_OPID) == NCCL_OPID


def test_a_credential_beside_them_is_still_masked():
    """The healthy twin: the same line shapes with a credential are masked."""
    assert MASK in mask_text("sysctl password=Pl4ntedSecret9") and "Pl4nted" not in mask_text(
        "sysctl password=Pl4ntedSecret9"
    )


@pytest.mark.parametrize(
    "text",
    [
        "see https://example.com for the docs",  # a URL without userinfo: no `@` at all
        "pip install git+https://github.com/org/repo@v1.2",  # an `@` in the path, after a `/`
        "https://host/a/b@c",
    ],
)
def test_a_url_without_credentials_stays_visible(text):
    assert mask_text(text) == text


def test_a_url_user_and_password_are_masked_before_the_host():
    assert mask_text("git clone https://user:Pl4ntedPw9@github.com/x") == (
        f"git clone https://{MASK}@github.com/x"
    )


def test_a_password_after_a_short_flag_is_masked():
    from ncclprobe.secrets import mask_argv

    assert mask_argv(["mysql", "-p", "Pl4ntedPw9"])[1:] == ["-p", MASK]


def test_a_password_glued_to_a_short_flag_is_masked():
    """mysql's `-pSECRET`: the value is part of the flag's own word."""
    from ncclprobe.secrets import mask_argv

    assert mask_argv(["mysql", "-uroot", "-pPl4ntedPw9", "db"])[2] == f"-p{MASK}"
