"""LLMEngine (the step loop); the offline Python API `LLM` lives in llm.py (re-exported here).

`LLMEngine.step()` is one round: schedule -> prepare tensors -> target forward -> sample -> commit.
The result's `.tolist()` is the one device-to-host point of a step. The same engine object serves
`LLM.generate`, the CLI and a server loop; nothing here parses flags. Start-up facts (the linear
backend chosen, adaptive calibration) are logged on stderr.
"""

from __future__ import annotations

import itertools
import logging
import sys
import time
import warnings
from contextlib import contextmanager
from typing import Iterable, Sequence

import torch

from .. import hugepages
from ..config import EngineConfig
from ..errors import RequestError  # noqa: F401 - re-exported: the engine's request refusals
from ..metrics.spec_stats import SpecStats
from ..models.native_gemm import describe as describe_native_gemm
from ..preflight import Checked, preflight, resolve_dtype  # noqa: F401 - resolve_dtype re-exported
from ..rounds import RoundPlan
from ..sampling_params import SamplingParams
from .admission import check_request
from .request_output import RequestOutput, append_tokens, request_output
from .process_setup import configure_allocator, configure_threads  # noqa: F401 - configure_* re-exported
from .request import Request
from .round_events import RoundEvent, RoundFailure
from .scheduler import ScheduledBatch, Scheduler


