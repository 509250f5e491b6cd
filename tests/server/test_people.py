"""Who is a person, through the gateway (docs/design.md §4.11): the real app,
driven through its ASGI interface in virtual time (sim backend, 8 slots)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx

from tests.payloads import HI, chat_body
from tests.server.helpers import fresh_data_dir, virtual_gateway
from tierlm.core.people import NEW_NAMES_AT
from tierlm.server.settings.sources import settings_from_dict
from tierlm.testing import run_virtual

T = TypeVar("T")
TOKEN = 0.02
KEYS = [
    {"key": "sk-ide", "name": "ide", "classes": ["chat", "gana"], "person": True},
    {"key": "sk-etl", "name": "etl", "classes": ["chat", "gana"], "person": False},
    {"key": "sk-app", "name": "app", "classes": ["chat", "gana"]},
]


def settings(**people: Any) -> Any:
    return settings_from_dict(
        {
            "backend": {"kind": "sim", "slots": 8, "token_interval": TOKEN},
            "people": people,
            "keys": KEYS,
            "batches": {"data_dir": str(fresh_data_dir())},
            "embeddings": {"backend": "none"},
        }
    )


async def on_app(test: Callable[[httpx.AsyncClient], Awaitable[T]], **people: Any) -> T:
    async with virtual_gateway(settings(**people)) as client:
        return await test(client)


def body(tokens: int = 20, **more: Any) -> dict[str, Any]:
    return chat_body(max_tokens=tokens, messages=HI, **more)


def served(reply: httpx.Response) -> str:
    assert reply.status_code == 200, reply.text
    return reply.headers["x-tierlm-served-as"]


async def chats(client: httpx.AsyncClient, key: str, n: int, gap: float, **more: Any) -> list[str]:
    """``n`` chats one after the other, ``gap`` s after each answer: how each was served."""
    out = []
    for _ in range(n):
        reply = await client.post(
            "/v1/chat/completions", json=body(**more), headers={"Authorization": f"Bearer {key}"}
        )
        out.append(served(reply))
        await asyncio.sleep(gap)
    return out


async def test_a_request_carrying_a_tool_s_result_is_a_program_s() -> None:
    tool_turn = [
        *HI,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "search", "arguments": '{"q": "tides"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "High tide at 6."},
    ]

    async def test(client: httpx.AsyncClient) -> list[str]:
        app = {"Authorization": "Bearer sk-app"}
        first = await client.post("/v1/chat/completions", json=body(), headers=app)
        await asyncio.sleep(8.0)  # the tool runs for 8 s: no one reads meanwhile
        after_tool = await client.post(
            "/v1/chat/completions",
            json=chat_body(max_tokens=20, messages=tool_turn),
            headers=app,
        )
        return [served(first), served(after_tool)]

    first, after_tool = await on_app(test)
    assert first.startswith("person")
    assert after_tool == "program; why=after-a-tool-call"


async def test_an_agent_loop_is_served_as_a_program_from_its_second_request() -> None:
    async def test(client: httpx.AsyncClient) -> tuple[list[str], list[str]]:
        loop = await chats(client, "sk-app", 4, 0.0)
        reader = await chats(client, "sk-app", 3, 5.0, user="alice")
        return loop, reader

    loop, reader = await on_app(test)
    assert loop == [
        "person; why=first-request",
        "program; why=back-to-back",
        "program; why=back-to-back",
        "program; why=back-to-back",
    ]
    # Another identity behind the same key (the user field): judged on its own.
    assert reader == [
        "person; why=first-request",
        "person; why=reads-between-requests",
        "person; why=reads-between-requests",
    ]


async def test_a_client_inventing_a_user_for_each_request_does_not_hold_the_guard() -> None:
    async def test(client: httpx.AsyncClient) -> list[str]:
        out = []
        for i in range(NEW_NAMES_AT + 4):  # keyless, a new `user` each time, back to back
            reply = await client.post("/v1/chat/completions", json=body(user=f"u{i}"))
            out.append(served(reply))
        return out

    verdicts = await _keyless_app(test)
    assert verdicts[:NEW_NAMES_AT] == ["person; why=first-request"] * NEW_NAMES_AT
    assert verdicts[NEW_NAMES_AT:] == ["program; why=a-new-name-each-request"] * 4


async def test_a_key_pins_person_or_program_and_a_named_class_is_taken_at_its_word() -> None:
    async def test(client: httpx.AsyncClient) -> tuple[list[str], list[str], str]:
        ide = await chats(client, "sk-ide", 3, 0.0)  # an editor's autocomplete
        etl = await chats(client, "sk-etl", 2, 10.0)  # a pipeline that sleeps between calls
        named = await client.post(
            "/v1/chat/completions",
            json=body(),
            headers={"Authorization": "Bearer sk-app", "X-Tierlm-Class": "chat"},
        )
        return ide, etl, served(named)

    ide, etl, named = await on_app(test)
    assert ide == ["person; why=key-says-person"] * 3
    assert etl == ["program; why=key-says-program"] * 2
    assert named == "person; why=class-named"


async def test_the_state_api_lists_identities_and_their_verdicts() -> None:
    async def test(client: httpx.AsyncClient) -> dict[str, Any]:
        for _ in range(3):
            reply = await client.post(
                "/v1/chat/completions", json=body(), headers={"User-Agent": "my-agent/1.0"}
            )
            assert reply.status_code == 200
        return (await client.get("/v1/scheduler/state")).json()["people"]

    people = await _keyless_app(test)
    [agent] = [i for i in people["identities"] if i["client"] == "my-agent"]
    assert agent["served_as"] == "program" and agent["why"] == "back-to-back"
    assert agent["short_gaps"] == 2 and agent["in_flight"] == 0


async def _keyless_app(test: Callable[[httpx.AsyncClient], Awaitable[T]]) -> T:
    keyless = {
        "backend": {"kind": "sim", "slots": 8, "token_interval": TOKEN},
        "batches": {"data_dir": str(fresh_data_dir())},
        "embeddings": {"backend": "none"},
    }
    async with virtual_gateway(settings_from_dict(keyless)) as client:
        return await test(client)


def test_one_keyless_agent_loop_leaves_eight_producers_most_of_the_device() -> None:
    """docs/design.md §4.11's measured case, shortened: eight producers (a
    header each) beside one keyless agent loop keep >= 0.8x their tokens
    alone; with every keyless request a person's, the guard took most."""

    async def run(agent: bool) -> int:
        produced = [0]

        async def scenario(client: httpx.AsyncClient) -> int:
            loop = asyncio.get_running_loop()
            start, end = loop.time() + 5.0, loop.time() + 35.0

            async def producer(i: int) -> None:
                headers = {"X-Tierlm-Class": "gana", "X-Tierlm-Producer": f"p{i}"}
                while loop.time() < end:
                    reply = await client.post(
                        "/v1/chat/completions", json=body(50), headers=headers
                    )
                    reply.raise_for_status()
                    if start <= loop.time() < end:
                        produced[0] += reply.json()["usage"]["completion_tokens"]

            async def agent_loop() -> None:
                while loop.time() < end:
                    reply = await client.post(
                        "/v1/chat/completions", json=body(30), headers={"User-Agent": "agent/1"}
                    )
                    reply.raise_for_status()

            await asyncio.gather(
                *(producer(i) for i in range(8)), *([agent_loop()] if agent else [])
            )
            return produced[0]

        return await _keyless_app(scenario)

    alone = run_virtual(run(agent=False))
    beside = run_virtual(run(agent=True))
    assert beside >= 0.8 * alone, (beside, alone)


