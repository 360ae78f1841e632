"""Object stores (``s3://``, ``gs://``, ``az://``) through fsspec: the one door, and every way it fails in words.

``storage`` (audit, apply) and ``data`` (bench, convert) both read buckets; they are siblings, so the
door lives here, below both. It does three things no driver does alike:

* **fails fast when the store cannot be reached.** Before the first request, one TCP connection to the
  store's endpoint, with a short time-out: a refused or unroutable endpoint is answered in
  milliseconds, where the drivers retry it for twenty seconds (s3fs over botocore) to a minute (gcsfs)
  and then name only the last attempt. Botocore's own retries are cut to a few as well. A proxy in the
  environment that applies to the endpoint skips the probe (the connection would go to the proxy);
* **says which failure it was.** No credentials, access denied, no such bucket, no such path, an
  endpoint that cannot be reached and one that did not answer in time each get an ``InputError`` of
  their own, with the fix for that store. The drivers raise them as botocore, aiohttp, google-auth,
  azure-core or their own exceptions, some wrapped in ``OSError``: they are told apart by the names of
  the classes along the exception's cause chain, so none of those libraries is imported to look;
* **keeps the user's fsspec configuration.** Our defaults (time-outs, retries) yield to what
  ``fsspec.config`` holds for the protocol (``~/.config/fsspec``, ``FSSPEC_S3='{...}'``).

fsspec and its drivers come from the ``data`` extra (``s3fs``, ``gcsfs``) and are imported inside
functions; Azure needs ``adlfs``, which no extra installs.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import IO, Any

from computewise.errors import ComputewiseError, InputError, MissingExtraError

__all__ = ["is_url", "locate", "open_store", "open_url", "translated"]

_DRIVER_LOGGERS = ("fsspec", "s3fs", "gcsfs", "adlfs")
CONNECT_TIMEOUT_S = 5.0  # a store that has not accepted a connection by then is not going to
_S3_ATTEMPTS = 3  # botocore's default of 5 (legacy mode) multiplies every unanswered request's wait

_STORES = {"s3": "S3", "s3a": "S3", "gs": "Google Cloud Storage", "gcs": "Google Cloud Storage"}
_STORES |= dict.fromkeys(("az", "abfs", "abfss", "adl"), "Azure Blob Storage")

_CREDENTIALS_HINTS = {
    "S3": "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE), or run `aws configure`",
    "Google Cloud Storage": "run `gcloud auth application-default login`, or set GOOGLE_APPLICATION_CREDENTIALS "
    "to a service-account key file",
    "Azure Blob Storage": "set AZURE_STORAGE_CONNECTION_STRING, or AZURE_STORAGE_ACCOUNT_NAME and "
    "AZURE_STORAGE_ACCOUNT_KEY",
}
_PERMISSION_HINTS = {
    "S3": "use credentials whose policy allows s3:ListBucket and s3:GetObject on the bucket",
    "Google Cloud Storage": "use an account with storage.objects.list and storage.objects.get on the bucket "
    "(roles/storage.objectViewer)",
    "Azure Blob Storage": "use an identity with the Storage Blob Data Reader role on the container",
}

# Exception classes, by name, along the cause chain; see the module's docstring for why by name.
_NO_CREDENTIALS = frozenset(
    {"NoCredentialsError", "PartialCredentialsError", "CredentialRetrievalError", "DefaultCredentialsError",
     "ClientAuthenticationError", "CredentialUnavailableError"}
)  # fmt: skip
_UNREACHABLE = frozenset(
    {"EndpointConnectionError", "ConnectTimeoutError", "ClientConnectorError", "ServiceRequestError",
     "gaierror", "ConnectionRefusedError", "ConnectionResetError"}
)  # fmt: skip
_TIMED_OUT = frozenset({"ReadTimeoutError", "TimeoutError", "FSTimeoutError", "ServerTimeoutError", "ReadTimeout"})
_DENIED_CODES = frozenset(
    {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "AllAccessDisabled", "AuthorizationFailure",
     "AuthorizationPermissionMismatch", "403"}
)  # fmt: skip
_NO_BUCKET_CODES = frozenset({"NoSuchBucket", "ContainerNotFound", "InvalidBucketName"})


def is_url(text: str) -> bool:
    """Whether ``text`` names an object store (or any fsspec URL) rather than a local path."""
    return "://" in text and not text.startswith("file://")


def _store(url: str) -> str:
    protocol = url.split("://", 1)[0].lower()
    return _STORES.get(protocol, f"the {protocol}:// store")


def _fsspec() -> Any:
    try:
        import fsspec
    except ImportError as error:
        raise MissingExtraError("fsspec", "data", "reading a URL") from error
    return fsspec


def _options(fsspec: Any, protocol: str) -> dict[str, Any]:
    """Our defaults for ``protocol``, under whatever the user's fsspec configuration says."""
    configured: dict[str, Any] = dict(fsspec.config.conf.get(protocol, {}))
    if protocol not in ("s3", "s3a"):
        return configured
    config = {
        "connect_timeout": CONNECT_TIMEOUT_S,
        "retries": {"max_attempts": _S3_ATTEMPTS, "mode": "standard"},
        **configured.get("config_kwargs", {}),
    }
    return {**configured, "config_kwargs": config}


