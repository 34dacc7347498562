#!/usr/bin/env python3
"""Where SLIDINGWINDOW.CHECK's server time goes, next to SET PXAT (and the other cases).

    python3 bench/profile_hotpath.py                 # callgrind + perf, all default cases
    python3 bench/profile_hotpath.py --no-perf       # callgrind only (instruction counts)
    python3 bench/profile_hotpath.py --cases check,setpxat --calls 20000
    python3 bench/profile_hotpath.py --cases check_new,check_new_clock,setpxat_new,check_clock

The cases are bench/workloads.py's (the benchmark's own commands): warm keys by default;
the new-key cases (check_new, check_new_clock, setpxat_new) call each id once, on ids
never written, over the same warm background keyspace.

Two views, written to target/bench/profile/ (text; the big raw files stay in a temp dir unless
--keep-raw is given):

* callgrind (valgrind): exact instructions (Ir) per call, insensitive to the machine's
  load. One redis-server runs under callgrind with the module; each case's keyspace is
  warmed first (every key exists, as in steady state), then for each case the counters
  are zeroed (callgrind_control -z), N calls are sent (pipeline 32), and the profile is
  dumped (callgrind_control -d). The dump is parsed here: per-call inclusive Ir of
  call() (what INFO commandstats times), of the command's proc, and of every callee
  down the tree; for the module, its own instructions split by source file (args.rs =
  parsing, encoding.rs = decode/encode, window.rs = decide, commands.rs = glue).
  -> callgrind-<case>.txt, callgrind-summary.json

* perf (cpu-clock samples with DWARF call graphs): where wall time goes, cache misses
  included (dictFind on a large keyspace misses the cache; instruction counts do not
  show that). A plain redis-server, the case's keyspace warmed, the driver sending
  pipelined calls for a few seconds while `perf record -p` samples the server.
  -> perf-<case>.txt (self time by symbol, and time inside call() by callee)
"""

import argparse
import collections
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from bench import DEFAULT_MODULE, LUA_LIBRARY, seed_script
from compact import RAW
from measure import warm_case, warm_stream
from report import ROOT, machine_info
from resp import Conn, batches_of, classify, count_cmds, resp, show_cmd
from servers import Server, binary
from workloads import Case, Ids, Zipf, ident, make_cases

OUT = RAW / "profile"  # callgrind/perf dumps and summaries: not committed
STREAM_WARM = 20_000  # the stream's draws before profiling (make bench: 200,000)
DEFAULT_CASES = ("check,check_clock,check_new,check_new_clock,denied,peek,details,setpxat,"
                 "setpxat_new,set,get,incr,seed")

# RM_* functions the module calls, by what they do for it.
GROUPS = [
    ("argv bytes (RM_StringPtrLen)", ["RM_StringPtrLen"]),
    ("clock (RM_Milliseconds)", ["RM_Milliseconds"]),
    ("key lookup (RM_OpenKey)", ["RM_OpenKey"]),
    ("read value (RM_KeyType, RM_ValueLength, RM_StringDMA)",
     ["RM_KeyType", "RM_ValueLength", "RM_StringDMA"]),
    ("write value (RM_StringTruncate/Set, Create/FreeString)",
     ["RM_StringTruncate", "RM_StringSet", "RM_CreateString", "RM_FreeString"]),
    ("expire (RM_SetAbsExpire)", ["RM_SetAbsExpire"]),
    ("WATCH signal + keyspace events (RM_SignalModifiedKey, RM_NotifyKeyspaceEvent)",
     ["RM_SignalModifiedKey", "RM_NotifyKeyspaceEvent"]),
    ("replication (RM_Replicate: command lookup, argv building, alsoPropagate)",
     ["RM_Replicate"]),
    ("close key (RM_CloseKey)", ["RM_CloseKey"]),
    ("reply (RM_ReplyWithArray, RM_ReplyWithLongLong)",
     ["RM_ReplyWithArray", "RM_ReplyWithLongLong"]),
]
MODULE_FILES = [
    ("module: parsing (args.rs)", "args.rs"),
    ("module: decode / encode (encoding.rs)", "encoding.rs"),
    ("module: decide (window.rs)", "window.rs"),
    ("module: glue (commands.rs)", "commands.rs"),
    ("module: stats (stats.rs)", "stats.rs"),
]


