"""The guard's failure codes: one stable catalog code per reason the isolate policy fails a request.

Each code is numbered by the same code book as the contract checks (``kvcanary/codebook.json``, key
``RequestFailure/<slug>``, letter ``G``; ``kvcanary docs --update-codes`` numbers a new one and never
renumbers), has a generated catalog page (``kvcanary explain KVC-G001``), and keeps the name it had before
it was in the catalog as an alias (``KVCANARY-CORRUPT-READ``), which the request's error text still carries
so that alert rules matching it keep working.

Light on purpose: the manager and the engines import it; it reads the code book as plain JSON.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CONTRACT", "FAILURE_CODES", "LETTER", "QUARANTINED", "FailureCode", "failure_codes",
           "failure_message", "get", "quarantined_message", "reload"]

CONTRACT = "RequestFailure"
"""The code book's name for the guard's codes (keys ``RequestFailure/<slug>``)."""
LETTER = "G"
"""The letter of the guard's codes: ``KVC-G<nnn>``."""
_CODEBOOK = Path(__file__).resolve().parents[1] / "codebook.json"


@functools.cache
def _book() -> dict[str, str]:
    codes: dict[str, str] = json.loads(_CODEBOOK.read_text())["codes"]
    return codes


@dataclass(frozen=True)
class FailureCode:
    """Why the guard failed a request, and what its catalog page says."""

    slug: str  # the code book's key within :data:`CONTRACT`; also :data:`FAILURE_CODES`' key
    alias: str | None  # the name before the catalog (still in the error text), None for a code born here
    summary: str  # one line: the page's title and the metrics' help
    happened: str  # what happened
    operator_sees: str  # what the engine, the events and the metrics show
    action: str  # what to do about it

    @property
    def code(self) -> str:
        """The stable code (``KVC-G001``); ``KVC-G???`` until ``kvcanary docs --update-codes`` numbers it."""
        return _book().get(f"{CONTRACT}/{self.slug}", f"KVC-{LETTER}???")

    @property
    def tag(self) -> str:
        """What the request's error text ends with: the code, the alias, and the command that explains it."""
        alias = f" {self.alias}" if self.alias else ""
        return f"[{self.code}{alias}; run `kvcanary explain {self.code}`]"


_SEEN = ("The engine ends the request in its failed state with the one-line error text (its HTTP error, "
         "where it serves one); the rest of the batch keeps running. kvcanary logs a JSON `isolation` event "
         "on `kvcanary.events` whose `failed` entries carry this code, the check, slot, position and fail "
         "reasons, and counts it in `kvcanary_requests_failed_total{code=...}`.")
_WHEN_SEEN_MANY = ("One such failure is a corruption caught before it was served. Many, or a steady rate, "
                   "point at a bug in the engine's KV management (a slot freed while in use, a prefix cache "
                   "entry left pointing at reused pages, a transfer or a drafter writing where it must not) or "
                   "at failing memory: keep the violation events and an evidence bundle (`BundleSink`, read by "
                   "`kvcanary inspect`), and look at what the engine did to the block in the steps before `step`.")

