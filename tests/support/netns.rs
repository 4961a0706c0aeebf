//! Two network namespaces joined by a veth pair: a small network of the
//! test's own, for what only a network does (a peer that vanishes without a
//! FIN or a reset, a partition, a late starter).
//!
//! ```text
//!   namespace A (fwt-PID-N-a)                namespace B (fwt-PID-N-b)
//!   lo, fw0 10.254.N.1/30  ◀──── veth ────▶  fw0 10.254.N.2/30, lo
//! ```
//!
//! Every peer of a test runs inside one of the two: processes through `ip
//! netns exec` ([`Net::command`]), the test's own tokio peers on threads that
//! moved into a namespace ([`Net::spawn_in`]). Neither namespace has a
//! default route or any interface but `lo` and its end of the pair, so
//! nothing a test sends can leave them, and the addresses exist only on that
//! pair. A partition is the link set down inside namespace A
//! ([`Net::partition`]): A loses its route to B (`Network is unreachable`),
//! B's end loses its carrier and drops what it sends; established
//! connections see nothing, as across a real partition. The machine's own
//! namespace is never touched. Both namespaces (and so the pair) are deleted
//! on drop, even when the test fails; namespaces that a killed test left
//! behind are deleted by the next one.
//!
//! Needs root and `ip` (iproute2). Where they are missing, [`Net::new`]
//! says why and [`Net::for_test`] fails the test with that reason: a test
//! that did not run never counts as passed. Every test that needs a
//! namespace is named `netns_*`, so leaving them out is a filter the test
//! output shows (`N filtered out`): `FRAMEWIRE_SKIP_NETNS=1 scripts/test`,
//! or `cargo test -- --skip netns_`.
#![allow(dead_code)]

use std::net::Ipv4Addr;
use std::os::unix::fs::MetadataExt;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// The variable `scripts/test` reads to leave out the `netns_*` tests.
pub const SKIP_VAR: &str = "FRAMEWIRE_SKIP_NETNS";

/// One end of the network.
#[derive(Clone, Debug)]
pub struct Host {
    /// The namespace's name (`ip netns`).
    pub ns: String,
    /// The address of its end of the veth pair.
    pub ip: Ipv4Addr,
}

/// Two namespaces joined by a veth pair; deleted on drop.
#[derive(Debug)]
pub struct Net {
    pub a: Host,
    pub b: Host,
}

/// The interface name of each end (one per namespace).
const DEV: &str = "fw0";

