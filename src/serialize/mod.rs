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

mod collection;
mod compression;
mod families;
mod ndarray;
mod shards;

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};

use crate::error::{DecodeError, EncodeError};
use crate::limits::Limits;
use crate::message;
use crate::msgpack::{self, RawMap};
use crate::value::{Block, Header, Integer, Value};

pub use collection::{CollectionKind, CollectionView};
pub use compression::{decompress, maybe_compress, Codec, DecompressBudget};
use families::msgpack_value;
pub use families::{DaskFamily, Encoded, ErrorFamily, Family, MsgpackFamily};
pub use ndarray::NdArray;
pub use shards::merge_frames;
use shards::Tables;

/// Whether a collection is serialized element by element or as one blob
/// (Dask's `iterate_collection` = True / False / None).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum IterateCollection {
    /// Every element gets its own sub-header and frames, at every level.
    Always,
    /// The collection goes as one blob through the first family that accepts
    /// it. A value inside that needs frames of its own is an error
    /// ([`EncodeError::OutOfBandInBlob`]), never glued into the blob.
    Never,
    /// Iterate exactly when something inside, at any depth, needs frames of
    /// its own: a `Serialize`, `Serialized` or `Pickled` leaf, an array, or
    /// bytes at or above [`SerializeOptions::out_of_band_threshold`].
    #[default]
    Auto,
}

/// Deserializing a `msgpack` blob packs arrays of at least this many
/// integers (all in `i64`'s range) into a [`Value::IntArray`].
pub const PACK_MIN: usize = 32;

/// Dask's default shard size, `distributed.comm.shard` (64 MiB).
pub const DEFAULT_SHARD_SIZE: usize = 64 << 20;

/// Bytes below this size travel inside a blob; at or above it they need a
/// frame of their own (under [`IterateCollection::Auto`]).
pub const DEFAULT_OUT_OF_BAND_THRESHOLD: usize = 16 << 10;

/// How values are serialized.
#[derive(Clone, Debug)]
pub struct SerializeOptions {
    /// Collections below the top of a `Serialize` (and a collection given to
    /// [`serialize`] directly). The top level of a `Serialize` wrapping a
    /// collection is always iterated, as in Dask.
    pub iterate: IterateCollection,
    /// See [`IterateCollection::Auto`].
    pub out_of_band_threshold: usize,
    /// Payload frames longer than this are cut into shards by [`crate::dumps`].
    pub shard_size: usize,
    /// The codec payload frames are compressed with, after they are cut into
    /// shards (each shard on its own), under [`maybe_compress`]'s policy; the
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

/// The serializer families, in the order [`serialize`] tries them; users add
/// their own with [`Registry::with`].
#[derive(Clone)]
pub struct Registry {
    families: Vec<Arc<dyn Family>>,
    /// Where framewire's own [`MsgpackFamily`] is in `families`: it encodes
    /// into [`Out::arena`] instead of a buffer per frame.
    builtin_msgpack: Option<usize>,
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
            families: vec![
                Arc::new(DaskFamily),
                Arc::new(MsgpackFamily),
                Arc::new(ErrorFamily),
            ],
            builtin_msgpack: Some(1),
        }
    }
}

impl Registry {
    /// This registry with `family` tried first.
    pub fn with(mut self, family: impl Family + 'static) -> Registry {
        self.families.insert(0, Arc::new(family));
        self.builtin_msgpack = self.builtin_msgpack.map(|i| i + 1);
        self
    }

    fn index_of(&self, name: &str) -> Option<usize> {
        self.families.iter().position(|f| f.name() == name)
    }

    fn by_name(&self, name: &str) -> Option<&dyn Family> {
        self.families
            .iter()
            .find(|f| f.name() == name)
            .map(|f| &**f)
    }
}

