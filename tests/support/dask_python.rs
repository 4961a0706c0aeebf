//! Finds the Python the live interop tests talk to. Included by each test
//! file that needs it (`#[path = "support/dask_python.rs"] mod dask_python;`,
//! or `"../../tests/support/dask_python.rs"` from the CLI package).
//!
//! The release under test is `$FRAMEWIRE_DASK_RELEASE`, else the one
//! `tests/dask/requirements.txt` pins (2026.8.0); `scripts/test` runs the
//! live tests whose behaviour can differ by release once more with an older
//! release's venv (`scripts/setup-python RELEASE`).
#![allow(dead_code)] // each test file uses its own part of it

use std::path::{Path, PathBuf};
use std::process::Command;

/// The `distributed` release the tests expect: `$FRAMEWIRE_DASK_RELEASE`,
/// else the one `tests/dask/requirements.txt` pins.
pub fn release() -> String {
    match std::env::var("FRAMEWIRE_DASK_RELEASE") {
        Ok(r) if !r.is_empty() => r,
        _ => default_release(),
    }
}

/// The release `tests/dask/requirements.txt` pins (the captures' release).
pub fn default_release() -> String {
    let path = repo_root().join("tests/dask/requirements.txt");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    text.lines()
        .find_map(|l| l.strip_prefix("distributed=="))
        .unwrap_or_else(|| panic!("{path:?} pins no distributed"))
        .trim()
        .to_owned()
}

/// The Python with `distributed==`[`release`] and numpy: `$FRAMEWIRE_PYTHON`,
/// else the venv `scripts/setup-python` makes for that release
/// (`<repo>/.venv-dask`, `<repo>/.venv-dask-RELEASE` for another release).
/// Panics — fails the test, never skips it — if it is missing or holds
/// another release.
pub fn python() -> PathBuf {
    let release = release();
    let candidate = std::env::var_os("FRAMEWIRE_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let venv = match release == default_release() {
                true => ".venv-dask".to_owned(),
                false => format!(".venv-dask-{release}"),
            };
            repo_root().join(venv).join("bin/python")
        });
    let ok = Command::new(&candidate)
        .args([
            "-c",
            &format!("import distributed, numpy; assert distributed.__version__ == '{release}'"),
        ])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(
        ok,
        "Python with distributed=={release} and numpy not found at {} — run \
         `scripts/setup-python {release}` (scripts/test and .ci/run do) or set FRAMEWIRE_PYTHON \
         (and FRAMEWIRE_DASK_RELEASE for a release other than {})",
        candidate.display(),
        default_release(),
    );
    candidate
}

/// The version of the CPython [`python`] runs (`sys.version_info[:3]`):
/// what a Python peer's handshake carries.
pub fn python_version() -> [u64; 3] {
    let out = Command::new(python())
        .args(["-c", "import sys; print(*sys.version_info[:3])"])
        .output()
        .expect("run python");
    assert!(out.status.success(), "python -c sys.version_info failed");
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let parts: Vec<u64> = text
        .split_whitespace()
        .map(|p| p.parse().expect("a version number"))
        .collect();
    parts.try_into().expect("three version numbers")
}

/// The repository's root (the library package's directory), from the
/// library's tests or the CLI package's.
pub fn repo_root() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    match here.join("tests/dask").is_dir() {
        true => here.to_path_buf(),
        false => here
            .parent()
            .expect("the CLI package sits in the repository")
            .to_path_buf(),
    }
}