COMMANDS: list[str] = []  # the exact external commands run, for PROFILE.md


def note(argv):
    COMMANDS.append(" ".join(str(a) for a in argv))


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- callgrind


class Profile:
    """A parsed callgrind dump (one event, Ir): self cost per function and per (object,
    source file), and call edges with their inclusive cost and count."""

    def __init__(self, path):
        self.self_fn = collections.Counter()
        self.self_file = collections.Counter()  # (object, file) -> Ir
        self.edges = collections.defaultdict(lambda: [0, 0])  # (caller, callee) -> [calls, Ir]
        self.obj_of = {}
        names = {"ob": {}, "fl": {}, "fn": {}}
        alias = {"cob": "ob", "cfl": "fl", "cfi": "fl", "cfn": "fn", "fi": "fl", "fe": "fl"}

        def name(kind, text):
            table = names[alias.get(kind, kind)]
            m = re.match(r"\((\d+)\)(?: (.*))?$", text)
            if not m:
                return text
            if m.group(2) is not None:
                table[m.group(1)] = m.group(2)
            return table.get(m.group(1), "?")

        ob = fl = fi = fn = cob = cfn = None
        calls_n = 0
        pending_call = None
        for raw in open(path, errors="replace"):
            line = raw.rstrip("\n")
            if not line or line[0] == "#":
                continue
            c = line[0]
            if c.isdigit() or c in "+-*":
                parts = line.split()
                cost = int(parts[1]) if len(parts) > 1 else 0
                if pending_call is not None:
                    e = self.edges[(fn, pending_call)]
                    e[0] += calls_n
                    e[1] += cost
                    pending_call = None
                else:
                    self.self_fn[fn] += cost
                    self.self_file[(ob, fi)] += cost
                continue
            key, _, val = line.partition("=")
            if key == "ob":
                ob = name("ob", val)
            elif key == "fl":
                fl = fi = name("fl", val)
            elif key in ("fi", "fe"):
                fi = name(key, val)
            elif key == "fn":
                fn = name("fn", val)
                fi = fl
                self.obj_of.setdefault(fn, ob)
            elif key == "cob":
                cob = name("cob", val)
            elif key in ("cfl", "cfi"):
                name(key, val)
            elif key == "cfn":
                cfn = name("cfn", val)
                if cob is not None:
                    self.obj_of.setdefault(cfn, cob)
                cob = None
            elif key == "calls":
                calls_n = int(val.split()[0])
                pending_call = cfn

    def inclusive(self, fn):
        return self.self_fn[fn] + sum(ir for (a, _), (_, ir) in self.edges.items() if a == fn)

    def calls_into(self, fn):
        return sum(n for (_, b), (n, _) in self.edges.items() if b == fn)

    def callees(self, fn):
        return sorted(((b, n, ir) for (a, b), (n, ir) in self.edges.items() if a == fn),
                      key=lambda x: -x[2])

    def find(self, pattern):
        return [f for f in set(self.self_fn) | {b for _, b in self.edges}
                if f and re.search(pattern, f)]

    def tree(self, fn, per, depth=4, floor=0.01, indent=0, total=None, seen=(), scale=1.0):
        """Lines of the call tree under fn, Ir per command, pruned below floor*total.

        Callgrind keeps one level of call context: a callee reached from several callers
        (zfree, malloc_usable_size) has one set of children for all of them. Below such a
        callee the children are scaled by this edge's share of its calls, marked "~"."""
        total = total or self.inclusive(fn)
        out = []
        for callee, n, ir in self.callees(fn):
            ir, n = ir * scale, n * scale
            if ir < floor * total or callee in seen:
                continue
            mark = "~" if scale != 1.0 else " "
            out.append(f"{'  ' * indent}{mark}{ir / per:8.1f} Ir  {n / per:5.2f} calls  "
                       f"{short(callee)}")
            if depth > 1:
                share = n / max(1, self.calls_into(callee))
                out += self.tree(callee, per, depth - 1, floor, indent + 1, total,
                                 seen + (fn,), min(1.0, share))
        return out


