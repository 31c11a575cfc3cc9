"""Prometheus metrics of a serving engine (R-I2, issue 9), on prometheus-client.

Names follow vLLM's where a vLLM user already scrapes one, with the same meaning (PRIOR_ART.md,
"Metrics that existing tools read"); `<ns>` is `adaspec` unless `--metrics_namespace` changes it:

- requests and tokens: `<ns>:request_success_total{finished_reason}`, `<ns>:prompt_tokens_total`,
  `<ns>:generation_tokens_total`; gauges `<ns>:num_requests_running`, `<ns>:num_requests_waiting`,
  `<ns>:kv_slots_in_use`, `<ns>:kv_slots_capacity`, `<ns>:kv_cache_usage_perc` (the KV cache is
  preallocated per slot, so the slot fraction is the cache fraction);
- latency histograms: `<ns>:time_to_first_token_seconds`, `<ns>:request_time_per_output_token_seconds`
  (TPOT = (e2e - TTFT) / (output tokens - 1)), `<ns>:inter_token_latency_seconds` (every gap
  between outputs; a multi-token speculative output is one gap), `<ns>:e2e_request_latency_seconds`;
- speculation (vLLM semantics): `<ns>:spec_decode_num_drafts_total` (request-rounds that verified
  >= 1 draft token), `_num_draft_tokens_total`, `_num_accepted_tokens_total` (bonus excluded),
  `_num_accepted_tokens_per_pos_total{position=i}` (drafts whose first i+1 tokens were accepted);
- adaspec's own (names kept clear of `spec_decode...num_draft...` so `vllm bench serve` does not
  add them up): `<ns>:adaptive_chosen_k` (draft steps per round), `<ns>:adaptive_chosen_target_rows`
  (target rows G per round: the padded bucket under adaptive verify, else the exact rows),
  `<ns>:verified_rows_per_request` (1 + verified drafts, per request per round),
  `<ns>:confidence_expected_accepted_tokens_total` / `<ns>:confidence_actual_accepted_tokens_total`
  (sum over verified positions of the draft's path probability vs what was accepted: the calibration
  of its confidence), `<ns>:round_predicted_seconds_total` / `<ns>:round_measured_seconds_total` and
  the histogram `<ns>:round_cost_ratio` (measured / predicted, on pure-decode rounds the cost table
  covers: the cost-model error), `<ns>:round_duration_seconds` (every round); exploration and the
  plain floor (issue 13): `<ns>:adaptive_confidence_ratio` (sync adaptive verify's correction of the draft's
  confidences, adaptive/draft_calibration.py), `<ns>:adaptive_rounds_total`, `<ns>:adaptive_probe_rounds_total` (their
  ratio is the share of probe rounds), `<ns>:adaptive_plain_rounds_total` (rounds that drafted nothing) and
  `<ns>:adaptive_cost_check_rounds_total` (rounds the draft step runs to time k = 1 as served: plain ones in a k = 1
  stretch, k = 1 ones at k = 0). Round times are the
  engine's host timestamps at the round's existing result read-back (RoundEvent; no device sync).
"""

from __future__ import annotations

import threading
import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, generate_latest

LATENCY_BUCKETS = (0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
                   7.5, 10.0, 20.0, 40.0, 80.0, 160.0)
TOKEN_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
                         10.0, 20.0)
RATIO_BUCKETS = (0.5, 0.7, 0.8, 0.9, 0.95, 1.0, 1.05, 1.1, 1.2, 1.3, 1.5, 2.0, 3.0)


def _int_buckets(top: int) -> tuple[float, ...]:
    return tuple(float(i) for i in range(top + 1))


