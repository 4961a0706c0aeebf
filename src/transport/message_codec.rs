//! [`MessageCodec`]: typed messages as a tokio-util codec, stacked on
//! [`FrameCodec`] as h2 stacks its codec on `length_delimited`.

use std::marker::PhantomData;

use bytes::BytesMut;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio_util::codec::{Decoder, Encoder};

use super::codec::FrameCodec;
use super::error::TransportError;
use crate::envelope::Envelope;
use crate::limits::Limits;
use crate::serialize::{DeserializeOptions, SerializeOptions};
use crate::typed;

/// A `Decoder` of `T`s and an `Encoder` of `&T`s (any serde type: a channel
/// enum of [`dask`](crate::dask), your own `#[derive]`d messages, or
/// [`Value`](crate::Value)): each frame list is decoded by [`FrameCodec`],
/// then read by [`from_frames`](crate::typed::from_frames) (what
/// [`loads`](crate::loads) and [`from_value`](crate::from_value) would
/// give); each item is written by [`to_frames`](crate::typed::to_frames)
/// (what [`to_value`](crate::to_value) and [`dumps_with`](crate::dumps_with)
/// would write). Like every tokio-util encoder it copies the frames into the
/// output buffer;
/// [`Connection::send_msg`](super::Connection::send_msg) does not.
///
/// ```
/// use futures_util::{SinkExt, StreamExt};
/// use framewire::dask::{KeepAlive, Op, WorkerToScheduler};
/// use framewire::transport::MessageCodec;
/// use tokio_util::codec::Framed;
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
/// let (a, b) = tokio::io::duplex(1 << 16);
/// let mut tx = Framed::new(a, MessageCodec::<WorkerToScheduler>::new());
/// let mut rx = Framed::new(b, MessageCodec::<WorkerToScheduler>::new());
/// tx.send(&WorkerToScheduler::KeepAlive(KeepAlive { op: Op::new() })).await?;
/// let got = rx.next().await.expect("a message")?;
/// assert_eq!(got.op(), Some("keep-alive"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct MessageCodec<T> {
    frames: FrameCodec,
    serialize: SerializeOptions,
    deserialize: DeserializeOptions,
    item: PhantomData<fn() -> T>,
}

impl<T> MessageCodec<T> {
    /// A codec with the default limits and options.
    pub fn new() -> MessageCodec<T> {
        MessageCodec::with_options(Limits::default(), SerializeOptions::default())
    }

    /// A codec with these limits (for reading, and writing: it refuses to
    /// send what it would refuse to receive) and serialize options (the
    /// codec a handshake agreed, say).
    pub fn with_options(limits: Limits, serialize: SerializeOptions) -> MessageCodec<T> {
        MessageCodec {
            frames: FrameCodec::builder().limits(limits.clone()).new_codec(),
            deserialize: DeserializeOptions {
                limits,
                registry: serialize.registry.clone(),
                backing: Vec::new(),
            },
            serialize,
            item: PhantomData,
        }
    }

    /// The frame codec underneath.
    pub fn frame_codec(&self) -> &FrameCodec {
        &self.frames
    }
}

impl<T> Default for MessageCodec<T> {
    fn default() -> MessageCodec<T> {
        MessageCodec::new()
    }
}

impl<T: DeserializeOwned> Decoder for MessageCodec<T> {
    type Item = T;
    type Error = TransportError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<T>, TransportError> {
        let Some(env) = self.frames.decode(src)? else {
            return Ok(None);
        };
        decode_item(&env, &self.deserialize).map(Some)
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<T>, TransportError> {
        let Some(env) = self.frames.decode_eof(src)? else {
            return Ok(None);
        };
        decode_item(&env, &self.deserialize).map(Some)
    }
}

fn decode_item<T: DeserializeOwned>(
    env: &Envelope,
    opts: &DeserializeOptions,
) -> Result<T, TransportError> {
    Ok(typed::from_frames(
        env.frames(),
        &opts.clone().backed_by(env),
    )?)
}

impl<T: Serialize> Encoder<&T> for MessageCodec<T> {
    type Error = TransportError;

    fn encode(&mut self, item: &T, dst: &mut BytesMut) -> Result<(), TransportError> {
        let env = Envelope::new(typed::to_frames(item, &self.serialize)?)?;
        self.frames.encode(&env, dst)
    }
}