def short(fn):
    fn = re.sub(r"::h[0-9a-f]{16}$", "", fn or "?")
    return fn if len(fn) < 90 else fn[:87] + "..."


def module_breakdown(prof, module_obj, per):
    """The module's share of one CHECK/PEEK: its own instructions by source file, and
    the Redis API it calls, grouped."""
    mod_fns = [f for f, ob in prof.obj_of.items() if ob and ob.endswith(module_obj)]
    out = collections.OrderedDict()
    api = collections.Counter()
    other_api = collections.Counter()
    for f in mod_fns:
        for callee, n, ir in prof.callees(f):
            if prof.obj_of.get(callee, "").endswith(module_obj):
                continue  # module -> module: its cost is counted as the callee's self
            api[callee] += ir
    grouped = set()
    for label, fns in GROUPS:
        v = sum(api[f] for f in fns)
        grouped.update(fns)
        out[label] = v / per
    for f, v in api.items():
        if f not in grouped:
            other_api[short(f)] += v
    for label, fname in MODULE_FILES:
        out[label] = sum(v for (ob, fl), v in prof.self_file.items()
                         if ob and ob.endswith(module_obj) and fl and fl.endswith(fname)) / per
    listed = {fname for _, fname in MODULE_FILES}
    rest = collections.Counter()
    for (ob, fl), v in prof.self_file.items():
        if ob and ob.endswith(module_obj) and not any(fl and fl.endswith(x) for x in listed):
            rest[fl] += v
    out["module: other (std, core, redis-module crate)"] = sum(rest.values()) / per
    for f, v in other_api.most_common():
        out[f"other callee: {f}"] = v / per
    return out, {k: v / per for k, v in rest.most_common(8)}


def case_server(args: argparse.Namespace, cases: list[str], keyspace: int,
                wrapper: Sequence[str] = (), start_timeout: float = 10
                ) -> tuple[Server, dict[str, Case], int]:
    """A server with the module, each case's background keyspace written."""
    srv = Server("redis7", args.redis_server, [Path(args.module).resolve()],
                 wrapper=wrapper, start_timeout=start_timeout)
    try:
        seed = seed_script(args.seed_script)
        sha = srv.r.script_load(seed.read_text()) if seed else None
        now = int(time.time())
        by = {c.key: c for c in make_cases(sha, now)}
        if "stream_lua" in cases:
            srv.r.execute_command("FUNCTION", "LOAD", "REPLACE", LUA_LIBRARY.read_text())
        for k in cases:
            log(f"  warming {k} ({keyspace} keys)")
            warm_case(srv, by[k], keyspace)
        stream = [by[k] for k in cases if by[k].keys == "stream"]
        if stream:
            # The stream's history, as `make bench` writes it before measuring.
            log(f"  warming the stream ({STREAM_WARM} draws)")
            warm_stream(srv, stream, Ids(keyspace, 1, Zipf()).for_run("stream", -1,
                                                                   STREAM_WARM, 0))
    except BaseException:
        srv.cleanup()
        raise
    return srv, by, now


