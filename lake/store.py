"""Where a lake lives: a local directory or an object-store prefix (`s3://bucket/prefix`), behind one small API.

Why: the lake reaches its files three ways: delta-rs through storage options, DuckDB through a registered
filesystem (lake/duck.py), and the lake's own reads of the Delta log, Parquet footers and small files (the
lake marker, consumers' offsets) through a pyarrow filesystem. This module builds all three from one root
and one set of credentials, so no lake module calls `open()` on a path under the root and a root moves from
a disk to a bucket unchanged (the Delta log holds relative paths).

Credentials: the standard AWS variables (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN,
AWS_ENDPOINT_URL, AWS_REGION, AWS_ALLOW_HTTP) or explicit `storage_options` with the same keys; they are
never printed (a Store's repr is its root).

Local roots keep what only a disk has: fsync (ground/durable.py), flock commit locks and atomic renames. On
object storage a PUT is atomic and delta-rs commits with conditional writes (If-None-Match), so concurrent
writers on any machine are safe; the commit lock that makes ingest's dedupe atomic is held in a local
directory per root (LACHESIS_LOCK_DIR), which covers the processes of one machine (docs/scale-out.md).
"""
from __future__ import annotations

import hashlib
import os
import re
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Mapping

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake.exceptions import DeltaError

from ground.atomic import write_bytes_atomic
from lake.errors import LakeError

SCHEMES = ("s3",)  # what delta-rs, pyarrow and DuckDB's bridge here all speak; s3-compatible stores included
S3_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_REGION",
           "AWS_ALLOW_HTTP")
DEFAULT_REGION = "us-east-1"
Location = str | os.PathLike
# Seconds to open a connection to the object store (pyarrow, and delta-rs's `connect_timeout`): an endpoint that
# never answers fails in seconds, not after the SDKs' retries, which take minutes (docs/lake-design.md;
# tests/test_lake_store_errors.py).
CONNECT_TIMEOUT_S = 2
_USERINFO = re.compile(r"^([a-z][a-z0-9+.-]*://)[^/@]*@", re.IGNORECASE)


def root_text(location: Location) -> str:
    """The text of a root. A URL that went through `pathlib.Path` (a CLI option typed Path) lost a slash,
    `s3:/bucket/prefix`: it gets it back (no local folder is named like a URL scheme with a colon)."""
    text = os.fspath(location)
    mangled = re.match(r"([a-z][a-z0-9+.-]+):/(?!/)", text)
    return f"{mangled.group(1)}://{text[mangled.end():]}" if mangled else text


def is_url(location: Location) -> bool:
    return "://" in root_text(location)


def redact(location: Location) -> str:
    """A location as it may be printed or put in an error: a URL's `user:secret@` dropped
    (`s3://AKIA..:SECRET@bucket/lake` -> `s3://bucket/lake`); a local path as it is. Every message that names a
    root the user typed goes through here (a Store's own root never holds credentials: it refuses them)."""
    return _USERINFO.sub(r"\1", root_text(location))


def s3_options(options: Mapping[str, str] | None = None) -> dict[str, str]:
    """Storage options for delta-rs (and polars): `options` (any case) over the AWS environment variables."""
    given = {k.upper(): str(v) for k, v in (options or {}).items()}
    out = {k: os.environ[k] for k in S3_KEYS if os.environ.get(k)}
    if "AWS_REGION" not in out and os.environ.get("AWS_DEFAULT_REGION"):
        out["AWS_REGION"] = os.environ["AWS_DEFAULT_REGION"]
    out.update(given)
    out.setdefault("AWS_REGION", DEFAULT_REGION)
    out.setdefault("connect_timeout", f"{CONNECT_TIMEOUT_S}s")  # delta-rs (object_store) client option
    endpoint = out.get("AWS_ENDPOINT_URL", "")
    if endpoint.startswith("http://"):
        out.setdefault("AWS_ALLOW_HTTP", "true")
    return out


