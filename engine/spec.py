"""`RunSpec`: everything one engine run needs, validated before any worker starts.

The CLI maps its options one to one onto these fields; the spec travels to the workers as JSON.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from ncclprobe.engine.config import PRESETS
from ncclprobe.errors import UsageProblem
from ncclprobe.evidence.run.modes import GraphMode, Label, Mode

GRAPH_MODES = GraphMode.values()
MODES = Mode.values()
DTYPES = ("auto", "float32", "bfloat16", "float16")
COMPILE_MODES = ("default", "max-autotune")  # graphs.COMPILE_MODES maps them onto torch.compile's


CHEAP_REPEATS = (
    3  # CPU presets: a timed run takes about a second, and one run's tokens/s is not a figure
)


def default_repeats(device: str, checkpoint: str | None) -> int:
    """3 timed runs per mode where a run is cheap (a preset on the CPU); 1 on a GPU or for a real
    checkpoint, whose runs can take minutes (ask for --repeats there)."""
    cpu = RunSpec(device=device).resolved_device() == "cpu"
    return CHEAP_REPEATS if cpu and not checkpoint else 1


@dataclass(frozen=True, kw_only=True)
class RunSpec:
    preset: str = "tiny"  # model shape (ignored when `checkpoint` is given)
    checkpoint: str | None = None  # local Hugging Face Llama-family directory or a .gguf file
    prompt_len: int = 16  # tokens per random (seeded) prompt; with `prompts`, the longest
    prompts: tuple[
        tuple[int, ...], ...
    ] = ()  # token ids of given prompts, decoded `batch` at a time
    chat: bool = False  # the prompts were wrapped in the chat template (recorded only)
    # the command-line options that gave the prompts (--chat, --prompt TEXT, --prompts FILE,
    # --prompt-set NAME), recorded so a printed next command repeats them (recorded only)
    prompt_options: tuple[str, ...] = ()
    new_tokens: int = 32  # tokens generated per sequence
    batch: int = 1  # sequences decoded together
    k: int = 3  # drafted tokens per speculative cycle
    temperature: float = 0.0  # 0: greedy
    seed: int = 0  # weights, prompts and sampling
    tp: int = 1  # tensor-parallel ranks (worker processes)
    draft: str | None = None  # trained draft (safetensors from train-draft); None: untrained
    draft_tp: bool = False  # shard the draft like the target (its steps then all-reduce)
    graphs: str = GraphMode.NONE  # none | decode | all (CUDA graphs; GPU only)
    capture_batches: tuple[int, ...] = ()  # batch sizes to capture graphs for; () = just `batch`
    compile: str = ""  # "", default or max-autotune: torch.compile each captured step first
    device: str = "auto"  # auto | cpu | cuda
    dtype: str = "auto"  # auto: bfloat16 on GPU, float32 on CPU
    modes: tuple[str, ...] = MODES
    warmup_tokens: int = 4  # an untimed short run per mode first; 0 to skip
    repeats: int = 1  # timed runs per mode: the record is the median one, with the spread
    single_rank_collectives: bool = False  # with tp=1, still issue (and trace) the all-reduces
    measure_share: bool = True  # time steps without collectives after the run (see share.py)
    label: str = Label.UNTUNED  # untuned | tuned | anything naming the settings
    profile_dir: str | None = None  # write a torch.profiler trace of each rank's measured loop here
    settings: dict = field(default_factory=dict)  # NCCL_* etc. set in every worker's environment
    # set by each worker in its own environment only after its communicator exists: reproduces on
    # purpose the classic mistake of setting NCCL variables too late (NCCL has already read them)
    env_after_init: dict = field(default_factory=dict)

    def __post_init__(self):
        object.__setattr__(self, "modes", tuple(self.modes))
        object.__setattr__(self, "prompts", tuple(tuple(int(i) for i in p) for p in self.prompts))
        object.__setattr__(self, "capture_batches", tuple(self.capture_batches))
        object.__setattr__(self, "prompt_options", tuple(self.prompt_options))
        for name in ("prompt_len", "new_tokens", "batch", "k", "tp", "repeats"):
            if getattr(self, name) < 1:
                raise UsageProblem(
                    f"{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}"
                )
        if self.prompts:
            self._check_prompts()
        if self.prompt_len < 2:
            raise UsageProblem(
                f"prompt-len must be at least 2 (the draft needs one prompt slot), got {self.prompt_len}"
            )
        if self.temperature < 0:
            raise UsageProblem(
                f"temperature must be 0 (greedy) or positive, got {self.temperature}"
            )
        if not self.checkpoint and self.preset not in PRESETS:
            raise UsageProblem(
                f"unknown preset {self.preset!r}; choose one of {', '.join(PRESETS)}"
            )
        for path, what in ((self.checkpoint, "checkpoint"), (self.draft, "draft file")):
            if path and not Path(path).exists():
                raise UsageProblem(f"{what} {path} does not exist")
        if self.graphs not in GRAPH_MODES:
            raise UsageProblem(
                f"graphs must be one of {', '.join(GRAPH_MODES)}, got {self.graphs!r}"
            )
        if any(b < 1 for b in self.capture_batches):
            raise UsageProblem(
                f"capture batch sizes must be at least 1, got {list(self.capture_batches)}"
            )
        if self.capture_batches and self.graphs == GraphMode.NONE:
            raise UsageProblem(
                "--capture-batches lists the batch sizes to capture CUDA graphs for; "
                "it needs --graphs decode or --graphs all"
            )
        if self.compile not in ("",) + COMPILE_MODES:
            raise UsageProblem(
                f"compile must be one of {', '.join(COMPILE_MODES)}, got {self.compile!r}"
            )
        if self.compile and self.graphs == GraphMode.NONE:
            raise UsageProblem(
                "--compile compiles the steps that CUDA graphs capture; it needs --graphs decode "
                "or --graphs all"
            )
        if self.dtype not in DTYPES:
            raise UsageProblem(f"dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if self.device not in ("auto", "cpu", "cuda"):
            raise UsageProblem(f"device must be auto, cpu or cuda, got {self.device!r}")
        unknown = set(self.modes) - set(MODES)
        if unknown or not self.modes:
            raise UsageProblem(
                f"modes must be among {', '.join(MODES)}, got {', '.join(self.modes) or 'none'}"
            )

    def _check_prompts(self) -> None:
        """Given prompts set the run's prompt length (the longest: shorter ones are right-padded,
        generate._last) and must split into batches of `batch` sequences."""
        short = next((i for i, p in enumerate(self.prompts, 1) if len(p) < 2), None)
        if short:
            raise UsageProblem(
                f"prompt {short} has fewer than 2 tokens; the draft needs one prompt slot"
            )
        if len(self.prompts) % self.batch:
            raise UsageProblem(
                f"--batch {self.batch} must divide the number of prompts ({len(self.prompts)}): "
                f"prompts are decoded {self.batch} at a time"
            )
        object.__setattr__(self, "prompt_len", max(len(p) for p in self.prompts))

    def groups(self) -> int:
        """How many batches of `batch` sequences the run decodes one after another."""
        return len(self.prompts) // self.batch if self.prompts else 1

    def sequences(self) -> int:
        return self.batch * self.groups()

    def graph_batches(self) -> tuple[int, ...]:
        """The batch sizes whose graphs are captured (the run's own when no list was given)."""
        return tuple(sorted(set(self.capture_batches))) or (self.batch,)

    def cache_batch(self) -> int:
        """Rows the KV caches need: the run's batch and every captured batch size fit in them."""
        return max(self.batch, *self.graph_batches())

    def resolved_device(self) -> str:
        if self.device != "auto":
            return self.device
        from ncclprobe.provenance import gpu_device_visible

        if not gpu_device_visible():
            return "cpu"  # known without importing torch
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"

    def resolved_dtype(self, device_type: str) -> str:
        if self.dtype != "auto":
            return self.dtype
        return "bfloat16" if device_type == "cuda" else "float32"

    def model_config(self):
        """The target's shape: the preset's, or the checkpoint's (a .gguf converted on first use)."""
        if not self.checkpoint:
            from ncclprobe.engine.config import preset

            return preset(self.preset)
        from ncclprobe.engine.gguf_loader import resolve_checkpoint
        from ncclprobe.engine.hf_loader import read_config

        return read_config(resolve_checkpoint(self.checkpoint))

    def check_limits(self, cfg=None) -> None:
        """Refuse, before any worker starts, a run the model cannot serve: more positions than its
        context (prompt + new tokens + the last cycle's k drafts), or KV caches and prefill scores
        that do not fit this machine's memory (CPU; a GPU's memory is only known inside its workers).
        Each is one line naming the options to change."""
        from ncclprobe.engine.limits import max_positions

        cfg = cfg or self.model_config()
        reach = max_positions(self.prompt_len, self.new_tokens, self.k)
        if cfg.max_positions is not None and reach > cfg.max_positions:
            raise UsageProblem(
                f"prompt {self.prompt_len} + new tokens {self.new_tokens} + 2 x (k {self.k} + 2) = {reach} positions, "
                f"more than {cfg.name} serves ({cfg.max_positions}); lower --prompt-len, --new-tokens or -k"
            )
        if self.resolved_device() == "cpu":
            _check_cpu_memory(self, cfg, reach)

    def check_runnable(self) -> None:
        """Refuse, before starting workers, what this machine or the model cannot run (one-line errors)."""
        from ncclprobe.engine.limits import check_tp_shape

        cfg = self.model_config()
        check_tp_shape(cfg, self.tp)
        self.check_limits(cfg)
        if self.prompts and max(max(p) for p in self.prompts) >= cfg.vocab:
            raise UsageProblem(
                f"a prompt holds token id {max(max(p) for p in self.prompts)}, outside {cfg.name}'s "
                f"vocabulary of {cfg.vocab}"
            )
        self.check_device()

    def check_device(self) -> None:
        """Refuse what this machine's device cannot run (CUDA graphs or --device cuda without a GPU,
        more ranks than GPUs); on a machine without a GPU device node it imports no torch, so the
        CLI calls it before any heavy work."""
        device = self.resolved_device()
        if device == "cpu" and self.graphs != GraphMode.NONE:
            raise UsageProblem(
                f"--graphs {self.graphs} needs a CUDA GPU; on CPU only --graphs none runs "
                f"(refusing rather than silently running eagerly)"
            )
        if device == "cuda":
            from ncclprobe.provenance import gpu_device_visible

            if not gpu_device_visible():
                raise UsageProblem("device cuda was requested but this machine shows no GPU device")
            import torch

            if not torch.cuda.is_available():
                raise UsageProblem("device cuda was requested but torch sees no CUDA GPU")
            if self.tp > torch.cuda.device_count():
                raise UsageProblem(
                    f"--tp {self.tp} needs {self.tp} GPUs (one per rank); "
                    f"this machine has {torch.cuda.device_count()}"
                )

    def warnings(self) -> list[str]:
        """What this run can do but will do badly, said before it starts (the CLI logs each and
        puts it in the trace's `warnings`)."""
        found = []
        if self.draft and Mode.SPECULATIVE in self.modes:
            from ncclprobe.engine.draft import trained_positions

            trained, reach = trained_positions(self.draft), self.prompt_len + self.new_tokens
            if trained is not None and reach > trained:
                found.append(
                    f"draft {self.draft} was trained on positions below {trained}, this run reaches "
                    f"{reach}: expect its acceptance to fall beyond them (train-draft --gen-len)"
                )
            differs = self.draft_mismatch()
            if differs:
                found.append(
                    f"draft {self.draft} was trained for another target: {differs}; a draft serves only "
                    "the weights it learnt, expect acceptance near 1 (train-draft for this target)"
                )
        return found

    def target_identity(self) -> dict:
        from ncclprobe.engine.gguf_loader import resolve_checkpoint
        from ncclprobe.engine.target_identity import target_identity

        return target_identity(
            self.model_config().summary(),
            preset=None if self.checkpoint else self.preset,
            seed=self.seed,
            checkpoint=str(resolve_checkpoint(self.checkpoint)) if self.checkpoint else None,
        )

    def draft_mismatch(self) -> str | None:
        """How the draft's recorded target differs from this run's (None: same, or not recorded)."""
        from ncclprobe.engine.draft import draft_target
        from ncclprobe.engine.target_identity import mismatch

        trained_for = draft_target(self.draft) if self.draft else None
        return mismatch(trained_for, self.target_identity()) if trained_for else None

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: dict) -> RunSpec:
        return cls(**{**doc, "prompts": tuple(tuple(p) for p in doc.get("prompts", ()))})


