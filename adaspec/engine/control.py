"""Adaptive control for one engine: prepared geometry, warm-up, the cost table, the controllers.

Built only when `--enable_adaptive_draft_step` or `--enable_adaptive_target_verify` is on (R-E5:
the static path does no warm-up, calibration or profiling). Start-up order (R-F2): choose and
prepare the geometry (sparse on CPU, `geometry.choose_prepared`, the reason logged), resolve the
calibration config (errors before any work, R-F5), warm every prepared shape the calibration will
not run itself (R-E4), then either load a saved table (R-G2) or log the effective configuration
(R-F7), drive real rounds with synthetic requests (engine/calibrate.py), fit, report each point's
spread, the noise and the held-out error (one warning line when the table is too noisy to trust),
optionally save (R-G1), and install the immutable table in the controllers before the engine
reports ready (the table's loading or calibration: engine/control_startup.py; the lines that describe the
controllers: engine/control_logs.py).

Per round the engine asks `plan()` for a RoundPlan and hands every completed result to
`observe()`. The lag between them is explicit: 1 for the synchronous engine, 2 with schedule
overlap (round n is planned while round n-1 runs, so it can only see rounds <= n-2). The draft step's plan and
observation are engine/control_step.py's (`StepRounds`, the base class); the verify side's are here.
"""

from __future__ import annotations

import dataclasses
import sys
import time

from ..adaptive.closed_batch import closed_batch_value, closed_batch_values
from ..adaptive.floor import PlainFloor, floor_applies, probe_requests
from ..adaptive.step_controller import DraftStepController, StepPolicy
from ..adaptive.verify_budget import budget_drafts
from ..adaptive.verify_controller import VerifyController
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
from .control_logs import step_lines, verify_lines
from .control_step import StepRounds
from .control_startup import load_or_calibrate


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class AdaptiveControl(StepRounds):
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
                for line in step_lines(self):
                    self.log(line)
        else:
            # None: the drafter's proposals cannot be foreseen from lagged feedback (floor.NEVER_SKIPPED)
            self.floor = PlainFloor() if floor_applies(getattr(self.engine, "drafter", None)) else None
            self.verify = VerifyController(
                self.width, self.table.cost_ms, self.geometry.pad_requests, dict(self.geometry.target_rows),
                self.geometry.pad_rows, mode="async" if cfg.enable_schedule_overlap else "sync", lag=self.lag,
                covers=self.table.covers, plain_ms=self.table.plain_cost_ms)
            self.engine.rounds.verify_controller = self.verify  # the runner's admission (R-D3, R-D4)
            if log:
                for line in verify_lines(self):
                    self.log(line)

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
                return RoundPlan(self.width, caps, "sync", round_id=round_id,
                                 token_value=self.request_values(decoding))
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
            return self._plan_step(decoding, caps, round_id, B, kv_len)
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
            return RoundPlan(self.width, caps, "budget", G, round_id, probe=verdict == "probe", draft_only=subset,
                             token_value=self.request_values(decoding))  # per request in a closed batch: the ranking
        verdict = (self.floor.decide(self.verify.predicts_gain(B, round_id=round_id, max_lens=list(caps), kv_len=kv_len,
                                                               token_value=value), any(caps), ids)
                   if self.floor is not None else "draft")
        if verdict == "skip":
            return RoundPlan(0, (0,) * B, round_id=round_id)
        subset, caps = self._probe_subset(decoding, caps) if verdict == "probe" else (None, caps)
        return RoundPlan(self.width, caps, "sync", round_id=round_id, probe=verdict == "probe",
                         token_value=self.request_values(decoding), draft_only=subset)

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

    def request_values(self, decoding) -> float | tuple[float, ...]:
        """The admission's weight of each decoding request's extra tokens (adaptive/closed_batch.py): `token_value` for
        all, or in a closed batch whose requests have unequal work to go, that value spread over them by what each
        one's earlier exit saves (closed_batch_values, averaging 1). Called for rounds that draft only; not memoised:
        the work to go shrinks every round, so no two rounds ask for the same weights."""
        value = self.token_value(len(decoding))
        if (self.engine.scheduler.waiting or len(decoding) <= 1 or self.table is None
                or not self.table.metadata.plain_ms):
            return value
        cap = self.engine.max_model_len
        remaining = tuple(max(0, min(r.params.max_tokens - len(r.output_token_ids), cap - r.num_tokens))
                          for r in decoding)
        weights = closed_batch_values(remaining, 0, self.geometry.request_buckets, self.table.plain_cost_ms)
        return value if weights is None else tuple(value * w for w in weights)

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
            self._observe_step(result, round_id, plan, seconds, decode_only)
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
