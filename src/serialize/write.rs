//! Serializing: a value becomes a header (written as msgpack bytes while
//! the value is walked, no `Value` per element) and frames of its own
//! (SPEC.md §5.2–5.6).

use bytes::{Bytes, BytesMut};

use super::collection::CollectionKind;
use super::compression;
use super::families::{
    known_leaf_len, Encoded, DASK_BYTES_LEAF_HEADER, MSGPACK_LEAF_HEADER, SERIALIZER,
};
use super::options::{IterateCollection, SerializeOptions};
use super::shards;
use crate::error::EncodeError;
use crate::message::{self, HeaderRules};
use crate::msgpack::{self, Leaves};
use crate::value::{Block, Header, Value};

/// What serializing a value builds: its header (msgpack bytes) and its
/// frames, with the shard unit (the item size shards are cut at a multiple
/// of) of every frame whose unit is not 1.
#[derive(Default)]
pub(super) struct Out {
    /// The header, written as the value is walked.
    pub(super) header: BytesMut,
    pub(super) frames: Vec<Bytes>,
    /// (frame index, unit), in frame order.
    pub(super) units: Vec<(usize, usize)>,
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
/// let mut opts = SerializeOptions::default();
/// opts.iterate = IterateCollection::Auto;
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
/// `dumps` does for a `ToSerialize` value. Shards are slices: nothing is
/// copied. With [`SerializeOptions::compression`], each frame (shard) whose
/// `compression` entry is nil then goes through
/// [`maybe_compress`](super::maybe_compress).
pub fn serialize_and_split(value: &Value, opts: &SerializeOptions) -> Result<Block, EncodeError> {
    let (given, mut out) = write(value, opts)?;
    let header = std::mem::take(&mut out.header).freeze();
    let (mut table, mut frames) = shards::split(given, out.frames, &out.units, opts.shard_size);
    if let Some(codec) = opts.compression {
        compression::compress_frames(&mut table.compression, &mut frames, codec);
    }
    let shards = frames.len();
    let write = |i: usize, out: &mut BytesMut| match i {
        0 => msgpack::put_ints(out, &table.counts),
        1 => msgpack::put_ints(out, &table.offsets),
        _ => match &table.compression {
            Some(entries) => {
                msgpack::put_array_len(out, entries.len())?;
                entries
                    .iter()
                    .try_for_each(|e| msgpack::encode_at(e, out, &mut HeaderRules, 1))
            }
            None => {
                msgpack::put_array_len(out, shards)?;
                msgpack::put_nils(out, shards);
                Ok(())
            }
        },
    };
    // The sub-headers a collection header has are stepped over by their
    // bytes where they are the built-in families'.
    // Read through here, the header tells whether it has `num-sub-frames`:
    // when it has not, the message layer appends it without reading again.
    let (header, has_count) = msgpack::set_entries_with(
        header,
        &["split-num-sub-frames", "split-offsets", "compression"],
        write,
        Some(("sub-headers", known_leaf_len)),
        Some("num-sub-frames"),
    )?;
    let header = if has_count {
        Header::written(header)
    } else {
        Header::written_without_count(header)
    };
    Ok(Block::from_vec(header, frames))
}

/// Serializes `value`: its header's `compression` list (if it has one), and
/// what was built.
fn write(value: &Value, opts: &SerializeOptions) -> Result<(Option<Vec<Value>>, Out), EncodeError> {
    let mut out = Out::default();
    let top = Level {
        mode: opts.iterate,
        depth: 0,
        key: None,
    };
    let given = write_value(value, top, false, opts, &mut out)?;
    Ok((given, out))
}

/// Where a value's header goes in the whole header, and how collections
/// there are written.
#[derive(Clone, Copy)]
struct Level<'a> {
    /// How a collection at this level is written.
    mode: IterateCollection,
    /// Containers of the whole header around this value's map.
    depth: usize,
    /// The map's last entry, when given (a dict element's key).
    key: Option<&'a Value>,
}

