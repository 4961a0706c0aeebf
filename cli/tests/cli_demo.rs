//! `framewire demo`: the README's main job. It runs a loopback client and
//! server in one process, so it needs no external service; its report must
//! show every count, every payload byte sent from its own memory, the copy
//! counters, and the verification.

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_framewire");

/// A hang guard (the demo takes a few seconds in a debug build).
const HANG_GUARD: Duration = Duration::from_secs(120);

/// The first integer after `key: ` on the line that starts with `key:`.
fn number(lines: &HashMap<String, String>, key: &str) -> u64 {
    let rest = lines
        .get(key)
        .unwrap_or_else(|| panic!("no `{key}:` line in the report: {lines:?}"));
    let digits: String = rest
        .trim_start()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits
        .parse()
        .unwrap_or_else(|_| panic!("`{key}:` is not followed by a number: {rest:?}"))
}

#[test]
fn demo_reports_verified_zero_copy_transfer() {
    let started = Instant::now();
    let mut child = Command::new(BIN)
        .arg("demo")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn framewire demo");
    // Wait with a deadline: a hang fails the test instead of blocking CI.
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > HANG_GUARD {
            let _ = child.kill();
            let _ = child.wait();
            panic!("framewire demo did not finish within {HANG_GUARD:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(status.success(), "demo failed: {stderr}\n{stdout}");
    assert!(stderr.is_empty(), "stderr: {stderr}");

    let lines: HashMap<String, String> = stdout
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    assert!(
        stdout.starts_with("framewire demo: loopback 127.0.0.1:"),
        "{stdout}"
    );
    assert!(
        lines["framewire demo"].contains("framewire-demo extension agreed"),
        "{stdout}"
    );

    let messages = number(&lines, "messages");
    // Hundreds of heartbeats, the two 64 MiB tasks, three collections.
    assert!(messages > 500, "{stdout}");
    assert!(lines["messages"].contains("heartbeat_worker"), "{stdout}");
    let frames = number(&lines, "frames");
    // The 100 000-element collection under `Always` has a frame per element.
    assert!(frames > 100_000, "{stdout}");
    let bytes = number(&lines, "bytes");
    assert!(bytes > 2 * (64 << 20), "{stdout}");

    // throughput: X MB/s, Y msgs/s (...)
    let throughput = &lines["throughput"];
    let figures: Vec<f64> = throughput
        .split([' ', ','])
        .filter_map(|w| w.parse::<f64>().ok())
        .collect();
    assert!(
        throughput.contains("MB/s") && throughput.contains("msgs/s"),
        "{stdout}"
    );
    assert!(
        figures.len() >= 2 && figures.iter().all(|&x| x > 0.0),
        "{throughput}"
    );

    // The payloads go out from their own memory: every payload byte the
    // kernel took lay in the payload's own memory (the demo watches the
    // address of every byte it hands to the socket).
    let large = lines
        .iter()
        .find(|(k, _)| k.starts_with("large frames"))
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| panic!("no `large frames` line: {stdout}"));
    let large_frames: u64 = large.trim().split(',').next().unwrap().parse().unwrap();
    assert!(large_frames >= 3, "{stdout}");
    let from_memory = &lines["payload bytes written from their own memory"];
    let words: Vec<&str> = from_memory.split_whitespace().collect();
    assert_eq!(words[1], "of", "{from_memory}");
    let (seen, payload): (u64, u64) = (words[0].parse().unwrap(), words[2].parse().unwrap());
    // Two 64 MiB payloads and a 1 MiB bytes element.
    assert_eq!(payload, 2 * (64 << 20) + (1 << 20), "{stdout}");
    assert_eq!(seen, payload, "{stdout}");
    // The copy counters: the small frames (heartbeats, collections' element
    // frames) are coalesced, so some bytes are copied on send, but far fewer
    // than the payloads.
    let copied = number(&lines, "frame bytes copied on send");
    assert!(copied > 0 && copied < bytes - payload, "{stdout}");
    // On receive, at most the 64 KiB read-ahead per run of large frames,
    // besides what growing buffers moved (counted in both).
    let copied_in = number(&lines, "bytes copied on receive");
    let relocated = number(&lines, "bytes relocated on receive");
    assert!(relocated <= copied_in, "{stdout}");
    assert!(
        copied_in - relocated <= large_frames * (64 << 10),
        "{stdout}"
    );

    // verified: N of N messages equal after deserialize, P payload bytes identical
    let verified = &lines["verified"];
    let words: Vec<&str> = verified.split_whitespace().collect();
    assert_eq!(words[0], words[2], "{verified}");
    assert_eq!(words[0].parse::<u64>().unwrap(), messages - 1, "{verified}");
    assert!(verified.contains("equal after deserialize"), "{verified}");
    let payload: u64 = words[words.len() - 4].parse().unwrap();
    assert!(payload >= 2 * (64 << 20), "{verified}");
    assert!(verified.ends_with("payload bytes identical"), "{verified}");
}
