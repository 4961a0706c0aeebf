//! `framewire call`: one Dask RPC, as Dask's own `rpc` makes it.
//!
//! ```text
//! connect ─▶ handshake ─▶ {"op": .., ..., "reply": true} ─▶ reply ─▶ {"op": "close", "reply": false}
//! ```
//!
//! The message is the JSON of `encode`; `"reply": true` is appended unless
//! the message says otherwise (Dask's `send_recv` sets `msg["reply"]`). The
//! reply is printed as one JSON line, blocks deserialized as by
//! `inspect --deserialize`. A reply map whose `status` is `"error"` or
//! `"uncaught-error"` (Dask's `error_message`: `exception`, `traceback`,
//! `exception_text`, `traceback_text`) is an error, as it is for Dask's
//! client; so is a block of the `error` family (a value the server could not
//! serialize), which Dask's client would raise on.
//!
//! `--compression CODEC` offers a codec in the handshake; when the server
//! offers the same, the message's payload frames are compressed under Dask's
//! policy (`SerializeOptions::compression`), as a Dask comm does after
//! negotiating. A Python Dask server answers `"compression": nil` to a peer
//! on its own host, so nothing is compressed then. `--checksums offer`
//! offers CRC32 trailers (SPEC.md §6.2; only a framewire peer agrees),
//! `--checksums require` refuses a server that does not offer them. Replies
//! are decompressed whatever was negotiated, as Dask does.

use std::io::Write;
use std::time::Duration;

use framewire::message::{self, Decoded};
use framewire::serialize::{Codec, DeserializeOptions};
use framewire::transport::{
    Address, Checksums, Connection, ConnectionBuilder, HandshakeError, HandshakeOptions,
    TransportError,
};
use framewire::{DeserializeError, Envelope, Limits, Value};
use serde_json::Value as Json;
use tokio::time::{timeout_at, Instant};

use crate::args::Connect;
use crate::json;

/// Time allowed for the `{"op": "close"}` goodbye after the reply arrived.
const GOODBYE: Duration = Duration::from_secs(1);

/// `--checksums`: what `call` asks of the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ChecksumMode {
    /// Offer CRC32 trailers; used if the server offers them too.
    Offer,
    /// Offer them and fail unless the server offers them too.
    Require,
}

/// What `call` offers in the handshake, and how long it waits.
#[derive(Clone, Debug)]
pub struct Options {
    /// Connecting, handshake and reply, all together.
    pub timeout: Duration,
    /// `--tcp-timeout`, `--connect-timeout` (connecting is retried within
    /// `timeout`) and `--tls-*`.
    pub connect: Connect,
    /// `--compression`: a codec name, checked before anything else.
    pub compression: Option<String>,
    /// `--checksums`; `None`: not offered (as Python peers).
    pub checksums: Option<ChecksumMode>,
}

/// Sends the message `input` (JSON text, or `-` for stdin) to the Dask
/// server at `address` and prints its reply.
pub fn run(address: &str, input: &str, opts: &Options, out: &mut impl Write) -> Result<(), String> {
    let codec = opts.compression.as_deref().map(parse_codec).transpose()?;
    let text = crate::input::text_arg(input)?;
    let msg = message_from_json(&text)?;
    let op = msg
        .get("op")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let wants_reply = !matches!(msg.get("reply"), Some(Value::Bool(false)));
    // Encoded once now, so that a message that cannot be encoded fails
    // before connecting; the connection encodes it again with the codec
    // the handshake agrees, if any.
    framewire::dumps(&msg).map_err(|e| format!("cannot encode the message: {e}"))?;
    let address = Address::parse(address).map_err(|e| e.to_string())?;
    let handshake = {
        let mut o = HandshakeOptions::default();
        o.compression = codec;
        o.checksums = match opts.checksums {
            None => Checksums::Off,
            Some(ChecksumMode::Offer) => Checksums::Offer,
            Some(ChecksumMode::Require) => Checksums::Require,
        };
        o.// The deadline in `converse` covers it.
        timeout = None;
        o
    };

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    let request = Request {
        msg: &msg,
        wants_reply,
    };
    let mut builder = Connection::builder();
    builder.limits(Limits::dask_compat());
    opts.connect.configure(&mut builder, &address)?;
    builder.connect_timeout(Some(
        opts.connect.timeouts.connect_timeout().min(opts.timeout),
    ));
    let reply = rt.block_on(converse(
        &address,
        &builder,
        request,
        &handshake,
        opts.timeout,
    ));
    let reply = reply.map_err(|e| match e {
        // It names the address already.
        Failure::Connect(e) => e.to_string(),
        Failure::Other(e) => format!("{address}: {e}"),
    })?;
    let line = match reply {
        None => Json::Null,
        Some(loaded) => reply_json(&loaded).map_err(|e| format!("{address}: {op}: {e}"))?,
    };
    let line = serde_json::to_string(&line).map_err(|e| e.to_string())?;
    writeln!(out, "{line}").map_err(crate::output::error)
}