/// What serializing a value builds: its header (msgpack bytes) and its
/// frames, with the shard unit (the item size shards are cut at a multiple
/// of) of every frame whose unit is not 1.
#[derive(Default)]
struct Out {
    /// The header, written as the value is walked.
    header: BytesMut,
    frames: Vec<Bytes>,
    /// (frame index, unit), in frame order.
    units: Vec<(usize, usize)>,
    /// Where the `msgpack` family writes element frames: each frame is split
    /// off it, so the small frames of an iterated collection share a few
    /// [`ARENA_CHUNK`]-byte buffers instead of one allocation each (and a
    /// one-byte frame is a slice of a static table).
    arena: BytesMut,
}

/// See [`Out::arena`].
const ARENA_CHUNK: usize = 4096;

/// Serializes a value into a header and frames of its own (Dask's
/// `serialize`). The header has no `num-sub-frames` yet; the message layer
/// sets it when the block is written.
///
/// ```
/// use framewire::serialize::{serialize, IterateCollection, SerializeOptions};
/// use framewire::Value;
///
/// let ints = Value::Array((0..1000).map(Value::from).collect());
/// let opts = SerializeOptions { iterate: IterateCollection::Auto, ..Default::default() };
/// let block = serialize(&ints, &opts)?;
/// assert_eq!(block.frames().len(), 1); // nothing needs a frame of its own: one blob
/// assert_eq!(block.header().get("serializer").and_then(Value::as_str), Some("msgpack"));
/// # Ok::<(), framewire::EncodeError>(())
/// ```
pub fn serialize(value: &Value, opts: &SerializeOptions) -> Result<Block, EncodeError> {
    let (_, out) = write(value, opts)?;
    Ok(Block::from_vec(
        Header::written(out.header.freeze()),
        out.frames,
    ))
}

/// [`serialize`], then cut long frames into shards and add Dask's
/// `split-num-sub-frames`, `split-offsets` and `compression` keys, as Dask's
/// `dumps` does for a `Serialize` value. Shards are slices: nothing is
/// copied. With [`SerializeOptions::compression`], each frame (shard) whose
/// `compression` entry is nil then goes through [`maybe_compress`].
pub fn serialize_and_split(value: &Value, opts: &SerializeOptions) -> Result<Block, EncodeError> {
    let (given, mut out) = write(value, opts)?;
    let header = std::mem::take(&mut out.header).freeze();
    let (mut table, mut frames) = shards::split(given, out, opts.shard_size);
    if let Some(codec) = opts.compression {
        compression::compress_frames(&mut table.compression, &mut frames, codec);
    }
    let header = msgpack::set_entries(
        &header,
        &[
            ("split-num-sub-frames", &Value::IntArray(table.counts)),
            ("split-offsets", &Value::IntArray(table.offsets)),
            ("compression", &Value::Array(table.compression)),
        ],
    )?;
    Ok(Block::from_vec(Header::written(header), frames))
}

/// The serialize-aware [`message::dumps`]: every [`Value::Serialize`] leaf
/// (and every bare [`Value::NdArray`]) is serialized and split into a block of
/// its own, with [`SerializeOptions::default()`]; pre-serialized blocks pass
/// through untouched.
///
/// ```
/// use bytes::{BufMut, Bytes, BytesMut};
/// use framewire::{dumps, Value};
///
/// let payload = Bytes::from(vec![7u8; 1 << 20]);
/// let msg = Value::map_of([
///     ("op", "store".into()),
///     ("data", Value::Serialize(Box::new(Value::Bin(payload.clone())))),
/// ]);
/// let frames = dumps(&msg)?;
/// assert_eq!(frames.len(), 3); // frame 0, the sub-header, the payload
/// assert_eq!(frames[2].as_ptr(), payload.as_ptr()); // the payload itself, not a copy
/// # Ok::<(), framewire::EncodeError>(())
/// ```
pub fn dumps(value: &Value) -> Result<Vec<Bytes>, EncodeError> {
    dumps_with(value, &SerializeOptions::default())
}

/// [`dumps`] with explicit options.
pub fn dumps_with(value: &Value, opts: &SerializeOptions) -> Result<Vec<Bytes>, EncodeError> {
    message::dumps_with(value, &mut |leaf| serialize_and_split(leaf, opts))
}

