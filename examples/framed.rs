//! A `tokio_util::codec::Framed` pipeline with [`FrameCodec`]: Dask's
//! framing as a `Stream`/`Sink` of [`Envelope`]s, combined with the usual
//! `futures` combinators. Simple, but the codec's encoder copies every
//! frame into one buffer (tokio-util's `Encoder` contract);
//! [`Connection`](framewire::Connection) is the zero-copy path.
//!
//! ```text
//! cargo run --example framed
//! ```

use framewire::transport::FrameCodec;
use framewire::{dumps, message, Envelope, Limits, Value};
use futures_util::{SinkExt, StreamExt};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (a, b) = tokio::io::duplex(1 << 16);
    let mut left = FrameCodec::builder().new_framed(a);
    let mut right = FrameCodec::builder().limits(Limits::strict()).new_framed(b);

    // A batched stream as Dask's BatchedSend writes it: a list of op maps.
    let batch = Value::Array(
        (0..3)
            .map(|i| {
                Value::map_of([
                    ("op", Value::str("task-finished")),
                    ("key", Value::from(format!("x-{i}"))),
                ])
            })
            .collect(),
    );
    left.send(Envelope::new(dumps(&batch)?)?).await?;
    drop(left);

    // Read until the peer closes; decode frame 0 of each message.
    while let Some(env) = right.next().await {
        let env = env?;
        let value = message::decode(env.frames(), right.codec().limits())?;
        let ops: Vec<&str> = value
            .as_array()
            .unwrap_or_default()
            .iter()
            .filter_map(|m| m.get("op")?.as_str())
            .collect();
        println!("{} frame(s), ops: {ops:?}", env.frames().len());
    }
    Ok(())
}
