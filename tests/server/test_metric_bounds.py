"""No client can grow /metrics without bound by inventing producer ids."""

from __future__ import annotations

from tests.payloads import MESSAGES
from tests.server.helpers import serve
from tierlm.server.gateway.metrics import OTHER_PRODUCERS, PRODUCER_SERIES


def test_invented_producer_ids_share_one_other_series() -> None:
    with serve() as gateway:
        for i in range(PRODUCER_SERIES + 30):
            client = gateway.openai(X_Tierlm_Class="gana", X_Tierlm_Producer=f"invented-{i}")
            client.chat.completions.create(model="sim-a", messages=MESSAGES, max_tokens=1)
        samples = gateway.metrics()
        series = [labels for name, labels in samples if name == "tierlm_vruntime_seconds"]
        assert len(series) == PRODUCER_SERIES + 1
        assert (("producer", OTHER_PRODUCERS),) in series
        assert gateway.metric("tierlm_fair_producers") == PRODUCER_SERIES + 30
