//! A command's output on stdout: the error of a write that failed, one
//! line as every error of the CLI, or quiet where the reader has gone.

/// The error of a write to a closed pipe (`framewire ... | head`): stop
/// quietly, with status 1.
pub const BROKEN_PIPE: &str = "";

/// The error of a write to stdout.
pub fn error(e: std::io::Error) -> String {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        return BROKEN_PIPE.into();
    }
    format!("writing output: {e}")
}
