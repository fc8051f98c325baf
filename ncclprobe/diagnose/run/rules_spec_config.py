"""Speculative-decoding configuration checks, from a server log, the draft checkpoint's config and the
target's (`engine_facts.spec_config` holds the engines' facts and their sources):
- the algorithm the engine runs against what the draft is (an EAGLE-3 draft run as `EAGLE` keeps no
  draft token, silently);
- the draft's vocabulary and auxiliary layers against the target's;
- SGLang's draft tokens with top-k 1 (it runs num_steps + 1 whatever is given);
- acceptance that says the draft does not work at all (1.00 tokens per cycle: not one draft token
  kept), told apart from a draft that works but costs more than it saves (`speculative-slower`,
  `rules_log`). Batch sizes outside the captured graphs are `capture-sizes` (`rules_log`).
"""

from __future__ import annotations

from typing import Any

from ncclprobe.engine_facts import spec_config as F
from ncclprobe.evidence import bundle as E
from ncclprobe.findings import Finding, NotChecked, RuledOut

RULE = "spec-config"


def _spec_logs(ev: E.Evidence) -> list[Any]:
    return [
        run
        for src, run in ev.all_runs()
        if src == "trace" and run.log and run.log.get("speculative")
    ]


def spec_config_findings(ev: E.Evidence) -> list:
    out: list = []
    for run in _spec_logs(ev):
        log = run.log
        cause = _algorithm(ev, run, log)
        out += cause + _topk_draft_tokens(log)
        if not any(isinstance(c, Finding) for c in cause):  # a cause found says the symptom too
            out += _not_working(run, log)
    if ev.draft_config is not None:
        out += _draft_against_target(ev)
    return out


def configuration_cause(ev: E.Evidence, log: dict) -> Finding | None:
    """The error this rule set names for a speculative run's log, if any: the draft run with the
    wrong algorithm, a draft that does not fit its target, or one that keeps no token at all (a
    broken or mismatched draft, not a weak one). Where one is named, low acceptance is its symptom:
    rules that judge acceptance defer to it instead of naming levers for a weak draft."""
    cause = _algorithm(ev, None, log)
    found = cause + _draft_against_target(ev)
    if not any(isinstance(c, Finding) for c in cause):
        found += _not_working(None, log)
    return next((f for f in found if isinstance(f, Finding) and f.severity == "error"), None)


def _algorithm(ev: E.Evidence, run: Any, log: dict) -> list:
    fact = F.ALGORITHMS.get(log.get("engine", ""))
    algorithm = log.get("speculative_algorithm")
    if fact is None or not algorithm:
        return []
    draft_path = log.get("speculative_draft_model_path")
    draft = ev.draft_config
    if draft is not None:
        eagle3, basis, confidence = (
            F.is_eagle3(draft.architectures),
            f"its config ({draft.path}) names {', '.join(draft.architectures)}",
            "high",
        )
    elif F.named_eagle3(draft_path):
        eagle3, basis, confidence = True, f"its name ({draft_path}) says EAGLE-3", "medium"
    else:
        return [
            NotChecked(
                rule=RULE,
                hypothesis="the draft runs with the algorithm it was trained for",
                missing="what the draft is: its config.json (--draft-config"
                + (f" {draft_path}/config.json" if draft_path else " DIR")
                + ")",
            )
        ]
    hyp = f"the draft runs with the algorithm it was trained for ({fact.flag} {algorithm})"
    if not eagle3 or algorithm == fact.eagle3 or algorithm not in fact.without_capture:
        return [
            RuledOut(
                rule=RULE,
                hypothesis=hyp,
                reason=f"the draft is {'an EAGLE-3 draft' if eagle3 else 'no EAGLE-3 draft'} "
                f"({basis}) and the engine runs {algorithm}",
            )
        ]
    accept = log.get("tokens_per_cycle")
    symptom = (
        f" The log agrees: {accept:.2f} tokens per cycle over {log.get('tokens_per_cycle_values')} "
        "decode lines, the target's own token and no draft token."
        if accept is not None and accept <= F.NOT_WORKING
        else (f" The log shows {accept:.2f} tokens per cycle." if accept is not None else "")
    )
    return [
        Finding(
            rule=RULE,
            severity="error",
            confidence=confidence if accept is None or accept > F.NOT_WORKING else "high",
            title=f"an EAGLE-3 draft runs as {algorithm}: the engine does not capture the hidden "
            "states it needs, so no draft token is kept",
            detail=f"The draft is EAGLE-3: {basis}. {fact.engine} runs it with {fact.flag} "
            f"{algorithm}, which captures no auxiliary hidden states: the draft's fc, which joins "
            "three target layers' states, is skipped, its drafts are wrong and every cycle keeps "
            "only the target's own token, without an error or a warning."
            + symptom
            + f" Source: {fact.source}.",
            evidence={
                "engine": fact.engine,
                "algorithm": algorithm,
                "needed": fact.eagle3,
                "draft": draft_path,
                "draft_architectures": list(draft.architectures) if draft else None,
                "tokens_per_cycle": accept,
            },
            next_command=f"# restart the server with {fact.flag} {fact.eagle3} (the same draft "
            "and speculative flags), then capture again",
        )
    ]


