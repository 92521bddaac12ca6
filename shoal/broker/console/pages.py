"""The web console's HTML: the view dicts of ``views.py`` written out as pages. Sans-IO.

Why hand-written HTML and no template engine: the pages are a few tables, and
one rule covers every value -- it goes through ``esc`` (``html.escape`` with
quotes) or ``_href`` (percent-encoded, then escaped) on its way out, so a key,
a value, a group id or a member id holding markup is shown as text. The pages
load no inline script or style, so the Content-Security-Policy the routes send
(scripts and styles from the console itself only) holds as a second line.

Colours are the Okabe-Ito palette (told apart with the common colour-vision
deficiencies), and each state also has its own fill pattern and its name in
text, so no information rests on colour alone.
"""

from __future__ import annotations

import html
import time
from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import quote, urlencode

from shoal.broker.console.views import FORMATS, MAX_BROWSE, STATE_ORDER

__all__ = ["dead_letters_page", "esc", "not_found_page", "overview_page", "share_group_page", "topic_page"]

STRIP_WIDTH = 1000  # the strip's SVG user units across
STATIC = "/console/static"


def esc(value: Any) -> str:
    """Any value as HTML text (attributes included: quotes are escaped too)."""
    return html.escape("" if value is None else str(value), quote=True)


def _href(*parts: str, query: dict[str, Any] | None = None) -> str:
    path = "/console/" + "/".join(quote(str(p), safe="") for p in parts)
    if query:
        path += "?" + urlencode(query)
    return esc(path)


def _time(ms: int | None) -> str:
    if ms is None or ms < 0:
        return ""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d} UTC"


def _page(title: str, body: str, *, poll: str | None = None, crumbs: Sequence[tuple[str, str]] = ()) -> str:
    nav = " <span aria-hidden='true'>&rsaquo;</span> ".join(
        ['<a href="/console">Overview</a>', *(f'<a href="{h}">{esc(t)}</a>' for t, h in crumbs)]
    )
    poll_attr = f' data-poll="{poll}"' if poll else ""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{esc(title)} · Shoal console</title>
<link rel="stylesheet" href="{STATIC}/console.css">
<script src="{STATIC}/console.js" defer></script>
</head><body{poll_attr}>
<a class="skip" href="#main">Skip to content</a>
<header><span class="brand">Shoal console</span><nav aria-label="Breadcrumbs">{nav}</nav></header>
<main id="main" tabindex="-1">
<h1>{esc(title)}</h1>
{body}
</main>
{_PATTERNS}
</body></html>
"""


# Fill patterns per state (drawn once per page; the strips and the legend refer to them).
_PATTERNS = """<svg class="defs" aria-hidden="true" focusable="false" width="0" height="0"><defs>
<pattern id="pat-AVAILABLE" width="6" height="6" patternUnits="userSpaceOnUse"><rect width="6" height="6" fill="#56B4E9"/></pattern>
<pattern id="pat-ACQUIRED" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="6" height="6" fill="#E69F00"/><rect width="2" height="6" fill="#000" fill-opacity="0.35"/></pattern>
<pattern id="pat-ACKNOWLEDGED" width="6" height="6" patternUnits="userSpaceOnUse"><rect width="6" height="6" fill="#009E73"/><circle cx="3" cy="3" r="1" fill="#fff" fill-opacity="0.6"/></pattern>
<pattern id="pat-ARCHIVING" width="6" height="6" patternUnits="userSpaceOnUse"><rect width="6" height="6" fill="#D55E00" fill-opacity="0.5"/><path d="M0 6L6 0" stroke="#000" stroke-opacity="0.4"/></pattern>
<pattern id="pat-ARCHIVED" width="6" height="6" patternUnits="userSpaceOnUse"><rect width="6" height="6" fill="#D55E00"/><path d="M0 0L6 6M6 0L0 6" stroke="#000" stroke-opacity="0.4"/></pattern>
</defs></svg>"""


def sparkline(values: Sequence[float], label: str, unit: str = "/s", series: str = "") -> str:
    """A small inline SVG line of recent rates, with the latest value in text beside it.
    ``series`` names it for the overview's live redraw (console.js)."""
    w, h = 120, 24
    latest = f"{values[-1]:,.1f}{unit}" if values else "-"
    if len(values) < 2:
        line = ""
    else:
        top = max(values) or 1.0
        step = w / (len(values) - 1)
        pts = " ".join(f"{i * step:.1f},{h - 2 - (v / top) * (h - 4):.1f}" for i, v in enumerate(values))
        line = f'<polyline points="{pts}" fill="none" stroke="currentColor" stroke-width="1.5"/>'
    aria = esc(f"{label}: latest {latest} over the last {len(values)} s")
    return (
        f'<span class="spark" data-series="{esc(series)}" data-unit="{esc(unit)}" data-label="{esc(label)}">'
        f'<svg role="img" aria-label="{aria}" viewBox="0 0 {w} {h}" width="{w}" height="{h}">'
        f"{line}</svg> <span class='spark-value'>{esc(latest)}</span></span>"
    )


