//! Memory-mapped payload frames through the transport: a file region sent
//! as a frame without being read into this process's memory, and never
//! copied on the way to the socket.
#![cfg(target_os = "linux")]

use std::io::Write;

use bytes::Bytes;
use framewire::message::loads;
use framewire::mmap;
use framewire::transport::Connection;
use framewire::EnvelopeError;
use framewire::{dumps, Envelope, Limits, Value};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sealed_file_region_is_sent_from_its_mapping() {
    const LEN: usize = 24 << 20;
    let mut file = tempfile::tempfile().unwrap();
    let data: Vec<u8> = (0..LEN + 100).map(|i| (i % 251) as u8).collect();
    file.write_all(&data).unwrap();
    let frame = mmap::sealed_copy(&file, 100, LEN).unwrap();
    drop(data);

    let head = Value::map_of([("op", Value::str("put")), ("len", Value::from(LEN as u64))]);
    let mut frames = dumps(&head).unwrap();
    let head_len = frames[0].len() as u64;
    frames.push(frame.clone());
    let env = Envelope::new(frames).unwrap();

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let sender = tokio::spawn(async move {
        let s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut tx = Connection::builder().limits(Limits::dask_compat()).build(s);
        tx.send(env).await.unwrap();
        tx.stats()
    });
    let (s, _) = listener.accept().await.unwrap();
    let mut rx = Connection::builder().limits(Limits::dask_compat()).build(s);
    let got = rx.recv().await.unwrap().unwrap();
    let stats = sender.await.unwrap();

    // Only frame 0 was copied (next to the prelude); the mapping went to
    // the kernel as it is.
    assert_eq!(stats.bytes_copied_on_send, head_len);
    assert_eq!(
        loads(&got.frames()[..1], &Limits::dask_compat()).unwrap(),
        head
    );
    assert_eq!(got.frames()[1].len(), LEN);
    assert!(got.frames()[1] == frame, "payload bytes differ");
    assert_eq!(&got.frames()[1][..4], &[100u8, 101, 102, 103][..]);
}

/// The line of /proc/self/maps whose range holds `addr`.
fn mapping_of(addr: usize) -> String {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    for line in maps.lines() {
        let range = line.split_whitespace().next().unwrap();
        let (a, b) = range.split_once('-').unwrap();
        let (a, b) = (
            usize::from_str_radix(a, 16).unwrap(),
            usize::from_str_radix(b, 16).unwrap(),
        );
        if (a..b).contains(&addr) {
            return line.to_owned();
        }
    }
    panic!("{addr:#x} is in no mapping");
}

/// `Builder::spill`: large frames arrive in an anonymous mapped file, not
/// on the heap, with and without checksum trailers; shards stay contiguous.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_frames_are_received_into_a_spill_file() {
    let dir = tempfile::tempdir().unwrap();
    for sums in [false, true] {
        let a: Bytes = (0..5_000_000u32).map(|i| (i % 253) as u8).collect();
        let b: Bytes = (0..3_000_000u32).map(|i| (i % 241) as u8).collect();
        let small = Bytes::from_static(b"\x80");
        let env = Envelope::new(vec![small.clone(), a.clone(), b.clone(), small.clone()]).unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let sender = tokio::spawn(async move {
            let s = tokio::net::TcpStream::connect(addr).await.unwrap();
            let mut tx = Connection::builder()
                .limits(Limits::dask_compat())
                .checksums(sums)
                .build(s);
            tx.send(env.clone()).await.unwrap();
            tx.send(env).await.unwrap();
        });
        let (s, _) = listener.accept().await.unwrap();
        let mut rx = Connection::builder()
            .limits(Limits::dask_compat())
            .checksums(sums)
            .spill(dir.path(), 1 << 20)
            .build(s);
        for _ in 0..2 {
            let got = rx.recv().await.unwrap().unwrap();
            assert_eq!(got.frames().len(), 4);
            assert!(
                got.frames()[1] == a && got.frames()[2] == b,
                "payload differs"
            );
            assert_eq!(got.frames()[0], small);
            // Both large frames are slices of one mapping of a deleted file.
            let line = mapping_of(got.frames()[1].as_ptr() as usize);
            assert!(line.contains("(deleted)"), "not a spill mapping: {line}");
            assert_eq!(
                got.frames()[2].as_ptr() as usize,
                got.frames()[1].as_ptr() as usize + a.len(),
                "shards are contiguous"
            );
        }
        sender.await.unwrap();
    }
    // Nothing is left behind in the directory (the files were never linked).
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

/// A spill run cut off by EOF is `Truncated`, like any other.
#[tokio::test]
async fn a_spill_run_cut_off_is_truncated() {
    let dir = tempfile::tempdir().unwrap();
    let env = Envelope::new(vec![Bytes::from(vec![9u8; 3 << 20])]).unwrap();
    let wire = env.to_bytes();
    let cut = &wire[..wire.len() - 1000];
    let mut rx = Connection::builder()
        .limits(Limits::dask_compat())
        .spill(dir.path(), 1 << 20)
        .build(tokio::io::join(cut, tokio::io::sink()));
    let r = rx.recv().await.unwrap();
    assert!(
        matches!(
            r,
            Err(framewire::TransportError::Decode(
                framewire::DecodeError::Envelope(EnvelopeError::Truncated { .. })
            ))
        ),
        "{r:?}"
    );
}
