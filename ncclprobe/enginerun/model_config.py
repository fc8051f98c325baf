"""A model's shape from a Hugging Face `config.json` (`diagnose --model-config FILE`), for the
expected verify/decode ratio when the evidence itself (a profile, a log) carries no shape.

Only the widths and counts are read, under the names `diagnose.expectations` knows; nothing of
the model is loaded.
"""

from __future__ import annotations

import json
from pathlib import Path

from ncclprobe.errors import UsageProblem

_FIELDS = {"hidden": ("hidden_size", "d_model", "n_embd"), "layers": ("num_hidden_layers", "n_layer", "num_layers"),
           "vocab": ("vocab_size",)}


def read_model_config(path: str | Path) -> dict:
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageProblem(f"cannot read model config {str(p)!r}: {getattr(exc, 'strerror', None) or exc}") from None
    except json.JSONDecodeError as exc:
        raise UsageProblem(f"{str(p)!r} is not JSON ({exc.msg} at line {exc.lineno}); expected a config.json") from None
    if isinstance(doc, dict) and isinstance(doc.get("text_config"), dict):
        doc = {**doc, **doc["text_config"]}       # multimodal configs nest the language model's
    if not isinstance(doc, dict):
        raise UsageProblem(f"{str(p)!r} is not a model config (a JSON object with hidden_size, num_hidden_layers)")
    model = {name: next((doc[k] for k in keys if isinstance(doc.get(k), int)), None) for name, keys in _FIELDS.items()}
    if not model["hidden"] or not model["layers"]:
        raise UsageProblem(f"{str(p)!r} has no hidden_size and num_hidden_layers: not a transformer config.json")
    model.update({k: v for k, v in doc.items() if isinstance(v, int) and not isinstance(v, bool)})
    model["moe"] = bool(doc.get("num_experts") or doc.get("n_routed_experts") or doc.get("num_local_experts"))
    if doc.get("num_local_experts") and not doc.get("num_experts"):
        model["num_experts"] = doc["num_local_experts"]
    model["name"] = doc.get("_name_or_path") or p.parent.name
    return model