def run_ids(case: Case, keyspace: int, n: int, seed: int, cycle: int = 0) -> list[int]:
    """Warm cases: random ids of the keyspace. New-key cases: ids never written, each
    once (`cycle` picks a range of its own). Stream cases: draws of the Zipf stream."""
    ids = Ids(keyspace, seed, Zipf() if case.keys == "stream" else None)
    if case.keys == "new":
        return ids.fresh(cycle, n, n)
    if case.keys == "stream":
        return ids.for_run("stream", cycle, n, n)
    return ids.for_run("warm", cycle, n, n)


def new_key_calls(keyspace: int, calls: int) -> int:
    # Keep background + new keys under the next power of two: the main and expires dicts
    # then do not grow (and rehash) during the profile.
    return min(calls, (1 << keyspace.bit_length()) - keyspace - 1)


def run_callgrind(args, cases, tmp):
    out_pat = os.path.join(tmp, "callgrind.%p")
    wrapper = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out_pat}",
               "--dump-instr=no", "--dump-line=yes", "--separate-threads=no"]
    log("callgrind: starting redis-server under valgrind (slow)...")
    srv, by, now = case_server(args, cases, args.keyspace, wrapper, 180)
    note([*wrapper, args.redis_server, "--port", srv.port, "--save", "''", "--loadmodule",
          Path(args.module).resolve(), "..."])
    summary = {}
    try:
        pid = srv.proc.pid
        for k in cases:
            c = by[k]
            n = new_key_calls(args.keyspace, args.calls) if c.keys == "new" else args.calls
            t = int(time.time())
            cmds = [resp(*c.cmd(ident(i), t)) for i in run_ids(c, args.keyspace, n, 7)]
            batches = list(batches_of(cmds, 32))
            with Conn(srv.port, c.db) as conn:
                conn.call(resp("PING"), 1)
                ctl(["-z", str(pid)])
                sink = []
                for b in batches:
                    conn.call(b, c.lines * count_cmds(b), sink)
                ctl(["-d", f"case-{k}", str(pid)])
            a, d, e = classify(b"".join(sink), c.allowed_pat, c.denied_pat)
            dumps = sorted(Path(tmp).glob(f"callgrind.{pid}.*"), key=os.path.getmtime)
            prof = Profile(dumps[-1])
            if args.keep_raw:
                shutil.copy(dumps[-1], OUT / f"callgrind-{k}.out")
            summary[k] = report_case(prof, c, args, dict(allowed=a, denied=d, errors=e))
            log(f"  {k}: {summary[k]['call_ir_per_command']:.0f} Ir per call() "
                f"({summary[k]['commands']} commands)")
    finally:
        srv.cleanup()
    return summary


