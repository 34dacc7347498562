//! A real Redis/Valkey Cluster for the integration tests: N masters with R replicas
//! each, every node a `support::Server` (own free port, own directory, the module
//! loaded, `nodes.conf` in that directory), joined with `redis-cli --cluster create`
//! (`valkey-cli` for Valkey), and stopped with the `Cluster`.
//!
//! Include it from a test file with
//! `#[path = "support/cluster.rs"] mod cluster_support;` after `mod support;`.
#![allow(dead_code)]

use crate::support::{
    info, info_field, info_u64, info_value, try_info, wait_until, Kind, Server, PATIENCE,
};
use std::collections::{BTreeMap, HashSet};
use std::process::Command;
use std::time::{Duration, Instant};

/// CRC16/XMODEM as Redis Cluster uses it: the hash slot of a key (hash tags honoured).
pub fn key_slot(key: &[u8]) -> u16 {
    let mut k = key;
    if let Some(open) = key.iter().position(|&b| b == b'{') {
        if let Some(len) = key[open + 1..].iter().position(|&b| b == b'}') {
            if len > 0 {
                k = &key[open + 1..open + 1 + len];
            }
        }
    }
    let mut crc: u16 = 0;
    for &b in k {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

/// One line of CLUSTER NODES.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeEntry {
    pub id: String,
    pub port: u16,
    pub flags: Vec<String>,
    /// The master's id, for a replica.
    pub master_id: Option<String>,
    /// Slot ranges owned (inclusive), for a master; importing/migrating marks left out.
    pub slots: Vec<(u16, u16)>,
}

impl NodeEntry {
    pub fn is_master(&self) -> bool {
        self.flags.iter().any(|f| f == "master")
    }
    pub fn is_failed(&self) -> bool {
        self.flags.iter().any(|f| f == "fail" || f == "fail?")
    }
    pub fn owns(&self, slot: u16) -> bool {
        self.slots.iter().any(|&(a, b)| a <= slot && slot <= b)
    }
    pub fn slot_count(&self) -> usize {
        self.slots.iter().map(|&(a, b)| (b - a) as usize + 1).sum()
    }
}

pub fn parse_nodes(text: &str) -> Vec<NodeEntry> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            // ip:port@cport[,hostname]
            let addr = f[1].split('@').next().unwrap();
            let port = addr.rsplit(':').next().unwrap().parse().unwrap_or(0);
            let slots = f[8..]
                .iter()
                .filter(|s| !s.starts_with('['))
                .map(|s| match s.split_once('-') {
                    Some((a, b)) => (a.parse().unwrap(), b.parse().unwrap()),
                    None => {
                        let v = s.parse().unwrap();
                        (v, v)
                    }
                })
                .collect();
            NodeEntry {
                id: f[0].to_string(),
                port,
                flags: f[2].split(',').map(str::to_string).collect(),
                master_id: (f[3] != "-").then(|| f[3].to_string()),
                slots,
            }
        })
        .collect()
}

/// A connection to a node that may be down or busy (a poll retries on `Err`).
fn try_connect(port: u16) -> Result<redis::Connection, String> {
    redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(2)))
        .map_err(|e| format!("{port}: {e}"))
}

/// The cli's output without its terminal colour codes.
fn strip_colours(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(ch) = chars.next() {
        if ch == '\u{1b}' {
            // ESC [ ... m
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            out.push(ch);
        }
    }
    out
}

/// From `--cluster check`: "[WARNING] Node 127.0.0.1:PORT has slots in migrating state
/// 52,53." lines, as (port, slots).
fn open_slots(check: &str) -> Vec<(u16, Vec<u16>)> {
    check
        .lines()
        .filter_map(|l| {
            let rest = l.split("[WARNING] Node 127.0.0.1:").nth(1)?;
            let port = rest.split_whitespace().next()?.parse().ok()?;
            let (_, list) = rest.rsplit_once("state ")?;
            let slots = list
                .trim_end_matches('.')
                .split(',')
                .filter_map(|s| s.trim().parse().ok())
                .collect();
            Some((port, slots))
        })
        .collect()
}

/// How one node sees another: (is master, its master's port, its slot ranges).
type NodeView = (bool, Option<u16>, Vec<(u16, u16)>);

pub struct Cluster {
    pub kind: Kind,
    pub nodes: Vec<Server>,
    /// Ports of nodes this test killed on purpose.
    pub dead: HashSet<u16>,
    pub masters: usize,
    pub replicas: usize,
}

