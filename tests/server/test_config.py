"""Settings: the TOML file, flags, validation with errors that name the field."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

import pytest

from tierlm.core.classes import Budget
from tierlm.server import serve_cli as cli
from tierlm.server.settings.backends import OpenAIBackend, local_model_available
from tierlm.server.settings.sources import (
    ConfigError,
    ServerSettings,
    load_settings,
    settings_from_dict,
)

DOCS = Path(__file__).parents[2] / "docs" / "gateway.md"


def args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    return parser.parse_args(list(argv))


def error(raw: dict[str, Any], **kw: Any) -> str:
    with pytest.raises(ConfigError) as info:
        settings_from_dict(raw, **kw)
    return str(info.value)


def test_defaults_run_the_simulated_backend_on_loopback() -> None:
    settings = settings_from_dict({})
    assert settings == ServerSettings()
    assert (settings.server.host, settings.server.port) == ("127.0.0.1", 8000)
    assert settings.backend.kind == "sim"
    assert settings.backend.model_ids() == ["sim-a", "sim-b"]
    assert sorted(settings.classes) == ["chat", "extract", "gana", "nataraj"]
    assert settings.keys == ()
    assert settings.anonymous_class() == "chat"


def test_the_documented_example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/gateway.md's TOML examples parse, with what they say."""
    blocks = re.findall(r"```toml\n(.*?)```", DOCS.read_text(), re.S)
    assert len(blocks) == 5
    for name in ("qwen2.5-1.5b-instruct-q4_k_m.gguf", "qwen2.5-coder-1.5b-q4_k_m.gguf"):
        (tmp_path / "models").mkdir(exist_ok=True)
        (tmp_path / "models" / name).write_bytes(b"GGUF")
    monkeypatch.setenv("TIERLM_CHAT_UI_KEY", "sk-chat")
    monkeypatch.setenv("UPSTREAM_KEY", "sk-up")
    config = tmp_path / "tierlm.toml"
    config.write_text(blocks[0])
    settings = load_settings(config)
    assert settings.backend.kind == "llama-cpp"
    qwen, coder = settings.backend.models.values()
    assert qwen.path == tmp_path / "models" / "qwen2.5-1.5b-instruct-q4_k_m.gguf"
    assert qwen.load_options() == {"n_ctx": 4096, "n_threads": 4}
    assert coder.load_options() == {"options": {"flash_attn": True}}
    assert settings.classes["extract"].budget == Budget(0.5, 300)
    assert settings.queue_limit("extract") == 5000 and settings.queue_limit("chat") == 1000
    cron = settings.classes["cron"]
    assert (cron.tier, cron.fair, cron.requeue) == (4, True, True)
    chat_ui, indexer, ops = settings.keys
    assert (chat_ui.key, chat_ui.classes, chat_ui.default_class) == ("sk-chat", {"chat"}, "chat")
    assert indexer.default_class == "extract" and not indexer.admin
    assert ops.admin and ops.classes == set(settings.classes)
    assert settings.scheduler.weights == {"indexer": 2.0}
    for block, kind in zip(blocks[1:], ("openai", "ollama", "sim", "llama-cpp"), strict=True):
        config.write_text(block)
        assert load_settings(config).backend.kind == kind
    (kept,) = load_settings(config).backend.models.values()  # the keep_alive example
    assert getattr(kept, "keep_alive", None) == 1800
    config.write_text(blocks[1])
    openai = load_settings(config).backend
    assert isinstance(openai, OpenAIBackend)
    assert openai.upstream_key() == "sk-up" and openai.resume == "prefill"
    assert openai.upstream_names() == {"qwen": "qwen2.5:1.5b"}


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"server": {"prot": 1}}, "server.prot: unknown field; did you mean 'port'?"),
        ({"servr": {}}, "servr: unknown field; did you mean 'server'?"),
        ({"server": {"port": "80"}}, "server.port: must be an integer, got the string '80'"),
        ({"server": {"port": 70000}}, "server.port: must be between 0 and 65535, got 70000"),
        ({"limits": {"queue_limit": 0}}, "limits.queue_limit: must be >= 1, got 0"),
        (
            {"backend": {"kind": "vllm"}},
            "backend.kind: must be one of sim, llama-cpp, openai, ollama",
        ),
        ({"backend": {"kind": "openai"}}, "backend.url: the openai backend needs the upstream"),
        (
            {"backend": {"kind": "llama-cpp", "models": {}}},
            "backend.models: the llama-cpp backend needs at least",
        ),
        (
            {"backend": {"kind": "llama-cpp", "models": {"m": "/nope/m.gguf"}}},
            "backend.models.m.path: no such file: '/nope/m.gguf'",
        ),
        (
            {"backend": {"kind": "sim", "token_interval": 0}},
            "backend.token_interval: must be > 0, got 0",
        ),
        ({"classes": {"cron": {"fair": True}}}, "classes.cron.tier: a new class needs a tier"),
        (
            {"classes": {"extract": {"budget": {"share": 2}}}},
            "classes.extract.budget.share: must be a fraction in (0, 1], got 2",
        ),
        ({"classes": {"chat": {"requeue": True}}}, "classes.chat: task class 'chat': tier 0"),
        ({"scheduler": {"chat_grace": -1}}, "scheduler.chat_grace: must be >= 0, got -1"),
        ({"keys": [{"name": "a"}]}, "keys[0].key: give exactly one of key or key_env"),
        (
            {"keys": [{"key": "k", "classes": ["boss"]}]},
            "keys[0].classes: unknown class 'boss' (classes: chat, extract, gana, nataraj)",
        ),
        (
            {"keys": [{"key": "k", "classes": ["gana"], "default_class": "chat"}]},
            "keys[0].default_class: 'chat' is not in this key's classes (gana)",
        ),
        (
            {"keys": [{"key": "k", "key_env": "TIERLM_TEST_UNSET"}]},
            "keys[0].key: give exactly one of key or key_env",
        ),
        ({"keys": [{"key_env": "TIERLM_TEST_UNSET"}]}, "keys[0].key_env: environment variable"),
        ({"server": {"default_class": "boss"}}, "server.default_class: unknown class 'boss'"),
    ],
)
def test_errors_name_the_field(raw: dict[str, Any], message: str) -> None:
    assert error(raw).startswith(message)


