//! `framewire encode`: one message, built from JSON in the conventions of
//! `inspect --json`, written to stdout as Dask's TCP framing.

use std::io::Write;

use framewire::dumps_with;
use framewire::envelope::Envelope;
use framewire::serialize::SerializeOptions;
use serde_json::Value as Json;

use crate::json;

/// Deepest JSON accepted. A Dask message nests up to 1024 levels, and each
/// level takes up to three levels of JSON (`{"$map": [[k, v]]}`).
const MAX_JSON_DEPTH: usize = 4 * 1024;

/// Stack for that (reserved, not committed, memory).
const STACK: usize = 512 << 20;

/// Where the prelude's `N` ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum FirstRead {
    /// `N` covers the whole message.
    All,
    /// `N` covers the prelude only.
    Prelude,
}

/// Builds the message `input` (JSON text, or `-` for stdin) describes and
/// writes it, enveloped.
pub fn run(
    input: &str,
    opts: &SerializeOptions,
    first_read: FirstRead,
    out: &mut impl Write,
) -> Result<(), String> {
    let text = crate::input::text_arg(input)?;
    // Parsing, converting and dropping JSON 4096 levels deep all recurse.
    let frames = std::thread::scope(|s| {
        std::thread::Builder::new()
            .stack_size(STACK)
            .spawn_scoped(s, || {
                let value = json::json_to_value(&parse(&text)?)?;
                dumps_with(&value, opts).map_err(|e| format!("cannot encode: {e}"))
            })
            .map_err(|e| format!("cannot start a thread: {e}"))?
            .join()
            .map_err(|_| "internal error while encoding".to_string())?
    })?;
    let env = match first_read {
        FirstRead::All => Envelope::new(frames),
        FirstRead::Prelude => Envelope::with_first_read_frames(frames, 0),
    }
    .map_err(|e| format!("cannot encode: {e}"))?;
    out.write_all(&env.to_bytes()).map_err(crate::output::error)
}

/// Parses JSON as deep as Dask messages go (serde_json alone stops at 128),
/// after checking the depth without recursion.
fn parse(text: &str) -> Result<Json, String> {
    let depth = json_depth(text);
    if depth > MAX_JSON_DEPTH {
        return Err(format!(
            "JSON input: nesting deeper than {MAX_JSON_DEPTH} levels ({depth})"
        ));
    }
    let mut de = serde_json::Deserializer::from_str(text);
    de.disable_recursion_limit();
    // A stream of values (the `serde` trait is not a dependency of the
    // binary): exactly one is wanted.
    let mut values = de.into_iter::<Json>();
    match (values.next(), values.next()) {
        (Some(Ok(j)), None) => Ok(j),
        (Some(Err(e)), _) | (_, Some(Err(e))) => Err(format!("JSON input: {e}")),
        (None, _) => Err("JSON input: empty".into()),
        (Some(Ok(_)), Some(Ok(_))) => Err("JSON input: more than one value".into()),
    }
}

/// The deepest bracket nesting of a JSON text, strings skipped.
fn json_depth(text: &str) -> usize {
    let (mut depth, mut max, mut in_str, mut escaped) = (0usize, 0usize, false, false);
    for c in text.bytes() {
        if in_str {
            match c {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_str = false,
                _ => {}
            }
            continue;
        }
        match c {
            b'"' => in_str = true,
            b'[' | b'{' => {
                depth += 1;
                max = max.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    max
}