impl Cluster {
    /// `masters` masters with `replicas` replicas each, converged: every node says
    /// cluster_state:ok and agrees on the topology, every replica is in sync.
    pub fn start(kind: Kind, masters: usize, replicas: usize) -> Cluster {
        let started = Instant::now();
        let n = masters * (1 + replicas);
        let nodes: Vec<Server> = (0..n)
            .map(|_| {
                Server::start(
                    kind,
                    &[
                        "--cluster-enabled",
                        "yes",
                        // Relative to --dir: each node's own directory.
                        "--cluster-config-file",
                        "nodes.conf",
                        "--cluster-node-timeout",
                        "3000",
                        "--appendonly",
                        "no",
                        // Replicas sync at once rather than after the default 5 s.
                        "--repl-diskless-sync-delay",
                        "0",
                        // A replica is listed in CLUSTER SLOTS once its master's pings
                        // have given it a non-zero offset: ping every second, not 10.
                        "--repl-ping-replica-period",
                        "1",
                    ],
                )
            })
            .collect();
        let mut cmd = Command::new(kind.cli());
        cmd.arg("--cluster").arg("create");
        for s in &nodes {
            cmd.arg(format!("127.0.0.1:{}", s.port));
        }
        cmd.args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"]);
        let out = cmd.output().expect("run the cluster cli");
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && text.contains("All 16384 slots covered"),
            "{kind}: {:?} --cluster create failed: {text}",
            kind.cli()
        );
        let c = Cluster {
            kind,
            nodes,
            dead: HashSet::new(),
            masters,
            replicas,
        };
        c.wait_converged();
        eprintln!(
            "{kind}: cluster of {masters} masters x {replicas} replicas converged in {:?}",
            started.elapsed()
        );
        c
    }

    pub fn server(&self, port: u16) -> &Server {
        self.nodes
            .iter()
            .find(|s| s.port == port)
            .expect("no such node")
    }

    pub fn connection(&self, port: u16) -> redis::Connection {
        self.server(port).connection()
    }

    pub fn alive_ports(&self) -> Vec<u16> {
        self.nodes
            .iter()
            .map(|s| s.port)
            .filter(|p| !self.dead.contains(p))
            .collect()
    }

    /// SIGKILL one node.
    pub fn kill(&mut self, port: u16) {
        self.dead.insert(port);
        self.nodes
            .iter_mut()
            .find(|s| s.port == port)
            .expect("no such node")
            .kill();
    }

    /// CLUSTER NODES as one node sees it.
    pub fn topology_via(&self, port: u16) -> Result<Vec<NodeEntry>, String> {
        let mut c = try_connect(port)?;
        let text: String = redis::cmd("CLUSTER")
            .arg("NODES")
            .query(&mut c)
            .map_err(|e| format!("{port}: {e}"))?;
        Ok(parse_nodes(&text))
    }

    /// The topology the first live node reports (call `wait_converged` first).
    pub fn topology(&self) -> Vec<NodeEntry> {
        self.topology_via(self.alive_ports()[0])
            .expect("CLUSTER NODES")
    }

    /// The live masters (owning slots), each with its live replicas' ports.
    pub fn shards(&self) -> Vec<(NodeEntry, Vec<u16>)> {
        let topo = self.topology();
        let mut out: Vec<(NodeEntry, Vec<u16>)> = topo
            .iter()
            .filter(|n| n.is_master() && !n.is_failed() && !n.slots.is_empty())
            .map(|m| {
                let reps = topo
                    .iter()
                    .filter(|r| r.master_id.as_deref() == Some(&m.id) && !r.is_failed())
                    .map(|r| r.port)
                    .collect();
                (m.clone(), reps)
            })
            .collect();
        out.sort_by_key(|(m, _)| m.slots.first().copied());
        out
    }

    /// The port of the master owning `slot`.
    pub fn owner(&self, slot: u16) -> u16 {
        self.shards()
            .iter()
            .find(|(m, _)| m.owns(slot))
            .map(|(m, _)| m.port)
            .expect("slot not covered")
    }

    /// Runs the cluster cli with `args`: whether it succeeded, and the end of its output.
    fn run_cli(&self, args: &[&str]) -> (bool, String) {
        let out = Command::new(self.kind.cli())
            .args(args)
            .output()
            .expect("run the cluster cli");
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        let tail = text.len().saturating_sub(3000);
        let tail = (tail..text.len())
            .find(|&i| text.is_char_boundary(i))
            .unwrap_or(0);
        (out.status.success(), text[tail..].to_string())
    }

    /// Moves `slots`, the lowest-numbered slots `from` owns, to `to` with the cli's
    /// `--cluster reshard` (MIGRATE underneath), and waits for convergence. Valkey 8.1+
    /// waits up to 2 s for the replicas to acknowledge each CLUSTER SETSLOT, then answers
    /// NOREPLICAS, which a loaded machine can reach: the cli stops with a slot half
    /// moved. The cluster is then repaired and the move resumed with the slots left, a
    /// few times at most. Returns the number of reshard runs.
    pub fn reshard(&self, from: &NodeEntry, to: &NodeEntry, slots: &[u16]) -> usize {
        let node = format!("127.0.0.1:{}", from.port);
        for run in 1..=5 {
            let left = slots
                .iter()
                .filter(|&&s| self.owner(s) == from.port)
                .count();
            let (ok, text) = self.run_cli(&[
                "--cluster",
                "reshard",
                &node,
                "--cluster-from",
                &from.id,
                "--cluster-to",
                &to.id,
                "--cluster-slots",
                &left.to_string(),
                "--cluster-yes",
            ]);
            if ok {
                self.wait_converged();
                return run;
            }
            assert!(
                text.contains("NOREPLICAS") || text.contains("fix your cluster problems"),
                "{}: reshard failed: {text}",
                self.kind
            );
            eprintln!(
                "{}: reshard run {run} stopped; repairing: {text}",
                self.kind
            );
            self.repair(&node);
        }
        panic!("{}: reshard did not complete in 5 runs", self.kind);
    }

    /// Repairs open slots until `--cluster check` finds nothing to warn about, then
    /// waits for convergence. `--cluster fix` settles the masters; a replica left with a
    /// slot migrating or importing (Valkey 8.1+ replicates CLUSTER SETSLOT) is beyond
    /// it, and is cleared by `CLUSTER SETSLOT <slot> STABLE` on its master, which
    /// replicates it.
    pub fn repair(&self, node: &str) {
        wait_until(PATIENCE, "the cluster's repair", || {
            let (ok, text) = self.run_cli(&["--cluster", "check", node]);
            let text = strip_colours(&text);
            if ok && !text.contains("[WARNING]") && !text.contains("[ERR]") {
                return Ok(true);
            }
            let (_, fixed) = self.run_cli(&["--cluster", "fix", node, "--cluster-yes"]);
            let topo = self.topology();
            for (port, slots) in open_slots(&text) {
                let Some(master) = topo
                    .iter()
                    .find(|n| n.port == port && !n.is_master())
                    .and_then(|r| topo.iter().find(|m| Some(&m.id) == r.master_id.as_ref()))
                else {
                    continue; // a master: --cluster fix's part
                };
                let mut c = try_connect(master.port)?;
                for slot in slots {
                    let _: redis::RedisResult<()> = redis::cmd("CLUSTER")
                        .arg("SETSLOT")
                        .arg(slot)
                        .arg("STABLE")
                        .query(&mut c);
                }
            }
            Err(format!("check: {text}\nfix: {}", strip_colours(&fixed)))
        });
        self.wait_converged();
    }

    /// Waits (at most PATIENCE) until every live node reports cluster_state:ok with all
    /// slots ok, all live nodes agree on who owns which slot and who replicates whom, and
    /// every live replica has a live link and no sync in progress.
    pub fn wait_converged(&self) {
        let alive = self.alive_ports();
        wait_until(PATIENCE, "cluster convergence", || {
            let mut views: Vec<BTreeMap<u16, NodeView>> = vec![];
            for &p in &alive {
                let mut c = try_connect(p)?;
                let info: String = redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query(&mut c)
                    .map_err(|e| format!("{p}: {e}"))?;
                if info_field(&info, "cluster_state") != Some("ok")
                    || info_field(&info, "cluster_slots_ok") != Some("16384")
                {
                    return Err(format!("{p} not ok: {info}"));
                }
                let topo = self.topology_via(p)?;
                let by_id: BTreeMap<&str, u16> =
                    topo.iter().map(|n| (n.id.as_str(), n.port)).collect();
                let mut view = BTreeMap::new();
                for n in &topo {
                    if self.dead.contains(&n.port) {
                        continue;
                    }
                    if n.is_failed() || n.port == 0 || n.flags.iter().any(|f| f == "handshake") {
                        return Err(format!("{p} sees {n:?}"));
                    }
                    let master = n.master_id.as_deref().and_then(|id| by_id.get(id).copied());
                    view.insert(n.port, (n.is_master(), master, n.slots.clone()));
                }
                if view.len() != alive.len() {
                    return Err(format!(
                        "{p} knows {} live nodes of {}",
                        view.len(),
                        alive.len()
                    ));
                }
                let replica_role = view.get(&p).map(|v| !v.0).unwrap_or(false);
                if replica_role {
                    let repl = try_info(&mut c, "replication").map_err(|e| format!("{p}: {e}"))?;
                    if info_field(&repl, "master_link_status") != Some("up")
                        || info_field(&repl, "master_sync_in_progress") != Some("0")
                    {
                        return Err(format!("replica {p} not in sync: {repl}"));
                    }
                }
                // CLUSTER SLOTS (what cluster clients read) lists every live replica.
                let slots: Vec<Vec<redis::Value>> = redis::cmd("CLUSTER")
                    .arg("SLOTS")
                    .query(&mut c)
                    .map_err(|e| format!("{p}: {e}"))?;
                let listed: usize = slots.iter().map(|r| r.len().saturating_sub(2)).sum();
                let masters_ranges: usize = view.values().filter(|v| v.0).map(|v| v.2.len()).sum();
                let replicas_of = |m: u16| view.values().filter(|v| v.1 == Some(m)).count();
                let expected: usize = view
                    .iter()
                    .filter(|(_, v)| v.0)
                    .map(|(&port, v)| v.2.len() * (1 + replicas_of(port)))
                    .sum();
                if slots.len() != masters_ranges || listed != expected {
                    return Err(format!("{p}: CLUSTER SLOTS lists {listed} nodes for {} ranges, expected {expected}", slots.len()));
                }
                views.push(view);
            }
            if views.windows(2).any(|w| w[0] != w[1]) {
                return Err(format!("nodes disagree: {views:?}"));
            }
            Ok(true)
        });
    }

    /// Waits until every live replica has processed its master's whole replication
    /// stream as it stood when this was called.
    pub fn wait_replicas_caught_up(&self) {
        for (m, reps) in self.shards() {
            let target = info_u64(
                &mut self.connection(m.port),
                "replication",
                "master_repl_offset",
            );
            for r in reps {
                let mut rc = self.connection(r);
                wait_until(
                    PATIENCE,
                    &format!("replica {r} to reach offset {target}"),
                    || {
                        let repl = try_info(&mut rc, "replication").map_err(|e| e.to_string())?;
                        let off: u64 = info_field(&repl, "slave_repl_offset")
                            .and_then(|v| v.parse().ok())
                            .unwrap_or(0);
                        Ok(off >= target)
                    },
                );
            }
        }
    }

    /// A cluster client seeded with every live node. With `replica_reads`, every
    /// connection it opens sends READONLY, so reads it routes to replicas are served.
    pub fn client(&self, replica_reads: bool) -> redis::cluster::ClusterClient {
        let urls: Vec<String> = self
            .alive_ports()
            .iter()
            .map(|p| format!("redis://127.0.0.1:{p}/"))
            .collect();
        let mut b = redis::cluster::ClusterClientBuilder::new(urls)
            .connection_timeout(Duration::from_secs(5))
            .response_timeout(Duration::from_secs(10));
        if replica_reads {
            b = b.read_routing_strategy(redis::cluster_read_routing::RandomReplicaStrategy);
        }
        b.build().expect("cluster client")
    }

    /// `calls` of `cmdstat_<command>` in INFO commandstats of one node (0 if absent).
    pub fn command_calls(&self, port: u16, command: &str) -> u64 {
        let stats = info(&mut self.connection(port), "commandstats");
        info_field(&stats, &format!("cmdstat_{command}"))
            .and_then(|v| v.strip_prefix("calls="))
            .and_then(|rest| rest.split(',').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }

    /// A node's role as INFO replication says it ("master" or "slave").
    pub fn role(&self, port: u16) -> String {
        info_value(&mut self.connection(port), "replication", "role")
    }
}
