//! The transport decoders fed through arbitrary chunking, with `Pending`
//! between every read: the zero-copy `ReadHalf` and the `FrameCodec`.
//! Oracle: both yield exactly the messages a one-shot `Envelope::decode`
//! loop finds in the same bytes (frames and `N`), fail exactly when it
//! does, and yield nothing after an error (hostile-inputs.md T1–T3).
//!
//! The first input byte picks two things. Bit 0: the bytes start with a
//! well-formed message of large frames (up to 4 of up to 263 KiB, their
//! sizes and contents from the input), so that large-frame receive paths
//! run, then the rest of the input as it is. Bit 1 (Linux): the
//! `ReadHalf` receives large runs into spill files
//! (`ConnectionBuilder::spill`, the `mmap` feature) in the temporary
//! directory, from a run length the other bits set.
#![no_main]
use std::future::Future;
use std::io;
use std::pin::{pin, Pin};
use std::task::{Context, Poll, Waker};

use bytes::{Bytes, BytesMut};
use framewire::transport::{ConnectionBuilder, FrameCodec, ReadHalf};
use framewire::{Envelope, Limits};
use libfuzzer_sys::fuzz_target;
use tokio::io::{AsyncRead, ReadBuf};
use tokio_util::codec::Decoder;

/// Hands out `data` in pieces of the given sizes, `Pending` before each.
struct Chunked<'a> {
    data: &'a [u8],
    sizes: &'a [u8],
    turn: usize,
    pending: bool,
}

impl Chunked<'_> {
    fn next_size(&mut self) -> usize {
        let s = self.sizes.get(self.turn % self.sizes.len().max(1)).copied();
        self.turn += 1;
        usize::from(s.unwrap_or(255)).max(1)
    }
}

impl AsyncRead for Chunked<'_> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.pending {
            self.pending = false;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        self.pending = true;
        let n = self.next_size().min(self.data.len()).min(buf.remaining());
        buf.put_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Poll::Ready(Ok(()))
    }
}

/// Polls to completion; the reader wakes itself, so a `Pending` means "poll again".
fn block_on<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
}

fn same(a: &Envelope, b: &Envelope) -> bool {
    a.frames() == b.frames() && a.first_read() == b.first_read()
}

/// A message of large frames from the first bytes of `data` (how many
/// frames, then each one's size in 1031-byte steps; contents: `data`
/// repeated), then what follows those bytes.
fn with_large_message(data: &[u8]) -> Vec<u8> {
    let Some((&n, rest)) = data.split_first() else {
        return Vec::new();
    };
    let n = usize::from(n % 4) + 1;
    let (lens, rest) = rest.split_at(n.min(rest.len()));
    let fill = |len: usize| -> Bytes { data.iter().copied().cycle().take(len).collect() };
    let frames: Vec<Bytes> = lens.iter().map(|&l| fill(usize::from(l) * 1031)).collect();
    if frames.is_empty() {
        return rest.to_vec();
    }
    let mut wire = Envelope::new(frames)
        .expect("at most 4 frames of at most 263 KiB")
        .to_bytes()
        .to_vec();
    wire.extend_from_slice(rest);
    wire
}

fuzz_target!(|input: (u8, Vec<u8>, Vec<u8>)| {
    let (mode, sizes, data) = input;
    let limits = Limits::strict();
    let whole = Bytes::from(match mode & 1 {
        1 => with_large_message(&data),
        _ => data,
    });

    // The reference: one-shot decodes, one message after the other.
    let mut expected = Vec::new();
    let mut rest = whole.clone();
    let expect_error = loop {
        if rest.is_empty() {
            break false;
        }
        match Envelope::decode(&rest, &limits) {
            Ok((env, used)) => {
                expected.push(env);
                rest = rest.slice(used..);
            }
            Err(_) => break true,
        }
    };

    // The connection's read half.
    let mut builder = ConnectionBuilder::new();
    builder.limits(limits.clone());
    #[cfg(target_os = "linux")]
    if mode & 2 != 0 {
        builder.spill(std::env::temp_dir(), usize::from(mode >> 2) << 12);
    }
    let reader = Chunked {
        data: &whole,
        sizes: &sizes,
        turn: 0,
        pending: false,
    };
    let mut rx = ReadHalf::new(reader, &builder);
    let mut got = 0;
    let mut errored = false;
    while let Some(r) = block_on(rx.recv()) {
        match r {
            Ok(env) => {
                assert!(
                    got < expected.len(),
                    "a message the one-shot decode did not find"
                );
                assert!(same(&env, &expected[got]), "message {got} differs");
                got += 1;
            }
            Err(_) => {
                errored = true;
                break;
            }
        }
    }
    assert_eq!(got, expected.len(), "messages lost");
    assert_eq!(errored, expect_error);
    if errored {
        assert!(block_on(rx.recv()).is_none(), "a message after an error");
    }

    // The Framed codec, fed the same pieces.
    let mut codec = FrameCodec::builder().limits(limits).new_codec();
    let mut buf = BytesMut::new();
    let mut chunks = Chunked {
        data: &whole,
        sizes: &sizes,
        turn: 0,
        pending: false,
    };
    let mut got = 0;
    let mut errored = false;
    'feed: loop {
        let n = chunks.next_size().min(chunks.data.len());
        buf.extend_from_slice(&chunks.data[..n]);
        chunks.data = &chunks.data[n..];
        let at_eof = chunks.data.is_empty();
        loop {
            let r = if at_eof {
                codec.decode_eof(&mut buf)
            } else {
                codec.decode(&mut buf)
            };
            match r {
                Ok(Some(env)) => {
                    assert!(
                        got < expected.len() && same(&env, &expected[got]),
                        "codec message {got}"
                    );
                    got += 1;
                }
                Ok(None) if at_eof => break 'feed,
                Ok(None) => break,
                Err(_) => {
                    errored = true;
                    break 'feed;
                }
            }
        }
    }
    assert_eq!(got, expected.len(), "codec lost messages");
    assert_eq!(errored, expect_error, "codec error mismatch");
    if errored {
        assert!(codec.decode(&mut buf).is_err() || codec.is_poisoned());
    }
});
