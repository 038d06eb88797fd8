"""What ``kvcanary inspect`` shows: a bundle as a readable text report, or as one self-contained HTML page
(inline CSS and SVG, no external asset) with the slot's owner timeline, the record diff, the owners'
block tables with the slot marked, and the bug class.
"""

from __future__ import annotations

import html
from typing import Any

from kvcanary.evidence.format import Bundle


def _diff_rows(rec: dict[str, Any]) -> list[tuple[str, str, str, bool]]:
    """(field, expected, found, differs) of one record entry."""
    stored = rec.get("stored") or {}
    exp = rec.get("expected") or {}
    out = []
    for name in ("token", "position", "prev_hash"):
        e = exp.get(name)
        f = stored.get(name)
        es = "-" if e is None else str(e)
        fs = "-" if f is None else str(f)
        out.append((name, es, fs, e is not None and f is not None and str(e) != str(f)))
    out.append(("real_kv_hash", "(recomputed by replay)", str(stored.get("real_kv_hash", "-")), False))
    owner = exp.get("owner")
    if owner:  # the write-time owner check: the writer's row against the owner map's entry for the slot
        out.append(("owner", f"req_pool_idx={owner['writer']}", f"held by {_holder(int(owner['holder']))}", True))
    return out


def _holder(value: int) -> str:
    """An owner-map entry as the violation log prints it."""
    if value >= 0:
        return f"req_pool_idx={value}"
    return "free" if value == -1 else f"read-only ({value})"


def _unique_records(meta: dict[str, Any]) -> list[tuple[list[str], dict[str, Any]]]:
    """Record entries that differ, each with the tags that share it."""
    seen: dict[str, tuple[list[str], dict[str, Any]]] = {}
    for r in meta["records"]:
        key = repr((r.get("stored"), r.get("expected")))
        if key in seen:
            seen[key][0].append(r["tag"])
        else:
            seen[key] = ([r["tag"]], r)
    return list(seen.values())


def text_report(bundle: Bundle) -> str:
    """The report ``kvcanary inspect BUNDLE`` prints."""
    m = bundle.meta
    a = m["attribution"]
    lines = [
        f"kvcanary evidence bundle (format {m['format']} v{m['version']}): slot {m['slot']} of the {m['group']} group",
        f"  recorded at step {m['step_recorded']}, reported at step {m['step_pumped']}; engine: {m['engine']}; "
        f"kvcanary {m['kvcanary_version']}, torch {m.get('torch_version', '?')}",
        "",
        f"Most likely bug class: {a['bug_class'].replace('_', ' ')}",
        f"  {a['reason']}",
        *(f"  note: {n}" for n in a.get("notes", ())),
        "",
        f"Violations ({len(m['rows'])} rows):",
    ]
    for r in m["rows"]:
        codes = ", ".join(str(c) for c in r["codes"])
        lines.append(f"  {r['tag']:<12} slot {r['fields'][1]:<6} position {r['fields'][2]:<6} "
                     f"{'+'.join(r['fail_reasons'])} (codes {codes}), ring index {r['ring_index']}")
    lines += ["", "Expected vs found:"]
    for tags, rec in _unique_records(m):
        lines.append(f"  {', '.join(tags)}:")
        lines.append(f"    {'field':<13} {'expected':<22} found")
        for name, e, f, differs in _diff_rows(rec):
            lines.append(f"    {name:<13} {e:<22} {f}{'   <-- differs' if differs else ''}")
        nb = rec.get("neighbour")
        if nb and nb.get("anchor"):
            lines.append("    chain neighbour: none (a chain head: its prev_hash is the anchor)")
        elif nb and nb.get("record"):
            n = nb["record"]
            lines.append(f"    chain neighbour: slot {nb['slot']} (token {n['token']}, position {n['position']}, "
                         f"prev_hash {n['prev_hash']})")
    lines += ["", "Who owned the slot:"]
    if a.get("writer"):
        wp = a.get("written_positions")
        lines.append(f"  last writer: {a['writer']} (step {a['write_step']}"
                     + (f", positions {wp[0]}..{wp[1]}" if wp else "") + ")")
    else:
        lines.append("  last writer: unknown (no write in the journal)")
    lines.append(f"  other holders: {', '.join(a['holders']) if a['holders'] else 'none recorded'}")
    if a.get("intended_slot") is not None:
        lines.append(f"  misdirected write: intended slot {a['intended_slot']}, actual slot {a['actual_slot']}")
    if m["readers"]:
        lines.append(f"  requests whose table names the slot now: {', '.join('request:' + r for r in m['readers'])}")
    lines += ["", f"Journal of block {m['slot'] // max(1, int(m.get('block_size', 1)))} (oldest first):"]
    if not m["journal"]:
        lines.append("  (no journal events)")
    if any(e.get("carried") for e in m["journal"]):
        lines.append("  (truncated: the block's newest events only; the first entries, marked carried, are its "
                     "state when they begin)")
    for e in m["journal"]:
        pos = (f" positions {e['first_position']}..{e['last_position']}" if e["first_position"] is not None else "")
        lines.append(f"  step {e['step']:<5} {e['kind']:<12} {e['owner'] or ('nobody' if e.get('carried') else '')}"
                     f"{pos}{' (carried)' if e.get('carried') else ''}")
    if m["owners"]:
        lines += ["", "Requests:"]
    for o in m["owners"]:
        where = [p for p, s in zip(o["positions"], o["slots"], strict=True) if s == m["slot"]]
        lines.append(f"  request:{o['request_id']} ({o['role']}, {'live' if o['live'] else 'not running'}): "
                     f"{len(o['tokens'])} positions, block table {_short(o['block_table'])}"
                     + (f"; slot {m['slot']} at position {', '.join(map(str, where))}" if where else ""))
    rp = m["replay"]
    lines += ["", f"Replay: {len(rp['verify'])} verify entries and {len(rp['write'])} writes on {rp['backend']} "
              f"(real-KV mode {rp['real_kv_mode']}); `kvcanary replay` re-runs them."]
    for u in rp["unreplayable"]:
        lines.append(f"  not replayable: {u}")
    return "\n".join(printable(line) for line in lines) + "\n"


