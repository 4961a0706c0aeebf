//! Runs one `#[ignore]`d test of the current test binary in a child process
//! (for what would abort the whole process on failure: a stack overflow),
//! and checks that exactly that test ran and passed: libtest exits 0 when
//! its filter matches nothing, so the exit status alone proves nothing.
//! Included by the test files that need it
//! (`#[path = "support/child_test.rs"] mod child_test;`).

use std::process::{Command, Output};

/// Runs `name` alone (`--ignored --exact NAME`) in a child process, after
/// `configure` has adjusted the command (environment, more arguments);
/// panics, with the child's output, unless it exited successfully and its
/// summary says exactly one test ran, and passed.
pub fn run_alone(name: &str, configure: impl FnOnce(&mut Command)) -> Output {
    let mut cmd = Command::new(std::env::current_exe().expect("the test binary"));
    cmd.args(["--ignored", "--exact", name, "--test-threads=1"]);
    configure(&mut cmd);
    let out = cmd.output().expect("run the test binary");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let ran = stdout.lines().any(|l| l == format!("test {name} ... ok"));
    let summary = stdout
        .lines()
        .find(|l| l.starts_with("test result: "))
        .unwrap_or("");
    assert!(
        out.status.success()
            && ran
            && summary.starts_with("test result: ok. 1 passed; 0 failed; 0 ignored;"),
        "child test {name} did not run and pass alone ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
    out
}
