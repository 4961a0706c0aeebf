//! Memory-mapped payload frames through the transport: a file region sent
//! as a frame without being read into this process's memory (the copy into
//! a sealed memfd is the kernel's), and never copied on the way to the
//! socket (the kernel takes its bytes from the mapping itself).
#![cfg(target_os = "linux")]

use std::io::{IoSlice, Write};
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use framewire::message::decode;
use framewire::mmap;
use framewire::transport::Connection;
use framewire::EnvelopeError;
use framewire::{dumps, Envelope, Limits, Value};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A TCP stream that keeps, for every write, the address and length of each
/// piece of memory the kernel took bytes from.
struct Recording {
    io: tokio::net::TcpStream,
    taken: Vec<(usize, usize)>,
}

impl Recording {
    fn note(&mut self, pieces: &[&[u8]], mut n: usize) {
        for p in pieces.iter().filter(|p| !p.is_empty()) {
            let m = p.len().min(n);
            if m == 0 {
                break;
            }
            self.taken.push((p.as_ptr() as usize, m));
            n -= m;
        }
    }

    /// Bytes taken from inside `frame`'s memory.
    fn taken_from(&self, frame: &Bytes) -> usize {
        let (lo, hi) = (
            frame.as_ptr() as usize,
            frame.as_ptr() as usize + frame.len(),
        );
        self.taken
            .iter()
            .map(|&(at, len)| (at + len).min(hi).saturating_sub(at.max(lo)))
            .sum()
    }
}

impl AsyncWrite for Recording {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = r {
            self.note(&[buf], n);
        }
        r
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = r {
            let pieces: Vec<&[u8]> = bufs.iter().map(|b| &**b).collect();
            self.note(&pieces, n);
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

impl AsyncRead for Recording {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

/// This thread's read system calls so far (`syscr` of /proc/thread-self/io:
/// read, pread, sendfile... one per call).
fn read_calls() -> u64 {
    let io = std::fs::read_to_string("/proc/thread-self/io").unwrap();
    io.lines()
        .find_map(|l| l.strip_prefix("syscr: "))
        .and_then(|n| n.trim().parse().ok())
        .expect("a syscr line")
}

/// `sealed_copy` copies inside the kernel: a 24 MiB region takes a couple of
/// system calls (copy_file_range, or sendfile across filesystems), where
/// reading it through a buffer of any usual size would take hundreds.
#[test]
fn a_sealed_copy_is_made_by_the_kernel() {
    const LEN: usize = 24 << 20;
    let mut file = tempfile::tempfile().unwrap();
    file.write_all(&vec![5u8; LEN + 100]).unwrap();
    let before = read_calls();
    let frame = mmap::sealed_copy(&file, 100, LEN).unwrap();
    let calls = read_calls() - before;
    assert!(calls < 16, "{calls} read calls to copy 24 MiB");
    assert_eq!(frame.len(), LEN);
    assert!(frame.iter().all(|&b| b == 5));
}

/// A sealed file region is sent from its mapping: every one of its bytes the
/// kernel took lay in the mapping (no buffer in between), and the
/// transport's copy counter saw only frame 0 copied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sealed_file_region_is_sent_from_its_mapping() {
    const LEN: usize = 24 << 20;
    let mut file = tempfile::tempfile().unwrap();
    let data: Vec<u8> = (0..LEN + 100).map(|i| (i % 251) as u8).collect();
    file.write_all(&data).unwrap();
    let frame = mmap::sealed_copy(&file, 100, LEN).unwrap();
    drop(data);
    let line = mapping_of(frame.as_ptr() as usize);
    assert!(
        line.contains("memfd:framewire-frame"),
        "not the memfd: {line}"
    );

    let head = Value::map_of([("op", Value::str("put")), ("len", Value::from(LEN as u64))]);
    let mut frames = dumps(&head).unwrap();
    let head_len = frames[0].len() as u64;
    frames.push(frame.clone());
    let env = Envelope::new(frames).unwrap();

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let sent = frame.clone();
    let sender = tokio::spawn(async move {
        let io = Recording {
            io: tokio::net::TcpStream::connect(addr).await.unwrap(),
            taken: Vec::new(),
        };
        let mut tx = Connection::builder()
            .limits(Limits::dask_compat())
            .build(io);
        tx.send(env).await.unwrap();
        (tx.stats(), tx.get_ref().taken_from(&sent))
    });
    let (s, _) = listener.accept().await.unwrap();
    let mut rx = Connection::builder().limits(Limits::dask_compat()).build(s);
    let got = rx.recv().await.unwrap().unwrap();
    let (stats, from_mapping) = sender.await.unwrap();

    // Every byte of the region went to the kernel from the mapping, once.
    assert_eq!(from_mapping, LEN);
    // Only frame 0 was copied (next to the prelude), counted at the copy.
    assert_eq!(stats.bytes_copied_on_send, head_len);
    assert_eq!(
        decode(&got.frames()[..1], &Limits::dask_compat()).unwrap(),
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
