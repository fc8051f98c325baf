"""`ncclprobe.nccl.ll128` against NCCL's LL128 rule as written in src/graph/tuning.cc at every tag
the module was read at (`READ_AT`), and NCCL's path type order (src/graph/topo.cc) at each of them.

The rule's C statements are run as written: the block `if (pEnable == 2 && p == NCCL_PROTO_LL128)`
of each excerpt is parsed (if/else, switch, `pEnable &= ...`) and its conditions evaluated over
every combination of the inputs (the path types of the intra-node and network hops, the compute
capabilities, NCCL_LL128_C2C). Where the evidence leaves an input open, NCCL's answer is known only
if every value of that input gives the same one; ll128.py must then give it, else "not known"."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from functools import cache

import pytest

from ncclprobe.nccl.ll128 import OLDEST, READ_AT, ll128_default
from ncclprobe.nccl.node import (
    NO_NVLINK,
    NVLINK_ALL,
    NVLINK_PARTIAL,
    NVLINK_RING,
    ONE_GPU,
    NodeFacts,
)
from ncclprobe.nccl.p2p import path_types
from tests.nccl_source import load, tag_version

CAPS = [(70, 70), (75, 75), (80, 80), (86, 86), (90, 90), (100, 100), (120, 120), (60, 60)]
CAPS += [(80, 90), (90, 100)]
# the intra-node hop NCCL's ring can take for each way NVLink joins the GPUs (NVB: through a GPU)
INTRA = {
    ("one", ONE_GPU, None): ("LOC",),
    ("direct", NVLINK_ALL, True): ("NVL",),
    ("via-gpu", NVLINK_ALL, False): ("NVL", "NVB"),
    ("unrecorded", NVLINK_ALL, None): ("NVL", "NVB"),
    ("ring", NVLINK_RING, None): ("NVL", "NVB", "PIX"),
    ("partial", NVLINK_PARTIAL, None): ("PIX", "SYS"),
    ("pcie", NO_NVLINK, None): ("PIX", "PXB", "PHB", "SYS"),
}


@cache
def order_at(tag: str) -> tuple[str, ...]:
    names = load(tag, "src/graph/topo.cc").strings(r"topoPathTypeStr\[\] *=")
    return tuple(names[: names.index("SYS") + 1])


def _code(tag: str) -> str:
    """The LL128 block of tuning.cc at `tag`, comments and string literals blanked, on one line."""
    excerpt = load(tag, "src/graph/tuning.cc")
    numbers = sorted(excerpt.lines)
    start = next(
        n for n in numbers if "if (pEnable == 2 && p == NCCL_PROTO_LL128)" in excerpt.lines[n]
    )
    code, depth = "", 0
    for n in numbers[numbers.index(start) :]:
        line = re.sub(r'"([^"\\]|\\.)*"', '""', excerpt.lines[n]).split("//")[0]
        code += " " + line.strip()
        depth += line.count("{") - line.count("}")
        if depth == 0:
            return code.strip()
    raise AssertionError(f"{tag}: the LL128 block does not close")


def _paren(code: str, i: int) -> tuple[str, int]:
    """The text inside the parentheses opening at code[i], and the index after them."""
    assert code[i] == "(", code[i:]
    depth = 0
    for j in range(i, len(code)):
        depth += {"(": 1, ")": -1}.get(code[j], 0)
        if depth == 0:
            return code[i + 1 : j], j + 1
    raise AssertionError(code[i:])


def _statements(code: str) -> list:
    """`code` as a list of statements: ("if", cond, then, else), ("switch", expr, cases),
    ("set", expr) for `pEnable = ...`, ("and", expr) for `pEnable &= ...`; others are skipped."""
    out, i = [], 0
    while i < len(code):
        if code[i] in " ;":
            i += 1
        elif code.startswith("if ", i) or code.startswith("if(", i):
            cond, i = _paren(code, code.index("(", i))
            then, i = _body(code, i)
            other = []
            if code[i:].lstrip().startswith("else"):
                other, i = _body(code, code.index("else", i) + 4)
            out.append(("if", cond, then, other))
        elif code.startswith("switch", i):
            expr, i = _paren(code, code.index("(", i))
            body, i = _braced(code, code.index("{", i))
            cases = re.findall(r"(?:case (\d+)|default): pEnable &= (.*?); break;", body)
            out.append(("switch", expr, [(int(n) if n else None, e) for n, e in cases]))
        elif code[i] == "{":
            body, i = _braced(code, i)
            out.extend(_statements(body))
        else:
            end = code.index(";", i)
            text, i = code[i:end].strip(), end + 1
            if text.startswith("pEnable &="):
                out.append(("and", text.removeprefix("pEnable &=")))
            elif text.startswith("pEnable ="):
                out.append(("set", text.removeprefix("pEnable =")))
    return out


def _braced(code: str, i: int) -> tuple[str, int]:
    depth = 0
    for j in range(i, len(code)):
        depth += {"{": 1, "}": -1}.get(code[j], 0)
        if depth == 0:
            return code[i + 1 : j], j + 1
    raise AssertionError(code[i:])


def _body(code: str, i: int) -> tuple[list, int]:
    while code[i] == " ":
        i += 1
    if code[i] == "{":
        body, i = _braced(code, i)
        return _statements(body), i
    end = code.index(";", i)
    return _statements(code[i : end + 1]), end + 1


def _python(expr: str, order: tuple[str, ...]) -> str:
    expr = expr.replace("graphs[a]->typeInter", "inter").replace("graphs[a]->typeIntra", "intra")
    expr = re.sub(r"PATH_(\w+)", lambda m: str(order.index(m[1])), expr)
    expr = expr.replace("ncclParamLl128C2c()", "c2c").replace("CUDART_VERSION == 11080", "False")
    expr = expr.replace("comm->nRanks", "nRanks").replace("&&", " and ").replace("||", " or ")
    expr = re.sub(r"!(?!=)", " not ", expr)
    expr = re.sub(r"\(([^()?]+)\?([^():]+):([^()]+)\)", r"((\2) if (\1) else (\3))", expr)
    if expr.rstrip().endswith("? 1 : 0"):  # before 2.15.5: pEnable = <condition> ? 1 : 0
        expr = expr.rstrip().removesuffix("? 1 : 0")
    return expr.strip()


def _compiled(statements: list, order: tuple[str, ...]) -> list:
    """The statements with each C expression turned into compiled Python."""

    def code(expr: str):
        return compile(_python(expr, order), "<tuning.cc>", "eval")

    out = []
    for kind, *rest in statements:
        if kind == "if":
            out.append((kind, code(rest[0]), _compiled(rest[1], order), _compiled(rest[2], order)))
        elif kind == "switch":
            out.append((kind, code(rest[0]), [(n, code(e)) for n, e in rest[1]]))
        else:
            out.append((kind, code(rest[0])))
    return out


@cache
def rule(tag: str) -> Callable[..., bool]:
    """NCCL's LL128 decision at `tag` as a function of (intra, inter, low, high, c2c)."""
    order = order_at(tag)
    program = _statements(_code(tag))
    assert program and program[0][0] == "if", program
    body = _compiled(program[0][2], order)

    def run(statements, env) -> None:
        for kind, *rest in statements:
            if kind == "if":
                run(rest[1] if eval(rest[0], {}, env) else rest[2], env)
            elif kind == "switch":
                value = eval(rest[0], {}, env)
                expr = next(e for n, e in rest[1] if n == value or n is None)
                env["pEnable"] = env["pEnable"] and bool(eval(expr, {}, env))
            elif kind == "set":
                env["pEnable"] = bool(eval(rest[0], {}, env))
            else:
                env["pEnable"] = env["pEnable"] and bool(eval(rest[0], {}, env))

    @cache  # a pure function of its inputs: asked 9000 times per tag, 980 of them distinct
    def decide(intra: str, inter: str, low: int, high: int, c2c: int) -> bool:
        env = {
            "intra": order.index(intra),
            "inter": order.index(inter),
            "minCompCap": low,
            "maxCompCap": high,
            "c2c": c2c,
            "nRanks": 8,
            "pEnable": True,
        }
        run(body, env)
        return env["pEnable"]

    return decide


