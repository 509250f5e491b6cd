"""Issue 54, items 1 and 2: a stored response is its key's (docs/design.md §9).
Another key cannot read it or continue it, and one key storing a lot forgets
its own oldest, never another key's."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from tests.server.helpers import Gateway, serve, sim_settings

KEYS = [
    {"key": "sk-ann", "name": "ann", "classes": ["chat", "gana", "nataraj"]},
    {"key": "sk-bob", "name": "bob", "classes": ["chat", "gana", "nataraj"]},
    {"key": "sk-admin", "name": "ops", "admin": True},
]
STORE_BYTES = 20_000


@pytest.fixture(scope="module")
def gw() -> Iterator[Gateway]:
    raw = {"keys": KEYS, "limits": {"responses_store_bytes": STORE_BYTES}}
    with serve(sim_settings(raw), key="sk-admin") as gateway:
        yield gateway


def test_another_key_cannot_read_or_continue_a_stored_response(gw: Gateway) -> None:
    """Item 1: key B asking for A's response gets 404, and B naming A's id as
    ``previous_response_id`` gets the 400 of an id never stored."""
    ann, bob = gw.openai("sk-ann"), gw.openai("sk-bob")
    mine = ann.responses.create(model="sim-a", input="my secret is 42", max_output_tokens=3)
    assert ann.responses.retrieve(mine.id).id == mine.id
    with pytest.raises(openai.NotFoundError):
        bob.responses.retrieve(mine.id)
    with pytest.raises(openai.BadRequestError) as info:
        bob.responses.create(
            model="sim-a", previous_response_id=mine.id, input="and?", max_output_tokens=3
        )
    assert info.value.code == "previous_response_not_found"
    # The owner still continues it.
    ann.responses.create(
        model="sim-a", previous_response_id=mine.id, input="and?", max_output_tokens=3
    )


def test_one_key_storing_a_lot_forgets_its_own_not_anothers(gw: Gateway) -> None:
    """Item 2: B stores far more than the whole store holds; A's conversation,
    within its share, is still there for A's next turn."""
    ann, bob = gw.openai("sk-ann"), gw.openai("sk-bob")
    kept = ann.responses.create(model="sim-a", input="remember me", max_output_tokens=3)
    filler = "x" * 1500
    bobs = [
        bob.responses.create(model="sim-a", input=f"{i} {filler}", max_output_tokens=3).id
        for i in range(30)
    ]
    store = gw.app.state.responses_store
    assert store.size <= STORE_BYTES
    # A's next turn continues its conversation (the one pool forgot it: 400).
    ann.responses.create(
        model="sim-a", previous_response_id=kept.id, input="still there?", max_output_tokens=3
    )
    assert bob.responses.retrieve(bobs[-1]).id == bobs[-1]
    with pytest.raises(openai.NotFoundError):
        bob.responses.retrieve(bobs[0])  # B's own oldest went
