"""One ``/metrics`` exposition of every replica's, for one scrape of the ingress.

Each replica's samples get a ``replica`` label (``relabel``), and each
family's samples come together with its ``HELP``/``TYPE`` once (``merge``),
as the exposition format asks. ``fleet_lines`` adds what only the ingress
knows: how many replicas answered the scrape, and how many did not (a
frozen one's series are missing from the scrape, not stale: the gauge says
so, docs/distributed.md "Health").
"""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = ["FLEET_FAMILY", "fleet_lines", "merge", "relabel"]

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?(\s.*)$")
FLEET_FAMILY = "tierlm_fleet_replicas"


def relabel(text: str, replica: str) -> list[tuple[str, str]]:
    """The exposition's lines as (family, line), each sample with a
    ``replica`` label; comment lines keep their family (``# TYPE name``)."""
    out: list[tuple[str, str]] = []
    family = ""
    value = replica.replace("\\", "\\\\").replace('"', '\\"')
    for line in text.splitlines():
        if not line.strip():
            continue
        if line.startswith("#"):
            parts = line.split()
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                family = parts[2]
            out.append((family, line))
            continue
        found = _SAMPLE.match(line)
        if found is None:
            continue
        name, _, labels, rest = found.groups()
        inner = f'replica="{value}"' + (f",{labels}" if labels else "")
        out.append((family or name, f"{name}{{{inner}}}{rest}"))
    return out


def merge(texts: Mapping[str, str]) -> str:
    """One exposition of every replica's (``relabel``): each family's HELP and
    TYPE once, then its samples from every replica."""
    heads: dict[str, list[str]] = {}
    samples: dict[str, list[str]] = {}
    for replica in sorted(texts):
        for family, line in relabel(texts[replica], replica):
            if line.startswith("#"):
                head = heads.setdefault(family, [])
                if line not in head:
                    head.append(line)
            else:
                heads.setdefault(family, [])
                samples.setdefault(family, []).append(line)
    lines: list[str] = []
    for family, head in heads.items():
        lines += head
        lines += samples.get(family, [])
    return "\n".join(lines) + "\n"


def fleet_lines(answered: int, silent: int) -> str:
    """The ingress's own family: replicas by whether they answered this scrape."""
    return (
        f"# HELP {FLEET_FAMILY} Replicas of the fleet, by whether they answered this scrape.\n"
        f"# TYPE {FLEET_FAMILY} gauge\n"
        f'{FLEET_FAMILY}{{state="answered"}} {answered}\n'
        f'{FLEET_FAMILY}{{state="silent"}} {silent}\n'
    )
