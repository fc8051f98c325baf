"""A server under the capture: wait until its OpenAI-compatible API answers, profile it around a
short load the capture sends on loopback, then end it.

The engines' own profilers are driven through their endpoints where they have them, read from their
sources (they cannot run on the CPU machine): `engine_facts.profiler` holds the endpoints, the body
SGLang's start takes and what a vLLM answering 404 there needs (`--profiler-config`, which the
capture cannot add: it runs the command unchanged); the capture sets the variables that turn them on.
Any other server (transformers serve, a user's own FastAPI app) is profiled by the capture's in-job
module between the load's start and its end (`--profile control`, driven by the capture).

The load: `--requests` chat completions, one after another, with `--prompt`, `--max-tokens` and
temperature 0, to `/v1/chat/completions`, the model the server lists first at `/v1/models`. Only
loopback addresses are accepted: the capture never sends traffic off the machine.
"""

from __future__ import annotations

import ipaddress
import json
import statistics
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ncclprobe.capture import hook
from ncclprobe.engine_facts.profiler import ENDPOINTS, VLLM_NO_ROUTE
from ncclprobe.errors import UsageProblem
from ncclprobe.evidence.live import capture_dir as D

READY_POLL_S = 1.0
REQUEST_TIMEOUT_S = 300.0
FLUSH_S = 180.0  # how long the profile may take to be written after the stop (a large trace)

# engine -> what its command line holds; its profile endpoints and body (engine_facts.profiler)
ENGINES: dict[str, dict[str, Any]] = {
    "sglang": {
        "commands": ("sglang.launch_server", "sglang serve", "sglang.srt"),
        **ENDPOINTS["sglang"],
    },
    "vllm": {
        "commands": ("vllm serve", "vllm.entrypoints", "vllm/entrypoints"),
        **ENDPOINTS["vllm"],
    },
}


def engine_of(command: tuple[str, ...]) -> str | None:
    text = " ".join(command)
    for name, engine in ENGINES.items():
        if any(pattern in text for pattern in engine["commands"]):
            return name
    return None


