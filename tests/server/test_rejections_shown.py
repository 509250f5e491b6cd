"""Issue 19's extra: recently rejected requests, with their reason, in the
state API and the dashboard's state (they were only a counter)."""

from __future__ import annotations

import openai
import pytest

from tests.payloads import chat_body
from tests.server.helpers import Gateway


def test_a_rejected_request_shows_in_the_state_api_and_the_dashboard(gateway: Gateway) -> None:
    with pytest.raises(openai.BadRequestError):
        gateway.openai().chat.completions.create(
            model="sim-a",
            messages=[{"role": "user", "content": "hi"}],
            extra_body={"frobnicate": 1},
        )
    assert (
        gateway.http.post("/v1/chat/completions", json=chat_body(max_tokens=0)).status_code == 400
    )
    rejected = gateway.state()["rejected"]
    assert [r["param"] for r in rejected[:2]] == ["max_tokens", "frobnicate"]  # newest first
    newest = rejected[0]
    assert newest["status"] == 400 and newest["path"] == "/v1/chat/completions"
    assert "max_tokens: must be between 1 and" in newest["message"]
    dashboard = gateway.http.get("/dashboard/state").json()
    assert dashboard["rejected"][:2] == rejected[:2]
    assert "Recently rejected" in gateway.http.get("/dashboard").text
