//! Reading a capture file (one direction of a Dask TCP stream) and walking
//! its messages, with the one-line error every command prints on bad input.

use std::io::Read;

use bytes::Bytes;
use framewire::message::{self, BlockRef};
use framewire::{DecodeError, Envelope, EnvelopeError, Limits, Position};

/// The text of an argument that is either the text itself or `-`, which
/// reads it from stdin (the JSON of `encode` and `call`).
pub fn text_arg(arg: &str) -> Result<String, String> {
    if arg != "-" {
        return Ok(arg.to_owned());
    }
    let mut s = String::new();
    std::io::stdin()
        .lock()
        .read_to_string(&mut s)
        .map_err(|e| format!("<stdin>: {e}"))?;
    Ok(s)
}

/// A whole input file in one buffer: frames are slices of it.
pub struct Input {
    /// The name to print (`-` is shown as `<stdin>`).
    pub name: String,
    /// The file's bytes.
    pub buf: Bytes,
}

impl Input {
    /// Reads `path`, or stdin for `-`.
    pub fn read(path: &str) -> Result<Input, String> {
        if path == "-" {
            let mut v = Vec::new();
            std::io::stdin()
                .lock()
                .read_to_end(&mut v)
                .map_err(|e| format!("<stdin>: {e}"))?;
            return Ok(Input {
                name: "<stdin>".into(),
                buf: Bytes::from(v),
            });
        }
        let v = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
        Ok(Input {
            name: path.into(),
            buf: Bytes::from(v),
        })
    }

    /// The messages, decoded with `Limits::dask_compat()`.
    pub fn messages(&self) -> Messages<'_> {
        Messages {
            input: self,
            pos: 0,
            index: 0,
            limits: Limits::dask_compat(),
            failed: false,
        }
    }
}

/// One decoded message and where it sat in the file.
pub struct Decoded {
    /// Its index in the file (0-based).
    pub index: usize,
    /// Byte offset of its start (the `N` field) in the file.
    pub start: usize,
    /// Its bytes on the wire (a slice of the file).
    pub wire: Bytes,
    /// The envelope (frames are slices of the file).
    pub env: Envelope,
    /// Frame 0 decoded in pass-through mode.
    pub loaded: message::Decoded,
}

/// The messages of an [`Input`]; stops after the first error.
pub struct Messages<'a> {
    input: &'a Input,
    pos: usize,
    index: usize,
    limits: Limits,
    failed: bool,
}

impl Messages<'_> {
    /// The limits messages are decoded with.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }
}

impl Iterator for Messages<'_> {
    type Item = Result<Decoded, String>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.pos >= self.input.buf.len() {
            return None;
        }
        let start = self.pos;
        let index = self.index;
        let rest = self.input.buf.slice(start..);
        let fail = |err: &DecodeError, lengths: Option<&[Bytes]>| {
            decode_error(&self.input.name, index, start, err, lengths)
        };
        let (env, used) = match Envelope::decode(&rest, &self.limits) {
            Ok(ok) => ok,
            Err(e) => {
                self.failed = true;
                return Some(Err(fail(&e.into(), None)));
            }
        };
        let loaded = match message::decode_detailed(env.frames(), &self.limits) {
            Ok(l) => l,
            Err(e) => {
                let msg = fail(&e.into(), Some(env.frames()));
                self.failed = true;
                return Some(Err(msg));
            }
        };
        self.pos += used;
        self.index += 1;
        Some(Ok(Decoded {
            index,
            start,
            wire: rest.slice(..used),
            env,
            loaded,
        }))
    }
}

/// The one-line description of a decode error: file, message index, byte
/// offset of the message, the error, and the error's own offset in the file
/// when it has one.
pub fn decode_error(
    name: &str,
    index: usize,
    start: usize,
    err: &DecodeError,
    frames: Option<&[Bytes]>,
) -> String {
    let mut line = format!("{name}: message #{index} at byte {start}: {err}");
    let own = match err {
        DecodeError::Envelope(EnvelopeError::Truncated { offset, .. }) => {
            Some(start as u64 + offset)
        }
        _ => match (err.position(), frames) {
            (Some(at), Some(frames)) => frame_byte(frames, at).map(|b| start as u64 + b),
            _ => None,
        },
    };
    if let Some(b) = own {
        line.push_str(&format!(" (file byte {b})"));
    }
    line
}

/// The one-line description of an error in one block of a decoded message:
/// file, message index and offset, the block and the file byte its
/// sub-header frame starts at, the error.
pub fn block_error(name: &str, msg: &Decoded, block: &BlockRef, err: &DecodeError) -> String {
    let frames = msg.env.frames();
    let before: u64 = frames[..block.offset.min(frames.len())]
        .iter()
        .map(|f| f.len() as u64)
        .sum();
    let at = msg.start as u64 + 16 + 8 * frames.len() as u64 + before;
    format!(
        "{name}: message #{} at byte {}: block {}@{} (file byte {at}): {err}",
        msg.index,
        msg.start,
        crate::json::kind_name(block.kind),
        block.offset
    )
}

/// Offset from the message start of a position inside one of its frames.
fn frame_byte(frames: &[Bytes], at: Position) -> Option<u64> {
    let header = 16 + 8 * frames.len() as u64;
    let before: u64 = frames.get(..at.frame)?.iter().map(|f| f.len() as u64).sum();
    Some(header + before + at.offset as u64)
}