def _table(headers: Sequence[str], rows: Iterable[str], *, caption: str = "", cls: str = "") -> str:
    head = "".join(f'<th scope="col">{esc(h)}</th>' for h in headers)
    cap = f"<caption>{esc(caption)}</caption>" if caption else ""
    body = "".join(rows) or f'<tr><td colspan="{len(headers)}" class="empty">none</td></tr>'
    return f'<table class="{cls}">{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _num(n: Any) -> str:
    return "-" if n is None else f"{n:,}" if isinstance(n, int) else esc(n)


def _bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


# -- pages ----------------------------------------------------------------------------------
def overview_page(v: dict[str, Any]) -> str:
    facts = (
        f"<dl class='facts'><dt>Node</dt><dd>{esc(v['node_id'])}</dd><dt>Cluster</dt><dd>{esc(v['cluster_id'])}</dd>"
        f"<dt>Ready</dt><dd>{'yes' if v['ready'] else 'no'}</dd>"
        f"<dt>Listeners</dt><dd>{esc(', '.join(v['listeners']))}</dd>"
        f"<dt>HTTP</dt><dd>{esc(', '.join(v['http_listeners']))}</dd></dl>"
    )
    trows = []
    for t in v["topics"]:
        internal = " <span class='tag'>internal</span>" if t["internal"] else ""
        trows.append(
            f'<tr data-topic="{esc(t["name"])}"><th scope="row"><a href="{_href("topics", t["name"])}">'
            f"{esc(t['name'])}</a>{internal}</th><td class='n'>{t['partitions']}</td>"
            f"<td class='n' data-col='size'>{_bytes(t['size_bytes'])}</td><td class='n' data-col='records'>{_num(t['records'])}</td>"
            f"<td>{sparkline(t['in_rate'], 'records in per second', ' rec/s', 'in:' + t['name'])}</td>"
            f"<td>{sparkline([x / 1024 for x in t['out_bytes_rate']], 'fetched KiB per second', ' KiB/s', 'out:' + t['name'])}</td></tr>"
        )
    grows = []
    for g in v["groups"]:
        name = esc(g["group_id"])
        if g["type"] == "share":
            name = f'<a href="{_href("share-groups", g["group_id"])}">{name}</a>'
        spark = (
            sparkline(g.get("acquired_rate", []), "records acquired per second", " rec/s", "acq:" + g["group_id"])
            if g["type"] == "share"
            else ""
        )
        grows.append(
            f'<tr data-group="{esc(g["group_id"])}"><th scope="row">{name}</th><td>{esc(g["type"])}</td>'
            f"<td data-col='state'>{esc(g['state'])}</td><td class='n' data-col='members'>{g['members']}</td>"
            f"<td class='n' data-col='lag'>{_num(g['lag'])}</td>"
            f"<td>{spark}</td></tr>"
        )
    body = (
        facts
        + "<h2>Topics</h2>"
        + _table(("Topic", "Partitions", "Size", "Records", "Produced", "Fetched"), trows, cls="topics")
        + "<h2>Groups</h2>"
        + _table(("Group", "Type", "State", "Members", "Lag", "Acquired"), grows, cls="groups")
        + "<p class='note'>Rates are sampled while this page is open (at most once a second). "
        + "<span id='live-status'></span></p>"
    )
    return _page("Overview", body, poll="/console/api/overview")


