//! Real Dask clusters across a network the test makes itself
//! (tests/support/netns.rs): the scheduler in namespace A, everything else
//! in namespace B, a veth pair between them, and a partition that is the
//! link set down inside A. Every process runs in one of the namespaces.
//!
//! * A `framewire tap` between a Python `Client` (and 200 more
//!   connections) and the scheduler: when the upstream side goes silent,
//!   the tap closes each client side with one `reason=peer-timeout` line
//!   within `--tcp-timeout` + 5 s, and then holds no connection (its own
//!   count, on `SIGUSR1`) and no socket but its listener.
//! * The Rust data worker started 5 s before its scheduler joins the
//!   cluster.
//! * A Python worker (Dask's own keepalive) and the data worker on the same
//!   partition: each notices within the same bound; the data worker exits 1
//!   with one line.
//!
//! These tests FAIL when Python Dask is missing, and when network
//! namespaces cannot be made (root and `ip` are needed); they are named
//! `netns_*`, so that `FRAMEWIRE_SKIP_NETNS=1 scripts/test` filters them
//! out, visibly.

#[path = "../../tests/support/dask_python.rs"]
mod dask_python;
#[path = "../../tests/support/netns.rs"]
mod netns;
#[path = "support/procs.rs"]
mod procs;

use std::path::Path;
use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

use framewire::transport::{ConnectionBuilder, HandshakeOptions};
use framewire::Value;
use netns::{Host, Net};
use procs::{cluster, scratch_dir, Daemon};

const BIN: &str = env!("CARGO_BIN_EXE_framewire");
/// `distributed.comm.timeouts.tcp` everywhere in these tests: Dask's
/// smallest.
const TCP_TIMEOUT: u64 = 11;
/// What a peer gets to notice a partition: the TCP timeout + 5 s.
const BOUND: Duration = Duration::from_secs(TCP_TIMEOUT + 5);
const SCHEDULER_PORT: u16 = 8786;

/// Dask's configuration, as environment variables, for every Python process.
fn dask_env(cmd: &mut Command) -> &mut Command {
    cmd.env(
        "DASK_DISTRIBUTED__COMM__TIMEOUTS__TCP",
        format!("{TCP_TIMEOUT}s"),
    )
    .env("PYTHONUNBUFFERED", "1")
}

/// A `dask scheduler` in `host`'s namespace, on its veth address.
fn scheduler(net: &Net, host: &Host, dir: &Path) -> (Daemon, String) {
    let mut cmd = net.command(host, dask_python::python());
    dask_env(&mut cmd).args([
        "-m",
        "distributed.cli.dask_scheduler",
        "--host",
        &host.ip.to_string(),
        "--port",
        &SCHEDULER_PORT.to_string(),
        "--no-dashboard",
    ]);
    let mut d = Daemon::start("scheduler", &mut cmd, dir);
    let addr = d.wait_for(cluster::STARTUP, |log| {
        cluster::address_after(log, "Scheduler at:")
    });
    (d, addr)
}

/// A `framewire tap` in `host`'s namespace, listening on its loopback;
/// returns it, its address and its log's path.
fn tap(net: &Net, host: &Host, upstream: &str, dir: &Path) -> (Daemon, String, std::path::PathBuf) {
    let log = dir.join("tap.log");
    let mut cmd = net.command(host, BIN);
    cmd.args([
        "tap",
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        upstream,
        "--tcp-timeout",
        &TCP_TIMEOUT.to_string(),
        "--log",
        log.to_str().unwrap(),
    ]);
    let mut d = Daemon::start("tap", &mut cmd, dir);
    let addr = d.wait_for(Duration::from_secs(20), |log| {
        let line = log
            .lines()
            .find(|l| l.starts_with("framewire tap: listening on "))?;
        let rest = line.trim_start_matches("framewire tap: listening on ");
        Some(rest.split(',').next()?.to_owned())
    });
    (d, format!("tcp://{addr}"), log)
}

