"""Data parallel on torch.distributed (issue 12, R-H1): shards with their own requests and KV.

Every rank runs a complete LLMEngine (target, draft, adaptive control, its own calibration with
its own request buckets: bucket 4 builds 4 synthetic requests on each shard, 8 in all). Rank 0 is
also the front, `DPEngine`: it checks each request (make_request), routes it to the shard with the
fewest unfinished requests, and drives the shards in lockstep. One step of the front is:
1. a broadcast of the new requests of each shard and the aborts;
2. every shard runs one engine step; inside it, once per round, one all-reduce (MAX) of
   (draft steps, request bucket, target rows) agrees on the common step count and physical bucket
   (`Agreement`; AdaptiveControl.plan applies it; a shard without a round contributes zeros);
3. a gather of every shard's outputs to rank 0, which updates its copies of the remote requests.
`DPEngine` has the surface the server and the offline API use (make_request, enqueue, abort, step,
has_unfinished, output, requests, scheduler.waiting/free_slots); the rest is the local shard's.
Round observers (metrics) and speculation stats see rank 0's shard only.
"""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist

from ..errors import UserError
from .launch import agree, broadcast, collective_device, init_group, leave_group, rank_device, spawn_ranks


class Agreement:
    """(k, Bcap, G) -> the maxima over shards; exactly one all-reduce per lockstep step."""

    def __init__(self):
        self.history: list[tuple[tuple[int, int, int], tuple[int, int, int]]] = []
        self.calls = 0

    def __call__(self, k: int, bcap: int, G: int) -> tuple[int, int, int]:
        if self.calls:
            raise RuntimeError("data parallel: a second agreement in one step would desynchronise the shards")
        t = torch.tensor([k, bcap, G], dtype=torch.long, device=collective_device())
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        self.calls += 1
        out = tuple(int(x) for x in t.tolist())
        self.history.append(((k, bcap, G), out))
        return out

    def end_step(self) -> None:
        if not self.calls:  # no round on this shard: take part with nothing
            self(0, 0, 0)
        self.calls = 0


def install_agreement(engine) -> Agreement:
    agreement = Agreement()
    if engine.control is not None:
        engine.control.agree = agreement
    else:  # plain or fixed speculation: the same one all-reduce per round, the plan unchanged
        local_plan = engine.plan

        def plan(batch, round_id=None):
            p = local_plan(batch, round_id)
            B = len(p.verify_lens)
            agreement(p.num_steps, B, B + sum(p.verify_lens))
            return p

        engine.plan = plan
    return agreement


def _shard_step(engine, agreement, new, aborts):
    from ..engine.round_events import RoundFailure

    for req in new:
        engine.enqueue(req)
    for rid in aborts:
        engine.abort(rid)
    failed, outs = [], []
    try:
        outs = engine.step()
    except RoundFailure as e:
        failed = [(rid, str(e)) for rid in e.request_ids]
    agreement.end_step()
    sched = engine.scheduler
    return outs, failed, len(sched.waiting), len(sched.free_slots), len(sched.running)


def _report(engine, agreement) -> dict:
    control = engine.control
    return {"history": list(agreement.history), "requests_served": getattr(engine, "dp_served", 0),
            "synthetic_requests": dict(control.synthetic_requests) if control is not None else {}}


def dp_worker_main(rank, world, addr, port, config, drafter) -> None:
    from ..engine.llm_engine import configure_threads

    configure_threads(config.threads)
    init_group(rank, world, config.device, addr, port)
    shard_main(config, drafter)


def _shard_config(config):
    """A shard's engine config: on CUDA, its own GPU (cuda:<local rank>)."""
    import dataclasses

    if not config.device.startswith("cuda"):
        return config
    return dataclasses.replace(config, device=rank_device(config, dist.get_rank()))


def shard_main(config, drafter) -> None:
    """A shard that is not rank 0 (its process group joined): build its engine, agree, serve rank 0."""
    from ..engine.llm_engine import LLMEngine

    error, engine = None, None
    try:
        engine = LLMEngine(_shard_config(config), drafter=drafter)
    except UserError as e:
        error = str(e)
    try:
        agree(error)
    except UserError:
        leave_group()
        sys.exit(0)  # agreed refusal: rank 0 prints it and exits 2
    agreement = install_agreement(engine)
    while True:
        msg = broadcast()
        if msg[0] == "stop":
            break
        if msg[0] == "report":
            dist.gather_object(_report(engine, agreement), None, dst=0)
            continue
        _, new, aborts = msg
        mine = new.get(dist.get_rank(), [])
        engine.dp_served = getattr(engine, "dp_served", 0) + len(mine)  # requests routed here
        dist.gather_object(_shard_step(engine, agreement, mine, aborts), None, dst=0)
    leave_group()


class _Scheduler:
    """What the server reads of the scheduler, over all shards."""

    def __init__(self, front):
        self.front = front

    @property
    def waiting(self):
        f = self.front
        return list(f.local.scheduler.waiting) + [None] * (sum(len(v) for v in f.pending.values()) + f.remote_waiting)

    @property
    def running(self):
        f = self.front
        return list(f.local.scheduler.running) + [None] * f.remote_running

    @property
    def free_slots(self):
        return list(self.front.local.scheduler.free_slots) + [None] * self.front.remote_free


