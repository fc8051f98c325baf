"""How SGLang's and vLLM's own profilers are turned on and driven over HTTP, read in their source
(neither engine runs on the CPU machine): what `ncclprobe capture` sets in a server's environment
(`PROFILER_ENV`) and calls around its load (`ENDPOINTS`).

- SGLang: `POST /start_profile` (GET too) with a `ProfileReqInput` body (output_dir, num_steps,
  activities, with_stack, record_shapes, all optional), `POST /stop_profile`; where a request names
  no output_dir the profiler writes under SGLANG_TORCH_PROFILER_DIR (default /tmp).
- vLLM: `POST /start_profile` and `POST /stop_profile` without a body, routed only with a profiler
  configured. The environment-variable era routes them when VLLM_TORCH_PROFILER_DIR (or
  VLLM_TORCH_CUDA_PROFILE) is set; `ProfilerConfig` (`--profiler-config`) still reads the variables
  (the directory made absolute; RECORD_SHAPES and WITH_STACK on when "1") with a warning that they
  go in v0.14.0 or v1.0.0. A vLLM without them answers 404 at /start_profile: its profiler is
  turned on by `--profiler-config` on its command line, which the capture does not change
  (`VLLM_NO_ROUTE`).
"""

from __future__ import annotations

from typing import Any

from ncclprobe.engine_facts.fact_row import EngineFact

SGLANG_SERVER = "sgl-project/sglang python/sglang/srt/entrypoints/http_server.py"
SGLANG_SERVER_AT = "0025436eab0556737d615b36a4dd3e1e26e82f3d"
SGLANG_ENVIRON = "sgl-project/sglang python/sglang/srt/environ.py"
SGLANG_ENVIRON_AT = "0003215cf1464f44b389cd0b18d0b4c56f2a3da6"
VLLM_ROUTER = "vllm-project/vllm vllm/entrypoints/serve/profile/api_router.py"
VLLM_ROUTER_AT = "063e5a89d54d5e17ded57593252c998889f9eb40"
VLLM_CONFIG = "vllm-project/vllm vllm/config/profiler.py"
VLLM_CONFIG_AT = "3898bcff5f20d9f7c48ae28b21c8172f9c252660"

# what the capture sets in a job's environment ("{dir}": the capture's engine-profiles directory,
# absolute, as vLLM wants it)
PROFILER_ENV = {
    "SGLANG_TORCH_PROFILER_DIR": "{dir}",
    "VLLM_TORCH_PROFILER_DIR": "{dir}",
    "VLLM_TORCH_PROFILER_RECORD_SHAPES": "1",
    "VLLM_TORCH_PROFILER_WITH_STACK": "1",
}

# engine -> its profile endpoints and the body its start takes (None: no body)
ENDPOINTS: dict[str, dict[str, Any]] = {
    "sglang": {
        "start": "/start_profile",
        "stop": "/stop_profile",
        "start_body": {"activities": ["CPU", "GPU"], "with_stack": True, "record_shapes": True},
        "source": f"{SGLANG_SERVER} @ {SGLANG_SERVER_AT[:12]} (start_profile_async, "
        "stop_profile_async)",
    },
    "vllm": {
        "start": "/start_profile",
        "stop": "/stop_profile",
        "start_body": None,
        "source": f"{VLLM_ROUTER} @ {VLLM_ROUTER_AT[:12]} (routes attached only with a profiler "
        f"configured); {VLLM_CONFIG} @ {VLLM_CONFIG_AT[:12]}",
    },
}

VLLM_NO_ROUTE = (
    "this vLLM routes no /start_profile: its profiler is configured by --profiler-config, the "
    "VLLM_TORCH_PROFILER_* variables being deprecated (to go in v0.14.0 or v1.0.0, "
    "vllm/config/profiler.py); run it with --profiler-config "
    '\'{"profiler": "torch", "torch_profiler_dir": "DIR", "torch_profiler_with_stack": true}\''
)

FACTS = (
    EngineFact(
        name="sglang.profile.endpoints",
        engine="sglang",
        summary="POST (or GET) /start_profile takes a ProfileReqInput (output_dir, start_step, "
        "num_steps, activities, with_stack, record_shapes); /stop_profile stops it",
        source=SGLANG_SERVER,
        read_at=SGLANG_SERVER_AT,
        excerpt="sglang_http_server.py.txt",
        lines=(
            '@app.api_route("/start_profile", methods=["GET", "POST"])',
            '@app.api_route("/stop_profile", methods=["GET", "POST"])',
            "output_dir=obj.output_dir,",
            "with_stack=obj.with_stack,",
            "record_shapes=obj.record_shapes,",
        ),
    ),
    EngineFact(
        name="sglang.profile.dir",
        engine="sglang",
        summary="SGLANG_TORCH_PROFILER_DIR is where the profiler writes when a request names no "
        "directory (default /tmp); stacks and shapes are recorded by default",
        source=SGLANG_ENVIRON,
        read_at=SGLANG_ENVIRON_AT,
        excerpt="sglang_environ.py.txt",
        lines=(
            'SGLANG_TORCH_PROFILER_DIR = EnvStr("/tmp")',
            "SGLANG_PROFILE_WITH_STACK = EnvBool(True)",
            "SGLANG_PROFILE_RECORD_SHAPES = EnvBool(True)",
        ),
    ),
    EngineFact(
        name="vllm.profile.endpoints",
        engine="vllm",
        summary="POST /start_profile and /stop_profile, without a body, routed only when "
        "VLLM_TORCH_PROFILER_DIR or VLLM_TORCH_CUDA_PROFILE is set",
        source=VLLM_ROUTER,
        read_at=VLLM_ROUTER_AT,
        excerpt="vllm_profile_api_router.py.txt",
        lines=(
            '@router.post("/start_profile")',
            '@router.post("/stop_profile")',
            "if envs.VLLM_TORCH_PROFILER_DIR or envs.VLLM_TORCH_CUDA_PROFILE:",
        ),
    ),
    EngineFact(
        name="vllm.profile.config",
        engine="vllm",
        summary="ProfilerConfig reads VLLM_TORCH_PROFILER_DIR (made absolute; it turns the torch "
        'profiler on), RECORD_SHAPES and WITH_STACK ("1" is on), with a warning that the '
        "variables go in v0.14.0 or v1.0.0 (--profiler-config instead)",
        source=VLLM_CONFIG,
        read_at=VLLM_CONFIG_AT,
        excerpt="vllm_profiler_config.py.txt",
        lines=(
            '"torch_profiler_dir", "VLLM_TORCH_PROFILER_DIR", to_bool=False',
            'self.profiler = "torch"',
            '"VLLM_TORCH_PROFILER_RECORD_SHAPES",',
            '"VLLM_TORCH_PROFILER_WITH_STACK",',
            'value = value == "1"',
            '"v0.14.0 or v1.0.0, whichever is soonest. Please use "',
            "self.torch_profiler_dir = os.path.abspath(os.path.expanduser(profiler_dir))",
        ),
    ),
)