/// A process's resident memory, KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// The connections a tap holds now, as it says on `SIGUSR1` (`stats
/// live=N accepted=M`, the line after those in its log so far).
fn tap_live_connections(pid: u32, log: &Path) -> u64 {
    let before = std::fs::read_to_string(log).unwrap_or_default().len();
    let status = Command::new("kill")
        .args(["-USR1", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -USR1 {pid}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let all = std::fs::read_to_string(log).unwrap_or_default();
        let line = all[before.min(all.len())..]
            .lines()
            .find(|l| l.contains(" stats live="));
        if let Some(line) = line {
            let live = line.split(" stats live=").nth(1).unwrap();
            return live.split_whitespace().next().unwrap().parse().unwrap();
        }
        assert!(Instant::now() < deadline, "no stats line:\n{}", tail(log));
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The sockets a process has open.
fn socket_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|target| target.to_string_lossy().starts_with("socket:"))
        .count()
}

/// The last 30 lines of a log.
fn tail(log: &Path) -> String {
    let all = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = all.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// The log's lines containing `needle`, once there are `n` of them
/// (by `deadline`; else the test fails with the log).
fn wait_lines(path: &Path, needle: &str, n: usize, deadline: Instant) -> Vec<String> {
    loop {
        let log = std::fs::read_to_string(path).unwrap_or_default();
        let lines: Vec<String> = log
            .lines()
            .filter(|l| l.contains(needle))
            .map(str::to_owned)
            .collect();
        if lines.len() >= n {
            return lines;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {n} lines with {needle:?} in time; the log:\n{}",
            lines.len(),
            log.lines().rev().take(40).collect::<Vec<_>>().join("\n")
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The connections a tap's log shows open (`conn=N open`, no `conn=N
/// closed` yet).
fn open_connections(log: &str) -> std::collections::BTreeSet<String> {
    let mut open = std::collections::BTreeSet::new();
    for line in log.lines() {
        let mut words = line.split_whitespace().skip(1);
        let (Some(conn), Some(event)) = (words.next(), words.next()) else {
            continue;
        };
        match event {
            "open" => open.insert(conn.to_owned()),
            "closed" => open.remove(conn),
            _ => false,
        };
    }
    open
}

/// The time of a tap log line (`2026-12-02T20:41:07.512Z conn=...`), in
/// seconds since the epoch.
fn line_time(line: &str) -> f64 {
    let stamp = line.split_whitespace().next().unwrap();
    let n = |r: std::ops::Range<usize>| stamp[r].parse::<i64>().unwrap();
    let (y, m, d) = (n(0..4), n(5..7), n(8..10));
    // Days since 1970-01-01 (Howard Hinnant's days_from_civil).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let days = era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719_468;
    let secs = days * 86_400 + n(11..13) * 3600 + n(14..16) * 60 + n(17..19);
    secs as f64 + n(20..23) as f64 / 1000.0
}

fn epoch(t: SystemTime) -> f64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// `n` framewire connections from `host`'s namespace to `address`, each
/// with one `identity` RPC answered, then held open until `release` says
/// (or its sender is dropped); sends the count on `opened`.
fn hold_connections(
    net: &Net,
    host: &Host,
    address: String,
    n: usize,
    opened: mpsc::Sender<usize>,
    release: mpsc::Receiver<()>,
) -> std::thread::JoinHandle<()> {
    net.spawn_in(host, move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let conns = rt.block_on(async {
            let builder = ConnectionBuilder::new();
            let mut conns = Vec::new();
            for _ in 0..n {
                let (mut conn, _) = builder
                    .connect(&address, &HandshakeOptions::default())
                    .await
                    .expect("through the tap");
                let identity =
                    Value::map_of([("op", Value::str("identity")), ("reply", true.into())]);
                conn.send_value(&identity).await.unwrap();
                let reply = conn.recv_value().await.expect("a reply").unwrap();
                assert_eq!(reply.get("type").and_then(Value::as_str), Some("Scheduler"));
                conns.push(conn);
            }
            conns
        });
        opened.send(conns.len()).unwrap();
        let _ = release.recv();
        drop(conns);
    })
}

#[test]
fn netns_a_tap_closes_the_client_side_of_a_silent_upstream_and_lets_go_of_it() {
    let net = Net::for_test("a tap across a partition");
    let dir = scratch_dir("partition-tap");
    let (mut sched, sched_addr) = scheduler(&net, &net.a, dir.path());
    let (mut tap, tap_addr, log) = tap(&net, &net.b, &sched_addr, dir.path());
    let tap_pid = tap.child.id();
    let idle_kib = rss_kib(tap_pid);
    // Its listener, and the runtime's own (the signal handler's pair).
    let idle_sockets = socket_fds(tap_pid);

    // A first round of 200 connections, closed by their clients: the
    // tap's memory after it, its figure once it has served them.
    let (opened_tx, opened) = mpsc::channel();
    let (release, released) = mpsc::channel();
    let holder = hold_connections(&net, &net.b, tap_addr.clone(), 200, opened_tx, released);
    assert_eq!(opened.recv().unwrap(), 200);
    drop(release);
    holder.join().unwrap();
    wait_lines(
        &log,
        "closed by=client reason=eof",
        200,
        Instant::now() + Duration::from_secs(30),
    );
    let served_kib = rss_kib(tap_pid);

    // Then a Python Client and 200 connections, idle, when the link goes.
    let mut client_cmd = net.command(&net.b, dask_python::python());
    dask_env(&mut client_cmd)
        .arg(dask_python::repo_root().join("tests/dask/partition_client.py"))
        .arg(&tap_addr);
    let mut client = Daemon::start("client", &mut client_cmd, dir.path());
    client.wait_for(cluster::STARTUP, |out| {
        out.contains("\"connected\"").then_some(())
    });
    let (opened_tx, opened) = mpsc::channel();
    let (release, released) = mpsc::channel();
    let holder = hold_connections(&net, &net.b, tap_addr.clone(), 200, opened_tx, released);
    assert_eq!(opened.recv().unwrap(), 200);
    // The first round's 200, the client's (at least one), these 200.
    wait_lines(
        &log,
        " open client=",
        401,
        Instant::now() + Duration::from_secs(10),
    );
    let open_at_cut = open_connections(&std::fs::read_to_string(&log).unwrap());
    assert!(open_at_cut.len() > 200, "{open_at_cut:?}"); // ours and the client's
    let cut_at = SystemTime::now();
    let cut = Instant::now();
    net.partition();

    // Every connection open at the cut ends by the upstream's silence, one
    // line each, within the bound.
    let deadline = cut + BOUND + Duration::from_secs(20);
    let last_close = loop {
        let all = std::fs::read_to_string(&log).unwrap();
        let ended: Vec<&str> = all
            .lines()
            .filter(|l| {
                let conn = l.split_whitespace().nth(1).unwrap_or("");
                open_at_cut.contains(conn) && l.contains(" closed ")
            })
            .collect();
        if ended.len() == open_at_cut.len() {
            let odd: Vec<&&str> = ended
                .iter()
                .filter(|l| !l.contains("closed by=upstream reason=peer-timeout"))
                .collect();
            assert!(odd.is_empty(), "closed otherwise: {odd:#?}");
            // Data sent upstream after the cut is unacknowledged from when
            // it was sent: the kernel's bound (TCP_USER_TIMEOUT) runs from
            // the later of the cut and the last message relayed upstream
            // (the Python client's heartbeats).
            let cut_s = epoch(cut_at);
            let mut worst: f64 = 0.0;
            for line in &ended {
                let conn = line.split_whitespace().nth(1).unwrap();
                let last_up = all
                    .lines()
                    .filter(|l| l.split_whitespace().nth(1) == Some(conn) && l.contains(" c->u "))
                    .map(line_time)
                    .fold(cut_s, f64::max);
                let after = line_time(line) - last_up;
                worst = worst.max(after);
                assert!(
                    after <= BOUND.as_secs_f64(),
                    "{after:.1} s after the cut or its last message: {line}"
                );
            }
            let times: Vec<f64> = ended.iter().map(|l| line_time(l) - cut_s).collect();
            let first = times.iter().cloned().fold(f64::MAX, f64::min);
            let last = times.iter().cloned().fold(0.0, f64::max);
            eprintln!(
                "the tap's peer-timeout lines: {first:.1} s to {last:.1} s after the cut, at most \
                 {worst:.1} s after the cut or the connection's last message upstream"
            );
            break last;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {} connections ended long after the cut:\n{}",
            ended.len(),
            open_at_cut.len(),
            all.lines().rev().take(30).collect::<Vec<_>>().join("\n")
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    // The Python client saw its scheduler stream end (the tap closed it).
    let lost = client.wait_for(BOUND + Duration::from_secs(20), |out| {
        out.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find_map(|j| j.get("lost").and_then(|t| t.as_f64()))
    });
    let client_after = lost - epoch(cut_at);
    assert!(
        client_after <= last_close + 2.0,
        "the client noticed {client_after:.1} s after the cut, the tap's last close was at {last_close:.1} s"
    );
    drop(release);
    holder.join().unwrap();
    // The Python client goes too (a client that connects again through the
    // tap would hold a connection while the tap tries the upstream): then
    // the tap holds no connection at all. Counted by the tap itself (its
    // `stats` line on SIGUSR1: the connections whose sockets and buffers
    // it still holds), and by its open sockets: neither can be hidden by
    // freed pages the allocator keeps, as resident memory can.
    drop(client);
    let deadline = Instant::now() + Duration::from_secs(60);
    let live = loop {
        let live = tap_live_connections(tap_pid, &log);
        if live == 0 || Instant::now() > deadline {
            break live;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    let sockets = socket_fds(tap_pid);
    let after_kib = rss_kib(tap_pid);
    eprintln!(
        "tap VmRSS: idle {idle_kib} KiB, after 200 closed connections {served_kib} KiB, after {} \
         connections ended by the partition {after_kib} KiB; the client noticed {client_after:.1} s \
         after the cut; connections held after: {live}, sockets open: {sockets} ({idle_sockets} idle)",
        open_at_cut.len()
    );
    assert_eq!(
        live,
        0,
        "the tap still holds connections a minute after they ended:\n{}",
        tail(&log)
    );
    assert_eq!(
        sockets, idle_sockets,
        "the tap has sockets open it had not when idle"
    );
    assert!(tap.is_running(), "{}", tap.logs());
    assert!(sched.is_running());
}

/// The data worker binary in `host`'s namespace.
fn data_worker(
    net: &Net,
    host: &Host,
    scheduler: &str,
    args: &[&str],
    dir: &Path,
    name: &str,
) -> Daemon {
    let mut cmd = net.command(host, cluster::data_worker_binary());
    cmd.arg(scheduler)
        .args([
            "--listen",
            &format!("{}:0", host.ip),
            "--tcp-timeout",
            &TCP_TIMEOUT.to_string(),
        ])
        .args(args);
    Daemon::start(name, &mut cmd, dir)
}

#[test]
fn netns_a_data_worker_started_before_its_scheduler_joins_the_cluster() {
    let net = Net::for_test("a data worker before its scheduler");
    let dir = scratch_dir("partition-late");
    let sched_addr = format!("tcp://{}:{SCHEDULER_PORT}", net.a.ip);
    let mut worker = data_worker(
        &net,
        &net.b,
        &sched_addr,
        &["--connect-timeout", "2"],
        dir.path(),
        "data-worker",
    );
    std::thread::sleep(Duration::from_secs(5));
    assert!(worker.is_running(), "{}", worker.logs());
    let waited = worker.stderr();
    assert!(
        waited.contains(&format!("waiting to connect to {sched_addr}")),
        "{waited}"
    );
    let (mut sched, addr) = scheduler(&net, &net.a, dir.path());
    assert_eq!(addr, sched_addr);
    let address = worker.wait_for(Duration::from_secs(60), |out| {
        let line = out.lines().find(|l| l.starts_with("listening on "))?;
        Some(line.trim_start_matches("listening on ").to_owned())
    });
    sched.wait_for(Duration::from_secs(30), |log| {
        log.contains(&format!("Register worker addr: {address}"))
            .then_some(())
    });
    assert!(worker.is_running(), "{}", worker.logs());
}

#[test]
fn netns_a_python_worker_and_the_data_worker_notice_a_partition_within_the_same_bound() {
    let net = Net::for_test("workers across a partition");
    let dir = scratch_dir("partition-workers");
    let (mut sched, sched_addr) = scheduler(&net, &net.a, dir.path());
    let mut py_cmd = net.command(&net.b, dask_python::python());
    dask_env(&mut py_cmd).args([
        "-m",
        "distributed.cli.dask_worker",
        &sched_addr,
        "--nthreads",
        "1",
        "--no-nanny",
        "--no-dashboard",
        "--host",
        &net.b.ip.to_string(),
        "--name",
        "py",
    ]);
    let mut py = Daemon::start("python-worker", &mut py_cmd, dir.path());
    py.wait_for(cluster::STARTUP, |log| {
        log.contains("Registered to:").then_some(())
    });
    let mut rust = data_worker(&net, &net.b, &sched_addr, &[], dir.path(), "data-worker");
    let address = rust.wait_for(Duration::from_secs(60), |out| {
        let line = out.lines().find(|l| l.starts_with("listening on "))?;
        Some(line.trim_start_matches("listening on ").to_owned())
    });
    sched.wait_for(Duration::from_secs(30), |log| {
        log.contains(&format!("Register worker addr: {address}"))
            .then_some(())
    });
    std::thread::sleep(Duration::from_secs(1));
    let cut = Instant::now();
    net.partition();
    let mut noticed = Vec::new();
    let (mut py_done, mut rust_done) = (None, None);
    while (py_done.is_none() || rust_done.is_none())
        && cut.elapsed() < BOUND + Duration::from_secs(30)
    {
        if py_done.is_none() && !py.is_running() {
            py_done = Some(cut.elapsed());
        }
        if rust_done.is_none() {
            if let Some(status) = rust.child.try_wait().unwrap() {
                rust_done = Some((cut.elapsed(), status));
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let py_after =
        py_done.unwrap_or_else(|| panic!("the Python worker never noticed\n{}", py.logs()));
    let (rust_after, status) =
        rust_done.unwrap_or_else(|| panic!("the data worker never noticed\n{}", rust.logs()));
    noticed.push(("python worker", py_after));
    noticed.push(("data worker", rust_after));
    eprintln!("noticed the partition (exited): python worker {py_after:.1?}, data worker {rust_after:.1?}");
    for (who, after) in &noticed {
        assert!(
            *after <= BOUND,
            "{who}: {after:?} after the cut (bound {BOUND:?})"
        );
    }
    assert_eq!(status.code(), Some(1), "{}", rust.logs());
    let err = rust.stderr();
    let last = err.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("data_worker: error: lost the scheduler: the peer stopped answering"),
        "{err}"
    );
    let py_log = py.stderr();
    assert!(
        py_log.contains("Connection to scheduler broken")
            || py_log.contains("connection-broken")
            || py_log.contains("Stopping worker"),
        "{py_log}"
    );
}
