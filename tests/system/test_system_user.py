"""``current_user``: the login name, or the uid where the process has no passwd entry (containers)."""

from __future__ import annotations

import getpass
import os
import pwd

import pytest

from computewise.system.user import current_user

UNLISTED_UID = 54_321


def test_the_login_name_where_there_is_one() -> None:
    assert current_user() == getpass.getuser()


@pytest.mark.skipif(not hasattr(os, "fork") or os.geteuid() != 0, reason="taking another uid needs root")
def test_a_uid_without_a_passwd_entry_is_recorded_by_number() -> None:
    with pytest.raises(KeyError):
        pwd.getpwuid(UNLISTED_UID)  # the case containers hit: no entry to name the user
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no login variables, a uid that /etc/passwd does not list
        try:
            for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):
                os.environ.pop(name, None)
            os.setuid(UNLISTED_UID)
            os.write(write_end, current_user().encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as answer:
        recorded = answer.read().decode()
    os.waitpid(pid, 0)
    assert recorded == str(UNLISTED_UID)
