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


# ---- issue 29: every form of the family, exactly, and its harmless twin --------------------------
M = MASK


@pytest.mark.parametrize(
    "argv, shown",
    [
        (
            ["sh", "-c", "python t.py --password Pw1 --token Tk2"],
            f"python t.py --password {M} --token {M}",
        ),
        (["python t.py --password Pw1 --lr 3"], f"python t.py --password {M} --lr 3"),  # a title
        (["app", "--login", "admin:Pw1"], f"admin:{M}"),
        (["redis-cli", "-a", "Pw1", "ping"], M),
        (["openssl", "enc", "-passin", "pass:Pw1"], M),
        (["java", "-Dpassword=Pw1", "-Dfile.encoding=UTF-8"], f"-Dpassword={M}"),
        (["app", "--password:Pw1"], f"--password:{M}"),
        (["app", "--api-key", "--", "Pw1"], M),
        (["app", "--config", '{"password": "Pw1", "lr": 3}'], f'{{"password": "{M}", "lr": 3}}'),
        (["curl", "https://h/x?token=Pw1&page=2"], f"https://h/x?token={M}&page=2"),
        (["mysql", "-uroot", "-pPw1", "db"], f"-p{M}"),
        (["sh", "-c", "mysql -pPw1 db"], f"mysql -p{M} db"),
        (["app", '--token="two words"'], f'--token="{M} {M}"'),
    ],
)
def test_every_command_line_form_is_masked_in_place(argv, shown):
    from ncclprobe.secrets import mask_argv

    masked = mask_argv(argv)
    assert shown in masked and "Pw1" not in " ".join(masked) and "two" not in " ".join(masked)


@pytest.mark.parametrize(
    "text, shown",
    [
        ("NCCL_IB_HCA=mlx5_0,https://h/x?token=Pw1", f"NCCL_IB_HCA=mlx5_0,https://h/x?token={M}"),
        ("https://h/c?sv=2022&sig=Pw1&se=3", f"https://h/c?sv=2022&sig={M}&se=3"),
        ("https://h/x?a=1&password=Pw1", f"https://h/x?a=1&password={M}"),
        ("NCCL WARN connect failed --password Pw1", f"NCCL WARN connect failed --password {M}"),
        ("NCCL WARN login admin:Pw1 refused", f"NCCL WARN login admin:{M} refused"),
        ("Server=db;User Id=sa;Password=Pw1;", f"Server=db;User Id=sa;Password={M};"),
        ("accessToken=Pw1 X-Amz-Signature=Pw2", f"accessToken={M} X-Amz-Signature={M}"),
        ("--settings 'HF_TOKEN=Pw1': bad", f"--settings 'HF_TOKEN={M}': bad"),
    ],
)
def test_every_free_text_form_is_masked_in_place(text, shown):
    assert mask_text(text) == shown


@pytest.mark.parametrize(
    "text, shown",
    [
        ("open /tmp/x?--password:Pw1 failed", f"open /tmp/x?--password:{M} failed"),
        ("open /tmp/x?login admin:Pw1 failed", f"open /tmp/x?login admin:{M} failed"),
        ("/tmp/x&--api-key=Pw1", f"/tmp/x&--api-key={M}"),
        ("cfg=--token:Pw1", f"cfg=--token:{M}"),
        ("/a/b,--password Pw1 --lr 3", f"/a/b,--password {M} --lr 3"),
        ("file:--secret:Pw1", f"file:--secret:{M}"),
        ("x?LOGIN root:Pw1", f"x?LOGIN root:{M}"),
        ("https://u:Pw2@h/x?--token:Pw1", f"https://{M}@h/x?--token:{M}"),  # before it: by shape
    ],
)
def test_a_credential_flag_or_login_inside_a_word_is_masked(text, shown):
    """After punctuation inside a word (a path's query, a list, a pair) a flag is still a flag."""
    assert mask_text(text) == shown


def test_a_credential_flag_inside_an_argument_hides_the_next_one():
    from ncclprobe.secrets import mask_argv

    assert mask_argv(["app", "/tmp/x?-p:2222"]) == ["app", "/tmp/x?-p:2222"]  # a short flag: no

    assert mask_argv(["app", "/tmp/x?--token", "Pw1", "?login", "admin:Pw2", "--lr", "3"]) == [
        "app",
        "/tmp/x?--token",
        M,
        "?login",
        f"admin:{M}",
        "--lr",
        "3",
    ]


@pytest.mark.parametrize(
    "text",
    [
        "/tmp/x?--lr:3 https://h/x?--page:2 a,--max-num-batched-tokens:8192",
        "x?--tokenizer:meta-llama/Llama-3 (--port:80) /tmp/my-file--password:notes",
        "/usr/bin/login alice relogin admin:x x?-p:2222 blogin admin:y",
    ],
)
def test_a_flag_or_login_inside_a_word_that_takes_no_credential_stays_visible(text):
    """The twins: other flags after punctuation, a flag glued to a name (no punctuation before it),
    a short flag inside a word, `login` ending a longer word, and login's next word without `:`."""
    assert mask_text(text) == text


@pytest.mark.parametrize(
    "text",
    [
        "kernel.numa_balancing=0 opId=0x7f3c2c000b70 busId=0x1b000",
        "--max-num-batched-tokens 8192 --tokenizer meta-llama/Llama-3 --max-tokens 64",
        "/home/Alice2/projects/NcclProbe/results_2026.jsonl",
        "GPU-4F3A2B1C-0D9E-8F7A-6B5C-4D3E2F1A0B9C node-17.cluster.example 12345",
        "PWD=/home/u OLDPWD=/tmp gcc -pthread -o x x.c ls -a",
        "NCCL_IB_HCA==mlx5_0:1,mlx5_1:1 NCCL_SOCKET_IFNAME=^lo,docker",
        "https://h/x?page=2&sort=name",
    ],
)
def test_harmless_values_stay_visible(text):
    """The twins: numbers, ids, paths, hosts, counts of tokens and plain queries are no secrets."""
    assert mask_text(text) == text