/// `--compression NAME`: one of Dask's codecs, by its exact name.
pub fn parse_codec(name: &str) -> Result<Codec, String> {
    Codec::from_name(name).ok_or_else(|| {
        let known: Vec<&str> = Codec::ALL.iter().map(|c| c.name()).collect();
        format!(
            "--compression {name:?}: unknown codec (known: {})",
            known.join(", ")
        )
    })
}

/// The message: a JSON object in the conventions of `encode`, with an `op`;
/// `"reply": true` appended when absent, as Dask's `send_recv` does.
fn message_from_json(text: &str) -> Result<Value, String> {
    let j: Json = serde_json::from_str(text).map_err(|e| format!("JSON input: {e}"))?;
    let mut value = json::json_to_value(&j)?;
    let Value::Map(entries) = &mut value else {
        return Err("JSON input: a Dask RPC message is an object with an \"op\"".into());
    };
    let op = entries
        .iter()
        .find(|(k, _)| k.as_str() == Some("op"))
        .map(|(_, v)| v);
    if op.and_then(Value::as_str).is_none() {
        return Err("JSON input: the message needs an \"op\" string".into());
    }
    match entries.iter().find(|(k, _)| k.as_str() == Some("reply")) {
        Some((_, Value::Bool(_))) => {}
        Some(_) => return Err("JSON input: \"reply\" must be true or false".into()),
        None => entries.push((Value::from_static("reply"), Value::Bool(true))),
    }
    Ok(value)
}

/// The message to send, and whether a reply is expected.
struct Request<'a> {
    msg: &'a Value,
    wants_reply: bool,
}

/// Why `call` failed: connecting (the error names the address), or
/// anything after.
enum Failure {
    Connect(TransportError),
    Other(String),
}

impl From<String> for Failure {
    fn from(e: String) -> Failure {
        Failure::Other(e)
    }
}

/// Connect (retrying until the builder's connect timeout), handshake,
/// send, and read the reply (unless none is wanted), all within `timeout`.
async fn converse(
    address: &Address,
    builder: &ConnectionBuilder,
    request: Request<'_>,
    opts: &HandshakeOptions,
    timeout: Duration,
) -> Result<Option<Decoded>, Failure> {
    let Request { msg, wants_reply } = request;
    let deadline = Instant::now() + timeout;
    let within = seconds(timeout);
    let socket = timeout_at(deadline, builder.connect_socket(address))
        .await
        .map_err(|_| format!("cannot connect within {within}"))?
        .map_err(|e| match e {
            TransportError::Connect(_) => Failure::Connect(e),
            e => Failure::Other(e.to_string()),
        })?;
    let (mut conn, _) = match timeout_at(deadline, builder.handshake(socket, opts)).await {
        Err(_) => return Err(format!("no handshake from the server within {within}").into()),
        Ok(Err(TransportError::Handshake(HandshakeError::ChecksumRequired))) => {
            return Err(Failure::Other(
                "checksums required, the server did not offer them \
                 (a Python Dask server never does)"
                    .into(),
            ))
        }
        Ok(Err(e)) => return Err(Failure::Other(format!("handshake: {e}"))),
        Ok(Ok(x)) => x,
    };
    // As a Dask comm: payloads compressed with the codec both sides
    // announced, if any (the session's serialize options carry it).
    timeout_at(deadline, conn.send_value(msg))
        .await
        .map_err(|_| format!("cannot send the message within {within}"))?
        .map_err(|e| format!("sending the message: {e}"))?;
    let reply = if wants_reply {
        let env = match timeout_at(deadline, conn.recv()).await {
            Err(_) => return Err(format!("no reply within {within}").into()),
            Ok(Some(Ok(env))) => env,
            Ok(Some(Err(e))) => return Err(format!("receiving the reply: {e}").into()),
            Ok(None) => {
                return Err(Failure::Other(
                    "the server closed the connection without replying".into(),
                ))
            }
        };
        let loaded = message::decode_detailed(env.frames(), &Limits::dask_compat())
            .map_err(|e| format!("the reply: {e}"))?;
        Some(loaded)
    } else {
        None
    };
    // What Dask's rpc does when it is done with a comm; best effort.
    let goodbye = async {
        let bye = Value::map_of([("op", Value::from_static("close")), ("reply", false.into())]);
        if let Ok(env) = framewire::dumps(&bye).and_then(Envelope::new) {
            conn.send(env).await?;
        }
        conn.close().await
    };
    let _ = tokio::time::timeout(GOODBYE, goodbye).await;
    Ok(reply)
}