class ServerMetrics:
    """All series on one private registry; `observe_round` and `observe_output` run on the engine
    thread, `render` on the server's. `bind(engine)` connects the gauges to a built engine."""

    def __init__(self, namespace: str = "adaspec", max_width: int = 16, max_rows: int = 512):
        ns = namespace
        self.registry = r = CollectorRegistry()
        ProcessCollector(registry=r)  # process_cpu_seconds_total: benchmarks report CPU next to wall time
        self.finished = Counter(f"{ns}:request_success", "Finished requests by finish reason", ["finished_reason"],
                                registry=r)
        self.prompt_tokens = Counter(f"{ns}:prompt_tokens", "Prompt tokens of admitted requests", registry=r)
        self.generation_tokens = Counter(f"{ns}:generation_tokens", "Generated tokens", registry=r)
        self.running = Gauge(f"{ns}:num_requests_running", "Requests holding a slot", registry=r)
        self.waiting = Gauge(f"{ns}:num_requests_waiting", "Requests waiting for a slot", registry=r)
        self.slots_in_use = Gauge(f"{ns}:kv_slots_in_use", "KV cache slots in use", registry=r)
        self.slots_capacity = Gauge(f"{ns}:kv_slots_capacity", "KV cache slots (--max_seqs_per_batch)", registry=r)
        self.kv_usage = Gauge(f"{ns}:kv_cache_usage_perc", "Fraction of KV cache slots in use (0..1)", registry=r)
        self.confidence_ratio = Gauge(f"{ns}:adaptive_confidence_ratio",
                                      "Sync adaptive verify: the stream's accepted / predicted drafts that scale the "
                                      "draft's confidences (1 in other modes)", registry=r)
        self.ttft = Histogram(f"{ns}:time_to_first_token_seconds", "Arrival to first token", registry=r,
                              buckets=LATENCY_BUCKETS)
        self.tpot = Histogram(f"{ns}:request_time_per_output_token_seconds",
                              "(e2e - TTFT) / (output tokens - 1), per request", registry=r,
                              buckets=TOKEN_LATENCY_BUCKETS)
        self.itl = Histogram(f"{ns}:inter_token_latency_seconds", "Gap between consecutive outputs of a request",
                             registry=r, buckets=TOKEN_LATENCY_BUCKETS)
        self.e2e = Histogram(f"{ns}:e2e_request_latency_seconds", "Arrival to finish", registry=r,
                             buckets=LATENCY_BUCKETS)
        sd = f"{ns}:spec_decode"
        self.num_drafts = Counter(f"{sd}_num_drafts", "Request-rounds that verified at least one draft token",
                                  registry=r)
        self.num_draft_tokens = Counter(f"{sd}_num_draft_tokens", "Draft tokens verified", registry=r)
        self.num_accepted = Counter(f"{sd}_num_accepted_tokens", "Draft tokens accepted (bonus excluded)", registry=r)
        self.accepted_per_pos = Counter(f"{sd}_num_accepted_tokens_per_pos",
                                        "Drafts whose first position+1 tokens were all accepted", ["position"],
                                        registry=r)
        self.chosen_k = Histogram(f"{ns}:adaptive_chosen_k", "Draft steps k per speculative round", registry=r,
                                  buckets=_int_buckets(max_width))
        self.chosen_g = Histogram(f"{ns}:adaptive_chosen_target_rows", "Target rows G per speculative round",
                                  registry=r, buckets=_row_buckets(max_rows))
        self.verified_rows = Histogram(f"{ns}:verified_rows_per_request",
                                       "Target rows per decoding request per round (1 + verified drafts)",
                                       registry=r, buckets=_int_buckets(max_width + 1))
        self.expected_accepted = Counter(f"{ns}:confidence_expected_accepted_tokens",
                                         "Sum of the draft's path probabilities over verified positions", registry=r)
        self.actual_accepted = Counter(f"{ns}:confidence_actual_accepted_tokens",
                                       "Accepted draft tokens on the rounds counted in expected_accepted", registry=r)
        self.predicted_s = Counter(f"{ns}:round_predicted_seconds", "Cost-table prediction of covered rounds",
                                   registry=r)
        self.measured_s = Counter(f"{ns}:round_measured_seconds", "Measured time of the same rounds", registry=r)
        self.cost_ratio = Histogram(f"{ns}:round_cost_ratio", "Measured / predicted round time", registry=r,
                                    buckets=RATIO_BUCKETS)
        self.adaptive_rounds = Counter(f"{ns}:adaptive_rounds", "Decoding rounds planned by an adaptive controller",
                                       registry=r)
        self.probe_rounds = Counter(f"{ns}:adaptive_probe_rounds",
                                    "Adaptive rounds run only to keep the acceptance estimate alive (exploration)",
                                    registry=r)
        self.plain_rounds = Counter(f"{ns}:adaptive_plain_rounds",
                                    "Adaptive rounds that drafted nothing (k = 0, or the plain floor skipped the draft)",
                                    registry=r)
        self.cost_check_rounds = Counter(f"{ns}:adaptive_cost_check_rounds",
                                         "Rounds the adaptive draft step ran to time k = 1 as served "
                                         "(plain in a k = 1 stretch, k = 1 at k = 0)",
                                         registry=r)
        self.round_time = Histogram(f"{ns}:round_duration_seconds", "Measured time of every round", registry=r,
                                    buckets=TOKEN_LATENCY_BUCKETS)
        self._lock = threading.Lock()
        self._last: dict[str, tuple[float, int]] = {}  # request id -> (time of last output, tokens so far)
        self.engine = None

    # ---- wiring ---------------------------------------------------------------------------
    def bind(self, async_engine) -> None:
        """Gauges read the engine at scrape time (cheap reads of Python lists)."""
        self._async = async_engine

        def running() -> int:
            eng = async_engine.engine
            return len(eng.scheduler.running) if eng is not None else 0

        def capacity() -> int:
            eng = async_engine.engine
            return eng.config.max_seqs_per_batch if eng is not None else 0

        self.running.set_function(running)
        self.slots_in_use.set_function(running)
        self.slots_capacity.set_function(capacity)
        self.kv_usage.set_function(lambda: running() / capacity() if capacity() else 0.0)

        def confidence_ratio() -> float:
            verify = getattr(getattr(async_engine.engine, "control", None), "verify", None)
            return verify.confidence_ratio() if verify is not None else 1.0

        self.confidence_ratio.set_function(confidence_ratio)
        self.waiting.set_function(lambda: async_engine.num_waiting)
        async_engine.observers.append(self.observe_round)
        async_engine.on_output = self.observe_output
        async_engine.on_failed = self.observe_failed

    def render(self) -> bytes:
        return generate_latest(self.registry)

    # ---- engine thread --------------------------------------------------------------------
    def observe_output(self, out) -> None:
        now = time.perf_counter()
        rid, n = out.request_id, len(out.token_ids)
        last = self._last.get(rid)
        if last is None:
            self.prompt_tokens.inc(len(out.prompt_token_ids))
            if n and out.first_token_time is not None:
                self.ttft.observe(out.first_token_time - out.arrival_time)
        elif n > last[1]:
            self.itl.observe(now - last[0])
        prev = last[1] if last else 0
        if n > prev:
            self.generation_tokens.inc(n - prev)
        self._last[rid] = (now if n > prev else (last[0] if last else now), max(n, prev))
        if out.finished:
            self._last.pop(rid, None)
            self.finished.labels(out.finish_reason).inc()
            end = out.finish_time if out.finish_time is not None else now
            self.e2e.observe(end - out.arrival_time)
            if n > 1 and out.first_token_time is not None:
                self.tpot.observe((end - out.first_token_time) / (n - 1))

    def observe_failed(self, request_id: str) -> None:
        self._last.pop(request_id, None)
        self.finished.labels("error").inc()

    def observe_round(self, ev) -> None:
        res, plan = ev.result, ev.plan
        self.round_time.observe(ev.finished - ev.started)
        lens, acc = res.verify_lens, res.num_accepted
        control = getattr(self._async.engine, "control", None) if hasattr(self, "_async") else None
        if ev.decoding and control is not None:
            self.adaptive_rounds.inc()
            if plan.probe:
                self.probe_rounds.inc()
            if not plan.num_steps:
                self.plain_rounds.inc()
            if plan.cost_check:
                self.cost_check_rounds.inc()
        if not ev.decoding or not plan.num_steps:
            return
        drafts = [(L, m) for L, m in zip(lens, acc) if L]
        if drafts:
            self.num_drafts.inc(len(drafts))
            self.num_draft_tokens.inc(sum(L for L, _ in drafts))
            self.num_accepted.inc(sum(m for _, m in drafts))
            for i in range(max(m for _, m in drafts)):
                survived = sum(m > i for _, m in drafts)
                if survived:
                    self.accepted_per_pos.labels(str(i)).inc(survived)
        for L in lens:
            self.verified_rows.observe(1 + L)
        self.chosen_k.observe(plan.num_steps)
        B, rows = len(lens), len(lens) + sum(lens)
        geometry = control.geometry if control is not None else None
        bcap = geometry.pad_requests(B) if geometry is not None else None
        G = None
        if plan.admission == "budget":
            G = plan.row_budget
        elif bcap is not None and control.verify is not None:
            G = geometry.pad_rows(bcap, rows)
        self.chosen_g.observe(G if G is not None else rows)
        self._observe_confidence(res, lens, acc)
        pure_decode = len(ev.batch.chunks) == len(ev.decoding)
        if control is not None and bcap is not None and pure_decode:
            x = plan.num_steps if control.step is not None else G
            kv_len = max(r.num_computed for r in ev.decoding)
            predicted = control.table.cost_ms(bcap, x, kv_len) if x is not None else None
            if predicted:
                measured = ev.finished - ev.started
                self.predicted_s.inc(predicted / 1000.0)
                self.measured_s.inc(measured)
                self.cost_ratio.observe(measured / (predicted / 1000.0))

    def _observe_confidence(self, res, lens, acc) -> None:
        if not res.draft_scores:
            return
        expected = 0.0
        for scores, L in zip(res.draft_scores, lens):
            p = 1.0
            for s in scores[:L]:
                p *= min(1.0, max(0.0, float(s)))
                expected += p
        self.expected_accepted.inc(expected)
        self.actual_accepted.inc(sum(acc))


def _row_buckets(top: int) -> tuple[float, ...]:
    out, g = [], 1
    while g < top:
        out.append(float(g))
        g *= 2
    return tuple(out + [float(top)])
