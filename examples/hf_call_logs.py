"""Ground truth from inside transformers' generate(): every forward call of a model (ForwardLog) and
the drafts each verify accepted (AcceptLog), recorded in the process that is profiled.

Why hooks and a wrapper: eager calls run the module's forward hooks; under the static cache the
decode runs through transformers' compiled call (`get_compiled_call`), where Dynamo traces the
hooks into the graph and the GPU replays it without running Python, so the compiled callable is
wrapped instead and the hooks skip themselves while compiling (`torch.compiler.is_compiling()`;
checked on CPU with `fullgraph=True`: no graph break, each decode logged once, as "compiled call").
"""

from __future__ import annotations

import time


class ForwardLog:
    """Every forward call of one model during one run: input length, cache length before (dynamic
    caches only: reading a static cache's length would launch a kernel), host start/end and how it
    ran. Hooks for eager calls; `wrap_compiled` for transformers' compiled call."""

    def __init__(self, model, role: str):
        import torch

        self.role, self.calls, self._open, self.recording = role, [], [], False
        self._is_compiling = torch.compiler.is_compiling
        self._handles = [
            model.register_forward_pre_hook(self._pre, with_kwargs=True),
            model.register_forward_hook(self._post),
        ]
        self._model, self._original = model, model.get_compiled_call
        model.get_compiled_call = self._compiled_call

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._model.get_compiled_call = self._original

    def _pre(self, module, args, kwargs):
        if not self._is_compiling():
            self._start(args, kwargs, "eager hook")

    def _post(self, module, args, output):
        if not self._is_compiling():
            self._end()

    def _compiled_call(self, compile_config):
        compiled = self._original(compile_config)

        def call(*args, **kwargs):
            self._start(args, kwargs, "compiled call")
            try:
                return compiled(*args, **kwargs)
            finally:
                self._end()

        return call

    def _start(self, args, kwargs, via: str) -> None:
        if not self.recording:
            self._open.append(None)
            return
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None:
            ids = kwargs.get("inputs_embeds")
        cache = kwargs.get("cache", kwargs.get("past_key_values"))  # 5.2x: cache; before: pkv
        cache_len = cache.get_seq_length() if type(cache).__name__ == "DynamicCache" else None
        call = {"input_len": int(ids.shape[1]), "cache_len_before": cache_len, "via": via}
        call["start_ns"] = time.time_ns()
        self.calls.append(call)
        self._open.append(call)

    def _end(self) -> None:
        call = self._open.pop()
        if call is not None:
            call["end_ns"] = time.time_ns()


class AcceptLog:
    """The accepted drafts of every verify, as transformers itself counts them: the `num_matches`
    it passes to its candidate generator's `update_candidate_strategy` after each target forward."""

    def __init__(self):
        from transformers.generation import candidate_generator as cg

        self.accepted, self._patched = [], []
        for cls in vars(cg).values():
            if isinstance(cls, type) and "update_candidate_strategy" in vars(cls):
                original = vars(cls)["update_candidate_strategy"]
                cls.update_candidate_strategy = self._wrap(original)
                self._patched.append((cls, original))
        self._depth = 0

    def _wrap(self, original):
        def update(generator, input_ids, scores, num_matches):
            if self._depth == 0:  # a subclass calling super() is still one verify
                self.accepted.append(int(num_matches))
            self._depth += 1
            try:
                return original(generator, input_ids, scores, num_matches)
            finally:
                self._depth -= 1

        return update

    def remove(self) -> None:
        for cls, original in self._patched:
            cls.update_candidate_strategy = original
