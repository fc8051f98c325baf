"""ncclprobe's own environment variables have one home, `ncclprobe.envvars`: every NCCLPROBE_ name the
code or the docs mention is registered there, nothing else reads one or keeps its name as a constant,
and README's table is the registry's."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from ncclprobe import envvars

ROOT = Path(__file__).resolve().parent.parent
NAME = re.compile(r"NCCLPROBE_[A-Z0-9_]+")
SOURCES = [
    path
    for folder in ("ncclprobe", "engine", "probes", "examples")
    for path in sorted((ROOT / folder).rglob("*.py"))
]
HOME = ROOT / "ncclprobe" / "envvars.py"


def _mentions(text: str) -> set[str]:
    return {name for name in NAME.findall(text) if not name.endswith("_")}


def test_every_name_the_code_or_docs_mention_is_registered():
    texts = [p.read_text(encoding="utf-8") for p in SOURCES]
    texts += [(ROOT / doc).read_text(encoding="utf-8") for doc in ("README.md", "docs/DESIGN.md")]
    unknown = sorted(set().union(*map(_mentions, texts)) - set(envvars.BY_NAME))
    assert unknown == [], f"add these to ncclprobe/envvars.py: {unknown}"


def _reads(tree: ast.AST) -> list[str]:
    """NCCLPROBE_ names read directly (environ.get/pop/setdefault, getenv, environ[...]) or kept as
    a module constant: what must go through the registry instead."""
    found = []
    for node in ast.walk(tree):
        literal = None
        if isinstance(node, ast.Call) and node.args:
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("get", "getenv", "pop", "setdefault"):
                literal = node.args[0]
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            literal = node.slice
        elif isinstance(node, ast.Assign):
            literal = node.value
        if isinstance(literal, ast.Constant) and isinstance(literal.value, str):
            if NAME.fullmatch(literal.value):
                found.append(f"line {node.lineno}: {literal.value}")
    return found


def test_no_variable_is_read_outside_the_registry():
    found = {
        str(path.relative_to(ROOT)): reads
        for path in SOURCES
        if path != HOME and (reads := _reads(ast.parse(path.read_text(encoding="utf-8"))))
    }
    assert found == {}, f"read these through ncclprobe.envvars.get: {found}"


def test_a_planted_direct_read_is_found():
    """The check above on its twin: each way of reading a variable directly is caught."""
    planted = (
        'import os\nA = "NCCLPROBE_GPU"\nos.environ.get("NCCLPROBE_GPU")\n'
        'os.getenv("NCCLPROBE_GPU")\nos.environ["NCCLPROBE_GPU"]\nenv = {"NCCLPROBE_GPU": "0"}\n'
    )
    assert [r.split(": ")[0] for r in _reads(ast.parse(planted))] == [
        "line 2",
        "line 3",
        "line 4",
        "line 5",
    ]


def test_get_knows_only_registered_names_and_keeps_os_environ_semantics():
    env = {envvars.GPU: "1"}
    assert envvars.get(envvars.GPU, env) == "1"
    assert envvars.get(envvars.BACKEND, env) is None
    assert envvars.get(envvars.BACKEND, env, default="gloo") == "gloo"
    with pytest.raises(KeyError, match=envvars.ENTRY):
        envvars.get(envvars.ENTRY, env, required=True)
    with pytest.raises(KeyError, match="not one of ncclprobe's variables"):
        envvars.get("NCCLPROBE_NOT_A_VARIABLE", env)


def test_readme_table_is_the_registry():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    begin = "<!-- envvars:begin (python -m ncclprobe.envvars) -->"
    block = text[text.index(begin) + len(begin) : text.index("<!-- envvars:end -->")].strip()
    assert block == envvars.table(), "README.md is stale: paste python -m ncclprobe.envvars"