def _topk_draft_tokens(log: dict) -> list:
    if log.get("engine") != "sglang":
        return []
    topk, steps = log.get("speculative_eagle_topk"), log.get("speculative_num_steps")
    tokens = log.get("speculative_num_draft_tokens")
    if topk != 1 or steps is None or tokens is None or tokens == steps + 1:
        return []
    return [
        Finding(
            rule=RULE,
            severity="info",
            confidence="high",
            title=f"with --speculative-eagle-topk 1 SGLang verifies {steps + 1} draft tokens, not "
            f"the {tokens} given",
            detail=f"{F.TOPK1_SOURCE}. The verify step (and the graphs captured for it) hold "
            f"{steps + 1} tokens per sequence; a benchmark of {tokens} draft tokens measured that.",
            evidence={"topk": topk, "num_steps": steps, "num_draft_tokens": tokens},
        )
    ]


def _not_working(run: Any, log: dict) -> list:
    accept, lines = log.get("tokens_per_cycle"), log.get("tokens_per_cycle_values") or 0
    if accept is None:
        return []
    hyp = "the draft does not work at all (no draft token ever kept)"
    if accept > F.NOT_WORKING:
        return [
            RuledOut(
                rule=RULE,
                hypothesis=hyp,
                reason=f"{accept:.2f} tokens per cycle: drafts are kept; whether they pay for "
                "themselves is the speculative/baseline comparison",
            )
        ]
    return [
        Finding(
            rule=RULE,
            severity="error",
            confidence="high" if lines >= 3 else "medium",
            title=f"the draft does not work: {accept:.2f} tokens per cycle, no draft token kept "
            f"in {lines} decode line(s)",
            detail="Every cycle keeps only the target's own token: the draft's tokens never match. "
            "That is a draft that is broken or mismatched (run with the wrong algorithm, made for "
            "another target or tokenizer, its vocabulary map missing), not one that is weak: a "
            "weak draft keeps some tokens and costs more than it saves.",
            evidence={"tokens_per_cycle": accept, "lines": lines},
        )
    ]


def _draft_against_target(ev: E.Evidence) -> list:
    draft = ev.draft_config
    if draft is None:
        return []
    target = (ev.config or {}).get("model") or {}
    vocab, layers = target.get("vocab"), target.get("layers")
    out: list = []
    if not vocab and not layers:
        return [
            NotChecked(
                rule=RULE,
                hypothesis="the draft's vocabulary and auxiliary layers fit the target",
                missing="the target's config.json (--model-config)",
            )
        ]
    problems = []
    if vocab and draft.draft_vocab_size and draft.draft_vocab_size > vocab:
        problems.append(
            f"its draft vocabulary ({draft.draft_vocab_size}) is larger than the target's "
            f"vocabulary ({vocab}): it cannot be a subset of it"
        )
    if vocab and draft.vocab_size and draft.vocab_size != vocab:
        problems.append(
            f"its vocab_size ({draft.vocab_size}) is not the target's ({vocab}): its token map "
            "points into another vocabulary"
        )
    if layers and draft.aux_layer_ids and max(draft.aux_layer_ids) >= layers:
        problems.append(
            f"its auxiliary layers {list(draft.aux_layer_ids)} reach past the target's {layers} "
            "layers"
        )
    if problems:
        out.append(
            Finding(
                rule=RULE,
                severity="error",
                confidence="high",
                title=f"the draft does not fit the target: {problems[0]}",
                detail=f"The draft's config ({draft.path}) against the target's: "
                + "; ".join(problems)
                + f". Source: {F.DRAFT_SOURCE}.",
                evidence={
                    "draft_vocab_size": draft.draft_vocab_size,
                    "draft_vocab": draft.vocab_size,
                    "target_vocab": vocab,
                    "aux_layer_ids": list(draft.aux_layer_ids or ()),
                    "target_layers": layers,
                },
            )
        )
    else:
        out.append(
            RuledOut(
                rule=RULE,
                hypothesis="the draft's vocabulary and auxiliary layers fit the target",
                reason=f"draft vocabulary {draft.draft_vocab_size or draft.vocab_size} of the "
                f"target's {vocab}; auxiliary layers {list(draft.aux_layer_ids or ())} of "
                f"{layers}",
            )
        )
    return out


RULES = (spec_config_findings,)
