"""What a base URL given to rollcheck must be: http:// or https://, a host, a port that is a
number, and no user name or password (a URL is written into the run folder and printed,
so a key in it would be too; keys come from environment variables)."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

KEY_FROM_ENV = "give the key through an environment variable (--api-key, load.api_key_env)"


# scheme://user[:password]@, or user:password@ with the scheme left out, anywhere in a
# text: a URL that carries a credential
_USERINFO = re.compile(r"[a-z][a-z0-9+.-]*://[^/?#\s@]*@|[^/?#\s@:=]+:[^/?#\s@]*@", re.IGNORECASE)


def carries_credentials(text: str) -> bool:
    """Whether text holds a URL with a user name or password in it (never to be echoed)."""
    return _USERINFO.search(text) is not None


def url_problem(url: str) -> str | None:
    """What is wrong with url as a base URL, in words that follow the URL's name; None
    when nothing is. The words never repeat a user name or password found in it."""
    try:
        parts = urlsplit(url)
        port_ok = parts.port is None or parts.port > 0
    except ValueError:
        return "is not a URL rollcheck can read (a bad port or [address])"
    if parts.username is not None or parts.password is not None:
        return f"carries a user name or password, which would be written with it; {KEY_FROM_ENV}"
    shown = "it" if "@" in url else repr(url[:120])  # u:p@host, no scheme: not echoed
    if parts.scheme.lower() not in ("http", "https"):
        return f"{shown} is not an http:// or https:// URL"
    if not parts.hostname:
        return f"{shown} has no host"
    if not port_ok:
        return f"{shown} has port 0"
    return None