/// Serializes `value`: its header's `compression` list (if it has one), and
/// what was built.
fn write(value: &Value, opts: &SerializeOptions) -> Result<(Option<Vec<Value>>, Out), EncodeError> {
    let mut out = Out::default();
    let given = ser(value, opts.iterate, false, opts, &mut out, 0, None)?;
    Ok((given, out))
}

/// Writes `v`'s header to `out.header` and pushes its frames; returns the
/// header's `compression` list, if it has one.
///
/// The header is written as msgpack straight away (no `Value` per element):
/// a map inside `depth` containers of the whole header, with `key` as its
/// last entry when given (a dict element's). `force` iterates a collection
/// whatever `mode` says (the top of a `Serialize`).
fn ser(
    v: &Value,
    mode: IterateCollection,
    force: bool,
    opts: &SerializeOptions,
    out: &mut Out,
    depth: usize,
    key: Option<&Value>,
) -> Result<Option<Vec<Value>>, EncodeError> {
    match v {
        Value::Serialized(block) => {
            let Value::Map(entries) = block.header().map() else {
                return Err(EncodeError::HeaderNotMap);
            };
            out.frames.extend(block.frames().iter().cloned());
            write_entries(entries.clone(), key, &mut out.header, depth)
        }
        Value::Pickled(_) => Err(EncodeError::Unserializable {
            what: "a Pickled block inside a serialized value",
        }),
        Value::Serialize(inner) => ser(inner, mode, true, opts, out, depth, key),
        Value::Array(_) | Value::IntArray(_) | Value::Map(_) => {
            let iterate = force || mode == IterateCollection::Always;
            if !iterate {
                let threshold = match mode {
                    IterateCollection::Never => usize::MAX,
                    _ => opts.out_of_band_threshold,
                };
                match blob(v, threshold) {
                    Ok(frame) => {
                        out.frames.push(frame);
                        write_msgpack_header(key, &mut out.header, depth)?;
                        return Ok(None);
                    }
                    Err(EncodeError::OutOfBandInBlob) if mode == IterateCollection::Auto => {}
                    Err(e) => return Err(e),
                }
            }
            iterate_collection(v, mode, opts, out, depth, key)
        }
        _ => family_serialize(v, opts, out, depth, key),
    }
}

/// The msgpack blob of a collection, or `OutOfBandInBlob` at the first value
/// that needs frames of its own.
fn blob(v: &Value, threshold: usize) -> Result<Bytes, EncodeError> {
    let mut buf = BytesMut::new();
    msgpack::encode_into(v, &mut buf, threshold, &mut |_, _| {
        Err(EncodeError::OutOfBandInBlob)
    })?;
    Ok(buf.freeze())
}

const SERIALIZER: &str = "serializer";

/// `{"serializer": "msgpack"}` in msgpack.
const MSGPACK_LEAF_HEADER: &[u8] = b"\x81\xaaserializer\xa7msgpack";

/// Writes a header map from its entries, with `key` set (Python dict
/// assignment); returns its `compression` list, if it has one.
fn write_entries(
    mut entries: Vec<(Value, Value)>,
    key: Option<&Value>,
    header: &mut BytesMut,
    depth: usize,
) -> Result<Option<Vec<Value>>, EncodeError> {
    if let Some(k) = key {
        set_key(&mut entries, "key", k.clone());
    }
    let compression = entries
        .iter()
        .find(|(k, _)| k.as_str() == Some("compression"))
        .and_then(|(_, c)| c.as_array())
        .map(<[Value]>::to_vec);
    msgpack::encode_header_at(&Value::Map(entries), header, depth)?;
    Ok(compression)
}

/// Writes `{"serializer": "msgpack"}`, with `key` when given.
fn write_msgpack_header(
    key: Option<&Value>,
    header: &mut BytesMut,
    depth: usize,
) -> Result<(), EncodeError> {
    msgpack::check_depth(depth)?;
    let at = header.len();
    header.extend_from_slice(MSGPACK_LEAF_HEADER);
    if let Some(k) = key {
        header[at] = 0x82; // a fixmap of 2
        msgpack::put_str(header, "key")?;
        msgpack::encode_header_at(k, header, depth + 1)?;
    }
    Ok(())
}