@dataclass(frozen=True)
class ServerRequest:
    url: str
    requests: int
    prompt: str
    max_tokens: int
    timeout_s: float

    @classmethod
    def of(cls, url: str, requests: int, prompt: str, max_tokens: int, timeout_s: float):
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise UsageProblem(f"--server {url!r}: give the server's URL, as http://127.0.0.1:8000")
        if not _loopback(parsed.hostname):
            raise UsageProblem(
                f"--server {url!r}: only a loopback address (127.0.0.1, ::1, localhost): the "
                "capture sends its load to this machine only"
            )
        return cls(url.rstrip("/"), requests, prompt, max_tokens, timeout_s)

    def driver(self, directory: Path, control, command: tuple[str, ...]) -> Driver:
        return Driver(self, directory, control, engine_of(command))


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass
class Driver:
    """The server's life under the capture, one state at a time, advanced by `tick()`."""

    request: ServerRequest
    directory: Path
    control: Any  # session._Control: the in-job profiler's start and stop
    engine: str | None
    state: str = "waiting"  # waiting | loading | flushing | done
    started: float = field(default_factory=time.monotonic)
    model: str | None = None
    latencies: list = field(default_factory=list)
    errors: list = field(default_factory=list)
    profile_calls: list = field(default_factory=list)
    flush_from: float = 0.0
    _thread: threading.Thread | None = None
    _opener: Any = field(
        default_factory=lambda: urllib.request.build_opener(urllib.request.ProxyHandler({}))
    )

    def busy(self) -> bool:
        """Waiting on the server's start or on its profile to be written: not a hang."""
        return self.state in ("waiting", "flushing")

    def progress(self) -> int:
        return len(self.latencies) + len(self.errors)

    def tick(self) -> str | None:
        if self.state == "waiting":
            return self._wait()
        if self.state == "loading" and self._thread is not None and not self._thread.is_alive():
            self._stop_profile()
            self.state, self.flush_from = "flushing", time.monotonic()
        if self.state == "flushing" and self._flushed():
            self.state = "done"
            return "server-done"
        return None

    def _wait(self) -> str | None:
        if time.monotonic() - self.started > self.request.timeout_s:
            self.errors.append(
                f"no answer at {self.request.url}/v1/models in {self.request.timeout_s:g} s"
            )
            return "hang"
        try:
            models = self._call("GET", "/v1/models", timeout=2.0)
        except (OSError, ValueError):
            return None
        data = models.get("data") if isinstance(models, dict) else None
        self.model = str(data[0].get("id")) if data and isinstance(data[0], dict) else None
        self._start_profile()
        self.state = "loading"
        self._thread = threading.Thread(target=self._load, daemon=True)
        self._thread.start()
        return None

    def _start_profile(self) -> None:
        engine = ENGINES.get(self.engine or "")
        if engine is None:
            self.control.profile(True)
            self.profile_calls.append("in-job profiler started")
            return
        body = dict(engine["start_body"]) if engine["start_body"] is not None else None
        if body is not None:
            body["output_dir"] = str(self.directory / D.ENGINE_PROFILES)
        self._profile_call(engine["start"], body)

    def _stop_profile(self) -> None:
        engine = ENGINES.get(self.engine or "")
        if engine is None:
            # torch.profiler stops only in the thread that started it, at the model's next step:
            # one more short request gives the server that step
            self.control.profile(False)
            threading.Thread(target=self._request, args=(1,), daemon=True).start()
            self.profile_calls.append("in-job profiler stopped (at the step of one more request)")
            return
        self._profile_call(engine["stop"], None)

    def _profile_call(self, path: str, body) -> None:
        try:
            self._call("POST", path, body, timeout=REQUEST_TIMEOUT_S)
            self.profile_calls.append(f"POST {path}: ok")
        except (OSError, ValueError) as exc:
            self.profile_calls.append(f"POST {path}: {exc}")
            if self.engine == "vllm" and "HTTP 404" in str(exc):
                self.profile_calls.append(VLLM_NO_ROUTE)

    def _load(self) -> None:
        for _ in range(self.request.requests):
            begun = time.monotonic()
            try:
                self._request(self.request.max_tokens)
                self.latencies.append(time.monotonic() - begun)
            except (OSError, ValueError) as exc:
                self.errors.append(str(exc))

    def _request(self, max_tokens: int) -> None:
        body = {
            "model": self.model,
            "messages": [{"role": "user", "content": self.request.prompt}],
            "max_tokens": max_tokens,
            "temperature": 0.0,
        }
        try:
            self._call("POST", "/v1/chat/completions", body, timeout=REQUEST_TIMEOUT_S)
        except (OSError, ValueError):
            if max_tokens > 1 or self.state == "loading":
                raise

    def _flushed(self) -> bool:
        """The profile is written (the files stopped growing), or FLUSH_S passed: an in-job
        profile of a server writes at its next forward or at its exit, after the capture ends it."""
        if time.monotonic() - self.flush_from > FLUSH_S:
            return True
        if self.engine not in ENGINES:  # the in-job module says when it has written its trace
            return any(
                "profile written" in str(event)
                for record in hook.injob_records(self.directory).values()
                for event in record.get("events") or ()
            )
        folder = D.ENGINE_PROFILES
        files = [
            p for p in (self.directory / folder).rglob("*") if p.is_file() and ".tmp" not in p.name
        ]
        return bool(files) and time.time() - max(p.stat().st_mtime for p in files) > 3.0

    def _call(self, method: str, path: str, body=None, *, timeout: float):
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            self.request.url + path,
            data=data,
            method=method,
            headers={"Content-Type": "application/json"} if data is not None else {},
        )
        try:
            with self._opener.open(request, timeout=timeout) as response:
                text = response.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as exc:
            raise ValueError(f"{method} {path}: HTTP {exc.code}") from None
        try:
            return json.loads(text) if text.strip() else {}
        except ValueError:
            return {}

    def summary(self) -> dict:
        return {
            "engine": self.engine or "other",
            "url": self.request.url,
            "model": self.model,
            "requests": self.request.requests,
            "answered": len(self.latencies),
            "errors": self.errors[:5],
            "median_latency_s": round(statistics.median(self.latencies), 3)
            if self.latencies
            else None,
            "profile": self.profile_calls,
            "source": ENGINES[self.engine]["source"] if self.engine in ENGINES else None,
        }
