"""One rule for secret names (harness/secrets.py), a table of names: what the config
reader hides, summary.json redacts and the client keeps out of every file."""

from __future__ import annotations

import pytest

from harness.config import is_secret
from harness.report.summary import is_secret_key
from harness.secrets import is_secret_name

pytestmark = pytest.mark.unit

SECRET = [
    "api_key", "apikey", "apiKey", "x-api-key", "api-key", "Authorization",
    "proxy-authorization", "token", "api_token", "bearer_token", "access_token",
    "auth_token", "password", "db_password", "secret", "client_secret",
    "aws_secret_access_key", "credentials", "credential", "bearer", "Cookie",
    "private_key", "load.api_key",
]  # fmt: skip
NOT_SECRET = [
    "max_tokens", "long_answer_tokens", "prompt_tokens", "tokens", "api_key_env",
    "load.api_key_env", "model", "keep_sessions", "key_count_limit", "token_budget",
    "tokenizer", "monkey", "keda", "turkey_sandwich", "",
]  # fmt: skip


@pytest.mark.parametrize("name", SECRET)
def test_a_secret_name_is_secret_to_every_reader(name):
    assert is_secret_name(name), name
    assert is_secret_key(name) and is_secret(name), name


@pytest.mark.parametrize("name", NOT_SECRET)
def test_counts_of_tokens_and_names_of_variables_are_not_secrets(name):
    assert not is_secret_name(name), name
    assert not is_secret_key(name) and not is_secret(name), name


def test_a_set_of_max_tokens_is_echoed_and_a_set_key_is_hidden(tmp_path):
    from harness.config import ConfigError
    from harness.config.schema import load_config

    with pytest.raises(ConfigError) as info:
        load_config(None, ["load.max_tokens=abc"])
    assert "abc" in str(info.value) and "<hidden>" not in str(info.value)