async def test_a_list_of_prompts_is_one_request_judged_once() -> None:
    # Legacy completions take a list of prompts: one request, one verdict.
    # Judged per prompt, its own prompts would be "alongside" each other, and
    # its person's next message, after reading, a program's.
    async def test(client: httpx.AsyncClient) -> tuple[str, str]:
        app = {"Authorization": "Bearer sk-app"}
        many = await client.post(
            "/v1/completions",
            json={"model": "sim-a", "prompt": ["a", "b", "c", "d"], "max_tokens": 5},
            headers=app,
        )
        await asyncio.sleep(5.0)  # reads the four answers
        reply = await client.post("/v1/chat/completions", json=body(), headers=app)
        return served(many), served(reply)

    many, after = await on_app(test)
    assert many == "person; why=first-request"
    assert after == "person; why=reads-between-requests"


async def test_a_fan_out_s_first_request_joins_the_pool_once_the_others_show_a_program() -> None:
    # A script sends four requests at once from a new identity: the first is
    # a person's for want of evidence; the three alongside are the evidence.
    # From then on the first is served as they are: no chat holds the device,
    # and the batch is not cut around it (eight background streams beside).
    keyless = settings_from_dict(
        {
            "backend": {"kind": "sim", "slots": 8, "token_interval": TOKEN},
            "batches": {"data_dir": str(fresh_data_dir())},
            "embeddings": {"backend": "none"},
        }
    )
    async with virtual_gateway(keyless) as client:
        background = [
            asyncio.create_task(
                client.post(
                    "/v1/chat/completions",
                    json=body(400),
                    headers={"X-Tierlm-Class": "gana", "X-Tierlm-Producer": f"p{i}"},
                )
            )
            for i in range(8)
        ]
        await asyncio.sleep(1.0)
        script = {"User-Agent": "eval-script/1.0"}
        fan_out = [
            asyncio.create_task(client.post("/v1/chat/completions", json=body(200), headers=script))
            for _ in range(4)
        ]
        await asyncio.sleep(1.0)
        batch = (await client.get("/dashboard/state")).json()["batch"]
        verdicts = [served(await reply) for reply in fan_out]
        await asyncio.gather(*background)
    assert verdicts[0] == "person; why=first-request"  # as it was admitted
    assert verdicts[1:] == ["program; why=alongside-another"] * 3
    assert [job["class"] for job in batch if job["class"] == "chat"] == []
    assert len(batch) == 8  # a full batch: no person's guard cuts it
