//! An echo server and a client over [`Connection`], both in this process:
//! the Dask handshake, then whole messages sent with `send_value` and
//! received with `recv_value` (serialized, framed and deserialized in one
//! call each), payloads never copied.
//!
//! ```text
//! cargo run --example echo
//! ```

use bytes::Bytes;
use framewire::transport::{Connection, HandshakeOptions, TransportError};
use framewire::{NdArray, Value};
use tokio::net::TcpListener;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    println!("echo server on tcp://{addr}");

    // The server: every message it receives goes back as it came.
    let server = tokio::spawn(async move {
        let (stream, peer) = listener.accept().await?;
        let (mut conn, agreed) = Connection::builder()
            .accept(stream, &HandshakeOptions::default())
            .await?;
        println!(
            "server: {peer} connected, pickle protocol {}",
            agreed.pickle_protocol()
        );
        while let Some(msg) = conn.recv_value().await {
            conn.send_value(&msg?).await?;
        }
        println!("server: {peer} closed");
        Ok::<(), TransportError>(())
    });

    // The client: a task-like message with a 1 MiB array out of band.
    let (mut conn, _) = Connection::builder()
        .connect(&format!("tcp://{addr}"), &HandshakeOptions::default())
        .await?;
    let data: Vec<u8> = (0..1u32 << 17)
        .flat_map(|i| f64::from(i).to_le_bytes())
        .collect();
    let array = NdArray::from_c_order("<f8", &[1 << 17], Bytes::from(data))?;
    let msg = Value::map_of([
        ("op", Value::str("echo")),
        ("key", Value::str("x-1")),
        (
            "data",
            Value::ToSerialize(Box::new(Value::NdArray(Box::new(array.clone())))),
        ),
    ]);
    conn.send_value(&msg).await?;
    let back = conn.recv_value().await.ok_or("the server closed")??;
    assert_eq!(back.get("data"), Some(&Value::NdArray(Box::new(array))));
    let stats = conn.stats();
    println!(
        "client: echoed {} bytes in {} frames; frame bytes copied on send: {}",
        stats.bytes_received, stats.frames_received, stats.bytes_copied_on_send
    );
    conn.close().await?;
    server.await??;
    Ok(())
}