def printable(text: str) -> str:
    """``text`` with every character a terminal would act on (control characters, a newline, bidi overrides:
    what ``str.isprintable`` refuses) written as its Python escape, so a bundle's strings print as text."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _short(xs: list[int], n: int = 16) -> str:
    if len(xs) <= n:
        return str(xs)
    return "[" + ", ".join(map(str, xs[:n])) + f", ... ({len(xs)} entries)]"


_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;margin:24px;color:#1d2330;background:#fafbfc}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:24px 0 8px;border-bottom:1px solid #d0d7de}
.meta{color:#57606a} .badge{display:inline-block;padding:4px 10px;border-radius:12px;background:#cf222e;
color:#fff;font-weight:600} table{border-collapse:collapse;margin:6px 0} td,th{border:1px solid #d0d7de;
padding:3px 8px;text-align:left;font-family:ui-monospace,Menlo,monospace;font-size:12px}
th{background:#eef1f4} tr.differs td{background:#ffebe9} .grid{display:flex;flex-wrap:wrap;gap:2px;max-width:900px}
.cell{font:11px ui-monospace,monospace;padding:2px 4px;border:1px solid #d0d7de;background:#fff;min-width:24px;
text-align:center} .cell.marked{background:#cf222e;color:#fff;font-weight:700} svg text{font:11px system-ui}
"""


def _e(x: object) -> str:
    return html.escape(str(x))


def _timeline_svg(meta: dict[str, Any]) -> str:
    events = meta["journal"]
    owners: list[str] = []
    for e in events:
        o = e["owner"] or "(free list)"
        if o not in owners:
            owners.append(o)
    steps = [e["step"] for e in events] + [meta["step_recorded"]]
    lo, hi = min(steps), max(steps)
    span = max(1, hi - lo)
    width, left, lane = 760, 150, 26
    height = 30 + lane * max(1, len(owners))

    def x(step: int) -> float:
        return float(left + (width - left - 20) * (step - lo) / span)

    colors = {"allocated": "#1a7f37", "shared": "#0969da", "cached": "#8250df", "written": "#bf8700",
              "released": "#57606a", "freed": "#cf222e", "quarantined": "#6e7781", "reinstated": "#1a7f37"}
    parts = [f'<svg id="timeline" width="{width}" height="{height}" '
             f'role="img" aria-label="owners and writes of the slot over steps">']
    for i, o in enumerate(owners):
        y = 20 + lane * i
        parts.append(f'<text x="4" y="{y + 4}">{_e(o)}</text>'
                     f'<line x1="{left}" y1="{y}" x2="{width - 20}" y2="{y}" stroke="#d0d7de"/>')
    for e in events:
        y = 20 + lane * owners.index(e["owner"] or "(free list)")
        c = colors.get(e["kind"], "#1d2330")
        parts.append(f'<circle class="event" cx="{x(e["step"]):.1f}" cy="{y}" r="5" fill="{c}">'
                     f'<title>step {e["step"]}: {_e(e["kind"])} {_e(e["owner"] or "")}</title></circle>')
    xr = x(meta["step_recorded"])
    parts.append(f'<line x1="{xr:.1f}" y1="8" x2="{xr:.1f}" y2="{height - 4}" stroke="#cf222e" '
                 f'stroke-dasharray="4 3"/><text x="{xr + 4:.1f}" y="{height - 6}" fill="#cf222e">'
                 f'violation (step {_e(meta["step_recorded"])})</text></svg>')
    legend = " ".join(f'<span style="color:{c}">&#9679; {k}</span>' for k, c in colors.items())
    return "".join(parts) + f'<div class="meta">{legend}</div>'