def ctl(argv):
    if argv[0] == "-z" and not any(c.startswith("callgrind_control -z") for c in COMMANDS):
        note(["callgrind_control", "-z", "<pid>", " # then the case's calls, then:",
              "callgrind_control", "-d", "case-<case>", "<pid>"])
    r = subprocess.run(["callgrind_control", *argv], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError(f"callgrind_control {argv}: {r.stdout} {r.stderr}")


PROCS = {"incr": "incrCommand", "set": "setCommand", "setpxat": "setCommand",
         "setpxat_new": "setCommand", "get": "getCommand", "seed": "evalShaCommand"}


def report_case(prof, case, args, replies):
    module_obj = Path(args.module).name
    n_call = prof.calls_into("call")
    per = n_call or 1
    call_ir = prof.inclusive("call")
    if case.key in PROCS:
        proc = PROCS[case.key]
    else:
        proc = "RedisModuleCommandDispatcher"
    proc_ir = prof.inclusive(proc)
    res = dict(case=case.label, command=show_cmd(case.cmd("<id>", 0)),
               commands=n_call, replies=replies,
               call_ir_per_command=call_ir / per, proc=proc, proc_ir_per_command=proc_ir / per,
               process_command_ir=prof.inclusive("processCommand") / per,
               read_query_ir=prof.inclusive("readQueryFromClient") / per)
    lines = [f"# callgrind: {case.label}", "",
             f"command: {res['command']}",
             f"commands profiled: {n_call} (replies: {replies})", "",
             f"Ir per command inside call() (what INFO commandstats times): "
             f"{res['call_ir_per_command']:.1f}",
             f"Ir per command in {proc}: {res['proc_ir_per_command']:.1f}",
             f"Ir per command in processCommand (call() + command lookup, ACL, ...): "
             f"{res['process_command_ir']:.1f}",
             f"Ir per command in readQueryFromClient (socket read + RESP parsing + all "
             f"of the above, per command): {res['read_query_ir']:.1f}", ""]
    if proc == "RedisModuleCommandDispatcher":
        br, rest = module_breakdown(prof, module_obj, per)
        res["module_breakdown"] = br
        res["module_other_files"] = rest
        disp_self = prof.self_fn["RedisModuleCommandDispatcher"] / per
        handler = sum(ir for f, n, ir in prof.callees("RedisModuleCommandDispatcher")
                      if prof.obj_of.get(f, "").endswith(module_obj)) / per
        res["dispatcher_overhead"] = res["proc_ir_per_command"] - handler
        res["call_overhead"] = res["call_ir_per_command"] - res["proc_ir_per_command"]
        res["handler_ir"] = handler
        lines.append("Breakdown (Ir per command):")
        lines.append(f"  {res['call_overhead']:9.1f}  call() itself (stats, timers, "
                     "propagation bookkeeping)")
        lines.append(f"  {res['dispatcher_overhead']:9.1f}  RedisModuleCommandDispatcher "
                     f"(context create/free; self {disp_self:.1f})")
        lines.append(f"  {handler:9.1f}  the module's handler, of which:")
        for k, v in br.items():
            lines.append(f"  {v:13.1f}  {k}")
        if rest:
            lines.append("  module 'other' by file: " +
                         ", ".join(f"{Path(f or '?').name} {v:.1f}" for f, v in rest.items()))
        lines.append("")
    lines.append("Call tree under call() (Ir per command, callees >= 1% of call()):")
    lines.append(f"{call_ir / per:9.1f} Ir  call")
    lines += ["  " + x for x in prof.tree("call", per, depth=6, floor=0.01)]
    lines.append("")
    lines.append("Top self cost (whole dump, Ir per command; includes the event loop, "
                 "socket I/O and serverCron):")
    for f, v in prof.self_fn.most_common(30):
        lines.append(f"{v / per:9.1f}  {short(f)}  [{Path(prof.obj_of.get(f) or '?').name}]")
    (OUT / f"callgrind-{case.key}.txt").write_text("\n".join(lines) + "\n")
    return res


# --------------------------------------------------------------------------- perf


def run_perf(args, cases, tmp):
    summary = {}
    srv, by, now = case_server(args, cases, args.perf_keyspace)
    try:
        for k in cases:
            c = by[k]
            data = os.path.join(tmp, f"perf-{k}.data")
            rec_cmd = ["perf", "record", "-F", str(args.perf_freq), "--call-graph",
                       "dwarf,8192", "-p", str(srv.proc.pid), "-o", data]
            note(rec_cmd)
            rec = subprocess.Popen(rec_cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(0.5)
            srv.r.config_resetstat()
            sent = drive(srv, c, args, time.time() + args.perf_seconds)
            stats = srv.commandstats().get(c.stat, (0, 0))
            rec.send_signal(signal.SIGINT)
            rec.wait(60)
            # New keys: the DELs between cycles are sampled too; their stacks are left out.
            skip = ("delCommand", "delGenericCommand") if c.keys == "new" else ()
            summary[k] = perf_report(data, c, stats, sent, exclude=skip)
            log(f"  perf {k}: {summary[k]['samples']} samples, "
                f"{summary[k]['usec_per_call']:.3f} us/call during the profile")
    finally:
        srv.cleanup()
    return summary


def drive(srv: Server, c: Case, args: argparse.Namespace, t_end: float) -> int:
    """Pipelined calls until t_end: warm cases cycle over 200,000 random ids; new-key
    cases send 20,000 ids never written, delete them, and go on with the next range."""
    ks = args.perf_keyspace
    sent = cycle = 0
    with Conn(srv.port, c.db) as conn:
        while time.time() < t_end:
            n = 20_000 if c.keys == "new" else 200_000
            ids = run_ids(c, ks, n, 11, cycle)
            t = int(time.time())
            batches = list(batches_of([resp(*c.cmd(ident(i), t)) for i in ids], 32))
            for b in batches:
                conn.call(b, (c.lines or 1) * count_cmds(b))
                sent += count_cmds(b)
                if time.time() >= t_end and c.keys != "new":
                    break
            if c.keys == "new":
                names = [c.cmd(ident(i), 0)[1] for i in ids]
                conn.load([resp("DEL", *names[j:j + 500]) for j in range(0, n, 500)], 1, 20)
            cycle += 1
    return sent


def perf_text(data, *extra):
    note(["perf", "report", "-i", data, "--stdio", *extra])
    r = subprocess.run(["perf", "report", "-i", data, "--stdio", *extra],
                       capture_output=True, text=True, timeout=600)
    return r.stdout


# perf samples inside call(), by what they were doing; first match from the leaf up.
BUCKETS = [
    ("key lookup (RM_OpenKey / lookupKey*)", ("RM_OpenKey", "lookupKey", "lookupKeyWrite",
                                              "lookupKeyRead",
                                              "lookupKeyWriteWithFlags",
                                              "lookupKeyReadWithFlags")),
    ("replication (RM_Replicate)", ("RM_Replicate",)),
    ("expire (RM_SetAbsExpire / setExpire)", ("RM_SetAbsExpire", "setExpire")),
    ("reply (RM_ReplyWith* / addReply*)", ("RM_ReplyWithArray", "RM_ReplyWithLongLong",
                                           "addReply", "addReplyLongLong", "addReplyArrayLen")),
    ("close key (RM_CloseKey)", ("RM_CloseKey",)),
    ("value access (RM_KeyType/ValueLength/StringDMA/StringTruncate)",
     ("RM_KeyType", "RM_ValueLength", "RM_StringDMA", "RM_StringTruncate")),
    ("WATCH/notify (RM_SignalModifiedKey, RM_NotifyKeyspaceEvent)",
     ("RM_SignalModifiedKey", "RM_NotifyKeyspaceEvent", "signalModifiedKey",
      "notifyKeyspaceEvent")),
    ("argv / clock (RM_StringPtrLen, RM_Milliseconds)", ("RM_StringPtrLen", "RM_Milliseconds")),
    ("module context (moduleCreateContext/FreeContext)", ("moduleCreateContext",
                                                          "moduleFreeContext")),
    ("SET: setKey (lookup, overwrite)", ("setKey",)),
    ("SET: rewrite argv for propagation", ("rewriteClientCommandVector",
                                           "rewriteClientCommandArgument",
                                           "replaceClientCommandVector")),
    ("INCR/SET/EVALSHA other", ("incrDecrCommand", "setGenericCommand", "evalGenericCommand",
                                "luaCallFunction", "scriptCall")),
]


CLOCK = ("__vdso_gettimeofday", "gettimeofday", "__gettimeofday", "ustime", "mstime",
         "RM_Milliseconds", "__vdso_clock_gettime", "clock_gettime", "__clock_gettime",
         "getMonotonicUs")


def inside_call(data, module_dso, exclude=()):
    """Parse `perf script` callchains: the samples under call(), inclusive share per
    function and a one-bucket-per-sample split. Stacks through `exclude` are skipped."""
    note(["perf", "script", "-i", data, "-F", "ip,sym,dso"])
    r = subprocess.run(["perf", "script", "-i", data, "-F", "ip,sym,dso"], capture_output=True,
                       text=True, timeout=900)
    total = inside = 0
    incl = collections.Counter()
    buckets = collections.Counter()
    stack = []

    def flush():
        nonlocal total, inside
        if not stack:
            return
        total += 1
        names = [n for n, _ in stack]
        if "call" not in names or any(x in names for x in exclude):
            return
        inside += 1
        inner = stack[:names.index("call")]
        for n in {n for n, _ in inner}:
            incl[n] += 1
        clock = False
        for n, dso in inner:  # leaf to root: the first bucket function or module frame
            if n in CLOCK:
                clock = True
                continue
            hit = next((b for b, fns in BUCKETS if n in fns), None)
            if hit:
                buckets[hit] += 1
                return
            if dso.endswith(module_dso):
                buckets["module: clock (RM_Milliseconds -> gettimeofday)" if clock else
                        "module's own code (and libc it calls: memcpy, ...)"] += 1
                return
        buckets["call() itself (incl. its own clock reads)" if clock else
                "call() itself / other"] += 1

    for line in r.stdout.splitlines():
        if not line.strip():
            flush()
            stack = []
            continue
        m = re.match(r"\s*[0-9a-f]+\s+(.+?)(?:\+0x[0-9a-f]+)?\s+\((.*)\)\s*$", line)
        if m:
            stack.append((re.sub(r"::h[0-9a-f]{16}$", "", m.group(1)), m.group(2)))
    flush()
    per = inside or 1
    keep = [k for k, _ in incl.most_common(40)]
    return dict(all_samples=total, samples=inside,
                inclusive={k: incl[k] / per for k in keep if incl[k] / per >= 0.01},
                buckets={k: v / per for k, v in buckets.most_common()})


def perf_report(data, case, stats, sent, exclude=()):
    calls, usec = stats
    self_txt = perf_text(data, "--no-children", "--sort", "dso,sym", "-g", "none",
                         "--percent-limit", "0.5")
    # Inclusive ("children") time of the functions that matter, as % of all samples.
    child_txt = perf_text(data, "--children", "--sort", "sym", "-g", "none",
                          "--percent-limit", "0.3")
    samples = re.search(r"# Samples: (\S+)", self_txt)
    incl = {}
    for line in child_txt.splitlines():
        m = re.match(r"\s+([\d.]+)%\s+([\d.]+)%\s+\[\.\]\s+(.+?)\s*$", line)
        if m:
            incl[m.group(3)] = (float(m.group(1)), float(m.group(2)))
    keep = ["call", "processCommand", "RedisModuleCommandDispatcher", "setCommand",
            "incrCommand", "evalShaCommand", "lookupKey", "lookupKeyWriteWithFlags",
            "lookupKeyReadWithFlags", "dictFind", "expireIfNeeded", "setExpire", "setKey",
            "RM_OpenKey", "RM_SetAbsExpire", "RM_Replicate", "RM_StringDMA",
            "RM_ReplyWithArray", "RM_ReplyWithLongLong", "RM_CloseKey",
            "RM_NotifyKeyspaceEvent", "RM_SignalModifiedKey", "RM_StringPtrLen",
            "RM_Milliseconds", "moduleCreateArgvFromUserFormat", "moduleCreateContext",
            "moduleFreeContext", "redis_slidingwindow::commands::check",
            "redis_slidingwindow::commands::peek", "redis_slidingwindow::commands::run",
            "addReplyLongLong", "addReplyArrayLen", "readQueryFromClient",
            "processInputBuffer", "writeToClient", "handleClientsWithPendingWritesUsingThreads",
            "aeProcessEvents", "zmalloc", "zfree", "malloc_usable_size", "siphash",
            "siphash_nocase", "lookupCommandByCString", "alsoPropagate"]
    inclusive = {k: incl[k] for k in keep if k in incl}
    res = dict(case=case.label, samples=samples.group(1) if samples else "?",
               calls=calls, usec_per_call=usec / calls if calls else 0,
               inclusive_pct=inclusive)
    within = inside_call(data, Path(DEFAULT_MODULE).name, exclude)
    res["inside_call"] = within
    body = [f"# perf: {case.label}", "",
            f"command: {show_cmd(case.cmd('<id>', 0))}",
            f"{calls} calls during the profile, {res['usec_per_call']:.3f} us/call (commandstats,"
            " perf running)", "",
            f"## Inside call() (= what commandstats times): {within['samples']} of "
            f"{within['all_samples']} samples", "",
            "Share of call()'s samples whose stack contains the function (inclusive):", ""]
    for k, v in within["inclusive"].items():
        body.append(f"{100 * v:7.1f}%  {k}")
    body += ["", "The same samples, each given to one bucket (first match, leaf to root):", ""]
    for k, v in within["buckets"].items():
        body.append(f"{100 * v:7.1f}%  {k}")
    body += ["", "## Inclusive time, whole server: % of all samples (children, self)", ""]
    for k, (c, s_) in sorted(inclusive.items(), key=lambda x: -x[1][0]):
        body.append(f"{c:7.2f}% {s_:7.2f}%  {k}")
    body += ["", "## Self time by symbol", "", self_txt.strip(), ""]
    (OUT / f"perf-{case.key}.txt").write_text("\n".join(body) + "\n")
    return res


# --------------------------------------------------------------------------- main


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default=DEFAULT_CASES)
    ap.add_argument("--calls", type=int, default=20_000, help="calls per case (callgrind)")
    ap.add_argument("--keyspace", type=int, default=20_000, help="keys per case (callgrind)")
    ap.add_argument("--perf-keyspace", type=int, default=100_000)
    ap.add_argument("--perf-seconds", type=float, default=6)
    ap.add_argument("--perf-freq", type=int, default=2000)
    ap.add_argument("--no-perf", action="store_true")
    ap.add_argument("--no-callgrind", action="store_true")
    ap.add_argument("--out", help="output directory (default target/bench/profile)")
    ap.add_argument("--keep-raw", action="store_true",
                    help="copy the callgrind dumps to the output directory too (large)")
    ap.add_argument("--module", default=str(DEFAULT_MODULE))
    ap.add_argument("--seed-script", help="the seed's Lua script (default: as bench.py)")
    ap.add_argument("--redis-server", default=None, help="default: $REDIS_SERVER or redis-server")
    args = ap.parse_args()
    global OUT
    OUT = Path(args.out) if args.out else OUT
    args.redis_server = args.redis_server or binary("redis7")
    cases = args.cases.split(",")
    OUT.mkdir(parents=True, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="swprofile-")
    # A run with --cases updates those cases and keeps the others' earlier results.
    try:
        old = json.loads((OUT / "summary.json").read_text())
    except (OSError, ValueError):
        old = {}
    summary = dict(date=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                   machine=machine_info(), args=vars(args))
    try:
        if not args.no_callgrind:
            summary["callgrind"] = {**old.get("callgrind", {}),
                                    **run_callgrind(args, cases, tmp)}
            (OUT / "callgrind-summary.json").write_text(json.dumps(summary, indent=1,
                                                                   default=str))
        if not args.no_perf:
            summary["perf"] = {**old.get("perf", {}), **run_perf(args, cases, tmp)}
        elif "perf" in old:
            summary["perf"] = old["perf"]
        if args.no_callgrind and "callgrind" in old:
            summary["callgrind"] = old["callgrind"]
        summary["commands"] = list(dict.fromkeys(COMMANDS))
        (OUT / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if "callgrind" in summary:
        print("Ir per command inside call():")
        for k, v in summary["callgrind"].items():
            print(f"  {v['case']:28s} {v['call_ir_per_command']:8.1f}")
    print(f"written: {OUT}/")


if __name__ == "__main__":
    main()
