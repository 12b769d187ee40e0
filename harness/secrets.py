"""One rule for what names a secret, used wherever a value might be echoed or written:
the config reader (an error shows <hidden>), summary.json (redacted), the client (the
headers whose values never reach a file).

A name is split into words (snake_case, kebab-case, dotted, camelCase). It names a
secret when its last word is one a credential goes by (key, token, password, secret,
credential(s), authorization, bearer, cookie) or any word is one only credentials use
(password, secret, credential(s), authorization); never a count of tokens (`max_tokens`,
`long_answer_tokens`: "tokens" is not "token") and never the name of the environment
variable that holds one (`api_key_env`: its value is a variable's name, not the key).
"""

from __future__ import annotations

import re

LAST = frozenset(
    {"key", "apikey", "token", "password", "passwd", "secret", "credential", "credentials",
     "authorization", "bearer", "cookie"}
)  # fmt: skip
ANY = frozenset({"password", "passwd", "secret", "credential", "credentials", "authorization"})


def words(name: str) -> list[str]:
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", str(name))
    return [w for w in re.split(r"[^a-z0-9]+", spaced.lower()) if w]


def is_secret_name(name) -> bool:
    parts = words(name)
    if not parts or parts[-1] == "env":
        return False
    return parts[-1] in LAST or any(p in ANY for p in parts)
