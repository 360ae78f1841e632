"""Deliver alerts to the log, a webhook and a command, without ever holding up the job that raised them.

An alert is first written to the log (a line on stderr and a ``computewise.alerts`` log record),
synchronously, because that cannot hang. Webhook and command deliveries run on a daemon thread per
alert, so a receiver that is down, slow or hanging costs the caller nothing:

- webhook: HTTP POST of the alert as JSON (standard library only), ``timeout_s`` per attempt, up to
  ``attempts`` tries on connection errors, timeouts, HTTP 408/425/429 and 5xx, sleeping
  ``min(max_backoff_s, backoff_s x 2^k) x U(0.5, 1)`` between tries (exponential back-off with
  jitter, so many clients do not retry in lock step), and never longer than ``total_timeout_s`` in
  all: a process that waits for its deliveries at exit (``run``) then waits a known, short time
  for a receiver that accepts and never answers. Other 4xx answers are final ("rejected").
  The body carries a top-level ``text`` so chat webhooks (Slack, Mattermost) show the message as is.
- command: run without a shell (``shlex.split``), the alert JSON on stdin and in ``COMPUTEWISE_ALERT_*``
  environment variables, killed with its process group after ``command_timeout_s``.

What happened is written back with ``Ledger.set_alert_delivery`` (``pending`` first, then the
outcome). ``Notifier.close(timeout_s)`` gives pending deliveries a bounded chance to finish at exit.

Commands stored in a shared ledger would run on every machine that checks budgets, so the owner of
the process decides with ``run_commands`` whether stored commands run at all.
"""

from __future__ import annotations

import json
import logging
import os
import random
import shlex
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any, TextIO

from computewise.errors import InputError
from computewise.ledger import Ledger
from computewise.specs.codec import Jsonable

__all__ = ["Alert", "Notifier", "parse_webhook_url"]

_LOG = logging.getLogger("computewise.alerts")
_RETRY_STATUSES = frozenset({408, 425, 429})
_TAIL_CHARS = 500


@dataclass(frozen=True)
class Alert(Jsonable):
    """What fired: ``alert_id`` is the ledger's id (None when it was not recorded). Its JSON, its fields in order,
    is the webhook's body (with ``text``) and the command's stdin; ``details`` is the budget's status or the idle
    run's figures, as their own JSON."""

    alert_id: int | None
    kind: str
    message: str
    fired_at_s: float
    scope: str | None = None
    period: str | None = None
    threshold_pct: float | None = None
    details: dict[str, Any] = field(default_factory=dict)


def parse_webhook_url(text: str) -> str:
    """An ``http://`` or ``https://`` URL with a host; anything else is an InputError."""
    url = text.strip()
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or any(ch.isspace() for ch in url):
        raise InputError(
            f"{text!r} is not an http(s) webhook URL",
            "give the full URL, e.g. --webhook https://alerts.example.com/computewise",
        )
    return url


