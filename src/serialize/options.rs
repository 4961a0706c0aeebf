//! The options of the serialize layer: how values are serialized
//! ([`SerializeOptions`], [`IterateCollection`]), how blocks are read back
//! ([`DeserializeOptions`]), and the families both go through ([`Registry`]).

use std::sync::Arc;

use bytes::Bytes;

use super::codec::Codec;
use super::families::{DaskFamily, ErrorFamily, Family, MsgpackFamily};
use crate::limits::Limits;

/// Whether a collection is serialized element by element or as one blob
/// (Dask's `iterate_collection` = True / False / None).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum IterateCollection {
    /// Every element gets its own sub-header and frames, at every level.
    Always,
    /// The collection goes as one blob through the first family that accepts
    /// it. A value inside that needs frames of its own is an error
    /// ([`EncodeError::OutOfBandInBlob`](crate::EncodeError::OutOfBandInBlob)), never glued into the blob.
    Never,
    /// Iterate exactly when something inside, at any depth, needs frames of
    /// its own: a `ToSerialize`, `Serialized` or `Pickled` leaf, an array, or
    /// bytes at or above [`SerializeOptions::out_of_band_threshold`].
    #[default]
    Auto,
}

/// Deserializing a `msgpack` blob packs arrays of at least this many
/// integers (all in `i64`'s range) into a [`Value::IntArray`](crate::Value::IntArray).
pub(crate) const PACK_MIN: usize = 32;

/// Dask's default shard size, `distributed.comm.shard` (64 MiB).
pub const DEFAULT_SHARD_SIZE: usize = 64 << 20;

/// Bytes below this size travel inside a blob; at or above it they need a
/// frame of their own (under [`IterateCollection::Auto`]).
pub const DEFAULT_OUT_OF_BAND_THRESHOLD: usize = 16 << 10;

/// How values are serialized.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct SerializeOptions {
    /// Collections below the top of a `Serialize` (and a collection given to
    /// [`serialize`](super::serialize) directly). The top level of a `Serialize` wrapping a
    /// collection is always iterated, as in Dask.
    pub iterate: IterateCollection,
    /// See [`IterateCollection::Auto`].
    pub out_of_band_threshold: usize,
    /// Payload frames longer than this are cut into shards by
    /// [`serialize_and_split`](super::serialize_and_split) (and so by [`crate::dumps`]).
    pub shard_size: usize,
    /// The codec payload frames are compressed with, after they are cut into
    /// shards (each shard on its own), under [`maybe_compress`](super::maybe_compress)'s policy; the
    /// header's `compression` list records it per frame. `None` (the default)
    /// compresses nothing: what a Dask comm negotiates by default (and always
    /// between two processes on one IP address). Set it to the codec a comm
    /// negotiated. Dask's bare `distributed.protocol.dumps(msg)` without a
    /// context uses `"auto"` (lz4 when installed) instead.
    pub compression: Option<Codec>,
    /// The serializer families, tried in order.
    pub registry: Registry,
}

impl Default for SerializeOptions {
    fn default() -> SerializeOptions {
        SerializeOptions {
            iterate: IterateCollection::Auto,
            out_of_band_threshold: DEFAULT_OUT_OF_BAND_THRESHOLD,
            shard_size: DEFAULT_SHARD_SIZE,
            compression: None,
            registry: Registry::default(),
        }
    }
}

/// The serializer families, in the order [`serialize`](super::serialize) tries them; users add
/// their own with [`Registry::with`].
#[derive(Clone)]
pub struct Registry {
    /// Shared: a registry is cloned into the options of every message
    /// received, which then costs one count, not a vector.
    pub(super) families: Arc<[Arc<dyn Family>]>,
    /// Where framewire's own [`MsgpackFamily`] is in `families`: it encodes
    /// into an arena instead of a buffer per frame.
    pub(super) builtin_msgpack: Option<usize>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.families.iter().map(|x| x.name()))
            .finish()
    }
}

impl Default for Registry {
    /// `dask` (bytes, arrays), `msgpack` (every plain value), `error` (decode only).
    fn default() -> Registry {
        Registry {
            families: Arc::new([
                Arc::new(DaskFamily) as Arc<dyn Family>,
                Arc::new(MsgpackFamily),
                Arc::new(ErrorFamily),
            ]),
            builtin_msgpack: Some(1),
        }
    }
}

impl Registry {
    /// This registry with `family` tried first.
    pub fn with(mut self, family: impl Family + 'static) -> Registry {
        let first: Arc<dyn Family> = Arc::new(family);
        self.families = std::iter::once(first)
            .chain(self.families.iter().cloned())
            .collect();
        self.builtin_msgpack = self.builtin_msgpack.map(|i| i + 1);
        self
    }

    /// Whether the registry is the default one, with no family of the
    /// user's in front: `dask` first, then `msgpack` (`with` is the only way
    /// to add one, and it moves `builtin_msgpack`). Then a bin is always the
    /// `dask` family's, any other plain value the `msgpack` family's, and
    /// the names `dask` and `msgpack` find framewire's own families: what
    /// the serialize layer's fast paths for collection elements rely on.
    pub(super) fn is_builtin(&self) -> bool {
        self.builtin_msgpack == Some(1)
    }

    pub(super) fn index_of(&self, name: &str) -> Option<usize> {
        self.families.iter().position(|f| f.name() == name)
    }

    pub(super) fn by_name(&self, name: &str) -> Option<&dyn Family> {
        self.families
            .iter()
            .find(|f| f.name() == name)
            .map(|f| &**f)
    }
}

/// How blocks are deserialized: limits, the families, and optionally the
/// buffer the frames were sliced from (so adjacent shards merge without a copy).
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct DeserializeOptions {
    /// Bounds on headers, nesting, merged shards and decompressed frames
    /// (each at most `max_frame_len`; a message's together at most
    /// `max_decompressed_len`, see [`DecompressBudget`](super::DecompressBudget)).
    pub limits: Limits,
    /// The families, found by the header's `serializer` name.
    pub registry: Registry,
    /// The receive buffers the frames may be slices of
    /// ([`Envelope::buffers`](crate::Envelope::buffers)): shards that lie
    /// back to back in one of them merge into a slice of it, not a copy.
    pub backing: Vec<Bytes>,
}

impl DeserializeOptions {
    /// Options with these limits and the default families.
    pub fn with_limits(limits: Limits) -> DeserializeOptions {
        DeserializeOptions {
            limits,
            ..Default::default()
        }
    }

    /// These options, with the receive buffers of `env` as the backing:
    /// shards that arrived back to back merge without a copy.
    pub fn backed_by(mut self, env: &crate::envelope::Envelope) -> DeserializeOptions {
        self.backing = env.buffers().to_vec();
        self
    }
}