/// Writes `v`'s header to `out.header` and pushes its frames; returns the
/// header's `compression` list, if it has one.
///
/// The header is written as msgpack straight away (no `Value` per element):
/// a map at `level` of the whole header. `force` iterates a collection
/// whatever `level.mode` says (the top of a `ToSerialize`).
fn write_value(
    v: &Value,
    level: Level<'_>,
    force: bool,
    opts: &SerializeOptions,
    out: &mut Out,
) -> Result<Option<Vec<Value>>, EncodeError> {
    let Level { mode, depth, key } = level;
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
        Value::ToSerialize(inner) => write_value(inner, level, true, opts, out),
        Value::Array(_) | Value::IntArray(_) | Value::BinArray(_) | Value::Map(_) => {
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
            iterate_collection(v, level, opts, out)
        }
        _ => family_serialize(v, opts, out, depth, key),
    }
}

/// The msgpack blob of a collection, or `OutOfBandInBlob` at the first value
/// that needs frames of its own.
fn blob(v: &Value, threshold: usize) -> Result<Bytes, EncodeError> {
    let mut buf = BytesMut::new();
    msgpack::encode_into(v, &mut buf, &mut Blob { threshold })?;
    Ok(buf.freeze())
}

/// The rules of a blob for the msgpack encoder: bytes of `threshold` or
/// more go out of band, and anything that goes out of band means the
/// collection cannot be a blob (`OutOfBandInBlob`: it is iterated instead,
/// or refused under `Never`). Reserved keys are refused, as in headers.
struct Blob {
    threshold: usize,
}

impl Leaves for Blob {
    #[inline]
    fn diverts_bin(&self, bin: &Bytes) -> bool {
        bin.len() >= self.threshold
    }

    fn write(&mut self, _: &Value, _: &mut BytesMut) -> Result<(), EncodeError> {
        Err(EncodeError::OutOfBandInBlob)
    }

    fn check_key(&mut self, key: &Value) -> Result<(), EncodeError> {
        message::check_key(key)
    }
}

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
    msgpack::encode_at(&Value::Map(entries), header, &mut HeaderRules, depth)?;
    Ok(compression)
}

/// Writes `{"serializer": "msgpack"}`, with `key` when given.
#[inline]
fn write_msgpack_header(
    key: Option<&Value>,
    header: &mut BytesMut,
    depth: usize,
) -> Result<(), EncodeError> {
    write_leaf_header(MSGPACK_LEAF_HEADER, 0, key, header, depth)
}

