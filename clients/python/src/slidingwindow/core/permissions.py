"""ACL: the grants the Functions library needs, and the error of a call refused by ACL.

A function's own `redis.call`s are checked against the caller's ACL, so the application's
user needs `FCALL`/`FCALL_RO` and every command the library calls. The lines below are
README.md's and lua/README.md's (between their `library-acl-lines` markers; the tests
compare them), run as written by the repository's tests/lua_acl.rs.

A call refused for lack of a permission (a command inside the library, the call itself,
or its key) raises `MissingPermissionError`: a configuration error, never an outage (the
circuit does not open). On Redis 7.0+ the backend asks the library which commands are
missing (`FCALL_RO slidingwindow_permissions 1 <key>`); on Redis 6.2, which cannot tell,
the error names the whole list.
"""

from __future__ import annotations

import re
from typing import Any, Optional, Sequence

from redis.exceptions import NoPermissionError

# What the library calls on Redis 7.0+ (slidingwindow_permissions checks these) and on 6.2.
LIBRARY_COMMANDS = ("time", "get", "set", "pexpiretime", "pexpireat")
LIBRARY_COMMANDS_62 = ("time", "get", "set", "pttl")

# README.md, "### ACL": the application's user (Redis 7.0+ / Valkey, then Redis 6.2) and
# the operator who loads the library.
LIBRARY_LINE = ("ACL SETUSER app on >secret ~rate:* +fcall +fcall_ro "
                "+time +get +set +pexpiretime +pexpireat")
LIBRARY_LINE_62 = "ACL SETUSER app on >secret ~rate:* +evalsha +eval +time +get +set +pttl"
OPERATOR_LINE = "ACL SETUSER sw-admin on >admin-secret +function|load +function|list +fcall_ro"

# A command inside a script refused: Redis 7.0 and 6.2 ("The user executing the script
# can't run this command or subcommand"), Redis 7.2+ and Valkey ("ACL failure in script").
_SCRIPT_REFUSED = ("the user executing the script can't run this command",
                   "acl failure in script")
# The call's own key refused (NOPERM): Redis 6.2 / 7.0, then 7.2+ and Valkey.
_KEY_REFUSED = ("permissions to access one of the keys", "no permissions to access a key")
_NAMED = re.compile(r"permissions to run the '([^']+)' command")
_USER = re.compile(r"\bUser (\S+) has no permissions")


class MissingPermissionError(NoPermissionError):
    """A call refused by ACL: a command the library calls, the call itself, or its key.

    `commands`: the lower-case names of the commands this user lacks (empty when only the
    key was refused). The message is the server's error, then ` -- ` and the fix: the
    commands and the `ACL SETUSER` line.
    `status_code` (redis-py 8): the refused reply's code, as the server sent it (NOPERM
    for the call itself or its key, ERR for a command inside the library).
    Raised, never failed open: no probe can grant a permission.
    """

    def __init__(self, message: str, commands: Sequence[str] = (),
                 status_code: Optional[str] = None) -> None:
        super().__init__(message)
        self.commands = list(commands)
        self.status_code = status_code  # set here: redis-py before 8 takes no such argument


def refusal(exc: BaseException) -> Optional[str]:
    """What `exc` says was refused: "script" (a command inside the library), "key" (the
    call's key), "command" (the call itself), or None when it is no ACL refusal."""
    text = str(exc).lower()
    if any(s in text for s in _SCRIPT_REFUSED):
        return "script"
    if isinstance(exc, NoPermissionError):
        if any(s in text for s in _KEY_REFUSED):
            return "key"
        if _NAMED.search(str(exc)):
            return "command"
    return None


def named_command(exc: BaseException) -> Optional[str]:
    """The command an error names ("... permissions to run the 'fcall' command")."""
    found = _NAMED.search(str(exc))
    return found.group(1).lower() if found else None


def _user(exc: BaseException) -> str:
    found = _USER.search(str(exc))  # Redis 7.2+ and Valkey name the user
    return found.group(1) if found else "<user>"


def _text(name: Any) -> str:
    return (name.decode() if isinstance(name, bytes) else str(name)).lower()


def error(exc: BaseException, kind: str, backend: str, key: Any,
          listed: Optional[Sequence[Any]] = None) -> MissingPermissionError:
    """The error for `exc`, refused as `kind` (see `refusal`) on `backend` ("module",
    "library" or "eval"); `listed`: what slidingwindow_permissions answered (None: not
    asked, or it failed)."""
    named = named_command(exc)
    user = _user(exc)
    code = getattr(exc, "status_code", None)
    missing = [_text(c) for c in listed] if listed is not None else None
    whole: Sequence[str]
    if backend == "eval":
        whole, line = LIBRARY_COMMANDS_62, LIBRARY_LINE_62
    else:
        whole, line = LIBRARY_COMMANDS, LIBRARY_LINE
    if kind == "key":
        key_text = key.decode() if isinstance(key, bytes) else str(key)
        return MissingPermissionError(
            f"{exc} -- the Redis user may not access the key {key_text!r}: add the limiter's "
            f"key prefix to its key patterns, ACL SETUSER {user} ~<prefix>* (the clients' "
            f"default prefix is rate:); the least-privilege line: {line}", [], code)
    commands: list[str]
    if kind == "command":
        commands = [named] if named else []
        commands += [c for c in missing or [] if c not in commands]
    elif backend == "eval":
        commands = list(whole)  # Redis 6.2 cannot tell which
    elif missing:
        commands = missing
    else:
        commands = list(whole)  # the diagnostic could not be asked (or saw nothing)
    grant = " ".join(f"+{c}" for c in commands)
    if backend == "module" and all(c.startswith("slidingwindow.") for c in commands):
        advice = ("the module's lines are in README.md, ACL (+@read +@write on Redis 7.2+ "
                  "and Valkey; the commands by name on Redis 7.0)")
    else:
        advice = f"the library's least-privilege line (README.md, ACL): {line}"
        if backend == "eval" and kind == "script":
            advice = ("Redis 6.2 cannot say which of them is missing; " + advice)
    return MissingPermissionError(
        f"{exc} -- the Redis user may not run {', '.join(commands)}. Grant "
        f"{'it' if len(commands) == 1 else 'them'}: ACL SETUSER {user} {grant}; {advice}",
        commands, code)
