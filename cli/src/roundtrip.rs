//! `framewire roundtrip`: decode every message, encode it again, and say
//! whether the frames and the wire bytes came back identical.

use std::io::Write;

use bytes::Bytes;
use framewire::envelope::{self, PreludeStatus};
use framewire::{message, Envelope};

use crate::input::{Decoded, Input};

/// Returns whether every message came back identical; `Err` on bad input.
pub fn run(path: &str, out: &mut impl Write) -> Result<bool, String> {
    let input = Input::read(path)?;
    let mut all_identical = true;
    let mut messages = input.messages();
    while let Some(msg) = messages.next() {
        let msg = msg?;
        let verdict = compare(&msg, messages.limits());
        if verdict.is_some() {
            all_identical = false;
        }
        let line = match verdict {
            None => format!("message #{}: identical", msg.index),
            Some(why) => format!("message #{}: {why}", msg.index),
        };
        writeln!(out, "{line}").map_err(crate::output::error)?;
    }
    Ok(all_identical)
}

/// `None` if re-encoding gives the same frames and wire bytes, else why not.
fn compare(msg: &Decoded, limits: &framewire::Limits) -> Option<String> {
    let loaded = &msg.loaded;
    if !loaded.orphans.is_empty() {
        return Some(format!(
            "differs: orphan frames {:?} are dropped on re-encoding",
            loaded.orphans
        ));
    }
    let frames = match message::encode(&loaded.value) {
        Ok(f) => f,
        Err(e) => return Some(format!("differs: re-encoding failed: {e}")),
    };
    let original = msg.env.frames();
    if frames.len() != original.len() {
        return Some(format!(
            "differs: {} frames re-encoded, {} in the original",
            frames.len(),
            original.len()
        ));
    }
    for (i, (a, b)) in original.iter().zip(&frames).enumerate() {
        if let Some(d) = first_difference(a, b) {
            return Some(format!("differs at frame {i} byte {d}"));
        }
    }
    let k = match envelope::parse_prelude(&msg.wire, limits) {
        Ok(PreludeStatus::Complete(p)) => p.frames_in_first_read(),
        // The message was decoded from these very bytes.
        _ => original.len(),
    };
    let env = match Envelope::with_first_read_frames(frames, k) {
        Ok(e) => e,
        Err(e) => return Some(format!("differs: re-encoding failed: {e}")),
    };
    let wire = env.to_bytes();
    first_difference(&msg.wire, &wire).map(|b| {
        format!(
            "differs at wire byte {b} (first read {} re-encoded as {})",
            msg.env.first_read(),
            env.first_read()
        )
    })
}

/// The first byte at which two buffers differ, with what differs there.
fn first_difference(a: &Bytes, b: &Bytes) -> Option<String> {
    if a == b {
        return None;
    }
    let at = a.iter().zip(b.iter()).position(|(x, y)| x != y);
    Some(match at {
        Some(i) => format!("{i} (original 0x{:02x}, re-encoded 0x{:02x})", a[i], b[i]),
        None => {
            let i = a.len().min(b.len());
            format!(
                "{i} (original {} bytes, re-encoded {} bytes)",
                a.len(),
                b.len()
            )
        }
    })
}
