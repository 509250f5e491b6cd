"""Issue 56, item 9, on the real default model (SmolLM2-135M-Instruct,
llama-cpp) as a user of llama-server or of the OpenAI client meets it:
``/tokenize`` and ``/detokenize`` with the model's own tokenizer; legacy
completions with an array of prompts, token-id prompts and ``echo``; and the
refusals, each naming its field: a model without FIM tokens for ``suffix``
and ``/infill``, ``echo`` with ``logprobs``, an id outside the vocabulary.
"""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from tests.server.helpers import Gateway, serve_default_model, sse

pytestmark = pytest.mark.llama
pytest.importorskip("llama_cpp", reason="needs llama-cpp-python")

from tierlm.runners.llama_cpp import DEFAULT_CHAT_MODEL_ID  # noqa: E402

MODEL = DEFAULT_CHAT_MODEL_ID
TEXT = "The capital of France is"
OTHER = "Water boils at"


@pytest.fixture(scope="module")
def gw() -> Iterator[Gateway]:
    with serve_default_model() as g:
        yield g


def complete(client: openai.OpenAI, prompt: object, **fields: object) -> openai.types.Completion:
    return client.completions.create(
        model=MODEL,
        prompt=prompt,  # type: ignore[arg-type]
        max_tokens=fields.pop("max_tokens", 6),  # type: ignore[arg-type]
        temperature=0,
        **fields,  # type: ignore[arg-type]
    )


def test_tokenize_then_detokenize_gives_the_text_back(gw: Gateway) -> None:
    text = "Hello world, á <|im_start|>!"
    tokens = gw.http.post("/tokenize", json={"content": text}).json()["tokens"]
    assert all(isinstance(t, int) for t in tokens) and len(tokens) > 3
    assert 1 in tokens  # <|im_start|> read as the special token (parse_special)
    back = gw.http.post("/detokenize", json={"tokens": tokens})
    assert back.status_code == 200 and back.json() == {"content": text}
    # parse_special: false tokenizes the marker as text, several tokens
    plain = gw.http.post("/tokenize", json={"content": text, "parse_special": False}).json()
    assert 1 not in plain["tokens"] and len(plain["tokens"]) > len(tokens)
    # the counts agree with a completion's usage
    usage = complete(gw.openai(), TEXT, max_tokens=1).usage
    assert usage is not None
    counted = gw.http.post("/tokenize", json={"content": TEXT}).json()["tokens"]
    assert usage.prompt_tokens == len(counted)


def test_with_pieces_gives_each_token_its_text_or_its_bytes(gw: Gateway) -> None:
    answer = gw.http.post("/tokenize", json={"content": "Hello world", "with_pieces": True})
    assert answer.json() == {
        "tokens": [{"id": 19556, "piece": "Hello"}, {"id": 905, "piece": " world"}]
    }
    pieces = gw.http.post("/tokenize", json={"content": "á", "with_pieces": True}).json()
    joined = b"".join(
        p["piece"].encode() if isinstance(p["piece"], str) else bytes(p["piece"])
        for p in pieces["tokens"]
    )
    assert joined == "á".encode()


def test_tokenize_refusals_name_their_field(gw: Gateway) -> None:
    bad = gw.http.post("/detokenize", json={"tokens": [5, 10_000_000]})
    assert bad.status_code == 400
    error = bad.json()["error"]
    assert error["param"] == "tokens[1]" and "not in this model's vocabulary" in error["message"]
    missing = gw.http.post("/tokenize", json={"text": "hi"})
    assert missing.status_code == 400 and missing.json()["error"]["param"] in ("content", "text")
    unknown = gw.http.post("/tokenize", json={"content": "hi", "model": "nope"})
    assert unknown.status_code == 404


