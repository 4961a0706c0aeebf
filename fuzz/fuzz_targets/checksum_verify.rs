//! Checksum trailers under bit flips (SPEC.md §6.2, hostile-inputs.md K1):
//! any frames, written by a sender with checksums on, read back equal; the
//! same bytes with one bit flipped anywhere in the frames or the trailer
//! are always an error, never a message.
#![no_main]
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use framewire::transport::{ChecksumError};
use framewire::transport::{ConnectionBuilder, ReadHalf, TransportError, WriteHalf};
use framewire::{Envelope, Limits};
use libfuzzer_sys::fuzz_target;

fn block_on<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
}

fuzz_target!(|input: (Vec<Vec<u8>>, u32, bool)| {
    let (frames, flip, prelude_only) = input;
    let frames: Vec<Bytes> = frames.into_iter().take(32).map(Bytes::from).collect();
    if frames.is_empty() {
        return;
    }
    let k = if prelude_only { 0 } else { frames.len() };
    let env = Envelope::with_first_read_frames(frames.clone(), k).unwrap();
    let mut builder = ConnectionBuilder::new();
    builder.limits(Limits::dask_compat()).checksums(true);

    let mut tx = WriteHalf::new(Vec::new(), &builder);
    block_on(tx.send(env.clone())).unwrap();
    let wire = tx.into_inner();

    let read = |bytes: &[u8]| {
        let mut rx = ReadHalf::new(bytes, &builder);
        block_on(rx.recv())
    };
    let back = read(&wire).expect("a message").expect("valid");
    assert_eq!(back.frames(), env.frames());
    assert_eq!(back.first_read(), env.first_read());

    // One bit flipped after the prelude: in a frame or in the trailer.
    let prelude = 16 + 8 * (frames.len() + 1);
    let body_bits = 8 * (wire.len() - prelude);
    let bit = flip as usize % body_bits;
    let mut bad = wire.clone();
    bad[prelude + bit / 8] ^= 1 << (bit % 8);
    match read(&bad) {
        Some(Err(TransportError::Checksum(
            ChecksumError::Mismatch { .. } | ChecksumError::PreludeMismatch { .. },
        ))) => {}
        other => panic!("flip of bit {bit} after the prelude: {other:?}"),
    }
});
