"""Rendezvous: how ranks find each other at start-up.

``connect(url, secret=...)`` opens a client to the store named by ``url``.
Schemes map to factories in ``SCHEMES``:

- ``tcp://host:port``: the store that ``gloocy-run`` embeds (TCPStoreServer);
  ``secret`` authenticates both ends.
- ``redis://[user:password@]host[:port][/db][?prefix=job42/]``: a Redis
  server (port 6379, db 0 and prefix "gloocy/" by default; user and
  password may be percent-encoded; ``redis://:password@host`` for a
  password alone).
- ``file:///shared/dir``: a directory on a file system every rank sees.
- ``hash://[name]``: in this process (threads); the same name, the same store.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import SplitResult, parse_qs, unquote, urlsplit

from .store import DEFAULT_TIMEOUT, Store

# Each store's module is imported when first asked for: a rank loads only
# the one it meets at (every rank of a job pays for its imports at start-up).
_LAZY = {"TCPStore": "tcp_store", "TCPStoreServer": "tcp_store_server",
         "HashStore": "hash_store", "FileStore": "file_store",
         "PrefixStore": "prefix_store", "RedisStore": "redis_store"}

__all__ = ["Store", "TCPStore", "TCPStoreServer", "HashStore", "FileStore",
           "RedisStore", "PrefixStore", "connect", "SCHEMES"]


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module
    value = getattr(import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def _connect_tcp(url: SplitResult, secret: bytes, timeout: float) -> Store:
    try:
        host, port = url.hostname, url.port  # .port raises on a bad number
    except ValueError as e:
        raise ValueError(f"bad store url {url.geturl()!r}: {e}") from None
    if not host or port is None:
        raise ValueError(f"store url {url.geturl()!r} needs a host and a port, "
                         f"e.g. tcp://127.0.0.1:29500 or tcp://[::1]:29500")
    from .tcp_store import TCPStore
    return TCPStore(host, port, secret=secret, timeout=timeout)


def _connect_redis(url: SplitResult, secret: bytes, timeout: float) -> Store:
    from .redis_store import DEFAULT_PORT, DEFAULT_PREFIX, RedisStore

    try:
        host, port = url.hostname, url.port
    except ValueError as e:
        raise ValueError(f"bad store url {_safe(url)!r}: {e}") from None
    if not host:
        raise ValueError(f"store url {_safe(url)!r} needs a host, e.g. "
                         f"redis://127.0.0.1:6379/0 or redis://user:password@host:6379")
    db_text = url.path.strip("/")
    if not db_text:
        db = 0
    elif db_text.isdigit():
        db = int(db_text)
    else:
        raise ValueError(f"bad store url {_safe(url)!r}: the path must be a "
                         f"database number, e.g. redis://host:6379/2")
    options = _query(url, {"prefix"})
    return RedisStore(
        host, DEFAULT_PORT if port is None else port, db=db,
        username=unquote(url.username) if url.username else None,
        password=None if url.password is None else unquote(url.password),
        prefix=options.get("prefix", DEFAULT_PREFIX), timeout=timeout)


def _connect_file(url: SplitResult, secret: bytes, timeout: float) -> Store:
    if url.netloc not in ("", "localhost") or not url.path.startswith("/"):
        raise ValueError(f"store url {url.geturl()!r} must name an absolute path "
                         f"with three slashes, e.g. file:///shared/job42")
    _query(url, set())
    from .file_store import FileStore
    return FileStore(unquote(url.path), timeout=timeout)


def _connect_hash(url: SplitResult, secret: bytes, timeout: float) -> Store:
    _query(url, set())
    from .hash_store import HashStore
    return HashStore.named(unquote(url.netloc + url.path), timeout=timeout)


def _safe(url: SplitResult) -> str:
    """The url without its password, for error messages."""
    if url.password is None:
        return url.geturl()
    host_part = url.netloc.rpartition("@")[2]
    return url._replace(netloc=f"{url.username or ''}:***@{host_part}").geturl()


def _query(url: SplitResult, allowed: set[str]) -> dict[str, str]:
    try:
        options = parse_qs(url.query, keep_blank_values=True, strict_parsing=bool(url.query))
    except ValueError:
        raise ValueError(f"bad query in store url {_safe(url)!r}") from None
    for name, values in options.items():
        if name not in allowed:
            known = ", ".join(sorted(allowed)) or "none"
            raise ValueError(f"unknown option {name!r} in store url {_safe(url)!r} "
                             f"(known: {known})")
        if len(values) != 1:
            raise ValueError(f"option {name!r} given twice in store url {_safe(url)!r}")
    return {name: values[0] for name, values in options.items()}


# scheme -> factory(parsed url, secret, timeout) -> Store
SCHEMES: dict[str, Callable[[SplitResult, bytes, float], Store]] = {
    "tcp": _connect_tcp,
    "redis": _connect_redis,
    "file": _connect_file,
    "hash": _connect_hash,
}


def connect(url: str, *, secret: bytes, timeout: float = DEFAULT_TIMEOUT) -> Store:
    """Open a client of the store at ``url`` (e.g. "tcp://127.0.0.1:29500").

    ``secret`` is the job's secret; only tcp:// uses it (Redis has its own
    password; a directory or a process is guarded by who can reach it).
    """
    if not isinstance(url, str):
        raise TypeError(f"url must be a str, not {type(url).__name__}")
    parsed = urlsplit(url)
    factory = SCHEMES.get(parsed.scheme.lower())
    if factory is None:
        raise ValueError(f"unknown store url {url!r}: scheme must be one of "
                         f"{', '.join(s + '://' for s in sorted(SCHEMES))}")
    return factory(parsed, secret, timeout)