/// Runs `ip ARGS`; the error is its stderr, in one line.
fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run `ip`: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`ip {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Deletes the namespaces of test processes that are gone.
fn sweep_stale() {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        let Some(pid) = name.strip_prefix("fwt-").and_then(|r| r.split('-').next()) else {
            continue;
        };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = ip(&["netns", "delete", name]);
        }
    }
}

impl Net {
    /// Makes the two namespaces and the pair, or says why it cannot.
    pub fn new() -> Result<Net, String> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        sweep_stale();
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        // 10.254.0.0/16, a /30 per pair: .1 and .2 of the N-th one.
        let (hi, lo) = ((n * 4 / 256 % 256) as u8, (n * 4 % 256) as u8);
        let net = Net {
            a: Host {
                ns: format!("fwt-{pid}-{n}-a"),
                ip: Ipv4Addr::new(10, 254, hi, lo + 1),
            },
            b: Host {
                ns: format!("fwt-{pid}-{n}-b"),
                ip: Ipv4Addr::new(10, 254, hi, lo + 2),
            },
        };
        ip(&["netns", "add", &net.a.ns])?;
        // From here on, drop deletes what was made.
        ip(&["netns", "add", &net.b.ns])?;
        // Both ends made inside the namespaces: nothing in the machine's own.
        ip(&[
            "-n", &net.a.ns, "link", "add", DEV, "type", "veth", "peer", "name", DEV, "netns",
            &net.b.ns,
        ])?;
        for host in [&net.a, &net.b] {
            let cidr = format!("{}/30", host.ip);
            ip(&["-n", &host.ns, "addr", "add", &cidr, "dev", DEV])?;
            ip(&["-n", &host.ns, "link", "set", "lo", "up"])?;
            ip(&["-n", &host.ns, "link", "set", DEV, "up"])?;
        }
        net.check_isolated()?;
        Ok(net)
    }

    /// A network for `test`; where namespaces cannot be made, the test
    /// fails with the reason and the way to leave such tests out.
    pub fn for_test(test: &str) -> Net {
        Net::new().unwrap_or_else(|why| {
            panic!(
                "{test}: network namespaces are needed (root and `ip`, iproute2): {why}. \
                 To leave the tests that need them out, visibly: \
                 `{SKIP_VAR}=1 scripts/test` (it filters out every test named `netns_*` \
                 and says so), or `cargo test -- --skip netns_`"
            )
        })
    }

    /// Checks what the tests rely on: no default route in either namespace,
    /// and no interface but `lo` and the pair's end.
    fn check_isolated(&self) -> Result<(), String> {
        for host in [&self.a, &self.b] {
            let out = Command::new("ip")
                .args(["-n", &host.ns, "-o", "link", "show"])
                .output()
                .map_err(|e| e.to_string())?;
            let links = String::from_utf8_lossy(&out.stdout).into_owned();
            let names: Vec<&str> = links
                .lines()
                .filter_map(|l| l.split(':').nth(1))
                .map(|n| n.trim().split('@').next().unwrap_or(""))
                .collect();
            if names != ["lo", DEV] {
                return Err(format!("{}: unexpected interfaces {names:?}", host.ns));
            }
            let out = Command::new("ip")
                .args(["-n", &host.ns, "route", "show", "default"])
                .output()
                .map_err(|e| e.to_string())?;
            if !out.stdout.is_empty() {
                return Err(format!("{}: has a default route", host.ns));
            }
        }
        Ok(())
    }

    /// A command run inside `host`'s namespace (`ip netns exec NS PROGRAM`).
    pub fn command(&self, host: &Host, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &host.ns]).arg(program);
        cmd
    }

    /// Runs `f` on a new thread that moved into `host`'s namespace first:
    /// every socket it makes is `host`'s (a tokio runtime on it must be a
    /// current-thread one, so that no other thread makes its sockets).
    pub fn spawn_in<T: Send + 'static>(
        &self,
        host: &Host,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> std::thread::JoinHandle<T> {
        let path = format!("/run/netns/{}", host.ns);
        std::thread::spawn(move || {
            enter(&path);
            f()
        })
    }

    /// Cuts the link: down inside namespace A.
    pub fn partition(&self) {
        ip(&["-n", &self.a.ns, "link", "set", DEV, "down"]).expect("set the link down");
    }

    /// Sets the link up again inside namespace A; A's route to B comes back
    /// with it.
    pub fn heal(&self) {
        ip(&["-n", &self.a.ns, "link", "set", DEV, "up"]).expect("set the link up");
    }

    /// Runs `tc ARGS` inside `host`'s namespace (to slow its end of the
    /// link, for instance).
    pub fn tc(&self, host: &Host, args: &[&str]) {
        let mut all = vec!["netns", "exec", &host.ns, "tc"];
        all.extend_from_slice(args);
        ip(&all).expect("tc inside the namespace");
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for host in [&self.a, &self.b] {
            let _ = ip(&["netns", "delete", &host.ns]);
        }
    }
}

/// Moves the calling thread into the network namespace at `path`, and
/// checks that it is there.
fn enter(path: &str) {
    use rustix::thread::{move_into_link_name_space, LinkNameSpaceType};
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    move_into_link_name_space(
        std::os::fd::AsFd::as_fd(&file),
        Some(LinkNameSpaceType::Network),
    )
    .unwrap_or_else(|e| panic!("setns {path}: {e}"));
    let want = std::fs::metadata(path).unwrap().ino();
    let now = std::fs::metadata("/proc/thread-self/ns/net").unwrap().ino();
    assert_eq!(now, want, "the thread is not in {path}");
}