def nccl_says(tag: str, intra: tuple[str, ...], inter: tuple[str, ...], caps, c2c: int):
    """True/False when every open input gives the same answer at `tag`, else None."""
    decide = rule(tag)
    answers = {decide(a, b, low, high, c2c) for a in intra for b in inter for low, high in caps}
    return answers.pop() if len(answers) == 1 else None


def cases(order: tuple[str, ...]):
    """(node, intra hops, network hops, caps, NCCL_LL128_C2C value) over every input."""
    nets = [(False, None, ("PIX",)), (True, None, order)]  # one node: typeInter stays at PIX
    nets += [(True, name, (name,)) for name in order]
    for ((_, links, direct), intra), (over, net, inter), caps, c2c in itertools.product(
        INTRA.items(), nets, [*([c] for c in CAPS), CAPS], (None, "0")
    ):
        node = NodeFacts(
            links=links,
            compute_capabilities=caps[0] if len(caps) == 1 else None,
            over_network=over,
            net_path=net,
            nvlink_direct=direct,
        )
        yield node, intra, inter, caps, c2c


def test_one_node_meets_the_network_check_at_pix():
    """ncclTopoCompute starts typeInter at PATH_PIX and moves it only when there is a network."""
    search = load("v2.28.9-1", "src/graph/search.cc")
    assert search.has(r"int minTypeIntra = PATH_LOC, minTypeInter = PATH_PIX;")
    assert search.has(r"if \(system->inter\) \{") and search.has(
        r"graph->typeInter = minTypeInter;"
    )


