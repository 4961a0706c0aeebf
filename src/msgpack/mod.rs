//! msgpack ⇄ [`Value`](crate::Value), on top of `rmp`'s marker table and
//! writers (SPEC.md §3). Every msgpack byte the crate reads or writes is
//! decided here; the layers above call these functions.
//!
//! ```text
//! head.rs     what an item's first bytes say (Head), for every walker below
//! reader.rs   the checked reader: items, lengths, depth, item budget
//! decode.rs   a frame → Value: iterative, zero-copy, bounded by Limits
//! raw.rs      in place: RawMap (entries found, not decoded), set_entries, skim
//! encode.rs   Value → the forms msgpack-python writes; out-of-band values via
//!             Leaves; Static encodings built at compile time
//! stream.rs   a frame item by item, for callers that build their own values
//! peek.rs     looks without limits: a map or a str at a byte, a lenient Walk
//! header.rs   Header::map, decoded from the header's bytes on first use
//! error.rs    MsgpackError, Position
//! ```
//!
//! Decoding is iterative (an explicit stack, never recursion that input can
//! drive), zero-copy (str and bin are slices of the frame), and bounded by
//! [`Limits`](crate::Limits): nesting depth, an item budget, and every
//! declared length checked against the bytes that remain before anything
//! is reserved.
//!
//! Encoding writes exactly the forms msgpack-python (`use_bin_type=True`)
//! chooses: non-negative integers in unsigned forms, negative ones in the
//! smallest signed form, float64 only, str8 for 32..=255-byte text, bin8 even
//! for empty bytes, maps in insertion order. This module knows msgpack only:
//! placeholders, reserved keys and what goes out of band are the message and
//! serialize layers' rules, given to the encoder as [`Leaves`].

mod decode;
mod encode;
mod error;
mod head;
mod header;
mod peek;
mod raw;
mod reader;
#[cfg(feature = "serde")]
mod stream;
#[cfg(test)]
mod tests;

pub(crate) use decode::{decode, decode_packed, lone_fixpos};
#[cfg(feature = "dask")]
pub(crate) use encode::array_len_bytes;
pub(crate) use encode::{
    add_map_entry, check_depth, encode, encode_at, encode_into, put_array_len, put_bool, put_ints,
    put_map_len, put_nils, put_str, put_uint, set_map_len, Leaves, Static,
};
#[cfg(feature = "serde")]
pub(crate) use encode::{len_prefix_width, put_bin, put_f64, put_int, put_nil};
pub use error::{MsgpackError, Position};
pub(crate) use head::fixpos;
#[cfg(feature = "serde")]
pub(crate) use peek::is_str_at;
#[cfg(feature = "serde")]
pub(crate) use peek::{is_map_at, one_entry_map_keyed, one_entry_map_to_count};
pub(crate) use peek::{Seen, Walk};
#[cfg(feature = "dask")]
pub(crate) use raw::lookup_str;
pub(crate) use raw::{decode_range, set_entries, set_entries_with, skim, value_end, RawMap};
#[cfg(feature = "serde")]
pub(crate) use raw::{lookup_str_item, value_at, StrItem};
#[cfg(feature = "serde")]
pub(crate) use stream::{Stream, Token};
