/**
 * ACL: the grants the Functions library needs, and the error of a call refused by ACL.
 *
 * A function's own `redis.call`s are checked against the caller's ACL, so the application's
 * user needs FCALL / FCALL_RO and every command the library calls. The lines below are
 * README.md's and lua/README.md's (between their `library-acl-lines` markers; the tests
 * compare them), run as written by the repository's tests/lua_acl.rs.
 *
 * A call refused for lack of a permission (a command inside the library, the call itself,
 * or its key) becomes a `MissingPermissionError`: configuration, never an outage. On Redis
 * 7.0+ the library is asked which commands are missing (`FCALL_RO slidingwindow_permissions
 * 1 <key>`; the whole list if that fails too); Redis 6.2 (EVALSHA) cannot tell, so there
 * the error names the whole list. `asPermissionError` is the one hook, applied where a
 * call's error is rethrown; it needs nothing from the backend but the key and a way to send
 * one command on it: which path the call took is read from the error's own text.
 */

/** What the library calls on Redis 7.0+ (slidingwindow_permissions checks these). */
export const LIBRARY_COMMANDS: readonly string[] = ['time', 'get', 'set', 'pexpiretime', 'pexpireat'];
/** What it calls on Redis 6.2 (EVALSHA / EVAL). */
export const LIBRARY_COMMANDS_62: readonly string[] = ['time', 'get', 'set', 'pttl'];

/** README.md, "### ACL": the application's user on Redis 7.0+ / Valkey. */
export const LIBRARY_LINE = 'ACL SETUSER app on >secret ~rate:* +fcall +fcall_ro +time +get +set +pexpiretime +pexpireat';
/** The same on Redis 6.2. */
export const LIBRARY_LINE_62 = 'ACL SETUSER app on >secret ~rate:* +evalsha +eval +time +get +set +pttl';
/** The operator who loads the library (FUNCTION LOAD on every primary) and checks it. */
export const OPERATOR_LINE = 'ACL SETUSER sw-admin on >admin-secret +function|load +function|list +fcall_ro';

/**
 * A call refused by ACL; `commands`: the lower-case names this user lacks ([] when only the
 * key was refused). The message is the server's error, then ` -- ` and the fix.
 */
export class MissingPermissionError extends Error {
  override readonly name = 'MissingPermissionError';
  constructor(message: string, readonly commands: string[], options?: { cause?: unknown }) {
    super(message, options);
  }
}

/** What was refused: a command inside the library, the call's key, or the call itself. */
export type Refusal = 'script' | 'key' | 'command';

// Inside a script: Redis 7.0 and 6.2, then Redis 7.2+ and Valkey.
const SCRIPT_REFUSED = /The user executing the script can't run this command|ACL failure in script/i;
// The call's own key (NOPERM): Redis 6.2 / 7.0, then 7.2+ and Valkey.
const KEY_REFUSED = /permissions to access one of the keys|No permissions to access a key/i;
const NAMED = /permissions to run the '([^']+)' command/;
const USER = /\bUser (\S+) has no permissions/;
// Redis 6.2's script errors (EVALSHA): "Error running script (call to f_<sha>)", and a
// pcall's error returned as the reply, "@user_script: <line>: ...".
const EVAL_PATH = /Error running script \(call to f_|^@user_script:/;

function text(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** The refusal `err` reports, or undefined when it is no ACL refusal. */
export function refusal(err: unknown): Refusal | undefined {
  const t = text(err);
  if (SCRIPT_REFUSED.test(t)) return 'script';
  if (!/^NOPERM\b/.test(t)) return undefined;
  if (KEY_REFUSED.test(t)) return 'key';
  return NAMED.test(t) ? 'command' : undefined;
}

/** Sends one command (name first) on the call's key, e.g. `(args) => limiter.command(key, args, true)`. */
export type SendOnKey = (args: readonly string[]) => Promise<unknown>;

/**
 * `err` as it is, unless it is an ACL refusal: then the MissingPermissionError for it
 * (asking the library which commands are missing where that can help).
 */
export async function asPermissionError(err: unknown, key: string, send: SendOnKey): Promise<unknown> {
  const kind = refusal(err);
  if (kind === undefined) return err;
  const t = text(err);
  const named = NAMED.exec(t)?.[1]?.toLowerCase();
  const path = EVAL_PATH.test(t) || named === 'evalsha' || named === 'eval' ? 'eval'
    : named?.startsWith('slidingwindow.') === true ? 'module' : 'library';
  let listed: string[] | undefined;
  if (path === 'library' && kind !== 'key') {
    try {
      const reply = await send(['FCALL_RO', 'slidingwindow_permissions', '1', key]);
      if (Array.isArray(reply)) listed = reply.map((c) => String(c).toLowerCase());
    } catch {
      listed = undefined; // an older library, FCALL_RO refused, ...: the whole list
    }
  }
  return permissionError(err, kind, path, key, listed);
}

/** The error for `err`, refused as `kind` on `path`; `listed`: what slidingwindow_permissions answered. */
export function permissionError(err: unknown, kind: Refusal, path: 'module' | 'library' | 'eval', key: string,
  listed?: readonly string[]): MissingPermissionError {
  const t = text(err);
  const named = NAMED.exec(t)?.[1]?.toLowerCase();
  const user = USER.exec(t)?.[1] ?? '<user>'; // Redis 7.2+ and Valkey name the user
  const [whole, line] = path === 'eval' ? [LIBRARY_COMMANDS_62, LIBRARY_LINE_62] : [LIBRARY_COMMANDS, LIBRARY_LINE];
  if (kind === 'key') {
    return new MissingPermissionError(`${t} -- the Redis user may not access the key '${key}': add the limiter's `
      + `key prefix to its key patterns, ACL SETUSER ${user} ~<prefix>* (the clients' default prefix is rate:); `
      + `the least-privilege line: ${line}`, [], { cause: err });
  }
  let commands: string[];
  if (kind === 'command') {
    commands = named === undefined ? [] : [named];
    for (const c of listed ?? []) if (!commands.includes(c)) commands.push(c);
  } else if (path === 'eval' || listed === undefined || listed.length === 0) {
    commands = [...whole]; // Redis 6.2 cannot tell; or the library could not be asked
  } else {
    commands = [...listed];
  }
  const grant = commands.map((c) => `+${c}`).join(' ');
  let advice = `the library's least-privilege line (README.md, ACL): ${line}`;
  if (path === 'module' && commands.every((c) => c.startsWith('slidingwindow.'))) {
    advice = "the module's lines are in README.md, ACL (+@read +@write on Redis 7.2+ and Valkey; the commands by name on Redis 7.0)";
  } else if (path === 'eval' && kind === 'script') {
    advice = `Redis 6.2 cannot say which of them is missing; ${advice}`;
  }
  return new MissingPermissionError(`${t} -- the Redis user may not run ${commands.join(', ')}. Grant `
    + `${commands.length === 1 ? 'it' : 'them'}: ACL SETUSER ${user} ${grant}; ${advice}`, commands, { cause: err });
}