_CODES: tuple[FailureCode, ...] = (
    FailureCode(
        slug="verify", alias="KVCANARY-CORRUPT-READ",
        summary="the request read KV that a per-forward verify found corrupt",
        happened=("A per-forward verify (the HEAD check before the forward, or the TAIL check after it) found "
                  "a slot of the request's live range whose canary record or real-KV fingerprint no longer "
                  "matches what was written there: its K or V bytes, token or position changed after the "
                  "write. The request's attention read that slot, so its next tokens would be computed from "
                  "corrupt KV."),
        operator_sees=_SEEN,
        action=("Nothing to do for the request itself: retry it; the slot's block is quarantined, so the "
                "retry recomputes the prefix from clean KV. " + _WHEN_SEEN_MANY)),
    FailureCode(
        slug="write", alias="KVCANARY-CORRUPT-WRITE",
        summary="the request was writing a KV slot with the wrong token or position",
        happened=("The write-time assert found that the token or the position the request was writing into a "
                  "slot is not the one its row expects (a token written at the wrong position, a slot mapping "
                  "that points at another request's slot, a stale draft token). The KV written there is not "
                  "the request's."),
        operator_sees=_SEEN,
        action=("Retry the request. A write assert points at the engine's slot mapping or its position "
                "bookkeeping (chunked prefill, speculative decoding, retract and resume): " + _WHEN_SEEN_MANY)),
    FailureCode(
        slug="sweep", alias="KVCANARY-CORRUPT-CACHED",
        summary="the request held a cached or shared KV block that the sweep found corrupt",
        happened=("The periodic sweep, which checks every slot the prefix cache keeps (blocks shared between "
                  "requests, or held by the cache alone), found one whose record or fingerprint no longer "
                  "matches. Every running request that held the block since the step that recorded it had a "
                  "prefix computed over the corrupt KV, or was about to reuse it."),
        operator_sees=_SEEN + " The block leaves the prefix cache, so no later request reuses it.",
        action=("Retry the request: the prefix is recomputed from clean KV. A corruption only the sweep finds "
                "sat in memory nothing was computing with, which points at a write through a stale mapping "
                "or at failing memory: " + _WHEN_SEEN_MANY)),
    FailureCode(
        slug="quarantined", alias=None,
        summary="the request held a KV block that the guard quarantined",
        happened=("A violation named a block, the guard quarantined it, and this request still held it (a "
                  "prefix it shared with a request the violation named, or a block it took after the "
                  "corruption): its KV there cannot be trusted, and the block leaves service, so the request "
                  "cannot continue on it. The error text names the quarantined blocks (or slots)."),
        operator_sees=("The engine ends the request in its failed state with the one-line error text, in the "
                       "step it carries out the decision that quarantined the block. The engine fails it, not "
                       "the policy: the decision's `isolation` event lists the block in `quarantined_blocks` (a "
                       "block of the sliding-window pool in `quarantined_blocks_swa`) and the requests the "
                       "violation named in `failed` (with their own codes). The engine's adapter then reports "
                       "this request: a follow-up `isolation` event of the same `step`, with no violations and "
                       "no blocks, lists it in `failed` with this code (`check` `quarantine`, `slot` the first "
                       "slot of the lowest quarantined block it held, `position` -1), and "
                       "`kvcanary_requests_failed_total{code=...}` and the health's `requests_failed` count it."),
        action=("Retry the request: the quarantined block is never handed out again until it is rewritten, "
                "so the retry recomputes its prefix. The violation behind it has its own code, on the other "
                "requests of the same event; look there for the cause.")),
)

FAILURE_CODES: dict[str, str] = {c.slug: c.code for c in _CODES}
"""The stable code of an isolated request, per reason: a per-forward verify found the KV the request read
corrupt (``verify``), the write-time assert found the token or position it was writing wrong (``write``),
the sweep found a cached or shared block it held corrupt (``sweep``), or it held a block the guard
quarantined for another request's violation (``quarantined``)."""


def reload() -> None:
    """Read the code book again (after ``kvcanary docs --update-codes`` numbered a code)."""
    _book.cache_clear()
    FAILURE_CODES.update({c.slug: c.code for c in _CODES})


def failure_codes() -> tuple[FailureCode, ...]:
    """Every failure code, in code book order of their slugs (verify, write, sweep, quarantined)."""
    return _CODES


def get(slug: str) -> FailureCode:
    """The failure code of ``slug`` (a key of :data:`FAILURE_CODES`)."""
    for c in _CODES:
        if c.slug == slug:
            return c
    raise KeyError(f"kv-canary: no failure code {slug!r}; known: {', '.join(FAILURE_CODES)}")


def failure_message(request_id: str, slug: str, *, check: str, slot: int, position: int, reasons: str,
                    step: int) -> str:
    """The one-line error of a request failed for a violation (``slug``: verify, write or sweep)."""
    return (f"kv-canary: request {request_id} failed: {check} found corrupt KV at slot {slot} position {position} "
            f"({reasons or 'none'}), recorded in step {step} {get(slug).tag}")


def quarantined_message(request_id: str, what: str, ids: list[int]) -> str:
    """The one-line error of a request failed because it holds quarantined ``what`` (``slot(s)``,
    ``block(s)``, ``ring block(s)``) ``ids``."""
    return f"kv-canary: request {request_id} failed: it holds quarantined {what} {ids} {QUARANTINED.tag}"


QUARANTINED = get("quarantined")
"""The code of a request failed because it held a block quarantined for another request's violation."""