class DPEngine:
    def __init__(self, config, drafter=None, checked=None):
        import warnings

        from ..engine.llm_engine import LLMEngine
        from ..preflight import preflight

        if checked is None:  # every refusal rank 0 can find comes before any process starts
            checked = preflight(config, drafter=drafter)
            for w in checked.warnings:
                warnings.warn(w, UserWarning, stacklevel=3)
        config = checked.config
        self.launch = spawn_ranks(config, dp_worker_main, (drafter,))
        if self.launch.rank != 0:  # torchrun rank > 0, or the first process of node > 0: a shard
            shard_main(config, drafter)
            self.launch.join()
            sys.exit(0)
        self.world = self.launch.world
        error = None
        try:
            self.local = LLMEngine(config, drafter=drafter, checked=checked)
        except UserError as e:
            error = e
        try:
            agree(None if error is None else str(error))
        except UserError as agreed:
            self.launch.leave()
            raise error if error is not None else agreed
        self.agreement = install_agreement(self.local)
        self.pending: dict[int, list] = {}
        self.aborts: list[str] = []
        self.remote: dict[str, object] = {}  # request id -> rank 0's copy of a request on another shard
        self.owner: dict[str, int] = {}
        self.load = [0] * self.world
        self.remote_waiting = 0
        self.remote_free = (self.world - 1) * config.max_seqs_per_batch
        self.remote_running = 0
        self.scheduler = _Scheduler(self)
        self.closed = False
        self.local.dp_served = 0
        import atexit

        atexit.register(self.close)

    def __getattr__(self, name):  # tokenizer, config, control, drafter, spec_stats, round_observers, ...
        if name == "local":
            raise AttributeError(name)
        return getattr(self.local, name)

    @property
    def requests(self) -> dict:
        return {**self.local.requests, **self.remote}

    def make_request(self, *args, **kwargs):
        req = self.local.make_request(*args, **kwargs)
        if req.request_id in self.remote:
            from ..errors import RequestError

            raise RequestError(f"request_id {req.request_id!r} is already in use", param="request_id")
        return req

    def add_request(self, prompt, params=None, request_id=None, prompt_text=None) -> str:
        return self.enqueue(self.make_request(prompt, params, request_id, prompt_text))

    def enqueue(self, req) -> str:
        shard = min(range(self.world), key=lambda s: (self.load[s], s))
        self.load[shard] += 1
        self.owner[req.request_id] = shard
        if shard == 0:
            self.local.dp_served += 1
            return self.local.enqueue(req)
        self.pending.setdefault(shard, []).append(req)
        self.remote[req.request_id] = req
        return req.request_id

    def abort(self, request_id: str) -> None:
        shard = self.owner.pop(request_id, None)
        if shard is None:
            return
        self.load[shard] -= 1
        if shard == 0:
            return self.local.abort(request_id)
        req = self.remote.pop(request_id, None)
        if req is not None:
            from ..engine.request import Status

            req.status = Status.FINISHED
            self.pending[shard] = [r for r in self.pending.get(shard, []) if r.request_id != request_id]
            self.aborts.append(request_id)

    def output(self, req):
        return self.local._output(req)

    def has_unfinished(self) -> bool:
        return self.local.has_unfinished() or bool(self.remote)

    def step(self):
        from ..engine.round_events import RoundFailure

        new, self.pending = self.pending, {}
        aborts, self.aborts = self.aborts, []
        broadcast(("step", new, aborts))
        mine = _shard_step(self.local, self.agreement, [], [])
        gathered = [None] * self.world
        dist.gather_object(mine, gathered, dst=0)
        local_outs = mine[0]
        outs = list(local_outs)
        self.remote_waiting = sum(g[2] for g in gathered[1:])
        self.remote_free = sum(g[3] for g in gathered[1:])
        self.remote_running = sum(g[4] for g in gathered[1:])
        for shard, (shard_outs, shard_failed, *_) in enumerate(gathered):
            failed_ids = {rid for rid, _ in shard_failed}
            for rid in failed_ids:
                self._forget(rid)
            if shard == 0:
                continue
            for o in shard_outs:
                req = self.remote.get(o.request_id)
                if req is None:  # aborted here meanwhile
                    continue
                req.output_token_ids[:] = o.token_ids
                req.first_token_time, req.finish_time = o.first_token_time, o.finish_time
                req.num_drafts, req.num_draft_tokens, req.num_accepted_tokens = (
                    o.num_drafts, o.num_draft_tokens, o.num_accepted_tokens)
                if o.finish_reason is not None:
                    req.finish_reason = o.finish_reason
                    self._forget(o.request_id)
                outs.append(o)
        for o in local_outs:
            if o.finish_reason is not None:
                self._forget(o.request_id)
        all_failed = [rid for g in gathered for rid, _ in g[1]]
        if all_failed:
            failure = RoundFailure(all_failed, RuntimeError("; ".join(m for g in gathered for _, m in g[1])[:400]))
            failure.outputs = outs  # the other requests of the step finished or advanced: deliver them too
            raise failure
        return outs

    def _forget(self, rid: str) -> None:
        shard = self.owner.pop(rid, None)
        if shard is not None:
            self.load[shard] -= 1
        self.remote.pop(rid, None)

    def report(self) -> list[dict]:
        """Every shard's agreement history and request count (index = rank)."""
        broadcast(("report",))
        out = [None] * self.world
        dist.gather_object(_report(self.local, self.agreement), out, dst=0)
        return out

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            broadcast(("stop",))
            self.launch.leave()
