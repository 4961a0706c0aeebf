//! Finds the Python the live interop tests talk to. Included by each test
//! file that needs it (`#[path = "support/dask_python.rs"] mod dask_python;`,
//! or `"../../tests/support/dask_python.rs"` from the CLI package).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The Python with `distributed==2026.8.0` and numpy: `$FRAMEWIRE_PYTHON`,
/// else the venv `scripts/setup-python` makes (`<repo>/.venv-dask`).
/// Panics — fails the test, never skips it — if neither works.
pub fn python() -> PathBuf {
    let candidate = std::env::var_os("FRAMEWIRE_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".venv-dask/bin/python"));
    let ok = Command::new(&candidate)
        .args([
            "-c",
            "import distributed, numpy; assert distributed.__version__ == '2026.8.0'",
        ])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(
        ok,
        "Python with distributed==2026.8.0 and numpy not found at {} — run scripts/setup-python \
         (scripts/test and .ci/run do) or set FRAMEWIRE_PYTHON",
        candidate.display()
    );
    candidate
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
