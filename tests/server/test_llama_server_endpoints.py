"""llama-server's own endpoints (issue 56, item 9): ``/props`` and
``/slots`` as tools written for llama.cpp's server read them; on the sim
backend, which has no tokenizer and no FIM, ``/infill``, ``/tokenize`` and
``/detokenize`` answer a 400 naming the field (their success paths:
test_tokens_and_prompts.py, test_infill.py).
"""

from __future__ import annotations

import httpx

from tests.payloads import chat_body
from tests.server.helpers import serve, sim_settings, sse

KEYS = [{"key": "sk-admin", "admin": True}, {"key": "sk-app", "name": "app"}]


def test_props_and_slots_as_llama_server_answers_them() -> None:
    with serve(sim_settings({"backend": {"slots": 2}})) as gw:
        props = gw.http.get("/props").json()
        assert props["total_slots"] == 2 and props["model_path"] == "sim-a"
        assert props["default_generation_settings"]["params"]["n_predict"] > 0
        with sse(gw, chat_body(max_tokens=4000), {"X-Tierlm-Class": "gana"}) as stream:
            stream.next_data()
            slots = gw.http.get("/slots").json()
            assert [s["id"] for s in slots] == [0, 1]
            busy = [s for s in slots if s["is_processing"]]
            assert [s["id_task"] for s in busy] == [stream.job_id]
            assert busy[0]["tierlm"]["class"] == "gana"
            idle = [s for s in slots if not s["is_processing"]]
            assert idle[0]["id_task"] == -1


def test_slots_need_an_admin_key_and_the_rest_say_what_to_do() -> None:
    with serve(sim_settings({"keys": KEYS}), key="sk-admin") as gw:
        app = {"Authorization": "Bearer sk-app"}
        assert httpx.get(f"{gw.url}/slots", headers=app).status_code == 403
        assert httpx.get(f"{gw.url}/props", headers=app).status_code == 200
        bodies = {
            "/infill": ({"input_prefix": "x", "input_suffix": "y"}, "input_suffix"),
            "/tokenize": ({"content": "x"}, "content"),
            "/detokenize": ({"tokens": [1]}, "tokens"),
        }
        for path, (body, field) in bodies.items():
            answer = httpx.post(f"{gw.url}{path}", json=body, headers=app)
            assert answer.status_code == 400, path
            error = answer.json()["error"]
            assert error["code"] == "unsupported" and error["param"] == field, error