def _check_cpu_memory(spec: RunSpec, cfg, positions: int) -> None:
    """The big allocations of a run against the memory available now: per rank, the KV caches
    (target, and the draft's one layer) and the prefill's attention scores (float32, T x S per head)."""
    import psutil

    element = 2 if spec.dtype in ("bfloat16", "float16") else 4
    batch = spec.cache_batch()
    kv_heads = max(1, cfg.kv_heads // spec.tp)
    kv = 2 * (cfg.layers + 1) * batch * positions * kv_heads * cfg.head_dim * element
    scores = batch * max(1, cfg.heads // spec.tp) * spec.prompt_len * positions * 4
    weights = (
        element * cfg.vocab * cfg.hidden * 2
        + element * cfg.layers * cfg.hidden * (4 * cfg.hidden + 3 * cfg.intermediate) // spec.tp
    )
    needed = spec.tp * (kv + scores + weights)
    available = psutil.virtual_memory().available
    if needed > available:
        raise UsageProblem(
            f"this run needs about {needed / 2**30:.1f} GiB ({spec.tp} rank(s): KV caches for batch "
            f"{batch} x {positions} positions, prefill scores for {spec.prompt_len} prompt tokens, "
            f"weights); {available / 2**30:.1f} GiB are free here: lower --batch, --prompt-len or "
            "--new-tokens"
        )