fn family_serialize(
    v: &Value,
    opts: &SerializeOptions,
    out: &mut Out,
    depth: usize,
    key: Option<&Value>,
) -> Result<Option<Vec<Value>>, EncodeError> {
    for (i, family) in opts.registry.families.iter().enumerate() {
        if opts.registry.builtin_msgpack == Some(i) {
            match msgpack_into_arena(v, out) {
                Some(Ok(())) => {
                    write_msgpack_header(key, &mut out.header, depth)?;
                    return Ok(None);
                }
                Some(Err(e)) => return Err(e),
                None => continue,
            }
        }
        let Some(encoded) = family.serialize(v) else {
            continue;
        };
        let Encoded {
            header: mut entries,
            frames,
            shard_unit,
        } = encoded?;
        set_key(&mut entries, SERIALIZER, Value::from_static(family.name()));
        if shard_unit > 1 {
            let first = out.frames.len();
            out.units
                .extend((first..first + frames.len()).map(|i| (i, shard_unit)));
        }
        out.frames.extend(frames);
        return write_entries(entries, key, &mut out.header, depth);
    }
    Err(EncodeError::Unserializable {
        what: "this value (no family in the registry accepts it)",
    })
}

/// [`MsgpackFamily::serialize`], with the frame split off [`Out::arena`];
/// `None` when the value is not msgpack (it has out-of-band values inside).
fn msgpack_into_arena(v: &Value, out: &mut Out) -> Option<Result<(), EncodeError>> {
    if out.arena.capacity() < 64 {
        out.arena.reserve(ARENA_CHUNK);
    }
    let encoded = msgpack::encode_into(v, &mut out.arena, usize::MAX, &mut |_, _| {
        Err(EncodeError::OutOfBandInHeader)
    });
    if let Err(e) = encoded {
        out.arena.clear();
        return (e != EncodeError::OutOfBandInHeader).then_some(Err(e));
    }
    let frame = match out.arena[..] {
        // A one-byte encoding (a small int, nil, a bool): a static frame.
        [b] => {
            out.arena.clear();
            Bytes::from_static(&ONE_BYTE[usize::from(b)..=usize::from(b)])
        }
        _ => out.arena.split().freeze(),
    };
    out.frames.push(frame);
    Some(Ok(()))
}

/// Every byte value, for one-byte frames that need no buffer of their own.
static ONE_BYTE: [u8; 256] = {
    let mut all = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        all[i] = i as u8;
        i += 1;
    }
    all
};

/// Sets `key` in a header: in place if present, appended otherwise (Python
/// dict assignment).
pub(crate) fn set_key(header: &mut Vec<(Value, Value)>, key: &'static str, value: Value) {
    match header.iter_mut().find(|(k, _)| k.as_str() == Some(key)) {
        Some((_, v)) => *v = value,
        None => header.push((Value::from_static(key), value)),
    }
}