def test_no_line_of_a_real_log_or_report_is_masked():
    """The over-masking pin over real text (issue 29): NCCL and RCCL logs, nccl-tests output,
    collect-env, server logs, topologies, P2P matrices, traces, as users posted them, hold no
    credential, so every line prints as it is (`bos_token_id`, `ms_per_token`, `tiktoken:`, a pod's
    `POD_NAME=...`, mpirun's `-H host:8`, GitHub URLs and CamelCase names included)."""
    from pathlib import Path

    changed = []
    for path in sorted((Path(__file__).parent / "fixtures").glob("*/*")):
        if not path.is_file() or path.suffix in (".gz", ".pkl", ".pickle"):
            continue
        text = path.read_bytes().decode("utf-8", errors="replace")
        if "\0" in text[:1000]:
            continue
        changed += [f"{path.name}: {m}" for l in text.splitlines() if (m := mask_text(l)) != l]
    assert changed == [], changed[:5]


@pytest.mark.parametrize(
    "text",
    [
        '"bos_token_id": 1, "num_key_value_heads": 8, "ms_per_token": 12.5',
        "{'pass_config': {'fuse_norm_quant': False}, 'encoder_cudagraph_token_budgets': []}",
        '"per_token_bytes": 65536.0, "max_tokens": 64',
        "tiktoken: 0.7.0 Number of speculative tokens: 5",
        "+ POD_NAME=nccl-tests-efa-worker-0",
        'mpirun -H inst-a-h100:8,inst-b-h100:8 -mca plm_rsh_args "-p 2222"',
        "https://github.com/NVIDIA/nvbandwidth/issues/12#issuecomment-2207731920",
        "~/cuda-samples/Samples/5_Domain_Specific/p2pBandwidthLatencyTest",
    ],
)
def test_names_counts_and_hosts_that_look_like_keys_stay_visible(text):
    assert mask_text(text) == text


def test_their_credential_twins_are_masked():
    for text in (
        '"bos_token": "Pw1Secret"',
        '"cookie_value": "Pw1Secret"',
        "X-Auth-Token: Pw1Secret",
        "sshpass -p Pw1Secret ssh -p 2222 gw",
        "Bearer Pw1Secret",  # short: no shape, only the scheme before it
        "https://hooks.slack.com/services/T0001/B0001/Xa1Yb2Zc3Wd4Ve5Uf6Tg7Sh8",
    ):
        masked = mask_text(text)
        assert "Pw1Secret" not in masked and "Xa1Yb2" not in masked and MASK in masked, masked
    assert mask_text("sshpass -p Pw1Secret ssh -p 2222 gw").endswith("ssh -p 2222 gw")
    assert mask_text("serve --enable-auth --port 80 --api-key Pw1Secret") == (
        f"serve --enable-auth --port 80 --api-key {MASK}"
    )  # a credential flag that takes no value does not swallow the next flag


def test_a_headers_argv_is_masked_as_read():
    """mask_provenance masks a results header's or trace's argv (another writer's file): the
    sampled mutation run of the secrets package left a negated list check alive."""
    from ncclprobe.secrets import mask_provenance

    doc = {"argv": ["python", "train.py", "--password", "hunter2xyz"], "env": {}}
    assert mask_provenance(doc)["argv"] == ["python", "train.py", "--password", "<masked>"]
    assert mask_provenance({"argv": "not a list"})["argv"] == "not a list"  # left as it came


@pytest.mark.parametrize(
    "quoted",
    ["'--password'", '"--password"', "'--password", "\"'--password'\""],
)
def test_a_quoted_credential_flag_still_hides_the_next_word(quoted):
    """A flag in quotes inside an `sh -c` string (the quotes are stripped before the flag is
    looked up, on either side); its value is masked, the quotes kept."""
    from ncclprobe.secrets import mask_argv, mask_text

    assert mask_text(f"python train.py {quoted} hunter2xyz --x 1") == (
        f"python train.py {quoted} <masked> --x 1"
    )
    assert mask_argv(["python", quoted, "hunter2xyz"]) == ["python", quoted, "<masked>"]


def test_a_java_property_naming_a_credential_is_masked_whatever_its_value():
    """`-Dtoken=9x` is caught only by the -D rule (its short value has no secret's shape)."""
    from ncclprobe.secrets import mask_argv, mask_text

    assert mask_text("java -Dtoken=9x -Dheap=9x -jar x.jar") == (
        "java -Dtoken=<masked> -Dheap=9x -jar x.jar"
    )
    assert mask_argv(["java", "-Dtoken=9x"]) == ["java", "-Dtoken=<masked>"]


@pytest.mark.parametrize("value", ["9abcdefgh?token=9abcdefgh", "mlx5_0?token=9abcdefgh"])
def test_a_credential_typed_as_a_setting_is_refused_whatever_its_first_character(value):
    """The refusal compares the masked value with the value typed, for difference, not order: a
    value beginning with a digit sorts below the mask's '<'."""
    from ncclprobe.errors import UsageProblem
    from ncclprobe.secrets import refuse_credential

    with pytest.raises(UsageProblem, match="looks like a credential"):
        refuse_credential("--set", "NCCL_IB_HCA", value)
    refuse_credential("--set", "NCCL_IB_HCA", "mlx5_0:1,mlx5_1:1")  # a real value passes