/// Writes a leaf header given as its msgpack bytes (a fixmap with fewer
/// than 15 entries, `nested` maps deep inside), then `key` when given, as
/// encoding the map with `key` appended would. Always inlined: the leaf is a
/// constant, so its copy is a few moves, not a call to `memcpy` (an element
/// of an iterated collection writes one each).
#[inline(always)]
fn write_leaf_header(
    leaf: &[u8],
    nested: usize,
    key: Option<&Value>,
    header: &mut BytesMut,
    depth: usize,
) -> Result<(), EncodeError> {
    msgpack::check_depth(depth + nested)?;
    let at = header.len();
    header.extend_from_slice(leaf);
    if let Some(k) = key {
        msgpack::add_map_entry(header, at);
        msgpack::put_str(header, "key")?;
        msgpack::encode_at(k, header, &mut HeaderRules, depth + 1)?;
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
    if opts.registry.is_builtin() {
        if let Some(written) = builtin_leaf(v, out, depth, key) {
            return written.map(|()| None);
        }
    }
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

/// What the default families write for a bin or a small integer, without
/// asking them (the elements of an iterated collection are mostly these);
/// `None` for any other value. Only for the default registry
/// ([`Registry::is_builtin`](super::Registry)).
#[inline]
fn builtin_leaf(
    v: &Value,
    out: &mut Out,
    depth: usize,
    key: Option<&Value>,
) -> Option<Result<(), EncodeError>> {
    match v {
        Value::Bin(b) => {
            out.frames.push(b.clone());
            Some(write_leaf_header(
                DASK_BYTES_LEAF_HEADER,
                1,
                key,
                &mut out.header,
                depth,
            ))
        }
        Value::Int(i) => {
            // A positive fixint: its one byte, from the static table.
            let b = usize::from(i.as_u64().and_then(msgpack::fixpos)?);
            out.frames.push(Bytes::from_static(&ONE_BYTE[b..=b]));
            Some(write_msgpack_header(key, &mut out.header, depth))
        }
        _ => None,
    }
}

/// [`MsgpackFamily::serialize`], with the frame split off [`Out::arena`];
/// `None` when the value is not msgpack (it has out-of-band values inside).
fn msgpack_into_arena(v: &Value, out: &mut Out) -> Option<Result<(), EncodeError>> {
    if out.arena.capacity() < 64 {
        out.arena.reserve(ARENA_CHUNK);
    }
    let encoded = msgpack::encode_into(v, &mut out.arena, &mut HeaderRules);
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
    level: Level<'_>,
    opts: &SerializeOptions,
    out: &mut Out,
) -> Result<Option<Vec<Value>>, EncodeError> {
    let Level { mode, depth, key } = level;
    // The map, and the sub-headers array inside it.
    msgpack::check_depth(depth + 1)?;
    let (len, kind) = match v {
        Value::Map(m) => (m.len(), CollectionKind::Dict),
        Value::Array(a) => (a.len(), CollectionKind::Tuple),
        Value::IntArray(a) => (a.len(), CollectionKind::Tuple),
        Value::BinArray(a) => (a.len(), CollectionKind::Tuple),
        _ => unreachable!("only collections are iterated"),
    };
    // At least a frame and a small header per element: the header of the
    // built-in leaf the first element takes, for all of them (a list of
    // bytes writes a header twice the size of an integer's: reserving for
    // the smaller would copy the header as it grows).
    let leaf = match v {
        Value::BinArray(_) => DASK_BYTES_LEAF_HEADER.len(),
        Value::Array(a) if matches!(a.first(), Some(Value::Bin(_))) => DASK_BYTES_LEAF_HEADER.len(),
        _ => MSGPACK_LEAF_HEADER.len(),
    };
    out.frames.reserve(len);
    // And at least one byte each in `frame-lengths`, written after them:
    // reserving less, the header would grow (and be copied or remapped)
    // just before it is done.
    out.header.reserve(len * (leaf + 1) + 64);
    let map_at = out.header.len();
    msgpack::put_map_len(&mut out.header, 0); // a fixmap; its entry count (4 to 6) is set below
    msgpack::put_str(&mut out.header, "sub-headers")?;
    msgpack::put_array_len(&mut out.header, len)?;
    // `frame-lengths`, its items written as they come (one byte each but
    // for elements of 128 frames or more).
    let mut lengths = BytesMut::with_capacity(len);
    // Built only once an element brings a codec: one entry per frame so far.
    let mut compressions: Option<Vec<Value>> = None;
    let first = out.frames.len();
    let builtin = opts.registry.is_builtin();
    let mut element = |e: &Value, k: Option<&Value>| -> Result<(), EncodeError> {
        let before = out.frames.len();
        let given = match builtin
            .then(|| builtin_leaf(e, out, depth + 2, k))
            .flatten()
        {
            Some(written) => written.map(|()| None)?,
            None => {
                let inner = Level {
                    mode,
                    depth: depth + 2,
                    key: k,
                };
                write_value(e, inner, false, opts, out)?
            }
        };
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
        msgpack::put_uint(&mut lengths, n as u64);
        Ok(())
    };
    match v {
        Value::Map(m) => m.iter().try_for_each(|(k, e)| element(e, Some(k)))?,
        Value::Array(a) => a.iter().try_for_each(|e| element(e, None))?,
        Value::IntArray(a) => a.iter().try_for_each(|&x| element(&Value::from(x), None))?,
        Value::BinArray(a) => a.iter().try_for_each(|b| element(&Value::Bin(b), None))?,
        _ => {}
    }
    let header = &mut out.header;
    msgpack::put_str(header, "is-collection")?;
    msgpack::put_bool(header, true);
    msgpack::put_str(header, "frame-lengths")?;
    msgpack::put_array_len(header, len)?;
    header.extend_from_slice(&lengths);
    msgpack::put_str(header, "type-serialized")?;
    msgpack::put_str(header, kind.name())?;
    let mut entries = 4;
    if let Some(c) = &compressions {
        msgpack::put_str(header, "compression")?;
        msgpack::put_array_len(header, c.len())?;
        for x in c {
            msgpack::encode_at(x, header, &mut HeaderRules, depth + 2)?;
        }
        entries += 1;
    }
    if let Some(k) = key {
        msgpack::put_str(header, "key")?;
        msgpack::encode_at(k, header, &mut HeaderRules, depth + 1)?;
        entries += 1;
    }
    msgpack::set_map_len(header, map_at, entries);
    Ok(compressions)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::serialize::{Family, MsgpackFamily};

    /// The bytes written for a `dask` bytes leaf are those of the family's
    /// header entries (with `key` appended for a dict element).
    #[test]
    fn dask_bytes_leaf_header_is_the_encoded_map() {
        use crate::serialize::DaskFamily;
        let bin = Value::Bin(Bytes::from_static(b"xyz"));
        let slow = |key: Option<&Value>| {
            let encoded = DaskFamily.serialize(&bin).unwrap().unwrap();
            let mut written = BytesMut::new();
            write_entries(encoded.header, key, &mut written, 0).unwrap();
            written
        };
        assert_eq!(DASK_BYTES_LEAF_HEADER, &slow(None)[..]);
        let opts = SerializeOptions::default();
        for key in [
            None,
            Some(Value::str("k")),
            Some(Value::Array(vec![1.into()])),
        ] {
            let mut out = Out::default();
            family_serialize(&bin, &opts, &mut out, 0, key.as_ref()).unwrap();
            assert_eq!(out.header, slow(key.as_ref()), "key {key:?}");
            assert_eq!(out.frames, [Bytes::from_static(b"xyz")]);
        }
        // The depth of its inner map counts, as when the map is encoded.
        let depth = 1023; // msgpack-python's limit is 1024 containers
        let mut out = Out::default();
        assert_eq!(
            family_serialize(&bin, &opts, &mut out, depth, None),
            write_entries(
                DaskFamily.serialize(&bin).unwrap().unwrap().header,
                None,
                &mut BytesMut::new(),
                depth
            )
        );
    }

    /// A small integer element: one static byte, and the msgpack leaf header.
    #[test]
    fn fixint_element_is_what_the_msgpack_family_writes() {
        let opts = SerializeOptions::default();
        for x in [0u64, 1, 99, 127, 128, 1 << 40] {
            let v = Value::from(x);
            let mut out = Out::default();
            family_serialize(&v, &opts, &mut out, 0, Some(&Value::str("k"))).unwrap();
            let frame = MsgpackFamily.serialize(&v).unwrap().unwrap().frames;
            assert_eq!(out.frames, frame);
            let mut header = BytesMut::new();
            write_msgpack_header(Some(&Value::str("k")), &mut header, 0).unwrap();
            assert_eq!(out.header, header);
        }
    }

    /// The bytes written for a msgpack leaf are those of its header map.
    #[test]
    fn msgpack_leaf_header_is_the_encoded_map() {
        let leaf = |key: Option<Value>| {
            let mut entries = vec![(Value::str(SERIALIZER), Value::str(MsgpackFamily::NAME))];
            entries.extend(key.map(|k| (Value::str("key"), k)));
            msgpack::encode(&Value::Map(entries), &mut HeaderRules).unwrap()
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