def test_a_public_address_needs_keys() -> None:
    message = error({"server": {"host": "0.0.0.0"}})
    assert message.startswith("server.host: refusing to listen on '0.0.0.0' without API keys")
    assert "Add [[keys]]" in message and "or bind 127.0.0.1" in message
    with_keys = settings_from_dict({"server": {"host": "0.0.0.0"}, "keys": [{"key": "k"}]})
    assert with_keys.server.host == "0.0.0.0"
    for loopback in ("localhost", "127.0.0.2", "::1"):
        assert settings_from_dict({"server": {"host": loopback}}).server.host == loopback


def test_flags_override_the_file_and_are_named_in_errors(tmp_path: Path) -> None:
    config = tmp_path / "t.toml"
    config.write_text('[server]\nport = 9000\n[backend]\nmodels = ["x", "y"]\n')
    settings = cli.settings_from_args(
        args("--config", str(config), "--port", "9100", "--model", "z")
    )
    assert settings.server.port == 9100
    assert settings.backend.model_ids() == ["z"]  # --model replaces the file's
    with pytest.raises(ConfigError, match=r"^--port \(server.port\): must be between 0 and 65535"):
        cli.settings_from_args(args("--port", "99999"))
    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(b"GGUF")
    settings = cli.settings_from_args(args("--backend", "llama-cpp", "--model", str(gguf)))
    assert [(i, m.path) for i, m in settings.backend.models.items()] == [("tiny", gguf)]
    settings = cli.settings_from_args(args("--host", "0.0.0.0", "--api-key", "sk-1"))
    (key,) = settings.keys
    assert key.admin and key.key == "sk-1" and key.classes == set(settings.classes)


def test_a_bad_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^--config: cannot read '.*missing.toml'"):
        load_settings(tmp_path / "missing.toml")
    broken = tmp_path / "broken.toml"
    broken.write_text("[server\n")
    with pytest.raises(ConfigError, match=r"broken.toml: not valid TOML"):
        load_settings(broken)


