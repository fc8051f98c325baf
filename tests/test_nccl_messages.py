"""What `ncclprobe.nccl` tells a user, word for word (issue 28 §4/§5): every lint finding and every
LL128 verdict as the user reads it, so a changed or lost word in a message fails; and the small
helpers the rules stand on (node facts in and out of JSON, integer and token parsing, the safety
rule's filters, the run recipes), each on the input that tells a wrong version apart."""

from __future__ import annotations

import pytest

from ncclprobe.errors import UsageProblem
from ncclprobe.nccl.knob_row import Scope
from ncclprobe.nccl.knobs import effective_scope, explain
from ncclprobe.nccl.lint import lint_env
from ncclprobe.nccl.ll128 import ll128_default
from ncclprobe.nccl.node import (
    NO_NVLINK,
    NVLINK_ALL,
    NVLINK_PARTIAL,
    NVLINK_RING,
    ONE_GPU,
    NodeFacts,
    classify_links,
)
from ncclprobe.nccl.p2p import level_as_logged, path_types
from ncclprobe.nccl.recipes import (
    LOG_DIR_VAR,
    check_share_gpu_ranks,
    only_shapes_the_log,
    own_log,
    proof_env,
    rank_log_env,
    share_gpu_env,
)
from ncclprobe.nccl.safety import check_job_settings
from ncclprobe.nccl.values import parse_integer, token_list_for, validate_value

PCIE = NodeFacts(links=NO_NVLINK)