def topic_page(t: dict[str, Any], r: dict[str, Any] | None) -> str:
    prows = [
        f"<tr data-partition='{p['index']}'><th scope='row'><a href=\"{_href('topics', t['name'], query={'partition': p['index']})}\">"
        f"{p['index']}</a></th><td class='n'>{_num(p['log_start'])}</td><td class='n'>{_num(p['high_watermark'])}</td>"
        f"<td class='n'>{_num(p['log_end'])}</td><td class='n'>{_bytes(p['size_bytes'])}</td></tr>"
        for p in t["partitions"]
    ]
    configs = (
        "".join(f"<dt>{esc(k)}</dt><dd>{esc(val)}</dd>" for k, val in t["configs"])
        or "<dt>Configs</dt><dd>defaults</dd>"
    )
    body = f"<dl class='facts'><dt>Topic id</dt><dd>{esc(t['topic_id'])}</dd>{configs}</dl>" + _table(
        ("Partition", "Log start", "High watermark", "Log end", "Size"), prows, caption="Partitions"
    )
    if r is not None:
        body += _browser(t["name"], r)
    return _page(f"Topic {t['name']}", body, crumbs=[(t["name"], _href("topics", t["name"]))])


def _browser(name: str, r: dict[str, Any]) -> str:
    fmts = "".join(
        f'<option value="{f}"{" selected" if f == r["format"] else ""}>{label}</option>'
        for f, label in zip(FORMATS, ("UTF-8", "JSON", "hex"))
    )
    form = (
        f'<form method="get" action="{_href("topics", name)}" class="browse">'
        f'<label>Partition <input name="partition" type="number" min="0" max="{r["partitions"] - 1}" value="{r["partition"]}"></label>'
        f'<label>From offset <input name="offset" type="number" value="{r["offset"]}"></label>'
        f'<label>Count <input name="count" type="number" min="1" max="{MAX_BROWSE}" value="{r["count"]}"></label>'
        f'<label>Show as <select name="format">{fmts}</select></label> <button type="submit">Show</button></form>'
    )
    notes = "".join(f"<p class='note' role='status'>{esc(n)}</p>" for n in r["notes"])
    q = {"partition": r["partition"], "count": r["count"], "format": r["format"]}
    prev_off = max(r["log_start"], r["offset"] - r["count"])
    next_off = r["records"][-1]["offset"] + 1 if r["records"] else r["offset"]
    pager = (
        f'<p class="pager"><a href="{_href("topics", name, query={**q, "offset": prev_off})}">← earlier</a> '
        f'<a href="{_href("topics", name, query={**q, "offset": next_off})}">later →</a> '
        f"<span>log start {r['log_start']:,}, high watermark {r['high_watermark']:,}</span></p>"
    )
    rows = []
    for rec in r["records"]:
        headers = "".join(f"<li><b>{esc(k)}</b>: {_shown(val)}</li>" for k, val in rec["headers"])
        rows.append(
            f"<tr data-offset='{rec['offset']}'><th scope='row'>{rec['offset']}</th><td>{esc(_time(rec['timestamp']))}</td>"
            f"<td class='data'>{_shown(rec['key'])}</td><td class='data'>{_shown(rec['value'])}</td>"
            f"<td><ul class='headers'>{headers}</ul></td></tr>"
        )
    title = f"<h2>Records of partition {r['partition']}</h2>"
    table = _table(("Offset", "Timestamp", "Key", "Value", "Headers"), rows, cls="records")
    return title + form + notes + pager + table


def _shown(d: dict[str, Any]) -> str:
    if d["text"] is None:
        return "<span class='null'>null</span>"
    cut = " <span class='tag'>cut</span>" if d["cut"] else ""
    return f"<pre class='fmt-{esc(d['format'])}' data-format='{esc(d['format'])}'>{esc(d['text'])}</pre>{cut}"


def legend() -> str:
    items = "".join(
        f'<li><svg width="18" height="12" aria-hidden="true"><rect width="18" height="12" class="st st-{s}"/></svg> {s.lower()}</li>'
        for s in STATE_ORDER
    )
    return f'<ul class="legend" aria-label="States">{items}<li><span class="hole-swatch"></span> no record (hole)</li></ul>'


def run_title(run: dict[str, Any]) -> str:
    n = run["last"] - run["first"] + 1
    what = f"offset {run['first']:,}" if n == 1 else f"offsets {run['first']:,} to {run['last']:,} ({n:,} records)"
    text = f"{what}: {run['state']}, delivery count {run['deliveries']}"
    if run.get("member"):
        text += f", owner {run['member']}"
    if "lock_left_ms" in run:
        text += f", lock until {_time(run['lock_deadline_ms'])} ({run['lock_left_ms'] / 1000:.1f} s left)"
    if run.get("pending"):
        text += ", write pending"
    return text


