"""The load generator of `adaspec bench-serve`: asyncio + httpx against any OpenAI-compatible server.

One `RequestResult` per request, timed on the client as `vllm bench serve` does: TTFT = first
streamed content chunk, ITL = every gap between content chunks (a multi-token speculative chunk is
one gap), TPOT = (latency - TTFT) / (output tokens - 1), output tokens from the stream's `usage`
(`stream_options.include_usage`) or, if the server sends none, the number of content chunks.
Arrivals: all at once behind a concurrency limit, or a Poisson process of `request_rate` per second.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass, field

from ..errors import UserError


class BenchError(UserError, ValueError):
    """A bench-serve flag or the target server is not usable as given."""


@dataclass(frozen=True)
class Prompt:
    source: str
    id: str
    text: str | None = None  # completions prompt, or the user message on the chat endpoint
    messages: tuple | None = None  # a whole conversation (multi-turn copy prompts)
    chat: bool = True


@dataclass
class RequestResult:
    ok: bool = False
    prompt_tokens: int = 0
    output_tokens: int = 0
    ttft: float = 0.0
    latency: float = 0.0
    itl: list[float] = field(default_factory=list)
    error: str = ""
    text: str = ""


def load_prompts(sets: list[str], n: int, seed: int = 0) -> tuple[list[Prompt], list[str]]:
    """`n` prompts drawn round-robin from the named sets (code, chat, prose, copy); returns the
    prompts and notes about sets that were skipped."""
    from ..training.corpus import heldout_prompts

    pools, notes = [], []
    for name in sets:
        if name == "copy":
            pool = _copy_prompts()
            if pool is None:
                notes.append("prompt set 'copy' skipped: adaspec/assets/copy_prompts_heldout.jsonl is not in "
                             "this installation yet")
                continue
        else:
            try:
                pool = [Prompt(it.source, it.id, it.text, None, it.chat) for it in heldout_prompts(name, max(n, 8))]
            except Exception as e:  # a missing corpus package: say which
                raise BenchError(f"--prompts={name}: {e}", param="--prompts") from None
        if pool:
            pools.append(pool)
    if not pools:
        raise BenchError(f"--prompts={','.join(sets)}: no prompts available", param="--prompts")
    rng = random.Random(seed)
    for pool in pools:
        rng.shuffle(pool)
    out = [pools[i % len(pools)][(i // len(pools)) % len(pools[i % len(pools)])] for i in range(n)]
    return out, notes


def _copy_prompts() -> list[Prompt] | None:
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "assets" / "copy_prompts_heldout.jsonl"
    if not path.is_file():
        return None
    out = []
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
        if not line.strip():
            continue
        row = json.loads(line)
        if "messages" in row:
            out.append(Prompt("copy", f"copy:{i}", None, tuple(dict(m) for m in row["messages"]), True))
        else:
            out.append(Prompt("copy", f"copy:{i}", row["prompt"], None, True))
    return out


class Target:
    """Where and how to send requests."""

    def __init__(self, base_url: str, model: str | None, endpoint: str, api_key: str | None,
                 max_tokens: int, temperature: float, ignore_eos: bool, timeout: float):
        self.base_url = base_url.rstrip("/")
        self.model, self.endpoint, self.api_key = model, endpoint, api_key
        self.max_tokens, self.temperature, self.ignore_eos, self.timeout = max_tokens, temperature, ignore_eos, timeout

    @property
    def headers(self) -> dict:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def request(self, p: Prompt) -> tuple[str, dict]:
        body = {"model": self.model, "max_tokens": self.max_tokens, "temperature": self.temperature,
                "stream": True, "stream_options": {"include_usage": True}}
        if self.ignore_eos:
            body["ignore_eos"] = True
        chat = self.endpoint == "chat" or (self.endpoint == "auto" and p.chat)
        if chat:
            body["messages"] = list(p.messages) if p.messages else [{"role": "user", "content": p.text}]
            return "/v1/chat/completions", body
        text = p.text if p.text is not None else "\n".join(m["content"] for m in p.messages)
        body["prompt"] = text
        return "/v1/completions", body


async def one_request(client, target: Target, p: Prompt) -> RequestResult:
    path, body = target.request(p)
    res = RequestResult()
    t0 = time.perf_counter()
    last = None
    chunks = 0
    try:
        async with client.stream("POST", target.base_url + path, json=body, headers=target.headers,
                                 timeout=target.timeout) as r:
            if r.status_code != 200:
                res.error = f"HTTP {r.status_code}: {(await r.aread()).decode(errors='replace')[:300]}"
                return res
            async for line in r.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                obj = json.loads(data)
                if "error" in obj:
                    res.error = str(obj["error"].get("message", obj["error"]))
                    return res
                if obj.get("usage"):
                    res.prompt_tokens = obj["usage"].get("prompt_tokens", 0)
                    res.output_tokens = obj["usage"].get("completion_tokens", 0)
                for ch in obj.get("choices") or []:
                    piece = ch.get("text") if "text" in ch else (ch.get("delta") or {}).get("content")
                    if piece:
                        now = time.perf_counter()
                        if last is None:
                            res.ttft = now - t0
                        else:
                            res.itl.append(now - last)
                        last = now
                        chunks += 1
                        res.text += piece
    except Exception as e:  # noqa: BLE001 - counted as a failed request, like vllm bench serve
        res.error = f"{type(e).__name__}: {e}"
        return res
    res.latency = time.perf_counter() - t0
    res.output_tokens = res.output_tokens or chunks
    res.ok = last is not None
    if not res.ok:
        res.error = "no content streamed"
    return res


async def run_level(target: Target, prompts: list[Prompt], concurrency: int | None, request_rate: float,
                    seed: int, progress=None) -> tuple[list[RequestResult], float]:
    """Send every prompt once; returns the results (prompt order) and the wall duration."""
    import httpx

    limit = asyncio.Semaphore(concurrency or len(prompts))
    rng = random.Random(seed)
    results: list[RequestResult | None] = [None] * len(prompts)
    limits = httpx.Limits(max_connections=(concurrency or len(prompts)) + 4, max_keepalive_connections=64)
    async with httpx.AsyncClient(limits=limits, timeout=target.timeout) as client:
        async def worker(i: int, delay: float) -> None:
            if delay:
                await asyncio.sleep(delay)
            async with limit:
                results[i] = await one_request(client, target, prompts[i])
            if progress is not None:
                progress.update(1)

        t0 = time.perf_counter()
        delays, t = [], 0.0
        for _ in prompts:
            delays.append(t)
            if request_rate != float("inf"):
                t += rng.expovariate(request_rate)
        await asyncio.gather(*(worker(i, d) for i, d in enumerate(delays)))
        duration = time.perf_counter() - t0
    return [r for r in results if r is not None], duration


async def scrape(base_url: str, metrics_url: str | None) -> dict[str, float] | None:
    """Sum of every sample of /metrics by name (labels folded in as name{label=value}); None if absent."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    url = metrics_url or base_url.rstrip("/") + "/metrics"
    try:
        async with httpx.AsyncClient(timeout=10) as client:
            r = await client.get(url)
        if r.status_code != 200:
            return None
        out: dict[str, float] = {}
        for fam in text_string_to_metric_families(r.text):
            for s in fam.samples:
                key = s.name + ("{" + ",".join(f"{k}={v}" for k, v in sorted(s.labels.items())) + "}" if s.labels else "")
                out[key] = out.get(key, 0.0) + s.value
        return out
    except Exception:  # noqa: BLE001 - a server without /metrics: acceptance is just not reported
        return None


async def served_model(base_url: str, api_key: str | None) -> str:
    import httpx

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        async with httpx.AsyncClient(timeout=30) as client:
            r = await client.get(base_url.rstrip("/") + "/v1/models", headers=headers)
        if r.status_code == 401:
            raise BenchError(f"--base_url={base_url}: the server answered 401 (unauthorised) for /v1/models; pass its key "
                             "with --api_key" + (" (the one given was refused)" if api_key else ""), param="--api_key")
        r.raise_for_status()
        return r.json()["data"][0]["id"]
    except BenchError:
        raise
    except Exception as e:  # noqa: BLE001
        raise BenchError(f"--base_url={base_url}: cannot read /v1/models ({type(e).__name__}: {e}); start the "
                         "server first or pass --model", param="--base_url") from None