def _s3_filesystem(options: Mapping[str, str], attempts: int | None = None) -> pafs.S3FileSystem:
    """pyarrow's S3 client for `options`; `attempts` caps its tries per request (default: the SDK's 3)."""
    endpoint = options.get("AWS_ENDPOINT_URL")
    kwargs = {"region": options.get("AWS_REGION", DEFAULT_REGION), "connect_timeout": CONNECT_TIMEOUT_S}
    if attempts is not None:
        kwargs["retry_strategy"] = pafs.AwsStandardS3RetryStrategy(max_attempts=attempts)
    if options.get("AWS_ACCESS_KEY_ID"):
        kwargs.update(access_key=options["AWS_ACCESS_KEY_ID"], secret_key=options.get("AWS_SECRET_ACCESS_KEY"),
                      session_token=options.get("AWS_SESSION_TOKEN"))
    if endpoint:
        scheme, _, host = endpoint.partition("://")
        kwargs.update(endpoint_override=host.rstrip("/"), scheme=scheme)
    return pafs.S3FileSystem(**kwargs)


class Store:
    """One lake root: `uri(...)` names a path for delta-rs, `fs` and `fs_path(...)` reach it through pyarrow."""

    def __init__(self, root: Location, storage_options: Mapping[str, str] | None = None):
        text = root_text(root)
        self.local = not is_url(text)
        if self.local:
            self.root: Path | str = Path(text)
            self.storage_options: dict[str, str] | None = None
            self.fs: pafs.FileSystem = pafs.LocalFileSystem()
            return
        if redact(text) != text:  # never kept: the root is printed, recorded in run folders and manifests
            raise LakeError(f"lake root {redact(text)}: credentials in the URL (user:secret@) are not used; set "
                            "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or pass storage options)")
        scheme, _, rest = text.partition("://")
        if scheme not in SCHEMES:
            raise LakeError(f"lake root {text}: only local paths and {', '.join(s + '://' for s in SCHEMES)} "
                            f"URLs are supported")
        rest = rest.strip("/")
        if not rest:
            raise LakeError(f"lake root {text} names no bucket")
        self.root = f"{scheme}://{rest}"
        self.storage_options = s3_options(storage_options)
        self.fs = _s3_filesystem(self.storage_options)
        _register(self)

    def __repr__(self) -> str:  # never the credentials
        return f"Store({str(self.root)!r})"

    def uri(self, *parts: str) -> str:
        """A path under the root as delta-rs and DuckDB name it (a local path, or s3://bucket/prefix/...)."""
        if self.local:
            return str(Path(self.root).joinpath(*parts))
        return "/".join([str(self.root), *parts])

    def fs_path(self, *parts: str) -> str:
        """A path under the root as `self.fs` names it (pyarrow's S3 paths have no scheme)."""
        return to_fs_path(self.uri(*parts))

    def exists(self, *parts: str) -> bool:
        """A file, or a directory (on object storage: a prefix some object has)."""
        with self.reaching():
            return self.fs.get_file_info(self.fs_path(*parts)).type != pafs.FileType.NotFound

    def read_bytes(self, *parts: str) -> bytes:
        with self.reaching(), self.fs.open_input_stream(self.fs_path(*parts)) as fh:
            return fh.read()

    def write_bytes(self, data: bytes, *parts: str) -> None:
        """Replace a small file at once: temp file, fsync and rename locally; one PUT (atomic) on object storage."""
        if self.local:
            write_bytes_atomic(Path(self.uri(*parts)), data)
            return
        with self.reaching(), self.fs.open_output_stream(self.fs_path(*parts)) as fh:
            fh.write(data)

    def list_names(self, *parts: str) -> list[str]:
        """Names of the files directly under a directory (none when it is absent), sorted."""
        selector = pafs.FileSelector(self.fs_path(*parts), allow_not_found=True)
        with self.reaching():
            infos = self.fs.get_file_info(selector)
        return sorted(i.base_name for i in infos if i.type == pafs.FileType.File)

    def check_reachable(self) -> None:
        """One request to the object store, without retries: an endpoint that is down or black-holed is a
        one-line LakeError naming the root within CONNECT_TIMEOUT_S (a missing bucket is left to the next call,
        which names it). Nothing to do for a local root."""
        if self.local:
            return
        bucket = self.fs_path().split("/", 1)[0]
        with self.reaching():
            _s3_filesystem(self.storage_options, attempts=1).get_file_info(bucket)

    @contextmanager
    def reaching(self) -> Iterator[None]:
        """An object store that cannot be reached (network, credentials, a missing bucket) is a one-line
        LakeError naming the root; a local disk's errors stay what they are."""
        try:
            yield
        except (OSError, DeltaError) as exc:
            if self.local:
                raise
            raise LakeError(f"lake at {self.root}: {first_line(exc)}") from None

    def lock_dir(self) -> Path:
        """Where this root's flock files live: inside a local lake; for object storage, a local directory per
        root (flock needs a local file; it covers the processes of this machine)."""
        if self.local:
            return Path(self.root) / "_lachesis" / "locks"
        base = os.environ.get("LACHESIS_LOCK_DIR") or os.path.join(
            os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "lachesis", "locks")
        return Path(base) / hashlib.sha256(str(self.root).encode()).hexdigest()[:16]