def strip(p: dict[str, Any]) -> str:
    """The in-flight window [SPSO, SPEO] as one SVG row of runs, each with its details as a title."""
    total = p["speo"] - p["spso"] + 1
    label = esc(
        f"In-flight records of {p.get('topic', '')}-{p['partition']}, offsets {p['spso']} to {p['speo']}: "
        + ", ".join(f"{n:,} {s.lower()}" for s, n in p["counts"].items())
    )
    rects = []
    if total > 0:
        scale = STRIP_WIDTH / total
        for run in p["runs"]:
            x = (run["first"] - p["spso"]) * scale
            w = (run["last"] - run["first"] + 1) * scale
            pending = " pending" if run.get("pending") else ""
            rects.append(
                f'<rect class="st st-{esc(run["state"])}{pending}" x="{x:.3f}" width="{w:.3f}" y="0" height="1" '
                f'data-first="{run["first"]}" data-last="{run["last"]}" data-state="{esc(run["state"])}" '
                f'data-deliveries="{run["deliveries"]}" data-member="{esc(run.get("member") or "")}">'
                f"<title>{esc(run_title(run))}</title></rect>"
            )
    undrawn = p["undrawn_from"]
    more = (
        f"<p class='note'>Offsets {undrawn:,} to {p['speo']:,} not drawn (more than {len(p['runs']):,} runs); "
        "the counts cover them.</p>"
        if undrawn is not None
        else ""
    )
    return (
        f'<svg class="strip" role="img" tabindex="0" aria-label="{label}" viewBox="0 0 {STRIP_WIDTH} 1" '
        f'preserveAspectRatio="none">{"".join(rects)}</svg>{more}'
    )


def _partition(p: dict[str, Any]) -> str:
    key = esc(f"{p['topic']}/{p['partition']}")
    counts = "".join(
        f'<tr><th scope="row"><svg width="14" height="10" aria-hidden="true"><rect width="14" height="10" class="st st-{s}"/></svg> '
        f'{s.lower()}</th><td class="n" data-state="{s}">{n:,}</td></tr>'
        for s, n in p["counts"].items()
    )
    fields = (
        ("spso", "Start offset (SPSO)"),
        ("speo", "End offset (SPEO)"),
        ("high_watermark", "High watermark"),
        ("in_flight", "In flight"),
        ("lag", "Lag"),
        ("holes", "Holes"),
        ("pending", "Write pending"),
    )
    facts = "".join(f'<dt>{esc(label)}</dt><dd data-field="{f}">{p[f]:,}</dd>' for f, label in fields)
    runs = "".join(
        f"<tr><td class='n'>{r['first']:,}</td><td class='n'>{r['last']:,}</td><td>{esc(r['state'].lower())}</td>"
        f"<td class='n'>{r['deliveries']}</td><td>{esc(r.get('member') or '')}</td>"
        f"<td>{esc(_time(r.get('lock_deadline_ms')))}</td></tr>"
        for r in p["runs"][:500]
    )
    return (
        f'<section class="sp" data-key="{key}" data-topic="{esc(p["topic"])}" data-partition="{p["partition"]}" '
        f'aria-labelledby="h-{key}"><h3 id="h-{key}"><a href="{_href("topics", p["topic"], query={"partition": p["partition"]})}">'
        f"{esc(p['topic'])}-{p['partition']}</a></h3>"
        f"<div class='sp-grid'><dl class='facts'>{facts}</dl>"
        f"<table class='counts'><caption>Records per state</caption><tbody>{counts}</tbody></table></div>"
        f"<div class='strip-box'>{strip(p)}</div>"
        f"<details><summary>Runs (first 500, as a table)</summary>"
        + _table(("First", "Last", "State", "Deliveries", "Owner", "Lock until"), [runs])
        + "</details></section>"
    )


def _assignment(assignment: list[tuple[str, list[int]]]) -> str:
    return "; ".join(t + ": " + ", ".join(map(str, ps)) for t, ps in assignment)