def test_serve_refuses_and_says_why(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.run(args("--host", "0.0.0.0")) == 2
    err = capsys.readouterr().err
    assert err.startswith("tierlm serve: --host (server.host): refusing to listen on '0.0.0.0'")
    assert cli.run(args("--check")) == 0
    out = capsys.readouterr().out
    # What `tierlm serve` chose by itself (the embedded SmolLM2 if installed).
    default = "llama-cpp (worker process)" if local_model_available() else "sim"
    assert f"backend  {default}" in out and "keys     none (loopback only" in out


def test_file_environment_and_flags_feed_one_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Precedence: flags > TIERLM_* variables > the file > the defaults."""
    config = tmp_path / "t.toml"
    config.write_text(
        "[server]\nport = 9000\nsse_heartbeat = 5\n"
        "[backend]\nswap_seconds = 2\n[limits]\nqueue_limit = 7\n"
    )
    monkeypatch.setenv("TIERLM_SERVER__PORT", "9100")  # over the file
    monkeypatch.setenv("TIERLM_BACKEND__SWAP_SECONDS", "0.5")  # text -> the field's type
    monkeypatch.setenv("tierlm_limits__max_tokens_limit", "300")  # any case
    monkeypatch.setenv("TIERLM_SCHEDULER__WEIGHTS", '{"indexer": 2}')  # a table, as JSON
    monkeypatch.setenv("TIERLM_CLASSES__CRON__TIER", "4")  # a table of tables, by path
    monkeypatch.setenv("TIERLM_CHROMIUM", "/not/a/setting")  # not a section: not read
    settings = cli.settings_from_args(args("--config", str(config)))
    assert settings.server.port == 9100 and settings.server.sse_heartbeat == 5
    assert settings.backend.model_dump()["swap_seconds"] == 0.5
    assert settings.limits.max_tokens_limit == 300 and settings.limits.queue_limit == 7
    assert settings.limits.default_max_tokens == 16  # the sim backend's default, under the limit
    assert settings.scheduler.weights == {"indexer": 2.0}
    assert settings.classes["cron"].tier == 4 and settings.classes["cron"].fair
    flagged = cli.settings_from_args(args("--config", str(config), "--port", "9200"))
    assert flagged.server.port == 9200  # a flag over the variable
    assert load_settings(config).server.port == 9100
    monkeypatch.delenv("TIERLM_SERVER__PORT")
    assert load_settings(config).server.port == 9000
    assert load_settings().server.port == 8000


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("TIERLM_SERVER__PORT", "99999", "TIERLM_SERVER__PORT (server.port): must be between"),
        ("TIERLM_SERVER__PORT", "x", "TIERLM_SERVER__PORT (server.port): must be an integer"),
        ("TIERLM_SERVER__PROT", "1", "TIERLM_SERVER__PROT (server.prot): unknown field; did you"),
        ("TIERLM_BACKEND__KIND", "vllm", "TIERLM_BACKEND__KIND (backend.kind): must be one of"),
        ("TIERLM_BACKEND__PRELOAD", "maybe", "TIERLM_BACKEND__PRELOAD (backend.preload): must be"),
        ("TIERLM_KEYS", "[{}]", "TIERLM_KEYS (keys[0].key): give exactly one of key or key_env"),
        ("TIERLM_SCHEDULER__WEIGHTS", "{not json", "TIERLM_*: "),
    ],
)
def test_errors_name_the_environment_variable(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, message: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert str(info.value).startswith(message)


def test_flags_are_derived_from_the_schema(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="tierlm serve")
    cli.add_arguments(parser)
    parser.print_help()
    text = " ".join(capsys.readouterr().out.split())
    # Help, default and choices come from the fields (ServerSection.port, backend kinds).
    assert "--port N The port (default 8000)" in text
    assert "--backend {sim,llama-cpp,openai,ollama}" in text
    assert "--embed-backend {minilm,llama-cpp,sim,none}" in text
    assert "sim: Seconds per token" in text  # a backend's own field says whose
    assert "openai: The upstream server's URL, with or without /v1; ollama:" in text
    assert "--embed-max-batch N Texts per batch" in text  # every embedder has it: no prefix
    settings = cli.settings_from_args(args("--backend", "ollama", "--url", "http://127.0.0.1:9"))
    assert settings.backend.summary() == "ollama (http://127.0.0.1:9)"