/// Writes a collection header (§5.3): `sub-headers` (each element's header,
/// written in place), `is-collection`, `frame-lengths`, `type-serialized`,
/// then `compression` when an element brought a codec, then `key`.
fn iterate_collection(
    v: &Value,
    mode: IterateCollection,
    opts: &SerializeOptions,
    out: &mut Out,
    depth: usize,
    key: Option<&Value>,
) -> Result<Option<Vec<Value>>, EncodeError> {
    // The map, and the sub-headers array inside it.
    msgpack::check_depth(depth + 1)?;
    let (len, kind) = match v {
        Value::Map(m) => (m.len(), CollectionKind::Dict),
        Value::Array(a) => (a.len(), CollectionKind::Tuple),
        Value::IntArray(a) => (a.len(), CollectionKind::Tuple),
        _ => unreachable!("only collections are iterated"),
    };
    // At least a frame and a small header per element.
    out.frames.reserve(len);
    out.header
        .reserve(len * (MSGPACK_LEAF_HEADER.len() + 1) + 64);
    let map_at = out.header.len();
    out.header.put_u8(0x80); // a fixmap; its entry count (4 to 6) is set below
    msgpack::put_str(&mut out.header, "sub-headers")?;
    msgpack::put_array_len(&mut out.header, len)?;
    let mut lengths: Vec<i64> = Vec::with_capacity(len);
    // Built only once an element brings a codec: one entry per frame so far.
    let mut compressions: Option<Vec<Value>> = None;
    let first = out.frames.len();
    let mut element = |e: &Value, k: Option<&Value>| -> Result<(), EncodeError> {
        let before = out.frames.len();
        let given = ser(e, mode, false, opts, out, depth + 2, k)?;
        let n = out.frames.len() - before;
        match (given, &mut compressions) {
            (Some(c), None) if c.iter().any(|x| *x != Value::Nil) => {
                let mut all = vec![Value::Nil; before - first];
                all.extend(c);
                compressions = Some(all);
            }
            (Some(c), Some(all)) => all.extend(c),
            (None, Some(all)) => all.extend(std::iter::repeat_n(Value::Nil, n)),
            _ => {}
        }
        lengths.push(n as i64);
        Ok(())
    };
    match v {
        Value::Map(m) => m.iter().try_for_each(|(k, e)| element(e, Some(k)))?,
        Value::Array(a) => a.iter().try_for_each(|e| element(e, None))?,
        Value::IntArray(a) => a.iter().try_for_each(|&x| element(&Value::from(x), None))?,
        _ => {}
    }
    let header = &mut out.header;
    msgpack::put_str(header, "is-collection")?;
    header.put_u8(0xc3); // true
    msgpack::put_str(header, "frame-lengths")?;
    msgpack::put_ints(header, &lengths)?;
    msgpack::put_str(header, "type-serialized")?;
    msgpack::put_str(header, kind.name())?;
    let mut entries = 4;
    if let Some(c) = &compressions {
        msgpack::put_str(header, "compression")?;
        msgpack::put_array_len(header, c.len())?;
        for x in c {
            msgpack::encode_header_at(x, header, depth + 2)?;
        }
        entries += 1;
    }
    if let Some(k) = key {
        msgpack::put_str(header, "key")?;
        msgpack::encode_header_at(k, header, depth + 1)?;
        entries += 1;
    }
    header[map_at] = 0x80 | entries;
    Ok(compressions)
}

/// How blocks are deserialized: limits, the families, and optionally the
/// buffer the frames were sliced from (so adjacent shards merge without a copy).
#[derive(Clone, Debug, Default)]
pub struct DeserializeOptions {
    /// Bounds on headers, nesting, merged shards and decompressed frames
    /// (each at most `max_frame_len`; a message's together at most
    /// `max_message_len`, see [`DecompressBudget`]).
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
    pub fn backed_by(mut self, env: &crate::Envelope) -> DeserializeOptions {
        self.backing = env.buffers().to_vec();
        self
    }
}

/// Deserializes a block as Dask's `loads` does: decompress each frame its
/// header's `compression` list names a codec for, merge shards, then
/// rebuild the value. What framewire cannot decode (`pickle`, `cuda`,
/// unknown families and types) comes back unchanged as a
/// [`Value::Serialized`] block (its frames as they came, still compressed),
/// never dropped. The `error` family gives
/// [`DecodeError::RemoteSerializationError`].
///
/// The block gets a [`DecompressBudget`] of its own; to bound the blocks of
/// one message together, use [`deserialize_blocks`] or
/// [`deserialize_with_budget`].
pub fn deserialize(block: &Block, opts: &DeserializeOptions) -> Result<Value, DecodeError> {
    deserialize_with_budget(block, opts, &mut DecompressBudget::new(&opts.limits))
}

