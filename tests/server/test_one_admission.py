"""One admission path (docs/design.md §0, ``gateway/intake``): the same request
through every surface of a real gateway (OpenAI's chat completions, the
Responses API, Ollama's chat through the official ``ollama`` client, a Batch
API line) is the same job to the policy: class, producer, subject, person,
model, and the request as counted."""

from __future__ import annotations

import threading
from typing import Any

import ollama

from tests.server.batch_helpers import start, wait_batch
from tests.server.helpers import WAIT, serve, sim_settings
from tierlm.core.jobs import Job
from tierlm.shell.events import JobSubmitted

KEY = "sk-app"
SETTINGS = {
    "keys": [{"key": KEY, "name": "app", "classes": ["chat", "gana"], "queue_limit": 50}],
}
HEADERS = {"X-Tierlm-Class": "gana", "X-Tierlm-Producer": "notes", "X-Tierlm-Subject": "n7"}
MESSAGES = [{"role": "user", "content": "summarise note 7"}]


def seen(job: Job) -> tuple[Any, ...]:
    return (job.class_name, job.producer, job.subject, job.chat_person, job.model_id, job.deadline)


def test_every_surface_queues_the_same_job() -> None:
    jobs: list[Job] = []
    lock = threading.Lock()

    def record(event: object) -> None:
        if isinstance(event, JobSubmitted):
            with lock:
                jobs.append(event.job)

    with serve(sim_settings(SETTINGS), key=KEY) as gw:
        gw.app.state.gateway.scheduler.add_listener(record)
        client = gw.openai()
        chat = client.with_options(default_headers=HEADERS)
        chat.chat.completions.create(model="sim-a", messages=MESSAGES, max_tokens=4)  # type: ignore[arg-type]
        chat.responses.create(model="sim-a", input=MESSAGES, max_output_tokens=4)  # type: ignore[arg-type]
        native = ollama.Client(
            host=gw.url, headers={**HEADERS, "Authorization": f"Bearer {KEY}"}, timeout=WAIT
        )
        native.chat(model="sim-a", messages=MESSAGES, options={"num_predict": 4})
        line = {
            "custom_id": "n7",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"model": "sim-a", "messages": MESSAGES, "max_tokens": 4},
        }
        metadata = {"tierlm_class": "gana", "tierlm_producer": "notes"}
        batch = start(client, [line], metadata=metadata)
        assert wait_batch(client, batch.id).status == "completed"
    assert len(jobs) == 4
    chat_job, response_job, ollama_job, batch_job = (seen(job) for job in jobs)
    assert chat_job == ("gana", "app/notes", "n7", ("app",), "sim-a", None)
    assert response_job == chat_job
    assert ollama_job == chat_job
    # A batch is one producer's work, about no subject (it has no headers per line).
    assert batch_job == ("gana", "app/notes", None, ("app",), "sim-a", None)