def test_a_list_prompt_gives_one_choice_set_per_prompt(gw: Gateway) -> None:
    client = gw.openai()
    alone = [complete(client, p).choices[0].text for p in (TEXT, OTHER)]
    both = complete(client, [TEXT, OTHER], n=2)
    assert [c.index for c in both.choices] == [0, 1, 2, 3]
    by_index = {c.index: c.text for c in both.choices}
    assert [by_index[i] for i in range(4)] == [alone[0], alone[0], alone[1], alone[1]]
    assert both.usage is not None
    one = complete(client, TEXT).usage
    two = complete(client, OTHER).usage
    assert one is not None and two is not None
    assert both.usage.prompt_tokens == one.prompt_tokens + two.prompt_tokens
    # streamed: every choice's chunks carry its index
    texts: dict[int, str] = {}
    for chunk in complete(client, [TEXT, OTHER], stream=True):
        for choice in chunk.choices:
            texts[choice.index] = texts.get(choice.index, "") + choice.text
    assert texts == {0: alone[0], 1: alone[1]}


def test_a_token_id_prompt_answers_as_its_text(gw: Gateway) -> None:
    client = gw.openai()
    ids = gw.http.post("/tokenize", json={"content": TEXT}).json()["tokens"]
    other = gw.http.post("/tokenize", json={"content": OTHER}).json()["tokens"]
    text = complete(client, TEXT).choices[0].text
    assert complete(client, ids).choices[0].text == text
    many = complete(client, [ids, other])
    assert [c.index for c in many.choices] == [0, 1]
    assert many.choices[0].text == text
    assert many.choices[1].text == complete(client, OTHER).choices[0].text
    with pytest.raises(openai.BadRequestError) as bad:
        complete(client, [5, 10_000_000])
    assert bad.value.body["param"] == "prompt[1]"  # type: ignore[index]


def test_echo_puts_the_prompt_before_the_completion(gw: Gateway) -> None:
    client = gw.openai()
    plain = complete(client, TEXT).choices[0].text
    echoed = complete(client, TEXT, echo=True)
    assert echoed.choices[0].text == TEXT + plain
    streamed = "".join(c.choices[0].text for c in complete(client, TEXT, echo=True, stream=True))
    assert streamed == TEXT + plain
    ids = gw.http.post("/tokenize", json={"content": TEXT}).json()["tokens"]
    assert complete(client, ids, echo=True).choices[0].text == TEXT + plain
    with pytest.raises(openai.BadRequestError) as bad:
        complete(client, TEXT, echo=True, logprobs=1)
    assert bad.value.body["param"] == "echo"  # type: ignore[index]
    assert "logprobs" in bad.value.message


def test_fill_in_the_middle_on_a_model_without_fim_tokens_says_so(gw: Gateway) -> None:
    with pytest.raises(openai.BadRequestError) as bad:
        complete(gw.openai(), "def add(a, b):\n    return ", suffix="\n\nprint(add(1, 2))")
    assert bad.value.body["param"] == "suffix"  # type: ignore[index]
    assert MODEL in bad.value.message and "fill-in-the-middle" in bad.value.message
    infill = gw.http.post(
        "/infill", json={"input_prefix": "def add(a, b):\n", "input_suffix": "\n", "n_predict": 4}
    )
    assert infill.status_code == 400
    error = infill.json()["error"]
    assert error["param"] == "input_suffix" and MODEL in error["message"]


def test_tokenizing_does_not_wait_behind_a_generation(gw: Gateway) -> None:
    # A generation that cannot stop early (its end tokens banned) holds the device.
    body = {
        "model": MODEL,
        "prompt": TEXT,
        "max_tokens": 3000,
        "logit_bias": {"0": -100, "2": -100},
    }
    with sse(gw, body, path="/v1/completions") as stream:
        stream.next_data()
        tokens = gw.http.post("/tokenize", json={"content": TEXT})
        back = gw.http.post("/detokenize", json={"tokens": tokens.json()["tokens"]})
        assert back.json() == {"content": TEXT}
        running = gw.state()["running"]  # answered while it still runs
        assert running is not None and running["id"] == stream.job_id