class Notifier:
    """Sends alerts to the log, and on background threads to webhooks and commands."""

    def __init__(
        self,
        ledger: Ledger | None = None,
        *,
        stream: TextIO | None = None,
        timeout_s: float = 5.0,
        total_timeout_s: float = 30.0,
        attempts: int = 4,
        backoff_s: float = 1.0,
        max_backoff_s: float = 30.0,
        command_timeout_s: float = 30.0,
        run_commands: bool = True,
        seed: int | None = None,
    ) -> None:
        if attempts < 1 or timeout_s <= 0 or total_timeout_s <= 0 or command_timeout_s <= 0:
            raise ValueError("attempts must be >= 1 and timeouts positive")
        self._ledger = ledger
        self._stream = stream
        self._timeout_s = timeout_s
        self._total_timeout_s = total_timeout_s
        self._attempts = attempts
        self._backoff_s = backoff_s
        self._max_backoff_s = max_backoff_s
        self._command_timeout_s = command_timeout_s
        self._run_commands = run_commands
        self._random = random.Random(seed)
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def notify(self, alert: Alert, webhook_url: str | None = None, command: str | None = None) -> None:
        """Log now; hand the webhook and command to a daemon thread and return at once."""
        stream = self._stream if self._stream is not None else sys.stderr
        try:
            stream.write(f"computewise: alert: {alert.message}\n")
            stream.flush()
        except (OSError, ValueError):  # a closed stderr must not break the job
            pass
        _LOG.info("%s alert: %s", alert.kind, alert.message)
        delivery: dict[str, Any] = {"log": "written"}
        if webhook_url:
            delivery["webhook"] = {"status": "pending"}
        if command:
            delivery["command"] = {"status": "pending" if self._run_commands else "skipped"}
        if not webhook_url and not (command and self._run_commands):
            self._record(alert, delivery)
            return
        thread = threading.Thread(
            target=self._deliver,
            args=(alert, webhook_url, command if self._run_commands else None, delivery),
            name=f"computewise-alert-{alert.alert_id}",
            daemon=True,
        )
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()]
            self._threads.append(thread)
        thread.start()

    def close(self, timeout_s: float = 10.0) -> bool:
        """Wait at most ``timeout_s`` in total for pending deliveries; True when none is left."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()]
            return not self._threads

    def __enter__(self) -> Notifier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- background ----------------------------------------------------------------------------

    def _deliver(self, alert: Alert, webhook_url: str | None, command: str | None, delivery: dict[str, Any]) -> None:
        self._record(alert, delivery)
        payload = json.dumps({"text": alert.message, **alert.to_dict()}).encode()
        if webhook_url:
            delivery["webhook"] = self._post(webhook_url, payload)
            self._record(alert, delivery)
        if command:
            delivery["command"] = self._run(command, alert, payload)
            self._record(alert, delivery)

    def _post(self, url: str, payload: bytes) -> dict[str, Any]:
        errors: list[str] = []
        status: int | None = None
        give_up_at = time.monotonic() + self._total_timeout_s
        tried = 0
        for attempt in range(self._attempts):
            if attempt:
                delay_s = min(self._max_backoff_s, self._backoff_s * 2 ** (attempt - 1)) * self._random.uniform(0.5, 1)
                if time.monotonic() + delay_s >= give_up_at:
                    break
                time.sleep(delay_s)
            left_s = give_up_at - time.monotonic()
            if left_s <= 0:
                break
            tried = attempt + 1
            request = urllib.request.Request(
                url,
                data=payload,
                method="POST",
                headers={"Content-Type": "application/json", "User-Agent": "computewise-alerts"},
            )
            try:
                with urllib.request.urlopen(request, timeout=min(self._timeout_s, left_s)) as response:
                    status = int(response.status)
                return {"status": "delivered", "attempts": attempt + 1, "http_status": status, "errors": errors}
            except urllib.error.HTTPError as exc:
                status = exc.code
                exc.close()
                errors.append(f"HTTP {exc.code}")
                if exc.code < 500 and exc.code not in _RETRY_STATUSES:
                    return {"status": "rejected", "attempts": attempt + 1, "http_status": status, "errors": errors}
            except (urllib.error.URLError, OSError) as exc:  # refused, unreachable, timed out
                status = None
                reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
                errors.append(f"{type(reason).__name__}: {reason}"[:200])
            _LOG.debug("webhook attempt %d failed: %s", attempt + 1, errors[-1])
        if tried < self._attempts:
            errors.append(f"gave up after {self._total_timeout_s:g} s in all")
        _LOG.warning("webhook delivery failed after %d attempts: %s", tried, errors[-1])
        return {"status": "failed", "attempts": tried, "http_status": status, "errors": errors}

    def _run(self, command: str, alert: Alert, payload: bytes) -> dict[str, Any]:
        try:
            argv = shlex.split(command)
        except ValueError as exc:
            return {"status": "failed", "error": f"cannot split command: {exc}"}
        env = {**os.environ, **_alert_env(alert)}
        try:
            process = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                env=env,
                start_new_session=True,
            )
        except OSError as exc:
            return {"status": "failed", "error": f"{type(exc).__name__}: {exc}"[:200]}
        try:
            _, stderr = process.communicate(payload, timeout=self._command_timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            process.communicate()
            return {"status": "timeout", "timeout_s": self._command_timeout_s}
        tail = stderr.decode(errors="replace")[-_TAIL_CHARS:]
        status = "ok" if process.returncode == 0 else "failed"
        return {"status": status, "exit_code": process.returncode, "stderr_tail": tail}

    def _record(self, alert: Alert, delivery: dict[str, Any]) -> None:
        if self._ledger is None or alert.alert_id is None:
            return
        try:
            self._ledger.set_alert_delivery(alert.alert_id, delivery)
        except Exception:  # a delivery report must never crash the job; the alert itself is stored
            _LOG.warning("could not record the delivery of alert %s", alert.alert_id, exc_info=True)


def _alert_env(alert: Alert) -> dict[str, str]:
    values = {
        "ID": alert.alert_id,
        "KIND": alert.kind,
        "MESSAGE": alert.message,
        "SCOPE": alert.scope,
        "PERIOD": alert.period,
        "THRESHOLD_PCT": alert.threshold_pct,
        "FIRED_AT_S": alert.fired_at_s,
    }
    return {f"COMPUTEWISE_ALERT_{key}": "" if value is None else str(value) for key, value in values.items()}


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    try:
        if hasattr(os, "killpg"):
            os.killpg(process.pid, signal.SIGKILL)
        else:  # pragma: no cover - Windows has no process groups here
            process.kill()
    except ProcessLookupError:
        pass
