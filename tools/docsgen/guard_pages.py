"""The catalog pages of the guard's failure codes (``KVC-G…``): one per reason the isolate policy fails a
request, built from :mod:`kvcanary.guard.codes`.

A failure code is not raised as an exception: it is the error of one request, so its page has no failing
call; it shows the error text a request ends with (built by the same function the engines use), what
happened, what the operator sees, what to do, and where the code is declared.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Mapping
from dataclasses import dataclass

from kvcanary.guard import codes as guard_codes
from kvcanary.guard.codes import CONTRACT, FailureCode
from tools.docsgen.blocks import Block, Code, Items, Link, Para, Section, markdown, text

SECTIONS = ("The message", "What happened", "What the operator sees", "What to do", "Related codes",
            "Where it is declared")
"""The sections of every failure code's page, in order."""

_EXAMPLE: Mapping[str, tuple[str, int, str]] = {
    "verify": ("per_forward_tail_k_full", 2, "verify_real_kv_hash"),
    "write": ("per_forward_head_k_full", 7, "write_position"),
    "sweep": ("sweep_k_full", 33, "verify_real_kv_hash"),
}
"""Per slug, the check, slot and fail reason of the page's example text."""


@dataclass(frozen=True)
class GuardPage:
    """One failure code's page."""

    code: str
    failure: FailureCode
    error_text: str
    title: str
    lead: tuple[Block, ...]
    sections: tuple[Section, ...]

    @property
    def path(self) -> str:
        return f"errors/{self.code}.md"

    def markdown(self) -> str:
        return markdown(self.title, self.lead, self.sections)

    def text(self) -> str:
        return text(self.title, self.lead, self.sections)


def example_text(f: FailureCode) -> str:
    """The error text of a request failed with ``f``, as the engines build it (request ``req-7``)."""
    if f.slug == guard_codes.QUARANTINED.slug:
        return guard_codes.quarantined_message("req-7", "block(s)", [12])
    check, slot, reason = _EXAMPLE[f.slug]
    return guard_codes.failure_message("req-7", f.slug, check=check, slot=slot, position=slot % 16,
                                       reasons=reason, step=41)


def _declared(f: FailureCode) -> str:
    """Where ``f`` is declared: the file and the line of its ``slug=`` entry."""
    lines = inspect.getsource(guard_codes).splitlines()
    line = next(i for i, s in enumerate(lines, 1) if f'slug="{f.slug}"' in s)
    return f"`kvcanary/guard/codes.py`, line {line}"


def _page(f: FailureCode) -> GuardPage:
    alias = (f"Before it had a catalog code it was `{f.alias}`; the error text still carries that name, so alert "
             "rules written against it keep matching." if f.alias else "")
    lead: list[Block] = [Para(f"**{f.summary[0].upper() + f.summary[1:]}.** The error of one request failed by "
                              "the `isolate` violation policy ([Violation policies](../policies.md)); not an "
                              "exception: the rest of the batch keeps running.")]
    message: list[Block] = [
        Code(example_text(f), "text", "Example (the request's error text)"),
        Para("The text ends with the code" + (", its alias" if f.alias else "") + " and the command that "
             "prints this page. The `isolation` event's `failed` entries carry the same facts as fields "
             "(`code`, `alias`, `check`, `slot`, `position`, `fail_reasons`, `step`)."
             if f.slug != guard_codes.QUARANTINED.slug else
             "The text ends with the code and the command that prints this page; it names the quarantined "
             "blocks (slots, in kvcanary's demo engine) the request held."),
    ]
    if alias:
        message.append(Para(alias))
    others = [o for o in guard_codes.failure_codes() if o is not f]
    related = (Para("The other reasons the isolate policy fails a request:"),
               Items(tuple(Link(o.code, f"{o.code}.md", f": {o.summary}") for o in others)))
    where = Items((f"The code and this page's text: {_declared(f)}.",
                   f"The number: key `{CONTRACT}/{f.slug}` in `kvcanary/codebook.json`."))
    sections = (
        Section(SECTIONS[0], tuple(message)),
        Section(SECTIONS[1], (Para(f.happened),)),
        Section(SECTIONS[2], (Para(f.operator_sees),)),
        Section(SECTIONS[3], (Para(f.action),)),
        Section(SECTIONS[4], related),
        Section(SECTIONS[5], (where,)),
    )
    return GuardPage(code=f.code, failure=f, error_text=example_text(f), title=f"{f.code}: {f.summary}",
                     lead=tuple(lead), sections=sections)


@functools.cache
def pages() -> dict[str, GuardPage]:
    """Every failure code's page, by code."""
    return {f.code: _page(f) for f in guard_codes.failure_codes()}


def index_markdown() -> list[str]:
    """The catalog index's section on the failure codes (lines)."""
    out = ["## Request failures (the isolate policy) {#request-failures}", "",
           "Not raised as exceptions: each is the error of one request that the `isolate` violation policy "
           "failed (see [Violation policies](../policies.md)), in its error text, its JSON `isolation` event and "
           "the `kvcanary_requests_failed_total` metric's `code` label.", "",
           "| code | alias | why the request failed |", "|---|---|---|"]
    for code, p in pages().items():
        alias = f"`{p.failure.alias}`" if p.failure.alias else ""
        out.append(f"| [{code}]({code}.md) | {alias} | {p.failure.summary} |")
    out.append("")
    return out