/// [`deserialize`], charging what it decompresses to `budget`, which the
/// caller shares between the blocks of one message.
pub fn deserialize_with_budget(
    block: &Block,
    opts: &DeserializeOptions,
    budget: &mut DecompressBudget,
) -> Result<Value, DecodeError> {
    // A collection whose header has bytes (it came off the wire, or
    // `serialize` wrote it) is read in place: no `Value` per sub-header.
    if let Some(raw) = block.header().raw_bytes() {
        if let Some((top, _)) = RawMap::read_noting_items(raw, 0, Some("sub-headers"))? {
            if top.has("is-collection") {
                let frames = shards::merge(&Tables::of_raw(&top)?, block.frames(), opts, budget)?;
                return raw_collection(raw, &top, &frames, opts);
            }
        }
    }
    let header = block.header().map();
    if header.as_map().is_none() {
        return Err(DecodeError::InvalidHeader { field: "header" });
    }
    let frames = shards::merge(&Tables::of(header), block.frames(), opts, budget)?;
    match deser(header, &frames, opts, 0)? {
        Some(v) => Ok(v),
        None => Ok(Value::Serialized(Box::new(block.clone()))),
    }
}

/// Rebuilds a collection from its header's bytes, as [`deser`] does from its
/// map, with the same checks in the same order (those of
/// [`CollectionView::new`]). The sub-headers are found in one pass; a leaf
/// of the built-in `msgpack` family is decoded without building its header;
/// any other element goes through [`deser`] from its decoded sub-header.
fn raw_collection(
    raw: &Bytes,
    top: &RawMap<'_>,
    frames: &[Bytes],
    opts: &DeserializeOptions,
) -> Result<Value, DecodeError> {
    let field = |field| DecodeError::InvalidHeader { field };
    if opts.limits.max_depth == 0 {
        return Err(DecodeError::CollectionTooDeep { limit: 0 });
    }
    // Where each sub-header starts, then where the last one ends.
    let bounds = top.items().ok_or(field("sub-headers"))?;
    let subs = &bounds[..bounds.len() - 1];
    let kind;
    // (The decoded table goes once the offsets are made.)
    let starts = {
        let table = top.table("frame-lengths")?;
        let lengths = table
            .as_ref()
            .and_then(Value::int_items)
            .ok_or(field("frame-lengths"))?;
        kind = top
            .str("type-serialized")
            .and_then(CollectionKind::from_name)
            .ok_or(field("type-serialized"))?;
        if lengths.len() != subs.len() {
            return Err(DecodeError::LengthMismatch {
                field: "frame-lengths",
                expected: subs.len(),
                got: lengths.len(),
            });
        }
        collection::frame_starts(lengths, frames.len())?
    };
    if !subs.iter().all(|&at| msgpack::is_map_at(raw, at)) {
        return Err(field("sub-headers"));
    }
    let sub_header = |at: usize| -> Result<RawMap<'_>, DecodeError> {
        Ok(RawMap::read(raw, at)?.ok_or(field("sub-headers"))?.0)
    };
    let builtin_msgpack = opts.registry.builtin_msgpack.is_some()
        && opts.registry.index_of(MsgpackFamily::NAME) == opts.registry.builtin_msgpack;
    let mut items = Items::new(kind, subs.len().min(opts.limits.prealloc_cap));
    for (i, w) in bounds.windows(2).enumerate() {
        let sub = &raw[w[0]..w[1]];
        let f = &frames[starts[i]..starts[i + 1]];
        // A leaf of the built-in msgpack family needs no header: known by
        // its exact bytes (the common case, one comparison) or its entries.
        let msgpack_leaf = builtin_msgpack
            && (sub == MSGPACK_LEAF_HEADER || {
                let map = sub_header(w[0])?;
                !map.has("is-collection") && map.str(SERIALIZER) == Some(MsgpackFamily::NAME)
            });
        let item = if msgpack_leaf {
            msgpack_value(f, &opts.limits)?
        } else {
            let h = msgpack::decode_range(raw, w[0]..w[1], usize::MAX)?;
            match deser(&h, f, opts, 1)? {
                Some(v) => v,
                None => opaque_element(&h, f),
            }
        };
        items.push(item);
    }
    let items = match items {
        Items::Values(items) if kind == CollectionKind::Dict => items,
        array => return Ok(array.finish()),
    };
    let entries = subs
        .iter()
        .zip(items)
        .map(|(&at, v)| {
            let key = sub_header(at)?
                .get("key")
                .ok_or(field("key"))
                .and_then(|at| msgpack::decode_range(raw, at, usize::MAX))?;
            Ok((key, v))
        })
        .collect::<Result<_, DecodeError>>()?;
    Ok(Value::Map(entries))
}