def open_store(url: str) -> tuple[Any, str]:
    """(fsspec file system, path inside it) for ``url``, its endpoint checked to answer; an ``InputError`` if not."""
    fsspec = _fsspec()
    for name in _DRIVER_LOGGERS:  # a failure is said once, as ours: not also as the driver's logged traceback
        driver = logging.getLogger(name)
        if not driver.handlers:
            driver.addHandler(logging.NullHandler())
    protocol = url.split("://", 1)[0].lower()
    with translated(url):
        try:
            fs, path = fsspec.core.url_to_fs(url, **_options(fsspec, protocol))
        except ImportError as error:
            if _store(url) == "Azure Blob Storage":
                raise InputError(
                    f"{url}: reading Azure Blob Storage needs adlfs, which is not installed",
                    "pip install adlfs (the data extra brings s3:// and gs:// only)",
                ) from error
            raise MissingExtraError(f"the fsspec driver for {protocol}://", "data", f"reading {url}") from error
        _probe(url, _endpoint(fs))
    return fs, str(path)


def _endpoint(fs: Any) -> str | None:
    """The URL the driver sends requests to, where it says (s3fs's client, gcsfs's base); None elsewhere."""
    if hasattr(fs, "connect") and hasattr(fs, "s3"):  # s3fs: the client is made here, without a request
        fs.connect()
        return str(fs.s3.meta.endpoint_url)
    base = getattr(fs, "base", None)
    return base if isinstance(base, str) else None


def _probe(url: str, endpoint: str | None) -> None:
    """One TCP connection to ``endpoint``, so an unreachable store is reported now, not after the driver's retries."""
    if endpoint is None:
        return
    parts = urllib.parse.urlsplit(endpoint)
    if parts.hostname is None:
        return
    if urllib.request.getproxies().get(parts.scheme) and not urllib.request.proxy_bypass(parts.hostname):
        return
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        socket.create_connection((parts.hostname, port), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as error:
        reason = "no answer" if isinstance(error, TimeoutError) else (error.strerror or str(error))
        raise _unreachable(url, f"{parts.hostname}:{port}", reason) from error


def _unreachable(url: str, where: str, reason: str) -> InputError:
    return InputError(
        f"{url}: cannot reach {_store(url)} at {where} ({reason})",
        "check the network and the endpoint (AWS_ENDPOINT_URL or FSSPEC_S3_ENDPOINT_URL for S3, "
        "STORAGE_EMULATOR_HOST for GCS) and any proxy",
    )


def locate(fs: Any, url: str, path: str) -> dict[str, Any]:
    """What the store says of ``path`` (``type``: file or directory, ``size``); an ``InputError`` naming the
    missing bucket or path. Not ``fs.exists``: s3fs's answers False for every failure, credentials included."""
    with translated(url):
        try:
            info: dict[str, Any] = fs.info(path)
            return info
        except FileNotFoundError:
            bucket = path.split("/", 1)[0]
            try:
                fs.info(bucket)
            except FileNotFoundError:
                raise _no_bucket(url, bucket) from None
            raise InputError(
                f"{url}: nothing at this path in bucket {bucket!r}", "check the path (prefix or object name)"
            ) from None


def _no_bucket(url: str, bucket: str) -> InputError:
    return InputError(f"{url}: no such bucket {bucket!r}", "check the bucket's name, and the account or project")


def open_url(url: str) -> IO[bytes]:
    """``url`` opened for reading (fsspec), its failures said as ``translated`` says them."""
    with translated(url):
        handle: IO[bytes] = _fsspec().open(url, "rb").open()
    return handle


@contextlib.contextmanager
def translated(url: str) -> Iterator[None]:
    """Inside: a store's failure (no credentials, denied, no bucket, unreachable, time-out) becomes an ``InputError``.

    Anything else that is not an ``OSError`` or ``ValueError`` (a driver's bug, ours) passes through as it is.
    """
    try:
        yield
    except ComputewiseError:
        raise
    except Exception as error:
        found = _explain(url, error)
        if found is None:
            raise
        raise found from error


def _chain(error: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _names(error: BaseException) -> set[str]:
    return {cls.__name__ for cls in type(error).__mro__}


def _code(error: BaseException) -> str | None:
    """The store's error code: botocore's ``response["Error"]["Code"]``, gcsfs's and azure's HTTP status."""
    response = getattr(error, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code")) or None
    for attribute in ("code", "status_code", "status"):
        value = getattr(error, attribute, None)
        if isinstance(value, int) and value >= 400:
            return str(value)
    return None


def _explain(url: str, error: BaseException) -> InputError | None:
    """The ``InputError`` for ``error`` raised while reaching ``url``; None when it is not a store's failure."""
    store = _store(url)
    for link in _chain(error):
        names, code = _names(link), _code(link)
        if names & _NO_CREDENTIALS or code == "401":
            said = "did not accept the credentials, or there were none" if code == "401" else "found no credentials"
            return InputError(f"{url}: {store} {said}", _CREDENTIALS_HINTS.get(store, "set the store's credentials"))
        if names & _TIMED_OUT:
            return InputError(
                f"{url}: {store} did not answer in time ({link})",
                "retry; if it keeps happening, check the network and the endpoint, or raise the driver's "
                'time-out in the fsspec configuration (FSSPEC_S3=\'{"config_kwargs": {"read_timeout": 60}}\')',
            )
        if names & _UNREACHABLE:
            return _unreachable(url, "its endpoint", str(link))
        if code in _NO_BUCKET_CODES:
            return _no_bucket(url, url.split("://", 1)[1].split("/", 1)[0])
        forbidden = isinstance(link, OSError) and str(link).startswith("Forbidden:")  # gcsfs's 403: a bare OSError
        if code in _DENIED_CODES or isinstance(link, PermissionError) or forbidden:
            return InputError(
                f"{url}: {store} denied access ({link})",
                _PERMISSION_HINTS.get(store, "use credentials allowed to list and read it"),
            )
    if isinstance(error, OSError | ValueError):
        return InputError(f"cannot read {url}: {error}", "check the URL, the endpoint and the credentials")
    return None
