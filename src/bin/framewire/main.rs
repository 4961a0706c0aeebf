//! `framewire`: look at Dask wire captures.
//!
//! Every error is one line on stderr and exit status 1.

use std::io::Write;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod input;
mod inspect;
mod json;
mod roundtrip;

#[derive(Parser)]
#[command(
    name = "framewire",
    version,
    about = "Inspect Dask distributed wire captures"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show each message of a capture (one direction of a Dask TCP stream):
    /// frames, frame 0 and its blocks. Messages are numbered from 0.
    Inspect {
        /// One JSON object per message, one per line.
        #[arg(long)]
        json: bool,
        /// Capture files; `-` reads stdin.
        #[arg(required = true, value_name = "FILE")]
        files: Vec<String>,
    },
    /// Decode each message, encode it again, and compare frames and wire
    /// bytes. Exit status 0 only if every message is identical.
    Roundtrip {
        /// Capture file; `-` reads stdin.
        #[arg(value_name = "FILE")]
        file: String,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let result = match &cli.command {
        Command::Inspect { json, files } => inspect::run(files, *json, &mut out).map(|()| true),
        Command::Roundtrip { file } => roundtrip::run(file, &mut out),
    };
    // What was printed before an error stays printed.
    let flushed = out.flush();
    match (result, flushed.map_err(output_error)) {
        (Err(e), _) | (Ok(_), Err(e)) => {
            if e != BROKEN_PIPE {
                eprintln!("framewire: {}", one_line(&e));
            }
            ExitCode::FAILURE
        }
        (Ok(true), Ok(())) => ExitCode::SUCCESS,
        (Ok(false), Ok(())) => ExitCode::FAILURE,
    }
}

/// The error of a write to a closed pipe (`framewire ... | head`): stop
/// quietly, with status 1.
const BROKEN_PIPE: &str = "";

/// The error of a write to stdout.
fn output_error(e: std::io::Error) -> String {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        return BROKEN_PIPE.into();
    }
    format!("writing output: {e}")
}

/// Errors are printed on exactly one line.
fn one_line(s: &str) -> String {
    s.replace(['\n', '\r'], " ")
}
