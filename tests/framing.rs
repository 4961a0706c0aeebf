//! The read path's drivers over real captures: `FrameCodec` (its decoder
//! fed one byte more at a time) and `Connection` (reading one byte at a
//! time, `Poll::Pending` before every byte) give the messages
//! `Envelope::decode` finds in every capture of `tests/captures`, and the
//! same error for a stream cut anywhere or a prelude that is not one. (The
//! reader they both drive is tested without IO in `transport::read`, the
//! tap's relay in the CLI's `tap::relay`.)

use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use framewire::transport::{Connection, FrameCodec, TransportError};
use framewire::{Envelope, Limits};
use tokio::io::{AsyncRead, ReadBuf};
use tokio_util::codec::Decoder;

/// Every `wire.bin` under tests/captures (one direction of a real Dask
/// connection, one or more messages).
fn captures() -> Vec<(PathBuf, Bytes)> {
    fn walk(dir: &Path, out: &mut Vec<(PathBuf, Bytes)>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                walk(&path, out);
            } else if path.ends_with("wire.bin") {
                out.push((path.clone(), std::fs::read(&path).unwrap().into()));
            }
        }
    }
    let mut out = Vec::new();
    walk(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/captures"),
        &mut out,
    );
    assert!(out.len() > 90, "{} captures", out.len());
    out
}

/// The messages of a stream, by the slice decoder, and the error after
/// them if any.
fn decode_all(wire: &Bytes) -> (Vec<Envelope>, Option<String>) {
    let mut out = Vec::new();
    let mut rest = wire.clone();
    while !rest.is_empty() {
        match Envelope::decode(&rest, &Limits::dask_compat()) {
            Ok((env, used)) => {
                out.push(env);
                rest = rest.slice(used..);
            }
            Err(e) => return (out, Some(e.to_string())),
        }
    }
    (out, None)
}

/// The codec's messages from `wire` given one byte more at a time, then
/// its `decode_eof`.
fn codec(wire: &[u8]) -> (Vec<Envelope>, Option<String>) {
    let mut codec = FrameCodec::builder()
        .limits(Limits::dask_compat())
        .new_codec();
    let mut src = BytesMut::new();
    let mut out = Vec::new();
    for &b in wire {
        src.extend_from_slice(&[b]);
        loop {
            match codec.decode(&mut src) {
                Ok(Some(env)) => out.push(env),
                Ok(None) => break,
                Err(e) => return (out, Some(error_text(e))),
            }
        }
    }
    loop {
        match codec.decode_eof(&mut src) {
            Ok(Some(env)) => out.push(env),
            Ok(None) => return (out, None),
            Err(e) => return (out, Some(error_text(e))),
        }
    }
}

/// A reader of one byte per read, `Pending` (after waking) before each.
struct OneByte {
    data: Bytes,
    pending: bool,
}

impl AsyncRead for OneByte {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.pending = !self.pending;
        if !self.pending {
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        if !self.data.is_empty() {
            let b = self.data.split_to(1);
            buf.put_slice(&b);
        }
        Poll::Ready(Ok(()))
    }
}

/// The connection's messages from `wire` read one byte at a time, then the
/// error that ended them (`None`: a clean end).
fn connection(wire: &Bytes) -> (Vec<Envelope>, Option<String>) {
    let io = tokio::io::join(
        OneByte {
            data: wire.clone(),
            pending: true,
        },
        tokio::io::sink(),
    );
    let mut conn = Connection::builder()
        .limits(Limits::dask_compat())
        .build(io);
    tokio_test::block_on(async {
        let mut out = Vec::new();
        while let Some(r) = conn.recv().await {
            match r {
                Ok(env) => out.push(env),
                Err(e) => {
                    assert!(conn.recv().await.is_none(), "a message after an error");
                    return (out, Some(error_text(e)));
                }
            }
        }
        (out, None)
    })
}

/// The envelope error a driver reported, in the slice decoder's words.
fn error_text(e: TransportError) -> String {
    match e {
        TransportError::Decode(framewire::DecodeError::Envelope(e)) => e.to_string(),
        other => panic!("not an envelope error: {other:?}"),
    }
}

#[test]
fn every_capture_one_byte_at_a_time_through_the_codec_and_a_connection() {
    for (path, wire) in captures() {
        let (want, end) = decode_all(&wire);
        assert!(end.is_none(), "{}", path.display());
        assert!(
            codec(&wire) == (want.clone(), None),
            "codec: {}",
            path.display()
        );
        assert!(
            connection(&wire) == (want, None),
            "connection: {}",
            path.display()
        );
    }
}

/// A stream cut anywhere: the messages before the cut, then the slice
/// decoder's truncation (offset reached, bytes needed) from both drivers;
/// a clean end only at a message boundary.
#[test]
fn a_capture_cut_anywhere_is_the_same_truncation_from_both_drivers() {
    let captures = captures();
    let pick = |name: &str| {
        captures
            .iter()
            .find(|(p, _)| p.ends_with(name))
            .unwrap()
            .1
            .clone()
    };
    let a = pick("task_with_numpy/wire.bin");
    let b = pick("reply_pong/wire.bin");
    let wire = Bytes::from([&a[..], &b[..]].concat());
    for cut in 0..=wire.len() {
        let input = wire.slice(..cut);
        let want = decode_all(&input);
        assert!(codec(&input) == want, "codec, cut at {cut}");
        assert!(connection(&input) == want, "connection, cut at {cut}");
        let (_, end) = want;
        let boundary = [0, a.len(), wire.len()].contains(&cut);
        assert_eq!(end.is_none(), boundary, "cut at {cut}: {end:?}");
        if let Some(end) = end {
            let offset = if cut < a.len() { cut } else { cut - a.len() };
            assert!(
                end.starts_with(&format!("truncated at byte {offset}:")),
                "cut at {cut}: {end}"
            );
        }
    }
}

/// A prelude that is not one, after good messages: the messages, then the
/// slice decoder's error for it, from both drivers.
#[test]
fn a_bad_prelude_after_a_capture_is_the_same_error_from_both_drivers() {
    let (_, good) = &captures()[0];
    let le = |n: u64| n.to_le_bytes();
    for bad in [
        [le(16), le(0)].concat(),              // no frames
        [le(100), le(1), le(3)].concat(),      // N off every frame boundary
        [le(24), le(1 << 60), le(0)].concat(), // 2^60 frames
    ] {
        let wire = Bytes::from([&good[..], &bad[..], &[0; 8][..]].concat());
        let (want, Some(want_err)) = decode_all(&wire) else {
            panic!("{bad:?} decodes")
        };
        assert_eq!(codec(&wire), (want.clone(), Some(want_err.clone())));
        assert_eq!(connection(&wire), (want, Some(want_err)));
    }
}