/// The reply's JSON with every block deserialized, or the error it reports.
fn reply_json(loaded: &Decoded) -> Result<Json, String> {
    if let Some(err) = remote_error(&loaded.value) {
        return Err(err);
    }
    let opts = DeserializeOptions::with_limits(Limits::dask_compat());
    // Dask's client raises on a value the server could not serialize.
    let results = json::deserialize_blocks(loaded, &opts, |r, e| {
        Err(match e {
            DeserializeError::RemoteSerializationError { text } => {
                format!("the reply holds a value the server could not serialize: {text}")
            }
            e => format!(
                "the reply's block {}@{}: {e}",
                json::kind_name(r.kind),
                r.offset
            ),
        })
    })?;
    Ok(json::deserialized_to_json(&loaded.value, &results))
}

/// The text of an error reply: a map whose `status` is `"error"` (handlers
/// that return `error_message(e)`) or `"uncaught-error"` (an exception in the
/// handler).
fn remote_error(reply: &Value) -> Option<String> {
    let status = reply.get("status")?.as_str()?;
    if status != "error" && status != "uncaught-error" {
        return None;
    }
    let text = match reply.get("exception_text") {
        Some(Value::Str(s)) if !s.is_empty() => s.to_string(),
        Some(other) => json::value_to_json(other).to_string(),
        None => "(no exception_text)".into(),
    };
    Some(format!("remote error ({status}): {text}"))
}

/// `1.5 s`, `30 s`.
fn seconds(d: Duration) -> String {
    format!("{} s", d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reply_key_appended_like_send_recv() {
        let v = message_from_json(r#"{"op": "identity"}"#).unwrap();
        assert_eq!(
            v,
            Value::map_of([("op", Value::str("identity")), ("reply", true.into())])
        );
        let v = message_from_json(r#"{"reply": false, "op": "x"}"#).unwrap();
        assert_eq!(v.get("reply"), Some(&Value::Bool(false)));
        assert!(message_from_json("[1]").is_err());
        assert!(message_from_json(r#"{"x": 1}"#).is_err());
        assert!(message_from_json(r#"{"op": "x", "reply": 1}"#).is_err());
    }

    #[test]
    fn error_replies() {
        let e = Value::map_of([
            ("status", Value::str("uncaught-error")),
            ("exception_text", Value::str("TypeError('x')")),
        ]);
        assert_eq!(
            remote_error(&e).unwrap(),
            "remote error (uncaught-error): TypeError('x')"
        );
        assert!(remote_error(&Value::map_of([("status", Value::str("OK"))])).is_none());
        assert!(remote_error(&Value::str("OK")).is_none());
    }

    #[test]
    fn codecs() {
        assert_eq!(parse_codec("lz4"), Ok(Codec::Lz4));
        assert_eq!(parse_codec("zstd"), Ok(Codec::Zstd));
        assert_eq!(
            parse_codec("brotli").unwrap_err(),
            "--compression \"brotli\": unknown codec (known: zlib, snappy, lz4, zstd)"
        );
        assert!(parse_codec("auto").is_err());
    }
}
