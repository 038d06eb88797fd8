"""A small OpenAI-protocol client over ``httpx``: concurrent chat completions (streaming or not), a scrape of
``/metrics`` parsed by prometheus-client's own parser, the health route. The serve demo drives the server with
it; what each request received (its text, or the error the server returned) is one :class:`ClientResult`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@dataclass(frozen=True)
class ClientResult:
    """What one request received: the HTTP status, the generated text, the error (None when it completed)."""

    request_id: str
    stream: bool
    status: int
    text: str
    error: str | None

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.error is None


def chat(url: str, prompt: str, *, request_id: str, stream: bool, max_tokens: int = 16,
         timeout: float = 120.0) -> ClientResult:
    """One chat completion (greedy) with ``X-Request-ID: request_id``; a streamed one is read to its end."""
    import httpx

    body: dict[str, Any] = {"messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
                            "temperature": 0.0, "stream": stream}
    headers = {"X-Request-ID": request_id}
    with httpx.Client(base_url=url, timeout=timeout) as client:
        if not stream:
            r = client.post("/v1/chat/completions", json=body, headers=headers)
            if r.status_code != 200:
                return ClientResult(request_id, False, r.status_code, "", r.text)
            return ClientResult(request_id, False, 200, r.json()["choices"][0]["message"].get("content") or "", None)
        parts: list[str] = []
        error: str | None = None
        with client.stream("POST", "/v1/chat/completions", json=body, headers=headers) as r:
            if r.status_code != 200:
                return ClientResult(request_id, True, r.status_code, "", r.read().decode(errors="replace"))
            for line in r.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                try:
                    chunk = json.loads(line[len("data: "):])
                except json.JSONDecodeError:  # an error text that is not valid JSON is still an error
                    error = line[len("data: "):]
                    continue
                if "error" in chunk:
                    error = str(chunk["error"])
                    continue
                for choice in chunk.get("choices", ()):
                    parts.append(choice.get("delta", {}).get("content") or "")
        return ClientResult(request_id, True, r.status_code, "".join(parts), error)


def run_workload(url: str, prompts: Sequence[str], *, tag: str, max_tokens: int = 16) -> dict[int, ClientResult]:
    """Every prompt at once (even ones streamed, odd ones not), request ids ``{tag}-{i}``; results by index."""
    with ThreadPoolExecutor(max_workers=len(prompts)) as pool:
        futures = {i: pool.submit(chat, url, p, request_id=f"{tag}-{i}", stream=i % 2 == 0, max_tokens=max_tokens)
                   for i, p in enumerate(prompts)}
        return {i: f.result() for i, f in futures.items()}


def scrape(url: str) -> Samples:
    """Every sample ``/metrics`` exposes, parsed by prometheus-client: ``(name, sorted labels) -> value``."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    r = httpx.get(f"{url}/metrics", timeout=30)
    r.raise_for_status()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(r.text) for s in fam.samples}


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels`` (0 when there are none)."""
    want = set(labels.items())
    return sum(v for (n, lab), v in samples.items() if n == name and want <= set(lab))


def health(url: str) -> tuple[int, dict[str, Any]]:
    """The health route's status code and JSON body."""
    import httpx

    r = httpx.get(f"{url}/kvcanary/health", timeout=30)
    body: dict[str, Any] = r.json()
    return r.status_code, body