@pytest.mark.parametrize("tag", READ_AT)
def test_path_types_are_nccls_order_at(tag):
    assert path_types(tag_version(tag)) == order_at(tag)


@pytest.mark.parametrize("tag", READ_AT)
def test_ll128_default_is_nccls_rule_at(tag):
    version, order = tag_version(tag), order_at(tag)
    wrong = []
    for node, intra, inter, caps, c2c in cases(order):
        expected = nccl_says(tag, intra, inter, caps, 0 if c2c == "0" else 1)
        got = ll128_default(node, version, ll128_c2c=c2c)
        if got.on is not expected or not got.why:
            wrong.append((node, c2c, expected, got))
    assert not wrong, f"{len(wrong)} cases differ, first: {wrong[0]}"


def test_an_unknown_version_is_judged_by_every_release_read():
    """With no version, ll128.py answers only what every tag of READ_AT agrees on."""
    newest = order_at(READ_AT[-1])
    wrong = []
    for node, intra, inter, caps, c2c in cases(newest):
        answers = {
            nccl_says(
                tag,
                intra,
                order_at(tag) if node.over_network and node.net_path is None else inter,
                caps,
                0 if c2c == "0" else 1,
            )
            for tag in READ_AT
            if all(name in order_at(tag) for name in inter)  # NCCL names only its own types
        }
        expected = answers.pop() if len(answers) == 1 else None
        if ll128_default(node, None, ll128_c2c=c2c).on is not expected:
            wrong.append((node, c2c, expected))
    assert not wrong, f"{len(wrong)} cases differ, first: {wrong[0]}"


def test_versions_older_than_the_oldest_rule_read_are_not_known():
    node = NodeFacts(links=NVLINK_ALL, compute_capabilities=(80, 80), nvlink_direct=True)
    assert READ_AT[0] == "v2.8.3-1" and OLDEST == tag_version(READ_AT[0])
    assert ll128_default(node, OLDEST).on is True
    assert ll128_default(node, (2, 8, 2)).on is None
