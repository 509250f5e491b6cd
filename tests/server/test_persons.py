"""Who is a person (docs/design.md §4.2): with API keys, the key, whatever
producer ids its requests send; names within a key that ``names_persons``
share the key's turn; without keys, the producer.

Through ``tierlm serve --backend sim`` on 127.0.0.1 (one slot): the scheduler
is paused while one key queues 24 chats under 24 producer ids, then another
person one; resumed, the chats start one after another, and the order of
their first tokens is the order persons in turn serves them.
"""

from __future__ import annotations

import threading
import tomllib
from pathlib import Path

import httpx
import pytest
from starlette.requests import Request

from tests.helpers import wait_until_blocking
from tests.payloads import HI, chat_body
from tests.server.helpers import WAIT
from tests.server.serve_process import tierlm_serve
from tierlm.server.gateway.auth import KeyRing
from tierlm.server.gateway.metadata import job_meta
from tierlm.server.settings.sections import ServerSettings
from tierlm.server.settings.sources import settings_from_dict

CONFIG = """
[[keys]]
key = "sk-ops"
name = "ops"
admin = true

[[keys]]
key = "sk-app"
name = "app"
classes = ["chat"]

[[keys]]
key = "sk-front"
name = "front"
classes = ["chat"]
names_persons = true

[[keys]]
key = "sk-other"
name = "other"
classes = ["chat"]
"""
FLOOD = 24


def request(key: str | None, producer: str | None = None) -> Request:
    headers = [(b"authorization", f"Bearer {key}".encode())] if key else []
    if producer is not None:
        headers.append((b"x-tierlm-producer", producer.encode()))
    return Request({"type": "http", "path": "/v1/chat/completions", "headers": headers})


def person(settings: ServerSettings, key: str | None, producer: str | None) -> tuple[str, ...]:
    ring = KeyRing(settings.keys, settings.classes, "chat")
    http = request(key, producer)
    return job_meta(http.headers, ring.authenticate(http), settings.classes).person


def test_a_key_is_one_person_unless_the_operator_lets_it_name_persons() -> None:
    keyed = settings_from_dict({"keys": tomllib.loads(CONFIG)["keys"]})
    assert person(keyed, "sk-app", "id7") == person(keyed, "sk-app", None) == ("app",)
    assert person(keyed, "sk-front", "id7") == ("front", "id7")
    assert person(keyed, "sk-front", None) == ("front",)
    # Without keys, the producer (each keyless client is a person, as sent).
    keyless = settings_from_dict({})
    assert person(keyless, None, "id7") == ()


def chat(url: str, key: str, producer: str, order: list[str], lock: threading.Lock) -> None:
    body = chat_body(max_tokens=4, messages=HI, stream=True)
    headers = {"Authorization": f"Bearer {key}", "X-Tierlm-Producer": producer}
    with httpx.stream(
        "POST", f"{url}/v1/chat/completions", json=body, headers=headers, timeout=WAIT
    ) as response:
        assert response.status_code == 200
        seen = False
        for line in response.iter_lines():
            if not seen and '"content":"' in line.replace(" ", ""):
                seen = True
                with lock:
                    order.append(f"{key}:{producer}")


def queued(url: str) -> int:
    state = httpx.get(
        f"{url}/v1/scheduler/state", headers={"Authorization": "Bearer sk-ops"}, timeout=WAIT
    ).json()
    return sum(len(jobs) for jobs in state["queued"].values())


def wait_queued(url: str, count: int) -> None:
    wait_until_blocking(lambda: queued(url) >= count, f"{count} queued", timeout=WAIT, every=0.02)


def first_tokens(url: str, flood_key: str) -> list[str]:
    """The order of first tokens: ``flood_key``'s 24 chats under 24 ids, then
    one of another key, all queued while the scheduler is paused."""
    admin = {"Authorization": "Bearer sk-ops"}
    assert httpx.post(f"{url}/v1/scheduler/pause", headers=admin, timeout=WAIT).status_code == 200
    order: list[str] = []
    lock = threading.Lock()
    threads = []
    for i in range(FLOOD + 1):
        key, producer = (flood_key, f"id{i}") if i < FLOOD else ("sk-other", "me")
        thread = threading.Thread(target=chat, args=(url, key, producer, order, lock))
        thread.start()
        threads.append(thread)
        wait_queued(url, i + 1)  # each submitted after the previous: arrival order
    assert httpx.post(f"{url}/v1/scheduler/resume", headers=admin, timeout=WAIT).status_code == 200
    for thread in threads:
        thread.join(WAIT)
    assert len(order) == FLOOD + 1
    return order


@pytest.mark.parametrize("flood_key", ["sk-app", "sk-front"])
def test_a_key_inventing_producer_ids_takes_one_persons_turns(
    tmp_path: Path, flood_key: str
) -> None:
    config = tmp_path / "tierlm.toml"
    config.write_text(CONFIG)
    argv = ("--config", str(config), "--backend", "sim", "--slots", "1")
    with tierlm_serve(*argv, "--token-interval", "0.005", "--log-level", "warning") as (url, _):
        order = first_tokens(url, flood_key)
    # The key's first chat (it came first), then the other person's: it waits
    # for one chat of the key, not for all 24 (it waited for all 24 when each
    # producer id was a person).
    assert order.index("sk-other:me") == 1, order
    if flood_key == "sk-front":
        # Its names are persons within its turn: each in turn, by arrival.
        assert [o for o in order if o != "sk-other:me"] == [
            f"{flood_key}:id{i}" for i in range(FLOOD)
        ]
