"""The gateway's resident memory under the Batch API's floods (issue 54, item 6).

`tierlm serve --backend sim` runs as a real subprocess on 127.0.0.1, on a
fresh data directory, once per flood; its RSS is sampled every 0.1 s
(``_lib.gateway.server.Server``). Two floods, as the issue measured them:

- **lines**: a 3 MB file of 1 000 000 ``{}`` lines uploaded, then a batch
  created from it (``batches.max_requests`` is 50 000: a 400). Before, every
  line became an error line first (~390 MiB, 40 s); now reading stops at
  line 50 001.
- **downloads**: a ~90 MB file uploaded, then fetched by 8 clients at once.
  Before, each request held the whole file (+950 MiB).

Reported per flood: RSS before (after a warm-up upload and download), right
after, the peak while it ran (samples and the kernel's VmHWM), seconds, and
the answer. ``--baseline SRC`` runs the same against another checkout's
``src`` (``PYTHONPATH``), e.g. one made with ``git archive <commit> src``.

    python bench/store_memory.py [--baseline /tmp/old/src]

Writes store_memory.json to the results folder (bench/_lib/results.py).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from _lib.gateway.server import Server
from _lib.results import load_now, machine, results_file

RESULTS = results_file("store_memory")
MiB = 1 << 20
TIMEOUT = 600.0
LINES = 1_000_000
DOWNLOADERS = 8
BIG_BYTES = 90 * 1000 * 1000


def upload(client: httpx.Client, content: bytes, name: str = "x.jsonl") -> str:
    answer = client.post(
        "/v1/files", data={"purpose": "batch"}, files={"file": (name, content)}, timeout=TIMEOUT
    )
    answer.raise_for_status()
    return str(answer.json()["id"])


def download(url: str, file_id: str) -> int:
    received = 0
    with httpx.stream("GET", f"{url}/v1/files/{file_id}/content", timeout=TIMEOUT) as response:
        response.raise_for_status()
        for chunk in response.iter_bytes():
            received += len(chunk)
    return received


def lines_flood(server: Server, client: httpx.Client) -> dict[str, Any]:
    file_id = upload(client, b"{}\n" * LINES)
    started = time.perf_counter()
    answer = client.post(
        "/v1/batches",
        json={
            "input_file_id": file_id,
            "endpoint": "/v1/chat/completions",
            "completion_window": "24h",
        },
        timeout=TIMEOUT,
    )
    return {
        "seconds": round(time.perf_counter() - started, 2),
        "status": answer.status_code,
        "message": answer.json().get("error", {}).get("message"),
    }


def downloads_flood(server: Server, client: httpx.Client) -> dict[str, Any]:
    line = b'{"custom_id": "x", "pad": "' + b"p" * 990 + b'"}\n'
    content = line * (BIG_BYTES // len(line))
    file_id = upload(client, content, "big.jsonl")
    size = len(content)
    del content
    started = time.perf_counter()
    with ThreadPoolExecutor(DOWNLOADERS) as pool:
        got = list(pool.map(lambda _: download(server.url, file_id), range(DOWNLOADERS)))
    return {
        "seconds": round(time.perf_counter() - started, 2),
        "file_bytes": size,
        "all_whole": all(g == size for g in got),
    }


def measure(
    flood: Callable[[Server, httpx.Client], dict[str, Any]], src: str | None
) -> dict[str, Any]:
    previous = os.environ.get("PYTHONPATH")
    if src is not None:
        os.environ["PYTHONPATH"] = src
    data_dir = tempfile.mkdtemp(prefix="tierlm-store-memory-")
    server = Server(["--backend", "sim", "--data-dir", data_dir, "--log-level", "warning"])
    try:
        server.start()
        with httpx.Client(base_url=server.url, timeout=TIMEOUT) as client:
            warm = upload(client, b"{}\n" * 1000)
            download(server.url, warm)
            time.sleep(0.5)
            before = server.rss()
            mark = time.perf_counter()
            outcome = flood(server, client)
            time.sleep(0.5)
            after = server.rss()
            peak = max((rss for at, rss in server.samples if at >= mark), default=after)
            return {
                **outcome,
                "rss_before_mib": round(before / MiB, 1),
                "rss_after_mib": round(after / MiB, 1),
                "rss_peak_mib": round(max(peak, after) / MiB, 1),
                "growth_peak_mib": round((max(peak, after) - before) / MiB, 1),
                "vm_hwm_mib": round((server.vm_hwm() or 0) / MiB, 1),
            }
    finally:
        server.stop()
        server.close()
        if previous is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = previous


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", metavar="SRC", help="also run another checkout's src")
    args = parser.parse_args()
    load = load_now()
    runs: dict[str, dict[str, Any]] = {}
    variants: list[tuple[str, str | None]] = [("this checkout", None)]
    if args.baseline:
        variants.append(("baseline", args.baseline))
    for label, src in variants:
        runs[label] = {
            "lines": measure(lines_flood, src),
            "downloads": measure(downloads_flood, src),
        }
        print(label, json.dumps(runs[label], indent=1))
    result = {
        "machine": machine(load, baseline=args.baseline),
        "floods": {
            "lines": f"{LINES} lines of {{}} (3 MB), then POST /v1/batches (max_requests 50000)",
            "downloads": f"{DOWNLOADERS} concurrent GET /v1/files/{{id}}/content of ~90 MB",
        },
        "runs": runs,
    }
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