def share_group_page(g: dict[str, Any], poll: str) -> str:
    mrows = [
        f'<tr data-member="{esc(m["member_id"])}"><th scope="row"><code>{esc(m["member_id"])}</code></th>'
        f"<td>{esc(m['client_id'])}</td><td>{esc(m['client_host'])}</td><td class='n'>{m['member_epoch']}</td>"
        f"<td>{esc(', '.join(m['subscribed']))}</td>"
        f"<td>{esc(_assignment(m['assignment']))}</td></tr>"
        for m in g["members"]
    ]
    crows = [
        f"<tr><th scope='row'>{esc(k)}</th><td>{esc(val)}</td><td>{esc(src)}</td></tr>" for k, val, src in g["configs"]
    ]
    totals = ", ".join(f"{n:,} {s.lower()}" for s, n in g["totals"].items())
    dlq = (
        f'<a href="{_href("dead-letters", g["group_id"])}">Dead letters ({esc(g["dead_letter_topic"])})</a>'
        if g["dead_letter_topic"]
        else "no dead-letter topic configured"
    )
    live = (
        "<p class='live'><button type='button' id='live-toggle' aria-pressed='true'>Pause live updates</button> "
        "<span id='live-status'>updated at page load</span></p>"
    )
    parts = "".join(_partition(p) for p in g["partitions"]) or "<p class='empty'>No share partition is loaded yet.</p>"
    body = (
        f"<dl class='facts'><dt>State</dt><dd data-field='state'>{esc(g['state'])}</dd><dt>Group epoch</dt>"
        f"<dd>{g['group_epoch']}</dd><dt>Lag</dt><dd data-field='lag'>{g['lag']:,}</dd><dt>Totals</dt>"
        f"<dd data-field='totals'>{esc(totals)}</dd><dt>Dead letters</dt><dd>{dlq}</dd></dl>"
        + live
        + "<h2>Members</h2>"
        + _table(("Member", "Client id", "Host", "Epoch", "Subscribed", "Assignment"), mrows, cls="members")
        + "<h2>Share partitions</h2>"
        + legend()
        + parts
        + "<h2>Group configs</h2>"
        + _table(("Setting", "Value", "Source"), crows, cls="configs")
    )
    crumbs = [(g["group_id"], _href("share-groups", g["group_id"]))]
    return _page(f"Share group {g['group_id']}", body, poll=poll, crumbs=crumbs)


def dead_letters_page(d: dict[str, Any]) -> str:
    gid = d["group_id"]
    crumbs = [(gid, _href("share-groups", gid)), ("dead letters", _href("dead-letters", gid))]
    if d["topic"] is None:
        body = "<p class='empty'>This group has no dead-letter topic (errors.deadletterqueue.topic.name).</p>"
    elif not d["exists"]:
        body = f"<p class='empty'>The dead-letter topic {esc(d['topic'])} does not exist.</p>"
    else:
        rows = []
        for rec in d["records"]:
            ctx = rec["context"]
            others = "".join(f"<li><b>{esc(k)}</b>: {_shown(val)}</li>" for k, val in rec["other_headers"])
            rows.append(
                f"<tr data-offset='{rec['offset']}'><th scope='row'>{rec['partition']}:{rec['offset']}</th>"
                f"<td>{esc(_time(rec['timestamp']))}</td>"
                + "".join(
                    f"<td data-context='{c}'>{esc(ctx.get(c, ''))}</td>" for c in ("topic", "partition", "offset")
                )
                + f"<td class='n' data-context='delivery.count'>{esc(ctx.get('delivery.count', ''))}</td>"
                f"<td data-context='message'>{esc(ctx.get('message', ''))}</td>"
                f"<td class='data'>{_shown(rec['key'])}</td><td class='data'>{_shown(rec['value'])}</td>"
                f"<td><ul class='headers'>{others}</ul></td></tr>"
            )
        body = f'<p>Topic <a href="{_href("topics", d["topic"])}">{esc(d["topic"])}</a></p>' + _table(
            (
                "Record",
                "Timestamp",
                "Topic",
                "Partition",
                "Offset",
                "Deliveries",
                "Reason",
                "Key",
                "Value",
                "Other headers",
            ),
            rows,
            cls="records dlq",
        )
    return _page(f"Dead letters of {gid}", body, crumbs=crumbs)


def not_found_page(what: str) -> str:
    return _page("Not found", f"<p class='empty' id='not-found'>{esc(what)}</p>")