def first_line(exc: BaseException) -> str:
    """One line for an object store's error: the S3 error code and message when the store sent them (delta-rs
    nests them under "Generic S3 error"), else the error's first line."""
    text = str(exc).strip()
    code, message = re.search(r"<Code>(.*?)</Code>", text), re.search(r"<Message>(.*?)</Message>", text)
    if code:
        return f"{code.group(1)}: {message.group(1)}" if message else code.group(1)
    return text.splitlines()[0] if text else type(exc).__name__


# Object-store roots opened in this process, so a function given only a file's URI (the change feed, vacuum,
# ingest's dedupe index) reaches it with the credentials its lake was opened with.
_stores: dict[str, Store] = {}
_stores_lock = threading.Lock()


def _register(store: Store) -> None:
    with _stores_lock:
        _stores[str(store.root)] = store


def to_fs_path(location: Location) -> str:
    """A location as its pyarrow filesystem names it: an absolute local path, or bucket/key without a scheme."""
    text = os.fspath(location)
    if is_url(text):
        return text.partition("://")[2]
    return os.path.abspath(text)


def filesystem_for(location: Location) -> pafs.FileSystem:
    """The filesystem that reaches `location`: local, or the S3 client of the lake root it lies under (the
    environment's credentials when no lake opened in this process holds it)."""
    text = os.fspath(location)
    if not is_url(text):
        return _LOCAL
    with _stores_lock:
        roots = [r for r in _stores if text == r or text.startswith(r + "/")]
        if roots:
            return _stores[max(roots, key=len)].fs
    bucket = text.partition("://")[2].split("/", 1)[0]
    return Store(f"{text.partition('://')[0]}://{bucket}").fs


def join(location: Location, *parts: str) -> Location:
    """`location / part / ...` for a local Path or an object-store URI."""
    if is_url(location):
        return "/".join([os.fspath(location).rstrip("/"), *parts])
    return Path(location).joinpath(*parts)


def read_bytes(location: Location) -> bytes:
    with filesystem_for(location).open_input_stream(to_fs_path(location)) as fh:
        return fh.read()


def read_parquet(location: Location, columns: list[str] | None = None) -> pa.Table:
    """A data file, local or on the object store of the lake it lies under (with that lake's credentials)."""
    return pq.read_table(to_fs_path(location), columns=columns, filesystem=filesystem_for(location))


def exists(location: Location) -> bool:
    return filesystem_for(location).get_file_info(to_fs_path(location)).type != pafs.FileType.NotFound


def delete_file(location: Location) -> None:
    filesystem_for(location).delete_file(to_fs_path(location))


_LOCAL = pafs.LocalFileSystem()
