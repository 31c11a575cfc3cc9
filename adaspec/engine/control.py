"""Adaptive control for one engine: prepared geometry, warm-up, the cost table, the controllers.

Built only when `--enable_adaptive_draft_step` or `--enable_adaptive_target_verify` is on (R-E5:
the static path does no warm-up, calibration or profiling). Start-up order (R-F2): choose and
prepare the geometry (sparse on CPU, `geometry.choose_prepared`, the reason logged), resolve the
calibration config (errors before any work, R-F5), warm every prepared shape the calibration will
not run itself (R-E4), then either load a saved table (R-G2) or log the effective configuration
(R-F7), drive real rounds with synthetic requests (engine/calibrate.py), fit, report each point's
spread, the noise and the held-out error (one warning line when the table is too noisy to trust),
optionally save (R-G1), and install the immutable table in the controllers before the engine
reports ready (the table's loading or calibration: engine/control_startup.py).

Per round the engine asks `plan()` for a RoundPlan and hands every completed result to
`observe()`. The lag between them is explicit: 1 for the synchronous engine, 2 with schedule
overlap (round n is planned while round n-1 runs, so it can only see rounds <= n-2).
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import time

from ..adaptive.closed_batch import closed_batch_value
from ..adaptive.floor import PlainFloor, floor_applies, probe_requests
from ..adaptive.step_controller import DraftStepController, StepPolicy
from ..adaptive.step_served import served_kind
from ..adaptive.verify_budget import budget_drafts
from ..adaptive.verify_controller import GATE_REQUESTS, VerifyController
from ..calibration.config import (
    EngineFacts,
    load_draft_step_config,
    load_verify_calibration,
    resolve_draft_step_config,
    resolve_verify_calibration,
)
from ..calibration.cost_table import CostTable, TableCompat, compatibility_mismatches
from ..rounds import RoundPlan
from ..geometry import choose_prepared
from .calibrate import rows_plan, steps_plan, warm_up
from .control_startup import load_or_calibrate


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class AdaptiveControl:
    def __init__(self, engine, log=_log, progress: bool = True):
        cfg = engine.config
        self.engine, self.log = engine, log
        self.width = engine.num_draft_tokens
        self.algorithm = cfg.speculative_algorithm
        self.mode = "adaptive_draft_step" if cfg.enable_adaptive_draft_step else "adaptive_target_verify"
        self.lag = 2 if cfg.enable_schedule_overlap else 1
        self.geometry, self.geometry_note = choose_prepared(
            cfg.max_seqs_per_batch, self.width, engine.device.type, cfg.graph_decode_batch_sizes,
            unified=cfg.enable_unified_mtp_graph, max_rows=cfg.max_num_batched_tokens,
            step_mode=self.mode == "adaptive_draft_step")
        self.facts = EngineFacts.from_geometry(
            self.geometry, model_context_limit=engine.max_model_len, kv_capacity_per_slot=engine.cache_len,
            dp_size=cfg.dp_size)
        self.compat = TableCompat(
            algorithm=self.algorithm, draft_width=self.width, weights_fingerprint=engine.weights_fingerprint,
            dtype=str(engine.dtype).removeprefix("torch."), device_type=engine.device.type,
            quantization=engine.quantization, linear_backend=engine.linear_backend,
            layer_kernels=engine.layer_kernels, tp_size=cfg.tp_size,
            dp_size=cfg.dp_size, cp_size=cfg.cp_size,
            unified=cfg.enable_unified_mtp_graph, mode=self.mode)

        t0 = time.perf_counter()
        # the calibration config is resolved (and refused) before any work is done (R-F5)
        self.effective = None if cfg.adaptive_target_verify_cost_table else self._resolve(cfg)
        measured = set()
        if self.effective is not None:
            measured = {(b, x) for b in self.effective.request_buckets for x in self.effective.grid[b]}
        shapes = [(b, plan) for b, x, plan in self._warmup_shapes() if (b, x) not in measured]
        n = warm_up(engine, shapes)
        also = f" (the {len(measured)} shapes calibration measures are warmed by its own warm-up rounds)" if measured else ""
        self.log(f"[adaspec] warm-up: {n} prepared shapes in {time.perf_counter() - t0:.1f} s{also}")
        self.synthetic_requests: dict[int, int] = {}
        self.table = self._load_or_calibrate(cfg, progress)
        self.calibration_seconds = time.perf_counter() - t0
        # the draft step's policy is this engine's own (its config file's, kept in the table it calibrated): a
        # table installed later (install_table) prices, it does not decide
        self._policy = (dict(self.table.metadata.calibration.get("policy") or {})
                        if self.mode == "adaptive_draft_step" else {})
        self.step: DraftStepController | None = None
        self.verify: VerifyController | None = None
        self.floor: PlainFloor | None = None
        self.reset(log=True)

    def reset(self, log: bool = False) -> None:
        """(Re)build the controllers from the installed table: same table, policy, geometry and lag, no
        feedback. Public so that benchmarks and tests start every run from the same cold state; the
        engine's round runner is pointed at the new verify controller."""
        self._closed_values: dict[int, float] = {}  # token_value_closed per batch size, for this table
        cfg = self.engine.config
        self.ceiling_batches = 0  # batches run at k_max by policy.greedy_ceiling
        if self.mode == "adaptive_draft_step":
            policy = self._policy
            self.step = DraftStepController(
                self.width, StepPolicy(**policy) if policy else StepPolicy(), self.table.cost_ms,
                self.geometry.pad_requests, lag=self.lag, covers=self.table.covers,
                buckets=self.geometry.request_buckets)
            # round times price k = 1 for MTP only: a Suffix draft's k = 1 round verifies only what matched, so its
            # rounds are no steady k = 1 (adaptive/step_served.py)
            self._timed_rounds = self.algorithm == "MTP"
            if log:
                self.log(self.step.describe_exploration())
                self.log(self.step.describe_served(None if self._timed_rounds else
                                                   f"{self.algorithm}: its rounds verify only what matched"))
                if self.algorithm == "MTP" and self.step.policy.confidence_stop > 0:
                    self.log(self.step.describe_depth())
                    self.log("[adaspec] greedy ceiling: " + (
                        f"a batch of one greedy request that speculates drafts up to k_max = {self.width} and the "
                        "confidence stop decides each round's depth (policy.greedy_ceiling)"
                        if self.step.policy.greedy_ceiling else "off (policy.greedy_ceiling); the controller's k is "
                        "the ceiling"))
        else:
            # None: the drafter's proposals cannot be foreseen from lagged feedback (floor.NEVER_SKIPPED)
            self.floor = PlainFloor() if floor_applies(getattr(self.engine, "drafter", None)) else None
            self.verify = VerifyController(
                self.width, self.table.cost_ms, self.geometry.pad_requests, dict(self.geometry.target_rows),
                self.geometry.pad_rows, mode="async" if cfg.enable_schedule_overlap else "sync", lag=self.lag,
                covers=self.table.covers, plain_ms=self.table.plain_cost_ms)
            self.engine.rounds.verify_controller = self.verify  # the runner's admission (R-D3, R-D4)
            if log and self.floor is None:
                self.log(f"[adaspec] plain floor: off for {self.algorithm} (its proposals appear as soon as the text "
                         "repeats, which lagged feedback cannot foresee; its draft is nearly free)")
            if log and self.table.metadata.plain_ms:
                values = ", ".join(f"{b}: {self.token_value_closed(b):.2f}" for b in self.geometry.request_buckets)
                self.log("[adaspec] closed batch: while no request waits for a slot, an extra token is worth what it "
                         "saves, c(B) - c(B-1) of a plain round, against c(B) / B for a decoded one (adaptive/"
                         f"closed_batch.py); its weight at B = {values}")
            if log and self.floor is not None:
                self.log(self.floor.describe())
                if self.verify.mode == "sync":
                    self.log("[adaspec] sync gate: a round the newest lagged round predicts to lose still drafts when "
                             f"the newest rounds holding {GATE_REQUESTS} request-rounds, each admitted by its own early "
                             "stop, predict a gain together; gate and admission read the draft's confidences times "
                             "the stream's accepted / predicted drafts (adaptive/draft_calibration.py)")
                if self.verify.served is not None:
                    self.log(self.verify.served.describe())
                if not self.table.metadata.plain_ms:
                    self.log("[adaspec] plain floor: this cost table has no plain-round costs (written before "
                             "issue 13): a plain round is charged the drafted G = B cost, so the floor skips the "
                             "draft less often than it should; recalibrate to measure them")

    def install_table(self, table) -> None:
        """Price this engine's controller by another engine's measured table (same model, dtype, kernels, geometry
        and mode: refused otherwise, naming the field), keeping this engine's own policy, and rebuild the controller
        cold. For benchmarks that compare two policies on one measurement (bench/adaptive.py --alt_shares_table):
        start-up tables differ between processes by more than most policy changes move a run."""
        mismatches = compatibility_mismatches(table.metadata, self.compat)
        if mismatches:
            raise ValueError("install_table: the table does not match this engine: "
                             + ", ".join(f"{name} (table {tv!r}, engine {ev!r})" for name, tv, ev in mismatches))
        self.table = table
        self.reset()

    # ---- start-up ------------------------------------------------------------------------------
    def _warmup_shapes(self):
        """(Bcap, x, plan) of every prepared shape: x = k (draft step) or G (verify)."""
        g = self.geometry
        if self.mode == "adaptive_draft_step":
            return [(b, k, steps_plan(b, k)) for b in g.request_buckets for k in range(0, self.width + 1)]
        return [(b, rows, rows_plan(b, rows, self.width)) for b in g.request_buckets for rows in g.target_rows[b]]

    def _resolve(self, cfg):
        if self.mode == "adaptive_draft_step":
            path = cfg.adaptive_draft_step_config
            eff = resolve_draft_step_config(load_draft_step_config(path) if path else None, self.facts,
                                            source=f"--adaptive_draft_step_config={path}" if path else None)
        else:
            path = cfg.adaptive_target_verify_calibration
            eff = resolve_verify_calibration(load_verify_calibration(path) if path else None, self.facts,
                                             source=f"--adaptive_target_verify_calibration={path}" if path else None)
        self.config_source = f"file {path}" if path else "built-in"
        return eff

    def _load_or_calibrate(self, cfg, progress: bool) -> CostTable:
        return load_or_calibrate(self, cfg, progress)  # engine/control_startup.py

    # ---- per round -----------------------------------------------------------------------------
    agree = None  # data parallel: f(k, Bcap, G) -> the shards' maxima, one all-reduce (parallel/data_parallel.py)

    def plan(self, decoding, caps: tuple[int, ...], round_id: int) -> RoundPlan:
        """decoding: the batch's decoding requests; caps: per request, draft tokens it may still emit.
        With data parallel every shard proposes (step count, request bucket, target rows) from its own
        lagged metadata and all take the common maxima (R-H1): a shard that would skip its draft
        drafts when another shard drafts, and a budget grows to the common bucket (capped at what its
        own requests can verify); per-request budgets stay the shard's own."""
        plan = self._plan_local(decoding, caps, round_id)
        if self.agree is None:
            return plan
        B = len(decoding)
        bcap = self.geometry.pad_requests(B) if B else 0
        rows = plan.row_budget if plan.row_budget is not None else B + sum(plan.verify_lens)
        k, _, G = self.agree(plan.num_steps, bcap or 0, rows)
        if not B or self.step is not None:  # adaptive draft step is refused at DP > 1 (R-E2)
            return plan
        if k > plan.num_steps:  # another shard drafts: so does this one
            if self.verify.mode != "async":
                return RoundPlan(self.width, caps, "sync", round_id=round_id, token_value=self.token_value(B))
            plan = RoundPlan(self.width, caps, "budget", B, round_id)
        if plan.admission == "budget":
            own = min(max(G, plan.row_budget), B * (1 + self.width))
            padded = self.geometry.pad_rows(bcap, own)
            plan = dataclasses.replace(plan, row_budget=max(plan.row_budget, padded if padded is not None else own))
        return plan

    def _plan_local(self, decoding, caps: tuple[int, ...], round_id: int) -> RoundPlan:
        if not decoding:
            return RoundPlan(0 if self.step else self.width, (), round_id=round_id)
        B = len(decoding)
        kv_len = max(r.num_computed for r in decoding)
        if self.step is not None:
            k = self.step.plan(B, round_id=round_id, kv_len=kv_len, can_verify=any(caps),
                               requests=[r.request_id for r in decoding],
                               closed=functools.partial(self._closed_batch, decoding))  # computed if a score reads it
            # the confidence stop reads the MTP draft's probability of its own tokens (step_policy.py); the Suffix
            # drafts' scores are online acceptance estimates of free proposals, for which it was never measured
            stop = self.step.policy.confidence_stop if self.algorithm == "MTP" else 0.0
            # a cost check at k = 0 times plain k = 1 rounds (adaptive/step_served.py): never at the ceiling
            ceiling = k > 0 and not self.step.last_check and self._greedy_ceiling(decoding, stop)
            if ceiling:  # one greedy request: draft to k_max, the stop decides how deep (step_policy.greedy_ceiling)
                k = self.width
                self.ceiling_batches += 1
            caps = tuple(min(k, c) for c in caps)
            if not self.step.last_probe:
                return RoundPlan(k, caps, round_id=round_id, stop_below=stop, cost_check=self.step.last_check,
                                 ceiling=ceiling)
            # a k = 0 probe drafts for a quarter of the batch, as the plain floor's do (floor.py): after a
            # long stretch at k = 0 the drafter would otherwise catch up on every request's skipped context
            subset, caps = self._probe_subset(decoding, caps)
            return RoundPlan(k, caps, round_id=round_id, probe=True, draft_only=subset, stop_below=stop,
                             ceiling=ceiling)
        value = self.token_value(B)
        ids = [r.request_id for r in decoding] if self.floor is not None else None  # the floor's batch turnover
        if self.verify.mode == "async":
            G = self.verify.plan_budget(B, round_id=round_id, max_lens=list(caps), kv_len=kv_len, token_value=value)
            gain = budget_drafts(self.verify.decisions[-1].reason, G, B)
            verdict = self.floor.decide(gain, any(caps), ids) if self.floor is not None else "draft"
            if verdict == "skip":  # the lagged budget admits no candidate, or not drafting wins (floor.py)
                return RoundPlan(0, (0,) * B, round_id=round_id)
            if not gain:  # a probe, or the floor is off: draft at the cheapest prepared budget
                G = self.geometry.pad_rows(self.geometry.pad_requests(B), B)
                self.verify.g_histogram[G] += 1
            subset, caps = self._probe_subset(decoding, caps) if verdict == "probe" else (None, caps)
            return RoundPlan(self.width, caps, "budget", G, round_id, probe=verdict == "probe", draft_only=subset)
        verdict = (self.floor.decide(self.verify.predicts_gain(B, round_id=round_id, max_lens=list(caps), kv_len=kv_len,
                                                               token_value=value), any(caps), ids)
                   if self.floor is not None else "draft")
        if verdict == "skip":
            return RoundPlan(0, (0,) * B, round_id=round_id)
        subset, caps = self._probe_subset(decoding, caps) if verdict == "probe" else (None, caps)
        return RoundPlan(self.width, caps, "sync", round_id=round_id, probe=verdict == "probe", token_value=value,
                         draft_only=subset)

    def _greedy_ceiling(self, decoding, stop: float) -> bool:
        """Whether a speculating batch runs at the ceiling k_max (policy.greedy_ceiling): a drafter decides each
        request's depth itself (the MTP draft with the confidence stop on; MTP+Suffix, whose value rule picks each
        request's source and MTP depth, drafts/hybrid.py) and the batch is one greedy request.

        MTP+Suffix (stop 59): its rounds verify a Suffix match at no draft cost, or an MTP draft at the depth of best
        value, so the table's k (calibrated on synthetic requests, which never match) prices neither, and the window's
        acceptance mixes both sources. On the held-out mixed stream at one request the draft step kept k = 1 in 91%
        of batches and ran 1.389x plain where a fixed k = 5 ran 1.655x (0.836x; `BENCHMARKS.md`, stop 59)."""
        own_depth = stop > 0 or self.algorithm == "MTP+Suffix"
        return (own_depth and self.step.policy.greedy_ceiling and len(decoding) == 1
                and decoding[0].params.temperature == 0)

    # a request's acceptance relative to its batch's is shrunk towards 1 by this many draft tokens at the batch's rate
    CLOSED_SHRINK_TOKENS = 16

    def _closed_batch(self, decoding) -> list[tuple[int, float]] | None:
        """The draft step's closed-batch view (adaptive/closed_step.py): None while a request waits for a slot
        (or the policy's closed_batch is off); else per decoding request (tokens it may still generate, its accepted draft tokens per verified one
        over the batch's, shrunk towards 1 by CLOSED_SHRINK_TOKENS)."""
        if not self.step.policy.closed_batch or self.engine.scheduler.waiting or len(decoding) < 2:
            return None
        drafted = sum(r.num_draft_tokens for r in decoding)
        mean = sum(r.num_accepted_tokens for r in decoding) / drafted if drafted else 0.0
        s = self.CLOSED_SHRINK_TOKENS
        out = []
        for r in decoding:
            rho = (r.num_accepted_tokens + s * mean) / (r.num_draft_tokens + s) / mean if mean > 0 else 1.0
            out.append((max(0, r.params.max_tokens - len(r.output_token_ids)), rho))
        return out

    def _probe_subset(self, decoding, caps: tuple[int, ...]) -> tuple[tuple[int, ...] | None, tuple[int, ...]]:
        """A probe's requests (floor.probe_requests of them: those that may verify a draft token, then (the draft
        step's per-request estimate) the fewest drafts in its window, then the fewest pending refresh entries, then
        batch order) and the caps with the others' set to 0; (None, caps)
        when that is the whole batch."""
        n = probe_requests(len(decoding))
        if n >= len(decoding):
            return None, caps
        pending = self.engine.rounds.pending_entries
        # the draft step measures the requests it knows least about first (adaptive/batch_acceptance.py)
        drafts = self.step.window.drafts_of if self.step is not None and self.step.window.batch else (lambda rid: 0)
        order = sorted(range(len(decoding)), key=lambda i: (caps[i] == 0, drafts(decoding[i].request_id),
                                                            pending(decoding[i].request_id), i))
        subset = tuple(sorted(order[:n]))
        return subset, tuple(c if i in subset else 0 for i, c in enumerate(caps))

    def token_value(self, B: int) -> float:
        """Adaptive verify's weight of extra tokens for this round (adaptive/closed_batch.py): below 1 only
        while no request waits for a slot."""
        return 1.0 if self.engine.scheduler.waiting else self.token_value_closed(B)

    def token_value_closed(self, B: int) -> float:
        """closed_batch_value for B requests, from the installed table (memoised until reset())."""
        if self.table is None or not self.table.metadata.plain_ms:
            return 1.0
        if B not in self._closed_values:
            self._closed_values[B] = closed_batch_value(B, 0, self.geometry.request_buckets, self.table.plain_cost_ms)
        return self._closed_values[B]

    def observe(self, result, round_id: int, plan: RoundPlan | None = None, seconds: float | None = None,
                decode_only: bool = False) -> None:
        """A completed round's result, as the normal result path delivered it (R-C4). With its `plan`, the
        `seconds` it took as served and whether its batch held only decoding requests (`decode_only`), the draft
        step also prices k = 1 from served rounds (adaptive/step_served.py)."""
        if self.step is not None:
            # with the confidence stop, the most each request could verify (its cap): a draft that ended short of it
            # stopped (adaptive/step_depth.py)
            stopped = (plan is not None and plan.stop_below > 0 and plan.admission == "fixed" and not plan.exact
                       and len(plan.verify_lens) == len(result.verify_lens))
            self.step.observe(result.verify_lens, result.num_accepted, round_id=round_id,
                              ceilings=plan.verify_lens if stopped else None)  # kept only with ceiling pricing
            if plan is not None and seconds is not None and round_id is not None and self._timed_rounds:
                # pure: decode only, no probe subset, every request drafted and verified the round's k; with ceiling
                # pricing, or at the greedy ceiling (whose rounds are never planned k = 1 ones), a round the confidence
                # stop ended at one step d for every request is served at k = d
                stop = plan.stop_below if self.step.policy.ceiling_pricing or plan.ceiling else 0.0
                k, pure = served_kind(plan.num_steps, plan.verify_lens, result.verify_lens, stop, decode_only,
                                      plan.probe, plan.draft_only is not None)
                self.step.observe_round(round_id, len(result.verify_lens), k, 1000.0 * seconds, pure)
            return
        if seconds is not None and round_id is not None and plan is not None:  # sync verify's served prices
            self.verify.observe_round(round_id, result.verify_lens, plan.num_steps > 0, 1000.0 * seconds,
                                      decode_only and not plan.probe and plan.draft_only is None, result.num_accepted)
        if any(result.draft_scores) and (self.verify.mode == "async" or self.floor is not None):
            # a round that skipped its draft has no scores, nor do the requests a probe left out;
            # synchronous admission without the floor's gate reads no lagged feedback at all (its heap
            # would only grow)
            drafted = [i for i, s in enumerate(result.draft_scores) if s]
            self.verify.observe([result.draft_scores[i] for i in drafted], round_id=round_id,
                                verify_lens=[result.verify_lens[i] for i in drafted],
                                accepted=[result.num_accepted[i] for i in drafted])

    def summary(self) -> dict:
        if self.step is not None:
            return {"chosen_k": dict(sorted(self.step.k_histogram.items())), **self.step.exploration_summary(),
                    "cost_checks": self.step.cost_checks, "ceiling_batches": self.ceiling_batches}
        return {"chosen_G": dict(sorted(self.verify.g_histogram.items())),
                **(self.floor.summary() if self.floor is not None else {}),
                **({"confidence_ratio": round(self.verify.confidence_ratio(), 4)} if self.verify.mode == "sync" else {}),
                **({"served_corrections": self.verify.served.priced()} if self.verify.served is not None else {})}