/// An element no family rebuilds: an opaque block (without the `key` its
/// dict put in its header).
fn opaque_element(h: &Value, f: &[Bytes]) -> Value {
    Value::Serialized(Box::new(Block::new(
        Header::new(without_key(h)),
        f.to_vec(),
    )))
}

/// Every `Serialized` block in a decoded message, deserialized (Dask's
/// `loads(frames, deserialize=True)`), with one [`DecompressBudget`] for the
/// whole message. `Pickled` blocks stay as they are, frames still
/// compressed: framewire never unpickles.
pub fn deserialize_blocks(value: Value, opts: &DeserializeOptions) -> Result<Value, DecodeError> {
    deserialize_all(value, opts, &mut DecompressBudget::new(&opts.limits))
}

fn deserialize_all(
    value: Value,
    opts: &DeserializeOptions,
    budget: &mut DecompressBudget,
) -> Result<Value, DecodeError> {
    let mut value = value;
    Ok(match &mut value {
        Value::Serialized(block) => deserialize_with_budget(block, opts, budget)?,
        Value::Array(items) => Value::Array(
            std::mem::take(items)
                .into_iter()
                .map(|v| deserialize_all(v, opts, budget))
                .collect::<Result<_, _>>()?,
        ),
        Value::Map(entries) => Value::Map(
            std::mem::take(entries)
                .into_iter()
                .map(|(k, v)| {
                    Ok((
                        deserialize_all(k, opts, budget)?,
                        deserialize_all(v, opts, budget)?,
                    ))
                })
                .collect::<Result<_, DecodeError>>()?,
        ),
        _ => value,
    })
}