LINT = [
    (
        {"NCCL_BUFFSIZE": " 1", "NCCL_NTHREADS": "'64'"},
        {},
        [
            (
                "error",
                "NCCL_BUFFSIZE",
                "NCCL_BUFFSIZE=' 1' carries quotes or spaces that NCCL reads as part of the value",
                "export NCCL_BUFFSIZE=1",
                "quoted-value",
            ),
            (
                "error",
                "NCCL_NTHREADS",
                "NCCL_NTHREADS=\"'64'\" carries quotes or spaces that NCCL reads as part of the value",
                "export NCCL_NTHREADS=64",
                "quoted-value",
            ),
        ],
    ),
    (
        {"NCCL_PROTO": "LL", "NCCL_BUFFSIZE": "4M", "NCCL_NTHREADS": "80"},
        {},
        [
            (
                "error",
                "NCCL_BUFFSIZE",
                "NCCL_BUFFSIZE='4M' is not an integer; NCCL reads it as 4 (strtoll, ignoring 'M')",
                "use one of the values `ncclprobe knobs NCCL_BUFFSIZE` lists",
                "number-as-read",
            ),
            (
                "error",
                "NCCL_NTHREADS",
                "NCCL_NTHREADS='80' is not one NCCL uses as given: it takes a multiple of 32 from 64 to 512 and replaces others",
                "use one of the values `ncclprobe knobs NCCL_NTHREADS` lists",
                "invalid-value",
            ),
        ],
    ),
    (
        {"NCCL_BUFFSIZE": '"4M"'},
        {},
        [
            (
                "error",
                "NCCL_BUFFSIZE",
                "NCCL_BUFFSIZE='\"4M\"' carries quotes or spaces that NCCL reads as part of the value",
                "export NCCL_BUFFSIZE=4M",
                "quoted-value",
            )
        ],
    ),
    (
        {"NCCL_P2P_LEVEL": "2"},
        {},
        [
            (
                "info",
                "NCCL_P2P_LEVEL",
                "NCCL_P2P_LEVEL=2 is a legacy integer; NCCL reads it as PXB",
                "export NCCL_P2P_LEVEL=PXB",
                "p2p-level-legacy-int",
            )
        ],
    ),
    (
        {"NCCL_P2P_LEVEL": "sys"},
        {},
        [
            (
                "error",
                "NCCL_P2P_LEVEL",
                "NCCL_P2P_LEVEL=sys: `sys` is not a level name (NCCL compares them case-sensitively); NCCL ignores it and uses its default level; write `SYS`",
                "export NCCL_P2P_LEVEL=SYS",
                "p2p-level-case",
            )
        ],
    ),
    (
        {"NCCL_P2P_LEVEL": "bogus"},
        {},
        [
            (
                "error",
                "NCCL_P2P_LEVEL",
                "NCCL_P2P_LEVEL='bogus' is not a P2P level; NCCL ignores it",
                "use one of LOC, NVL, PIX, PXB, PHB, SYS",
                "p2p-level-unknown",
            )
        ],
    ),
    (
        {"NCCL_P2P_LEVEL": "C2C"},
        {"nccl_version": "2.25.1"},
        [
            (
                "error",
                "NCCL_P2P_LEVEL",
                "NCCL_P2P_LEVEL=C2C is not a level name before NCCL 2.26 (this is 2.25.1): NCCL ignores it and uses its default level",
                "use one of LOC, NVL, PIX, PXB, PHB, SYS",
                "p2p-level-too-new",
            )
        ],
    ),
    (
        {"NCCL_P2P_LEVEL": "C2C"},
        {"nccl_version": "2.28.9"},
        [
            (
                "info",
                "NCCL_P2P_LEVEL",
                "NCCL_P2P_LEVEL=C2C is accepted by NCCL's code but not documented (NCCL 2.26+; older versions ignore it); its meaning may change between versions",
                "prefer one of LOC, NVL, PIX, PXB, PHB, SYS",
                "p2p-level-undocumented",
            )
        ],
    ),
    (
        {"NCCL_P2P_LEVEL": "NVB"},
        {},
        [
            (
                "info",
                "NCCL_P2P_LEVEL",
                "NCCL_P2P_LEVEL=NVB is accepted by NCCL's code but not documented; its meaning may change between versions",
                "prefer one of LOC, NVL, PIX, PXB, PHB, SYS",
                "p2p-level-undocumented",
            )
        ],
    ),
    (
        {"NCCL_P2P_DISABLE": "1", "NCCL_P2P_LEVEL": "SYS"},
        {},
        [
            (
                "warning",
                "NCCL_P2P_DISABLE",
                "NCCL_P2P_DISABLE=1 turns P2P off, so NCCL_P2P_LEVEL=SYS has no effect",
                "unset one of the two",
                "p2p-disable-and-level",
            )
        ],
    ),
    (
        {"NCCL_PROTO": "LL129", "NCCL_ALGO": "Ring,Bogus"},
        {"nccl_version": "2.28.9"},
        [
            (
                "error",
                "NCCL_ALGO",
                "NCCL_ALGO='Ring,Bogus': unknown token 'Bogus'; known: Ring, Tree, CollNet, CollNetDirect, CollNetChain, NVLS, NVLSTree, PAT. NCCL 2.24+ refuses it and communicator creation fails",
                "see `ncclprobe knobs NCCL_ALGO` for the accepted names",
                "unknown-token",
            ),
            (
                "error",
                "NCCL_PROTO",
                "NCCL_PROTO='LL129': unknown token 'LL129'; known: LL, LL128, Simple. NCCL 2.24+ refuses it and communicator creation fails",
                "see `ncclprobe knobs NCCL_PROTO` for the accepted names",
                "unknown-token",
            ),
        ],
    ),
    (
        {"NCCL_PROTO": "allreduce:LL", "NCCL_ALGO": "allreduce:Ring"},
        {"nccl_version": "2.23.4"},
        [
            (
                "error",
                "NCCL_ALGO",
                "NCCL_ALGO='allreduce:Ring' uses the per-collective form, which NCCL reads only from 2.24",
                "use a plain comma list, or upgrade NCCL",
                "per-collective-too-old",
            ),
            (
                "error",
                "NCCL_PROTO",
                "NCCL_PROTO='allreduce:LL' uses the per-collective form, which NCCL reads only from 2.24",
                "use a plain comma list, or upgrade NCCL",
                "per-collective-too-old",
            ),
        ],
    ),
    (
        {"NCCL_ALGO": "NVLS,Ring,pat"},
        {"nccl_version": "2.16.5"},
        [
            (
                "error",
                "NCCL_ALGO",
                "algorithm 'nvls' needs NCCL 2.17+; this is 2.16.5",
                "drop it or upgrade NCCL",
                "algo-too-new",
            ),
            (
                "error",
                "NCCL_ALGO",
                "algorithm 'pat' needs NCCL 2.23+; this is 2.16.5",
                "drop it or upgrade NCCL",
                "algo-too-new",
            ),
        ],
    ),
    (
        {"NCCL_ALGO": "CollNet"},
        {"nccl_version": "2.24.3"},
        [
            (
                "error",
                "NCCL_ALGO",
                "algorithm 'collnet' is an NCCL_ALGO name only before NCCL 2.14: NCCL 2.24+ refuses it and communicator creation fails",
                "name CollNetDirect or CollNetChain (NCCL 2.14+)",
                "algo-too-old",
            )
        ],
    ),
    (
        {"NCCL_PROTO": "^LL"},
        {"node": PCIE, "nccl_version": "2.28.9"},
        [
            (
                "error",
                "NCCL_PROTO",
                "NCCL_PROTO=^LL forces LL128 on: `^LL` is a ^ list that leaves LL128 in, and NCCL force-enables every protocol a ^ list leaves in (seen on 2.28.9: it then picks LL128 without NVLink). Without the setting NCCL would keep LL128 off here: no NVLink between the GPUs: every hop is PCIe. NCCL enables LL128 by itself only where it verified that it cannot corrupt data silently.",
                "exclude LL128 too (NCCL_PROTO=^LL,LL128) or name only what you want (NCCL_PROTO=LL,Simple)",
                "ll128-without-nvlink",
            )
        ],
    ),
    (
        {"NCCL_PROTO": "LL128"},
        {},
        [
            (
                "warning",
                "NCCL_PROTO",
                "NCCL_PROTO=LL128 forces LL128 on: `LL128` names LL128. Whether NCCL would enable LL128 here without the setting is not known from this evidence: the GPUs' links are not known. NCCL enables LL128 by itself only where it verified that it cannot corrupt data silently.",
                "exclude LL128 too (NCCL_PROTO=^LL,LL128) or name only what you want (NCCL_PROTO=LL,Simple)",
                "ll128-without-nvlink",
            )
        ],
    ),
    (
        {"NCCL_DEBUG_SUBSYS": "INIT,", "NCCL_DEBUG_FILE": "/tmp/nccl.log"},
        {},
        [
            (
                "warning",
                "NCCL_DEBUG_FILE",
                "NCCL_DEBUG_FILE=/tmp/nccl.log has no %p: every process on a host opens the same file for writing and they overwrite each other",
                "add %p (pid) and %h (host) to the name, e.g. nccl.%h.%p.log",
                "debug-file-shared",
            ),
            (
                "warning",
                "NCCL_DEBUG_SUBSYS",
                "NCCL_DEBUG_SUBSYS=INIT, replaces the default list and leaves out ENV: the `set by environment` lines, the proof a setting was read, vanish",
                "export NCCL_DEBUG_SUBSYS=INIT,ENV",
                "debug-subsys-without-env",
            ),
            (
                "info",
                "NCCL_DEBUG_SUBSYS",
                "NCCL_DEBUG_SUBSYS only filters INFO lines, and NCCL_DEBUG is unset",
                "export NCCL_DEBUG=INFO",
                "debug-subsys-without-info",
            ),
        ],
    ),
    (
        {"NCCL_DEBUG_SUBSYS": "^ENV", "NCCL_DEBUG": "info"},
        {},
        [
            (
                "warning",
                "NCCL_DEBUG_SUBSYS",
                "NCCL_DEBUG_SUBSYS=^ENV replaces the default list and leaves out ENV: the `set by environment` lines, the proof a setting was read, vanish",
                "do not exclude ENV",
                "debug-subsys-without-env",
            )
        ],
    ),
    (
        {"NCCL_DEBUG_SUBSYS": "^RAS,ENV", "NCCL_DEBUG": "INFO"},
        {"nccl_version": "2.23.4"},
        [
            (
                "warning",
                "NCCL_DEBUG_SUBSYS",
                "NCCL_DEBUG_SUBSYS=^RAS,ENV replaces the default list and leaves out ENV: the `set by environment` lines, the proof a setting was read, vanish",
                "do not exclude ENV",
                "debug-subsys-without-env",
            ),
            (
                "info",
                "NCCL_DEBUG_SUBSYS",
                "NCCL_DEBUG_SUBSYS names RAS, which NCCL knows from 2.24; 2.23.4 ignores the name",
                "drop RAS",
                "debug-subsys-too-new",
            ),
        ],
    ),
    (
        {"NCCL_MIN_NCHANNELS": "4", "NCCL_MAX_NCHANNELS": "2"},
        {},
        [
            (
                "error",
                "NCCL_MIN_NCHANNELS",
                "NCCL_MIN_NCHANNELS=4 is above NCCL_MAX_NCHANNELS=2",
                "make the minimum at most the maximum",
                "min-above-max",
            ),
            (
                "info",
                "NCCL_MAX_NCHANNELS",
                "NCCL_MAX_NCHANNELS is deprecated since NCCL 2.17; the most restrictive of it, NCCL_MAX_CTAS and the communicator config wins",
                "use NCCL_MAX_CTAS",
                "deprecated",
            ),
            (
                "info",
                "NCCL_MIN_NCHANNELS",
                "NCCL_MIN_NCHANNELS is deprecated since NCCL 2.17; the most restrictive of it, NCCL_MIN_CTAS and the communicator config wins",
                "use NCCL_MIN_CTAS",
                "deprecated",
            ),
        ],
    ),
    (
        {"NCCL_LAUNCH_MODE": "group"},
        {"nccl_version": "2.12.12"},
        [
            (
                "error",
                "NCCL_LAUNCH_MODE",
                "NCCL_LAUNCH_MODE=group means PARALLEL before NCCL 2.13, which compares it with exact case",
                "export NCCL_LAUNCH_MODE=GROUP (or unset it)",
                "launch-mode-case",
            )
        ],
    ),
    (
        {"NCCL_LAUNCH_MODE": "GROUP"},
        {"nccl_version": "2.28.9"},
        [
            (
                "info",
                "NCCL_LAUNCH_MODE",
                "NCCL_LAUNCH_MODE=GROUP is deprecated since NCCL 2.9",
                "unset it",
                "deprecated",
            )
        ],
    ),
    (
        {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"},
        {},
        [
            (
                "warning",
                "NCCL_SHM_DISABLE",
                "P2P and SHM are both disabled: GPUs of one node talk through the network transport (sockets), far slower",
                "re-enable one of them",
                "no-intranode-transport",
            )
        ],
    ),
    (
        {"NCCL_NVLS_ENABLE": "1"},
        {"node": PCIE},
        [
            (
                "warning",
                "NCCL_NVLS_ENABLE",
                "NCCL_NVLS_ENABLE=1 asks for NVLink SHARP, which needs every GPU on one NVSwitch fabric; this node's GPUs are not all linked by NVLink",
                "unset it",
                "nvls-without-nvlink",
            )
        ],
    ),
    (
        {"NCCL_TUNER_CONFIG_FILE": "t.csv"},
        {"nccl_version": "2.27.4"},
        [
            (
                "warning",
                "NCCL_TUNER_CONFIG_FILE",
                "NCCL's example tuner plugin reads NCCL_TUNER_CONFIG_FILE only from 2.27.5; this is 2.27.4",
                "upgrade NCCL or unset it",
                "tuner-config-too-old",
            ),
            (
                "info",
                "NCCL_TUNER_CONFIG_FILE",
                "NCCL_TUNER_CONFIG_FILE is read only by NCCL's example tuner plugin, and NCCL_TUNER_PLUGIN is not set",
                "set NCCL_TUNER_PLUGIN to that plugin",
                "tuner-config-without-plugin",
            ),
        ],
    ),
    (
        {"NCCL_TUNER_PLUGIN": "None"},
        {"nccl_version": "2.27.7"},
        [
            (
                "warning",
                "NCCL_TUNER_PLUGIN",
                "NCCL_TUNER_PLUGIN=none means `no plugin` only from NCCL 2.28; older versions look for a library called none, fail, and fall back (to a tuner inside the net plugin, else the internal one)",
                "unset it to get the internal tuner",
                "tuner-none-too-old",
            )
        ],
    ),
    (
        {"NCCL_NO_CACHE": "BUFFSIZE,NCCL_P2P_LEVEL,all,,ALL"},
        {"nccl_version": "2.29.3"},
        [
            (
                "warning",
                "NCCL_NO_CACHE",
                "NCCL_NO_CACHE exists from NCCL 2.29.7; this is 2.29.3, which caches every variable once per process",
                "upgrade NCCL or unset it",
                "no-cache-too-old",
            ),
            (
                "warning",
                "NCCL_NO_CACHE",
                "NCCL_NO_CACHE lists 'BUFFSIZE': NCCL compares full names exactly (NCCL_BUFFSIZE, ALL), so this matches nothing",
                "write NCCL_BUFFSIZE",
                "no-cache-name",
            ),
            (
                "warning",
                "NCCL_NO_CACHE",
                "NCCL_NO_CACHE lists 'all': NCCL compares full names exactly (NCCL_BUFFSIZE, ALL), so this matches nothing",
                "write ALL",
                "no-cache-name",
            ),
            (
                "info",
                "NCCL_NO_CACHE",
                "NCCL_NO_CACHE lists NCCL_P2P_LEVEL, which NCCL does not read through its cached parameters: it stays read once per process",
                "drop NCCL_P2P_LEVEL",
                "no-cache-no-effect",
            ),
        ],
    ),
    (
        {"NCCL_PROTOCOL": "LL", "NCCL_LL_BUFFSIZE": "1"},
        {},
        [
            (
                "warning",
                "NCCL_PROTOCOL",
                "NCCL_PROTOCOL is not a variable NCCL reads; it is ignored",
                "did you mean NCCL_PROTO?",
                "unknown-variable",
            )
        ],
    ),
    (
        {"NCCL_PROTO": "LL129"},
        {"nccl_version": "2.23.4"},
        [
            (
                "error",
                "NCCL_PROTO",
                "NCCL_PROTO='LL129': unknown token 'LL129'; known: LL, LL128, Simple. NCCL before 2.24 ignores the unknown token silently",
                "see `ncclprobe knobs NCCL_PROTO` for the accepted names",
                "unknown-token",
            )
        ],
    ),
    (
        {"NCCL_PROTO": "LL129"},
        {},
        [
            (
                "error",
                "NCCL_PROTO",
                "NCCL_PROTO='LL129': unknown token 'LL129'; known: LL, LL128, Simple. NCCL 2.24+ fails communicator creation; older versions ignore it silently",
                "see `ncclprobe knobs NCCL_PROTO` for the accepted names",
                "unknown-token",
            )
        ],
    ),
    (
        {"NCCL_ALGO": "CollNet"},
        {"nccl_version": "2.23.4"},
        [
            (
                "error",
                "NCCL_ALGO",
                "algorithm 'collnet' is an NCCL_ALGO name only before NCCL 2.14: NCCL 2.14-2.23 ignore it silently",
                "name CollNetDirect or CollNetChain (NCCL 2.14+)",
                "algo-too-old",
            )
        ],
    ),
    (
        {"NCCL_ALGO": "CollNet"},
        {},
        [
            (
                "warning",
                "NCCL_ALGO",
                "algorithm 'collnet' is an NCCL_ALGO name only before NCCL 2.14: NCCL 2.14-2.23 ignore it silently, 2.24+ fail communicator creation",
                "name CollNetDirect or CollNetChain (NCCL 2.14+)",
                "algo-too-old",
            )
        ],
    ),
    (
        {"NCCL_ALGO": "allreduce:NVLS;broadcast:^Ring"},
        {"nccl_version": "2.16.5"},
        [
            (
                "error",
                "NCCL_ALGO",
                "NCCL_ALGO='allreduce:NVLS;broadcast:^Ring' uses the per-collective form, which NCCL reads only from 2.24",
                "use a plain comma list, or upgrade NCCL",
                "per-collective-too-old",
            ),
            (
                "error",
                "NCCL_ALGO",
                "algorithm 'nvls' needs NCCL 2.17+; this is 2.16.5",
                "drop it or upgrade NCCL",
                "algo-too-new",
            ),
        ],
    ),
    (
        {"NCCL_BUFFSIZE": "X1"},
        {},
        [
            (
                "error",
                "NCCL_BUFFSIZE",
                "NCCL_BUFFSIZE='X1' is not an integer; NCCL finds no number in it and reads 0",
                "use one of the values `ncclprobe knobs NCCL_BUFFSIZE` lists",
                "invalid-value",
            )
        ],
    ),
    (
        {"NCCL_PROTO": "LL", "NCCL_PROTOCOL": "LL"},
        {},
        [
            (
                "warning",
                "NCCL_PROTOCOL",
                "NCCL_PROTOCOL is not a variable NCCL reads; it is ignored",
                "did you mean NCCL_PROTO?",
                "unknown-variable",
            )
        ],
    ),
    ({"NCCL_DEBUG_SUBSYS": "INIT,ENV", "NCCL_DEBUG": "trace"}, {}, []),
    (
        {"NCCL_DEBUG_SUBSYS": "INIT,ENV", "NCCL_DEBUG": "WARN"},
        {},
        [
            (
                "info",
                "NCCL_DEBUG_SUBSYS",
                "NCCL_DEBUG_SUBSYS only filters INFO lines, and NCCL_DEBUG is WARN",
                "export NCCL_DEBUG=INFO",
                "debug-subsys-without-info",
            )
        ],
    ),
    (
        {"NCCL_LAUNCH_MODE": "GROUP"},
        {"nccl_version": "2.12.12"},
        [
            (
                "info",
                "NCCL_LAUNCH_MODE",
                "NCCL_LAUNCH_MODE=GROUP is deprecated since NCCL 2.9",
                "unset it",
                "deprecated",
            )
        ],
    ),
    (
        {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "ENV,ALLOC_HOST"},
        {"nccl_version": "2.30.6"},
        [
            (
                "info",
                "NCCL_DEBUG_SUBSYS",
                "NCCL_DEBUG_SUBSYS names ALLOC_HOST, which NCCL knows from 2.30.7; 2.30.6 ignores the name",
                "drop ALLOC_HOST",
                "debug-subsys-too-new",
            )
        ],
    ),
    (
        {"NCCL_ALGO": "^NVLS"},
        {"nccl_version": "2.16.5"},
        [
            (
                "error",
                "NCCL_ALGO",
                "algorithm 'nvls' needs NCCL 2.17+; this is 2.16.5",
                "drop it or upgrade NCCL",
                "algo-too-new",
            )
        ],
    ),
]


@pytest.mark.parametrize("env, kwargs, expected", LINT)
def test_every_lint_finding_word_for_word(env, kwargs, expected):
    found = [(f.severity, f.variable, f.message, f.fix, f.code) for f in lint_env(env, **kwargs)]
    assert found == expected


def _net(net, caps=(90,)):
    return NodeFacts(links=ONE_GPU, compute_capabilities=caps, over_network=True, net_path=net)


LL128 = [
    (
        None,
        (2, 28, 9),
        None,
        "nothing shows that NCCL would keep LL128 on here (the GPUs' links are not known)",
    ),
    (
        NodeFacts(links=NVLINK_ALL, compute_capabilities=(80, 80), nvlink_direct=True),
        (2, 8, 2),
        None,
        "nothing shows that NCCL would keep LL128 on here (NCCL's rule was not read for versions "
        "before 2.8.3)",
    ),
    (
        NodeFacts(links=NVLINK_ALL, compute_capabilities=(90, 90)),
        (2, 28, 9),
        None,
        "NCCL keeps LL128 on here itself (every hop NVLink, sm90 GPUs)",
    ),
    (
        NodeFacts(links=NVLINK_ALL, compute_capabilities=(80, 80), nvlink_direct=False),
        (2, 17, 1),
        None,
        "nothing shows that NCCL would keep LL128 on here (before 2.18.3 NCCL wants every hop direct "
        "NVLink (NVL), and some GPU pairs are NVLink only through another GPU (NVB): it depends on "
        "the ring NCCL's search picks)",
    ),
    (
        NodeFacts(links=NVLINK_ALL, compute_capabilities=(80, 80)),
        (2, 17, 1),
        None,
        "nothing shows that NCCL would keep LL128 on here (before 2.18.3 NCCL wants every hop direct "
        "NVLink (NVL), and whether some GPU pairs are NVLink only through another GPU (NVB) is not "
        "known from this evidence)",
    ),
    (
        NodeFacts(links=NVLINK_RING, compute_capabilities=(70,) * 8),
        (2, 28, 9),
        None,
        "nothing shows that NCCL would keep LL128 on here (an NVLink-only ring through every GPU "
        "exists but some pairs are PCIe: it depends on the ring NCCL's search picks (its GRAPH "
        "`Pattern ... type` lines))",
    ),
    (
        NodeFacts(links=NVLINK_PARTIAL, compute_capabilities=(86,) * 4),
        (2, 28, 9),
        None,
        "NCCL keeps LL128 off here (NVLink does not join every GPU into one ring, so some hop is PCIe)",
    ),
    (
        NodeFacts(links=NO_NVLINK, compute_capabilities=(89, 89)),
        (2, 28, 9),
        None,
        "NCCL keeps LL128 off here (no NVLink between the GPUs: every hop is PCIe)",
    ),
    (
        NodeFacts(compute_capabilities=(89, 89)),
        (2, 28, 9),
        None,
        "nothing shows that NCCL would keep LL128 on here (the GPUs' links are not known)",
    ),
    (
        _net(None),
        (2, 28, 9),
        None,
        "nothing shows that NCCL would keep LL128 on here (the ranks meet over the network, and the "
        "path type of that hop (the second of NCCL's GRAPH `type <intra>/<inter>`) is not known from "
        "this evidence)",
    ),
    (
        _net("PXB"),
        (2, 28, 9),
        None,
        "NCCL keeps LL128 on here itself (the network hop is PXB (within PXB), sm90 GPUs)",
    ),
    (
        _net("PXN"),
        (2, 28, 9),
        None,
        "NCCL keeps LL128 on here itself (the network hop is PXN (within PXN on sm90+), sm90 GPUs)",
    ),
    (
        _net("PXN"),
        (2, 28, 9),
        "0",
        "NCCL keeps LL128 off here (the network hop is PXN, beyond what NCCL 2.28.9 allows LL128 over)",
    ),
    (
        _net("PXN"),
        (2, 28, 9),
        "x",
        "nothing shows that NCCL would keep LL128 on here (NCCL_LL128_C2C='x' is not an integer, so "
        "NCCL's limit is not known)",
    ),
    (
        _net("PXN", caps=(80,)),
        (2, 28, 9),
        None,
        "NCCL keeps LL128 off here (the network hop is PXN, which NCCL allows only on sm90 and newer)",
    ),
    (
        _net("PXN", caps=None),
        (2, 28, 9),
        None,
        "nothing shows that NCCL would keep LL128 on here (the network hop is PXN, which NCCL allows "
        "LL128 over only on sm90 and newer, and the GPUs' compute capability is not known)",
    ),
    (
        _net("PHB"),
        None,
        None,
        "NCCL keeps LL128 off here (the network hop is PHB, beyond what NCCL 2.30.7 allows LL128 over)",
    ),
    (
        _net("PXN"),
        None,
        "0",
        "nothing shows that NCCL would keep LL128 on here (the NCCL version is not known, and NCCL's "
        "rule differs between versions here (current versions: NCCL keeps LL128 off here (the network "
        "hop is PXN, beyond what NCCL 2.30.7 allows LL128 over)))",
    ),
    (
        NodeFacts(links=NVLINK_ALL),
        (2, 28, 9),
        None,
        "nothing shows that NCCL would keep LL128 on here (the GPUs' compute capability is not known "
        "(NCCL enables LL128 only on some))",
    ),
    (
        NodeFacts(links=NVLINK_ALL, compute_capabilities=(60, 60)),
        (2, 28, 9),
        None,
        "NCCL keeps LL128 off here (sm60 is older than Volta (sm70))",
    ),
    (
        NodeFacts(links=NVLINK_ALL, compute_capabilities=(80, 90)),
        (2, 28, 9),
        None,
        "NCCL keeps LL128 off here (the GPUs differ (sm80 and sm90))",
    ),
    (
        NodeFacts(links=NVLINK_ALL, compute_capabilities=(86, 86)),
        (2, 24, 3),
        None,
        "NCCL keeps LL128 off here (NCCL 2.24.3 enables LL128 by default only on sm70/sm80/sm90, not "
        "sm86)",
    ),
    (
        NodeFacts(links=NVLINK_ALL, compute_capabilities=(86, 86)),
        None,
        None,
        "nothing shows that NCCL would keep LL128 on here (the NCCL version is not known, and NCCL's "
        "rule differs between versions here (current versions: NCCL keeps LL128 on here itself "
        "(every hop NVLink, sm86 GPUs)))",
    ),
    (
        NodeFacts(links=ONE_GPU, compute_capabilities=(90,)),
        (2, 28, 9),
        None,
        "NCCL keeps LL128 on here itself (sm90 GPUs)",
    ),
]


@pytest.mark.parametrize("node, version, c2c, summary", LL128)
def test_every_ll128_verdict_word_for_word(node, version, c2c, summary):
    assert ll128_default(node, version, ll128_c2c=c2c).summary == summary


def test_explain_gives_every_field_of_a_row():
    assert set(explain("NCCL_P2P_LEVEL")) == {
        "name",
        "summary",
        "read",
        "read_when",
        "kind",
        "values",
        "case_sensitive",
        "default",
        "syntax",
        "since",
        "version_notes",
        "risks",
        "log_proof",
        "source",
        "checked_at",
        "verified",
        "unverified",
        "undocumented_levels",
        "level_since",
        "legacy_integers",
    }
    row = explain("NCCL_NTHREADS")
    assert (row["name"], row["kind"], row["values"], row["default"]) == (
        "NCCL_NTHREADS",
        "int",
        [],
        "256 or 512 by link speed",
    )
    assert row["version_notes"] and row["syntax"] and row["log_proof"] and row["checked_at"]
    assert explain("NCCL_PROTO")["risks"] and explain("NCCL_PROTO")["verified"]
    assert explain("NCCL_P2P_LEVEL")["unverified"]
    with pytest.raises(UsageProblem) as unknown:
        explain("NCCL_BOGUS")
    assert str(unknown.value).startswith(
        "'NCCL_BOGUS' is not in the knowledge table; known: NCCL_ALGO, NCCL_BUFFSIZE, "
    )


def test_explain_says_when_nccl_reads_a_variable():
    assert explain("NCCL_PROTO")["read_when"] == (
        "at every communicator creation: a new communicator in the same process sees a new value"
    )
    assert explain("NCCL_LAUNCH_MODE")["read_when"] == (
        "at every communicator creation: a new communicator in the same process sees a new value, "
        "but NCCL logs the read only the first time"
    )
    assert explain("NCCL_BUFFSIZE")["read_when"] == (
        "once per process and cached: another value needs a new process (NCCL 2.29.7+: "
        "NCCL_NO_CACHE can make it re-read at every use)"
    )
    assert explain("NCCL_BUFFSIZE")["since"] is None
    assert explain("NCCL_TUNER_CONFIG_FILE")["since"] == "2.27.5"


def test_effective_scope_reads_the_no_cache_list_as_nccl_does():
    assert effective_scope("NCCL_PROTO", {}, (2, 30, 7)) is Scope.COMMUNICATOR
    assert effective_scope("NCCL_BUFFSIZE", {}, (2, 30, 7)) is Scope.PROCESS
    both = {"NCCL_NO_CACHE": "NCCL_SHM_DISABLE,NCCL_BUFFSIZE"}
    assert effective_scope("NCCL_BUFFSIZE", both, (2, 30, 7)) is Scope.COMMUNICATOR


def test_node_facts_round_trip_through_json_and_reject_wrong_types():
    node = NodeFacts(
        links=NVLINK_ALL,
        compute_capabilities=(90, 90),
        over_network=True,
        net_path="PXN",
        nvlink_direct=True,
    )
    assert node.to_json() == {
        "links": "nvlink-all",
        "nvlink": True,
        "over_network": True,
        "compute_capabilities": [90, 90],
        "net_path": "PXN",
        "nvlink_direct": True,
    }
    assert NodeFacts.from_json(node.to_json()) == node
    assert NodeFacts.from_json({"links": "bogus"}).links is None
    assert NodeFacts.from_json({"nvlink": False}).links == NO_NVLINK
    odd = NodeFacts.from_json({"net_path": 5, "nvlink_direct": "yes"})
    assert odd.net_path is None and odd.nvlink_direct is None
    assert NodeFacts.from_json(None) == NodeFacts()
    assert NodeFacts.from_json({}, over_network=True).over_network is True
    assert NodeFacts.from_json({"over_network": True}).over_network is True
    assert NodeFacts.from_json({}).over_network is False


def test_node_facts_from_path_types_record_direct_nvlink():
    direct = [["LOC", "NVL", "NVL"], ["NVL", "LOC", "NVL"], ["NVL", "NVL", "LOC"]]
    via_gpu = [["LOC", "NVL", "NVB"], ["NVL", "LOC", "NVL"], ["NVB", "NVL", "LOC"]]
    assert NodeFacts.from_path_types(direct).nvlink_direct is True
    assert NodeFacts.from_path_types(via_gpu).nvlink_direct is False
    assert NodeFacts.from_path_types(via_gpu, gpus=[0, 1]).nvlink_direct is True
    assert NodeFacts.from_path_types(via_gpu, gpus=[1, 2]).nvlink_direct is True
    assert NodeFacts.from_path_types(via_gpu, gpus=[0]).nvlink_direct is None  # no pair
    unknown = [["LOC", None], [None, "LOC"]]
    assert NodeFacts.from_path_types(unknown).nvlink_direct is None
    chosen = NodeFacts.from_path_types(via_gpu, gpus=[2, 0], compute_capabilities=[80, 86, 90])
    assert chosen.compute_capabilities == (90, 80) and chosen.over_network is False
    assert NodeFacts.from_path_types(direct, over_network=True).over_network is True


def test_merged_node_facts_keep_what_every_file_agrees_on():
    a = NodeFacts(links=NVLINK_ALL, compute_capabilities=(90,), net_path="PXB", nvlink_direct=True)
    b = NodeFacts(links=NVLINK_RING, compute_capabilities=(90,), net_path="PXB", nvlink_direct=True)
    merged = NodeFacts.merge([a, b])
    assert merged.links == NVLINK_RING and merged.compute_capabilities == (90,)
    assert merged.net_path == "PXB" and merged.nvlink_direct is True
    assert merged.over_network is False
    other = NodeFacts.merge([a, NodeFacts(links=NVLINK_ALL, net_path="PXN", over_network=True)])
    assert other.net_path is None and other.compute_capabilities is None
    assert other.over_network is True and other.nvlink_direct is None
    assert NodeFacts.merge([a, NodeFacts(nvlink_direct=False)]).nvlink_direct is False
    assert NodeFacts.merge([a, NodeFacts(links=NO_NVLINK)]).links == NO_NVLINK
    assert NodeFacts.merge([a, NodeFacts()]).links is None
    assert NodeFacts.merge([]) == NodeFacts()


def test_rings_of_nvlink_hops():
    """Four GPUs with NVLink on some pairs only: a ring through all of them, in any order the GPUs
    are listed, is NVLINK_RING; a path without the hop back is NVLINK_PARTIAL."""

    def linked(n, nvlinks):  # PCIe everywhere but the NVLink pairs
        types = [["X" if i == j else "PHB" for j in range(n)] for i in range(n)]
        for i, j in nvlinks:
            types[i][j] = types[j][i] = "NVL"
        return types

    square = linked(4, [(0, 1), (1, 2), (2, 3), (3, 0)])  # the ring 0-1-2-3-0, no diagonals
    assert classify_links(square, [0, 1, 2, 3]) == NVLINK_RING
    assert classify_links(square, [1, 0, 2, 3]) == NVLINK_RING  # listed out of ring order
    path = linked(4, [(0, 1), (1, 2), (2, 3)])  # 0-1-2-3 but no hop back from 3 to 0
    assert classify_links(path, [0, 1, 2, 3]) == NVLINK_PARTIAL
    assert classify_links(path, [1, 0, 2, 3]) == NVLINK_PARTIAL
    bridged = linked(4, [(0, 1), (1, 2), (2, 3)])
    bridged[3][0] = bridged[0][3] = "NVB"  # an NVLink hop through a bridge GPU closes the ring
    assert classify_links(bridged, [0, 1, 2, 3]) == NVLINK_RING


def test_the_ring_search_is_attempted_up_to_sixteen_gpus():
    def ring(n):  # an NVLink ring, every other pair PCIe
        types = [["LOC" if i == j else "PHB" for j in range(n)] for i in range(n)]
        for i in range(n):
            types[i][(i + 1) % n] = types[(i + 1) % n][i] = "NVL"
        return types

    assert classify_links(ring(16), list(range(16))) == NVLINK_RING
    assert classify_links(ring(17), list(range(17))) is None


@pytest.mark.parametrize(
    "text, number",
    [
        ("42", 42),
        ("+42", 42),
        ("-42", -42),
        ("0x2a", 42),
        ("-0x10", -16),
        ("052", 42),
        ("0", 0),
        ("-052", -42),
        ("0X2A", 42),
    ],
)
def test_integers_as_nccl_param_reads_them(text, number):
    assert parse_integer(text) == number


@pytest.mark.parametrize(
    "text", ["", "+", "-", "4M", "08", "0x", "++5", "--5", "4 ", "\u0663", "1.5"]
)
def test_what_is_not_an_integer(text):
    assert parse_integer(text) is None


def test_per_collective_clauses_govern_their_collective():
    value = "^LL128;allreduce:LL128"
    allreduce, broadcast = token_list_for(value, "allreduce"), token_list_for(value, "broadcast")
    assert (allreduce.exclude, allreduce.names) == (False, frozenset({"ll128"}))
    assert (broadcast.exclude, broadcast.names) == (True, frozenset({"ll128"}))
    assert token_list_for("allreduce:LL", "broadcast") is None
    assert token_list_for("LL", "allreduce").names == frozenset({"ll"})
    assert token_list_for("allreduce:;LL", "broadcast").names == frozenset({"ll"})  # empty clause
    assert token_list_for("^XLL", "allreduce").names == frozenset({"xll"})


def test_debug_subsystems_a_value_turns_on():
    from ncclprobe.nccl.knobs_tooling import DEBUG_SUBSYSTEMS
    from ncclprobe.nccl.values import subsystems_enabled

    every = set(DEBUG_SUBSYSTEMS) - {"ALL"}
    assert subsystems_enabled("^ENV") == every - {"ENV"}
    assert subsystems_enabled("ALL") == every and subsystems_enabled("init, env") == {"INIT", "ENV"}


@pytest.mark.parametrize(
    "value, message",
    [
        (
            "allreduce:broadcast:LL",
            "NCCL_PROTO='allreduce:broadcast:LL': unknown token 'broadcast:LL'; known: LL, LL128, Simple",
        ),
        (
            " allreduce:LL",
            "NCCL_PROTO=' allreduce:LL': unknown collective ' allreduce' (NCCL compares each token whole: no spaces around names)",
        ),
        ("bogus:LL", "NCCL_PROTO='bogus:LL': unknown collective 'bogus'"),
        (
            "LL, Simple",
            "NCCL_PROTO='LL, Simple': unknown token ' Simple' (NCCL compares each token whole: no spaces around names)",
        ),
        ("Bogus", "NCCL_PROTO='Bogus': unknown token 'Bogus'; known: LL, LL128, Simple"),
        ("XLL", "NCCL_PROTO='XLL': unknown token 'XLL'; known: LL, LL128, Simple"),
    ],
)
def test_token_lists_nccl_refuses_word_for_word(value, message):
    with pytest.raises(UsageProblem) as refused:
        validate_value("NCCL_PROTO", value)
    assert str(refused.value) == message


def test_values_checked_against_their_row():
    assert validate_value("NCCL_DEBUG", "info") == "info"  # any case
    with pytest.raises(UsageProblem, match="did you mean SYS"):
        validate_value("NCCL_P2P_LEVEL", "sys")
    with pytest.raises(UsageProblem) as refused:
        validate_value("NCCL_P2P_LEVEL", "bogus")
    assert str(refused.value) == (
        "NCCL_P2P_LEVEL='bogus' is not a P2P level; use one of LOC, NVL, PIX, PXB, PHB, SYS"
    )
    with pytest.raises(UsageProblem) as refused:
        validate_value("NCCL_NVLS_ENABLE", "3")
    assert str(refused.value) == "NCCL_NVLS_ENABLE='3' is not valid; use one of 0, 1, 2"


def test_legacy_levels_are_logged_as_path_names():
    assert level_as_logged("2") == "PXB" and level_as_logged("SYS") == "SYS"


def test_path_type_orders_at_their_boundaries():
    assert "PXN" not in path_types((2, 11, 9)) and "PXN" in path_types((2, 12, 0))
    assert "C2C" not in path_types((2, 25, 9)) and "C2C" in path_types((2, 26, 0))
    assert "P2C" not in path_types((2, 26, 9)) and path_types((2, 27, 0)).index("P2C") == 7
    assert path_types((2, 27, 5)).index("P2C") == 6 and path_types() == path_types((2, 30, 7))


def _check(settings, node=PCIE, version="2.28.9", **kw):
    return check_job_settings(
        settings, source="--env", node=node, nccl_version=version, nccl_used=True, **kw
    )


def test_the_safety_rule_judges_with_the_node_and_the_version_it_is_given():
    with pytest.raises(UsageProblem, match="--allow-ll128-without-nvlink"):
        _check({"NCCL_PROTO": "LL128"})  # refused unless allowed
    with pytest.raises(UsageProblem, match="per-collective form"):
        _check({"NCCL_PROTO": "allreduce:LL"}, version="2.23.4")
    sm86 = NodeFacts(links=NVLINK_ALL, compute_capabilities=(86, 86))
    assert _check({"NCCL_PROTO": "LL128"}, node=sm86, version="2.28.9") == []
    assert _check({"NCCL_NVLS_ENABLE": "1"}) == [
        "--env: NCCL_NVLS_ENABLE=1 asks for NVLink SHARP, which needs every GPU on one NVSwitch "
        "fabric; this node's GPUs are not all linked by NVLink"
    ]
    assert _check({"NCCL_DEBUG_FILE": "/tmp/x.log", "NCCL_P2P_LEVEL": "2"}) == [
        "--env: NCCL_DEBUG_FILE=/tmp/x.log has no %p: every process on a host opens the same file "
        "for writing and they overwrite each other"
    ]  # warnings only: the legacy level is a note
    allowed = _check({"NCCL_PROTO": "LL128"}, node=None, allow_ll128=True)
    assert allowed == [
        "--env: NCCL_PROTO=LL128 forces LL128 although nothing shows that NCCL would keep LL128 on "
        "here (the GPUs' links are not known) (--allow-ll128-without-nvlink): check the run's "
        "correctness"
    ]  # the lint's own LL128 warning is not repeated


def test_the_recipes_for_running_nccl(tmp_path, monkeypatch):
    assert proof_env() == {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV,TUNING"}
    assert proof_env(tuning=False, also=("GRAPH",))["NCCL_DEBUG_SUBSYS"] == "INIT,ENV,GRAPH"
    assert rank_log_env(tmp_path) == {
        "NCCL_DEBUG_FILE": str(tmp_path / "nccl-rank{rank}.log"),
        LOG_DIR_VAR: str(tmp_path),
    }
    assert rank_log_env(tmp_path, 3)["NCCL_DEBUG_FILE"] == str(tmp_path / "nccl-rank3.log")
    monkeypatch.delenv(LOG_DIR_VAR, raising=False)
    assert own_log(2) is None
    monkeypatch.setenv(LOG_DIR_VAR, str(tmp_path))
    assert own_log(2) == tmp_path / "nccl-rank2.log"
    assert only_shapes_the_log("NCCL_DEBUG") and only_shapes_the_log("NCCL_DEBUG_SUBSYS")
    assert not only_shapes_the_log("NCCL_DEBUGGER")
    assert not only_shapes_the_log("NCCL_PROTO")
    assert share_gpu_env() == {"NCCL_NVLS_ENABLE": "0"}
    assert share_gpu_env(swept=("NCCL_NVLS_ENABLE",)) == {}
    check_share_gpu_ranks(2)
    with pytest.raises(UsageProblem) as refused:
        check_share_gpu_ranks(1)
    assert str(refused.value) == (
        "--share-gpu needs at least 2 ranks (NCCL tunes nothing for one), got 1"
    )