def html_report(bundle: Bundle) -> str:
    """One self-contained HTML page for the bundle."""
    m = bundle.meta
    a = m["attribution"]
    out = [f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>kvcanary bundle: slot "
           f"{_e(m['slot'])}</title><style>{_CSS}</style></head><body>",
           f"<h1>Slot {_e(m['slot'])} ({_e(m['group'])} group)</h1>",
           f"<div class=\"meta\">recorded at step {_e(m['step_recorded'])}, reported at step {_e(m['step_pumped'])}"
           f" &middot; {_e(m['engine'])} &middot; kvcanary {_e(m['kvcanary_version'])} &middot; format "
           f"{_e(m['format'])} v{_e(m['version'])}</div>",
           "<h2>Most likely bug class</h2>",
           f"<p><span id=\"bug-class\" class=\"badge\">{_e(a['bug_class'].replace('_', ' '))}</span></p>",
           f"<p id=\"bug-reason\">{_e(a['reason'])}</p>",
           *(f"<p class=\"meta\">note: {_e(n)}</p>" for n in a.get("notes", ())),
           "<h2>Owners and writes over time</h2>", _timeline_svg(m),
           "<ul id=\"owners\">"]
    out.append(f"<li>last writer: <b>{_e(a.get('writer') or 'unknown')}</b>"
               + (f" at step {_e(a['write_step'])}" if a.get("write_step") is not None else "") + "</li>")
    out.append(f"<li>other holders: <b>{_e(', '.join(a['holders']) or 'none recorded')}</b></li>")
    if a.get("intended_slot") is not None:
        out.append(f"<li>misdirected write: intended slot {_e(a['intended_slot'])}, actual slot "
                   f"{_e(a['actual_slot'])}</li>")
    out.append("</ul><h2>Record: expected vs found</h2><div id=\"record-diff\">")
    for tags, rec in _unique_records(m):
        out.append(f"<p>{_e(', '.join(tags))}</p><table><tr><th>field</th><th>expected</th><th>found</th></tr>")
        for name, e, f, differs in _diff_rows(rec):
            out.append(f"<tr class=\"{'differs' if differs else 'same'}\"><td>{_e(name)}</td><td>{_e(e)}</td>"
                       f"<td>{_e(f)}</td></tr>")
        out.append("</table>")
    out.append("</div><h2>Violation rows</h2><table id=\"rows\"><tr><th>tag</th><th>slot</th><th>position</th>"
               "<th>fail reasons</th><th>codes</th></tr>")
    for r in m["rows"]:
        out.append(f"<tr><td>{_e(r['tag'])}</td><td>{_e(r['fields'][1])}</td><td>{_e(r['fields'][2])}</td>"
                   f"<td>{_e('+'.join(r['fail_reasons']))}</td><td>{_e(', '.join(map(str, r['codes'])))}</td></tr>")
    out.append("</table><h2>Block tables</h2><div id=\"block-table\">")
    if not m["owners"]:
        out.append("<p>No request description in this bundle.</p>")
    for o in m["owners"]:
        out.append(f"<p>request:{_e(o['request_id'])} ({_e(o['role'])}, "
                   f"{'live' if o['live'] else 'not running'})</p><div class=\"grid\">")
        for p, s in zip(o["positions"], o["slots"], strict=True):
            cls = "cell marked" if s == m["slot"] else "cell"
            out.append(f"<span class=\"{cls}\" title=\"position {_e(p)}\">{_e(s)}</span>")
        out.append("</div>")
    out.append("</div><h2>Journal</h2><table id=\"journal\"><tr><th>step</th><th>event</th><th>owner</th>"
               "<th>positions</th></tr>")
    for e in m["journal"]:
        pos = f"{e['first_position']}..{e['last_position']}" if e["first_position"] is not None else ""
        kind = f"{e['kind']} (carried)" if e.get("carried") else e["kind"]
        out.append(f"<tr><td>{_e(e['step'])}</td><td>{_e(kind)}</td><td>{_e(e['owner'] or '')}</td>"
                   f"<td>{_e(pos)}</td></tr>")
    out.append("</table></body></html>\n")
    return "".join(out)