/// An element header without the `key` its dict put there (Dask pops it),
/// and with a `compression` list of nils: its frames come decompressed.
fn without_key(h: &Value) -> Value {
    match h {
        Value::Map(m) => Value::Map(
            m.iter()
                .filter(|(k, _)| k.as_str() != Some("key"))
                .map(|(k, v)| match (k.as_str(), v) {
                    (Some("compression"), Value::Array(c)) => {
                        (k.clone(), Value::Array(vec![Value::Nil; c.len()]))
                    }
                    _ => (k.clone(), v.clone()),
                })
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Rebuilds a value from a header and its (merged) frames; `None` when no
/// family can (the caller keeps the block opaque). Nested collections are
/// walked with an explicit stack: depth costs heap, never call stack.
fn deser(
    header: &Value,
    frames: &[Bytes],
    opts: &DeserializeOptions,
    depth: usize,
) -> Result<Option<Value>, DecodeError> {
    /// A collection being rebuilt.
    struct Level<'a> {
        view: CollectionView<'a>,
        next: usize,
        items: Items,
    }
    let mut stack: Vec<Level<'_>> = Vec::new();
    let (mut h, mut f) = (header, frames);
    loop {
        // Descend into `h`: open a collection, or rebuild a leaf.
        let mut done = if h.get("is-collection").is_some() {
            if depth + stack.len() >= opts.limits.max_depth {
                return Err(DecodeError::CollectionTooDeep {
                    limit: opts.limits.max_depth,
                });
            }
            let view = CollectionView::new(h, f)?;
            let cap = view.len().min(opts.limits.prealloc_cap);
            stack.push(Level {
                items: Items::new(view.kind(), cap),
                view,
                next: 0,
            });
            None
        } else {
            let leaf = family_value(h, f, opts)?;
            if stack.is_empty() {
                return Ok(leaf);
            }
            // An element no family rebuilds stays an opaque block.
            Some(leaf.unwrap_or_else(|| opaque_element(h, f)))
        };
        // Ascend: hand finished values to their collections.
        loop {
            let Some(top) = stack.last_mut() else {
                return Ok(done);
            };
            if let Some(v) = done.take() {
                top.items.push(v);
            }
            if top.next < top.view.len() {
                (h, f) = top.view.element(top.next);
                top.next += 1;
                break;
            }
            let level = stack.pop().expect("a top level exists");
            done = Some(finish_collection(level.view, level.items)?);
        }
    }
}

/// The rebuilt elements of a collection. A tuple, list or set is kept packed
/// while every element is an integer in `i64`'s range, and comes back as a
/// [`Value::IntArray`] when it has at least [`PACK_MIN`] (as a `msgpack`
/// blob's arrays do).
enum Items {
    Ints(Vec<i64>),
    Values(Vec<Value>),
}

impl Items {
    fn new(kind: CollectionKind, cap: usize) -> Items {
        match kind {
            CollectionKind::Dict => Items::Values(Vec::with_capacity(cap)),
            _ => Items::Ints(Vec::with_capacity(cap)),
        }
    }

    fn push(&mut self, v: Value) {
        match self {
            Items::Values(items) => items.push(v),
            Items::Ints(ints) => match v.as_int().and_then(Integer::as_i64) {
                Some(x) => ints.push(x),
                None => {
                    let mut items: Vec<Value> = ints.drain(..).map(Value::from).collect();
                    items.push(v);
                    *self = Items::Values(items);
                }
            },
        }
    }

    /// The array (a dict's values are taken apart by the caller).
    fn finish(self) -> Value {
        match self {
            Items::Ints(ints) if ints.len() >= PACK_MIN => Value::IntArray(ints),
            Items::Ints(ints) => Value::Array(ints.into_iter().map(Value::from).collect()),
            Items::Values(items) => Value::Array(items),
        }
    }
}

/// Builds the container a collection header names from its rebuilt elements.
fn finish_collection(view: CollectionView<'_>, items: Items) -> Result<Value, DecodeError> {
    let items = match items {
        Items::Values(items) if view.kind() == CollectionKind::Dict => items,
        array => return Ok(array.finish()),
    };
    let entries = items
        .into_iter()
        .enumerate()
        .map(|(i, v)| {
            let key = view
                .key(i)
                .ok_or(DecodeError::InvalidHeader { field: "key" })?;
            Ok((key.clone(), v))
        })
        .collect::<Result<_, DecodeError>>()?;
    Ok(Value::Map(entries))
}

/// A leaf through the family its `serializer` names; `None` when there is
/// no such family or the family cannot rebuild it.
fn family_value(
    header: &Value,
    frames: &[Bytes],
    opts: &DeserializeOptions,
) -> Result<Option<Value>, DecodeError> {
    let Some(name) = header.get(SERIALIZER).and_then(Value::as_str) else {
        return Ok(None);
    };
    match opts.registry.by_name(name) {
        Some(family) => family.deserialize(header, frames, &opts.limits).transpose(),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bytes written for a msgpack leaf are those of its header map.
    #[test]
    fn msgpack_leaf_header_is_the_encoded_map() {
        let leaf = |key: Option<Value>| {
            let mut entries = vec![(Value::str(SERIALIZER), Value::str(MsgpackFamily::NAME))];
            entries.extend(key.map(|k| (Value::str("key"), k)));
            msgpack::encode(&Value::Map(entries)).unwrap()
        };
        assert_eq!(MSGPACK_LEAF_HEADER, &leaf(None)[..]);
        for key in [
            None,
            Some(Value::str("k")),
            Some(Value::Array(vec![1.into(), 2.into()])),
        ] {
            let mut written = BytesMut::new();
            write_msgpack_header(key.as_ref(), &mut written, 0).unwrap();
            assert_eq!(written, leaf(key), "written as the map encodes");
        }
    }
}
