//! Memory-mapped payload frames through the transport: a file region sent
//! as a frame without being read into this process's memory, and never
//! copied on the way to the socket.
#![cfg(target_os = "linux")]

use std::io::Write;

use bytes::Bytes;
use framewire::mmap;
use framewire::transport::Connection;
use framewire::{dumps, loads, Envelope, Limits, Value};

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
    assert_eq!(
        got.frames()[1].slice(..4),
        Bytes::from_static(&[100 % 251, 101 % 251, 102 % 251, 103 % 251][..]).slice(..)
    );
}