class LLMEngine:
    def __init__(self, config: EngineConfig, drafter=None, *, checked: Checked | None = None):
        """`drafter`: an object following drafts.base.Drafter, used instead of loading one. A drafter
        that is an `nn.Module` gets the target's linear backend in place (models/linear.pack_module:
        inference only, so never pass a draft that is still being trained).
        `checked`: the result of `adaspec.preflight.preflight(config, ...)` when the caller ran it
        already (the CLI, the server); otherwise it runs here, before any model work (issue 8)."""
        from ..models.linear_select import check_rows
        from ..models.loader import load_model
        from ..runner.model_runner import ModelRunner
        from ..runner.round_runner import RoundRunner

        if checked is None:
            checked = preflight(config, drafter=drafter)
            for w in checked.warnings:
                warnings.warn(w, UserWarning, stacklevel=2)
        self.checked = checked
        self.config = config = checked.config
        configure_threads(config.threads)
        self.device, self.dtype = checked.device, checked.dtype
        if self.device.type == "cpu":
            configure_allocator()
            print(hugepages.describe(), file=sys.stderr, flush=True)
        self.model_dir = checked.model_dir
        # auto measures at one row and at the rows of a verify (speculative) or a full batch (plain)
        verify_rows = 1 + config.num_draft_tokens if config.speculative else config.max_seqs_per_batch
        self.parallel = None  # parallel/launch.Launch with --tp_size > 1 (issue 12)
        if config.tp_size > 1:
            from ..parallel.tp_setup import start_tp

            self.parallel, self.model_config, self.model = start_tp(
                config, self.model_dir, self.dtype, self.device, config.max_seqs_per_batch, checked.cache_len, verify_rows)
        else:
            # preflight already refused a --layer_kernels=native that cannot run, and built the kernels
            self.model_config, self.model = load_model(self.model_dir, self.dtype, self.device,
                                                       linear_backend=config.linear_backend, verify_rows=verify_rows,
                                                       layer_kernels=config.layer_kernels)
        # part of the target's identity (cost tables, --json stats, the server's /version)
        self.linear_backend = self.model.linear_backend
        self.linear_choice = self.model.linear_choice
        self.layer_kernels = self.model.layer_kernels
        check_rows(self.linear_choice, self.model)  # logged: do a verify row's linears equal a plain row's?
        print(self.linear_choice.describe(), file=sys.stderr, flush=True)
        print(f"[adaspec] layer kernels: {self.layer_kernels} ({self.model.layer_kernels_choice})",
              file=sys.stderr, flush=True)
        if getattr(self.model, "native_gemm", None) is not None:  # fp16w with native kernels (models/native_gemm.py)
            print(f"[adaspec] {describe_native_gemm(self.model.native_gemm)}", file=sys.stderr, flush=True)
        self.tokenizer = checked.tokenizer
        self.max_model_len = checked.max_model_len
        self.num_draft_tokens = config.num_draft_tokens
        # verify rows may run num_draft_tokens positions past the context limit before being cut
        self.cache_len = cache_len = checked.cache_len
        if self.parallel is not None:
            from ..parallel.tp_runner import TPDriverRunner

            runner = TPDriverRunner(self.model, config.max_seqs_per_batch, cache_len, self.device)
        else:
            runner = ModelRunner(self.model, config.max_seqs_per_batch, cache_len, self.device)
        self.model_runner = runner
        self.kv_cache = runner.kv  # the target's KV cache (engine/fork.py copies slots of it)
        self.drafter = None
        if config.speculative:
            from ..drafts.factory import engine_drafter, ready_drafter

            if drafter is None:
                drafter = engine_drafter(config, checked.draft_dir or config.draft_model, self.model, self.model_dir,
                                         self.device, self.dtype)
            self.drafter = ready_drafter(drafter, config, self.linear_backend, cache_len, self.layer_kernels)
        self._drafter_observe = getattr(self.drafter, "observe", None)  # drafters with feedback (Suffix)
        self.generator = torch.Generator(device=self.device).manual_seed(config.seed)
        self.rounds = RoundRunner(runner, self.drafter, self.generator)
        self.scheduler = Scheduler(config.max_seqs_per_batch, config.max_num_batched_tokens)
        self.spec_stats = SpecStats()
        self.requests: dict[str, Request] = {}
        self._ids = itertools.count()
        self.round_id = 0
        self._executor = None
        self._inflight = None  # (batch, plan, future) of the round running on the worker thread
        # called with a RoundEvent after each completed round (on the engine's thread)
        self.round_observers: list = []
        self.plan_transform = None  # f(batch, plan) -> RoundPlan, see plan()
        if self.parallel is not None:
            from ..parallel.engine_hooks import install_tp_hooks

            install_tp_hooks(self)
        self.control = None
        if config.adaptive:
            from .control import AdaptiveControl

            self.weights_fingerprint, self.quantization = checked.weights_fingerprint, checked.quantization
            if self.weights_fingerprint is None:  # a Checked made without speculation facts: identify the weights here
                from ..models.loader import quantization, weights_fingerprint

                draft_fp = getattr(self.drafter, "fingerprint", None) or type(self.drafter).__name__
                self.weights_fingerprint = f"{weights_fingerprint(self.model_dir)}+draft:{draft_fp}"
                self.quantization = quantization(self.model_dir)
            self.control = AdaptiveControl(self)  # wires rounds.verify_controller (AdaptiveControl.reset)

    def close(self) -> None:
        """Stop the tensor-parallel workers and leave the process group (also run at exit); a
        single-process engine has nothing to stop. Idempotent."""
        if self.parallel is not None:
            from ..parallel.engine_hooks import shutdown_parallel

            shutdown_parallel(self)

    # ---- admission -------------------------------------------------------------------------
    def add_request(
        self,
        prompt: str | Sequence[int],
        params: SamplingParams | None = None,
        request_id: str | None = None,
        prompt_text: str | None = None,
    ) -> str:
        """Queue a request; raises RequestError (nothing queued) if it cannot be served."""
        return self.enqueue(self.make_request(prompt, params, request_id, prompt_text))

    def make_request(
        self,
        prompt: str | Sequence[int],
        params: SamplingParams | None = None,
        request_id: str | None = None,
        prompt_text: str | None = None,
        template_tokens: int | None = None,
    ) -> Request:
        """Check a request before any work is done for it (R-B5); RequestError names the field (`param`).

        `prompt` is text or token ids (a list of int; nothing else is converted). `template_tokens`:
        the length of the user's text before a chat template wrapped it (for the error message)."""
        params, text, ids = check_request(self.config, self.tokenizer, self.max_model_len, self.model_config.vocab_size,
                                          prompt, params, prompt_text, template_tokens)
        if request_id is not None and not isinstance(request_id, str):
            raise RequestError(f"request_id must be a str, got {type(request_id).__name__}", param="request_id")
        request_id = request_id or f"req-{next(self._ids)}"
        if request_id in self.requests:
            raise RequestError(f"request_id {request_id!r} is already in use", param="request_id")
        return Request(request_id, text, ids, params)  # a seed's noise is per position (sampling/seeding.py)

    def enqueue(self, req: Request) -> str:
        self.requests[req.request_id] = req
        self.scheduler.add(req)
        return req.request_id

    def abort(self, request_id: str) -> None:
        """Stop a request now and free its slot. Call from the thread that calls `step()`.

        If the request is part of the round running on the overlap worker, its refresh entries
        belong to that round: the worker is still reading and writing them, so they are released
        when the round is collected (`commit` skips and releases finished requests)."""
        req = self.requests.pop(request_id, None)
        if req is not None and not req.finished:
            self.scheduler.finish(req)
            if not self._in_flight(req):
                self.rounds.release(request_id)

    def _in_flight(self, req: Request) -> bool:
        return self._inflight is not None and any(c.request is req for c in self._inflight[0].chunks)

    # ---- one step ------------------------------------------------------------------------
    def step(self) -> list[RequestOutput]:
        """Run one round; returns the state of every request that produced a token (or finished).

        If the round raises, its requests are finished with reason "error" (slots and draft state
        freed) and `RoundFailure` is raised naming them; the engine stays usable for the rest."""
        if self.config.enable_schedule_overlap:
            return self._step_overlapped()
        batch = self._schedule()
        if batch is None:
            return []
        with self._failing(batch):
            return self._outputs(self._collect(batch, *self._run(batch)))

    def _schedule(self) -> ScheduledBatch | None:
        batch = self.scheduler.schedule(verify_cap=self.verify_cap)
        return batch or None

    def _run(self, batch: ScheduledBatch, executor=None):
        """Plan the round; run it here, or submit it to `executor`. Returns (plan, timed result)."""
        self.round_id += 1
        plan = self.plan(batch, self.round_id)
        if executor is None:
            return plan, self._timed_run(batch.chunks, plan)
        return plan, executor.submit(self._timed_run, batch.chunks, plan)

    def _timed_run(self, chunks, plan: RoundPlan):
        started = time.perf_counter()
        result = self.rounds.run(chunks, plan)  # ends with the round's one device-to-host read-back
        return result, started, time.perf_counter()

    def _collect(self, batch: ScheduledBatch, plan: RoundPlan, timed) -> list[Request]:
        """Feedback (the normal result path, R-C4), commit and observers of a completed round."""
        result, started, finished = timed
        self.spec_stats.observe(result.verify_lens, result.num_accepted)
        decoding = [c.request for c in batch.chunks if c.is_decode]
        for req, L, m in zip(decoding, result.verify_lens, result.num_accepted):
            if L:
                req.num_drafts, req.num_draft_tokens = req.num_drafts + 1, req.num_draft_tokens + L
                req.num_accepted_tokens += m
        if self.control is not None:
            # decode only: no prefill chunk in the round (the metrics' pure-decode rounds, metrics/prometheus.py)
            self.control.observe(result, plan.round_id, plan, finished - started,
                                 len(decoding) == len(batch.chunks))
        if self._drafter_observe is not None and decoding:
            self._drafter_observe(plan.round_id, result.verify_lens, result.num_accepted)
        updated = self.commit(batch, result)
        if self.round_observers:
            event = RoundEvent(plan.round_id, batch, decoding, plan, result, started, finished)
            for observe in self.round_observers:
                try:
                    observe(event)
                except Exception:  # an observer's bug must not fail the round's requests
                    logging.getLogger("adaspec.engine").exception("round observer %r failed", observe)
        return updated

    @contextmanager
    def _failing(self, batch: ScheduledBatch):
        """Turn an exception of the round into failed requests + RoundFailure (error isolation)."""
        try:
            yield
        except Exception as e:
            failed = []
            for chunk in batch.chunks:
                req = chunk.request
                self.rounds.release(req.request_id)
                if not req.finished:
                    self._finish(req, "error")
                    failed.append(req.request_id)
                self.requests.pop(req.request_id, None)
            raise RoundFailure(failed, e) from e

    def _step_overlapped(self) -> list[RequestOutput]:
        """Schedule overlap: round n runs on a worker thread while this thread turns round n-1's
        tokens into outputs (detokenisation, stop strings) and returns them to the caller.

        Round n is planned after round n-1 completed, but its controller sees only rounds <= n-2
        (lag 2, enforced by the controllers' LaggedFeedback), as if it had been planned while
        n-1 was still running (R-D4). Greedy output is identical to the synchronous engine.
        """
        if self._executor is None:
            from concurrent.futures import ThreadPoolExecutor

            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="adaspec-round")
        updated: list[Request] = []
        if self._inflight is not None:
            batch, plan, future = self._inflight
            self._inflight = None
            with self._failing(batch):
                updated = self._collect(batch, plan, future.result())
        batch = self._schedule()
        if batch is not None:
            with self._failing(batch):
                self._inflight = (batch, *self._run(batch, self._executor))
        return self._outputs(updated)

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished() or self._inflight is not None

    def plan(self, batch: ScheduledBatch, round_id: int | None = None) -> RoundPlan:
        """The round's plan: `default_plan`, then `plan_transform(batch, plan)` if one is installed.

        `plan_transform` is the public injection point for baselines that are not product modes
        (bench/adaptive.py's fixed verify lengths and its oracle, tests): it may shorten what requests
        verify or change the admission mode, never make a request verify beyond its cap."""
        plan = self.default_plan(batch, round_id)
        if self.plan_transform is None:
            return plan
        return plan.check_shortened(self.plan_transform(batch, plan), self.rounds.verify_controller is not None)

    def default_plan(self, batch: ScheduledBatch, round_id: int | None = None) -> RoundPlan:
        """How much each decoding request speculates this round: fixed width, or the controller's.

        A request never verifies more draft tokens than it may still emit: tokens past max_tokens
        or the context limit would be thrown away, so verifying them is wasted work. Nor more than
        the step's row budget left after prefill (the scheduler's cut caps, `verify_cap`).
        """
        decoding = [c.request for c in batch.chunks if c.is_decode]
        if not self.num_draft_tokens:
            return RoundPlan.plain(len(decoding))
        # the scheduler charged these rows (verify_cap), cut where the step's row budget ran out
        caps = tuple(c.verify_cap for c in batch.chunks if c.is_decode)
        if self.control is not None:
            return self.control.plan(decoding, caps, round_id)
        return RoundPlan(self.num_draft_tokens, caps, round_id=round_id)

    def verify_cap(self, r: Request) -> int:
        """Draft tokens request `r` may verify this round: the width, less what it may still emit."""
        K = self.num_draft_tokens
        return max(0, min(K, r.params.max_tokens - len(r.output_token_ids) - 1, self.max_model_len - r.num_tokens - 1))

    def commit(self, batch: ScheduledBatch, result) -> list[Request]:
        """Advance cache lengths (rejected rows are dropped by not counting them) and append tokens.
        Returns the requests that received tokens."""
        now = time.perf_counter()
        updated = []
        for chunk, tokens in zip(batch.chunks, result.new_tokens):
            req = chunk.request
            if req.finished:  # aborted while its round was running
                self.rounds.release(req.request_id)
                continue
            # prefill: the chunk's rows; decode: t_n and the accepted drafts (the last token is new)
            req.num_computed += len(chunk.token_ids) if not chunk.is_decode else len(tokens)
            if not tokens:
                continue
            if req.first_token_time is None:
                req.first_token_time = now
            self._append_tokens(req, tokens)
            if req.finished:
                self.rounds.release(req.request_id)
            updated.append(req)
        return updated

    def _outputs(self, requests: list[Request]) -> list[RequestOutput]:
        return [self._output(r) for r in requests]

    # ---- commit and stopping (engine/request_output.py) ----------------------------------------
    def _append_tokens(self, req: Request, tokens: Iterable[int]) -> None:
        """Commit tokens in order until one finishes the request; later ones are dropped."""
        reason = append_tokens(req, tokens, self.tokenizer, self.max_model_len)
        if reason is not None:
            self._finish(req, reason)

    def _finish(self, req: Request, reason: str) -> None:
        req.finish_reason, req.finish_time = reason, time.perf_counter()
        self.scheduler.finish(req)

    def output(self, req: Request) -> RequestOutput:
        """The request's current state as a RequestOutput (forgotten by the engine once finished)."""
        return self._output(req)

    def _output(self, req: Request) -> RequestOutput:
        if req.finished:
            self.requests.pop(req.request_id, None)
        return request_output(req, self.tokenizer)


def make_engine(config: EngineConfig, drafter=None, *, checked: Checked | None = None):
    """The engine the config asks for: an LLMEngine, or with --dp_size > 1 a parallel.DPEngine
    (rank 0's front over the data-parallel shards, issue 12). --tp_size > 1 is inside LLMEngine."""
    if config.dp_size > 1:
        from ..parallel.data_parallel import DPEngine

        return DPEngine(config, drafter=drafter, checked=checked)
    return LLMEngine(config, drafter=drafter, checked=checked)


from .llm import LLM  # noqa: E402,F401 - re-exported: the offline API lives in llm.py
