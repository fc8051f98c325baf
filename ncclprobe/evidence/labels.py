"""`NCCL_ALGO=Ring,NCCL_IB_HCA=mlx5_0,mlx5_1` on the command line -> settings (import --settings,
recommend --baseline). Values are validated against the knowledge table, so a label NCCL would
reject is refused before it names a run."""

from __future__ import annotations

from ncclprobe.errors import UsageProblem
from ncclprobe.nccl.values import validate_value
from ncclprobe.secrets import refuse_credential


def parse_labels(text: str, flag: str = "--settings") -> dict[str, str]:
    """`NCCL_ALGO=Ring,NCCL_IB_HCA=mlx5_0,mlx5_1` -> settings (a token without `=` continues the
    previous value: NCCL lists use commas); `default` -> none."""
    if text.strip() == "default":
        return {}
    found: dict[str, str] = {}
    last = None
    for token in text.split(","):
        name, sep, value = token.partition("=")
        if sep and name.strip().startswith("NCCL_"):
            last = name.strip()
            found[last] = value.strip()
        elif last is not None and not sep:
            found[last] += "," + token.strip()
        else:
            raise UsageProblem(
                f"{flag} {text!r}: expected NCCL_VAR=value pairs separated by commas, or `default`"
            )
    for name, value in found.items():
        refuse_credential(flag, name, value)
        validate_value(name, value)
    if not found:
        raise UsageProblem(f"{flag} {text!r}: no NCCL_VAR=value given")
    return found
