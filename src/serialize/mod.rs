//! Layer 3, serialize: a value becomes a header plus frames of its own
//! (SPEC.md §5).
//!
//! ```text
//! Serialize([ndarray, b"raw", 42])            ── iterated collection ──▶
//!   header {"sub-headers": [h0, h1, h2], "is-collection": true,
//!           "frame-lengths": [1, 1, 1], "type-serialized": "tuple",
//!           "split-num-sub-frames": [1, 1, 1], "split-offsets": [0, 1, 2],
//!           "compression": [nil, nil, nil]}
//!   frames [array data, b"raw", msgpack(42)]     (each element's own frames)
//!
//! serialize((1, 2, 3), Never | Auto)          ── one blob ──▶
//!   header {"serializer": "msgpack"}   frames [msgpack((1, 2, 3))]
//! ```
//!
//! [`IterateCollection`] decides between the two. `Auto` is exact: a
//! collection is iterated if and only if something inside it, at any depth,
//! needs frames of its own. Deciding is folded into encoding: framewire
//! encodes the blob and switches to iterating only when the encoder meets
//! such a value, so a collection that goes as a blob costs exactly its
//! encoding. One that is iterated costs, per iterated level, the part of the
//! blob encoded before the first such value.
//!
//! ```text
//! options.rs      SerializeOptions, DeserializeOptions, IterateCollection, Registry
//! write.rs        serialize, serialize_and_split: a value → its header and frames
//! read.rs         deserialize, deserialize_blocks: a block → its value
//! families.rs     the dask (bytes, numpy), msgpack and error families; Family for your own
//! collection.rs   collection headers: CollectionView over sub-headers and frame-lengths
//! shards.rs       frames cut into shards and merged back (split-num-sub-frames, split-offsets)
//! compression.rs  Dask's codecs, one file each under compression/ (SPEC.md §5.12)
//! error.rs        DeserializeError, CompressionError
//! ```

mod codec;
mod collection;
mod compression;
mod error;
mod families;
mod options;
mod read;
mod shards;
mod write;

pub use codec::Codec;
pub use collection::{CollectionKind, CollectionView};
pub use compression::{decompress, maybe_compress, DecompressBudget};
pub use error::{CompressionError, DeserializeError};
pub use families::{DaskFamily, Encoded, ErrorFamily, Family, MsgpackFamily};
pub(crate) use options::PACK_MIN;
pub use options::{
    DeserializeOptions, IterateCollection, Registry, SerializeOptions,
    DEFAULT_OUT_OF_BAND_THRESHOLD, DEFAULT_SHARD_SIZE,
};
#[cfg(feature = "pickle")]
pub(crate) use read::merged_frames;
pub use read::{deserialize, deserialize_blocks, deserialize_owned, deserialize_with_budget};
pub use shards::merge_frames;
pub use write::{serialize, serialize_and_split};
