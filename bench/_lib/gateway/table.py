"""bench/gateway_load.py's report: the table printed after a run.

One row per figure, with the in-process and gateway variants side by side,
their difference and their ratio; times in ms below a second, else in s.
"""

from __future__ import annotations

from typing import Any

from rich.table import Table


def ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:,.1f} ms"


def secs(value: float | None) -> str:
    return "-" if value is None else f"{value:,.2f} s"


def ttft_cell(value: float | None) -> str:
    if value is None:
        return "-"
    return ms(value) if abs(value) < 1.0 else secs(value)


def mib(value: float | None) -> str:
    return "-" if value is None else f"{value / 2**20:,.1f} MiB"


def ratio(a: float | None, b: float | None) -> str:
    return "-" if not a or b is None else f"{b / a:.2f}x"


def table(inp: dict[str, Any], gw: dict[str, Any], server: dict[str, Any], title: str) -> Table:
    t = Table(title=title)
    for header in ("", "in-process", "gateway", "gateway - in-process", "ratio"):
        t.add_column(header, justify="left" if not header else "right")

    def errors(s: dict[str, Any]) -> str:
        n = sum(s["errors"].values())
        return f"{n}" + (
            "" if not n else " (" + ", ".join(f"{k}: {v}" for k, v in s["errors"].items()) + ")"
        )

    t.add_row(
        "requests ok / sent",
        f"{inp['ok']} / {inp['requests']}",
        f"{gw['ok']} / {gw['requests']}",
        "",
        "",
    )
    t.add_row("errors", errors(inp), errors(gw), "", "")
    t.add_row(
        "peak requests in flight", str(inp["peak_in_flight"]), str(gw["peak_in_flight"]), "", ""
    )
    for label, group in (
        ("all", "ttft_all"),
        ("chat", "ttft_chat"),
        ("background", "ttft_background"),
    ):
        for q in ("p50", "p99"):
            a, b = inp[group][q], gw[group][q]
            added = None if a is None or b is None else b - a
            t.add_row(
                f"TTFT {label} {q} (n={gw[group]['count']})",
                ttft_cell(a),
                ttft_cell(b),
                ttft_cell(added),
                ratio(a, b),
            )
    server_ttft = gw.get("server_view", {}).get("ttft_mean_by_class", {})
    if "chat" in server_ttft:
        # The gateway's own clock: submit -> first token produced, without HTTP.
        a, b = inp["ttft_chat"]["mean"], server_ttft["chat"]
        t.add_row(
            "TTFT chat mean, in the server",
            ttft_cell(a),
            ttft_cell(b),
            ttft_cell(None if a is None else b - a),
            ratio(a, b),
        )
    overhead = gw.get("http_overhead_mean_by_class", {})
    if overhead:
        chat = overhead.get("chat")
        bg = [v for c, v in overhead.items() if c != "chat"]
        t.add_row("HTTP+SSE cost, chat (mean)", "", ms(chat), "", "")
        if bg:
            t.add_row("HTTP+SSE cost, background (mean)", "", ms(sum(bg) / len(bg)), "", "")
    if "response_headers" in gw:
        t.add_row(
            "request -> response headers p50 / p99",
            "",
            f"{ms(gw['response_headers']['p50'])} / {ms(gw['response_headers']['p99'])}",
            "",
            "",
        )
    if "sse_comment_lines" in gw:
        t.add_row(
            "SSE lines read: comments / tokens",
            "",
            f"{gw['sse_comment_lines']:,} / {gw['tokens_delivered']:,}",
            "",
            "",
        )
    a, b = inp["tokens_per_second"], gw["tokens_per_second"]
    t.add_row(
        "tokens/s delivered",
        f"{a:,.1f}" if a else "-",
        f"{b:,.1f}" if b else "-",
        f"{b - a:+,.1f}" if a and b else "-",
        ratio(a, b),
    )
    t.add_row(
        "device busy (tokens/s x interval)",
        f"{inp['device_utilisation']:.1%}" if inp["device_utilisation"] else "-",
        f"{gw['device_utilisation']:.1%}" if gw["device_utilisation"] else "-",
        "",
        "",
    )
    t.add_row(
        "wall (release -> last token)",
        secs(inp["wall_seconds"]),
        secs(gw["wall_seconds"]),
        "",
        ratio(inp["wall_seconds"], gw["wall_seconds"]),
    )
    sv = gw.get("server_view", {})
    t.add_row(
        "preemptions",
        str(inp["scheduler"]["preemptions"]),
        str(int(sv.get("preemptions", 0))) if "preemptions" in sv else "-",
        "",
        "",
    )
    t.add_row(
        "bench loop lag p99 / max (background)",
        f"{ms(inp['loop_lag']['p99'])} / {ms(inp['loop_lag']['max'])}",
        f"{ms(gw['loop_lag']['p99'])} / {ms(gw['loop_lag']['max'])}",
        "",
        "",
    )
    own = sv.get("event_loop_lag") or {}
    if own.get("probes"):
        t.add_row(
            "gateway's own loop lag p99 (bucket) / max",
            "",
            f"<= {ms(own['p99_at_most'])} / {ms(own['max'])}",
            "",
            "",
        )
    chat_lag = gw.get("chat_process_loop_lag")
    if chat_lag:
        t.add_row(
            "bench loop lag p99 / max (chat process)",
            "",
            f"{ms(chat_lag['p99'])} / {ms(chat_lag['max'])}",
            "",
            "",
        )
    t.add_row("server peak RSS (VmHWM)", "", mib(server.get("vm_hwm_bytes")), "", "")
    t.add_row(
        "server RSS idle -> sampled max",
        "",
        f"{mib(gw.get('server_rss_idle_bytes'))} -> {mib(server.get('rss_sampled_max_bytes'))}",
        "",
        "",
    )
    t.add_row(
        "CPU s: server / this process",
        f"- / {inp['bench_cpu_seconds']:.1f}",
        f"{gw.get('server_cpu_seconds', 0):.1f} / {gw['bench_cpu_seconds']:.1f}",
        "",
        "",
    )
    return t
