//! Deserializing: a block is rebuilt into its value, as Dask's `loads`
//! does (SPEC.md §5.8–5.9): compressed frames decompressed, shards merged,
//! collections rebuilt without recursion, families by name, and anything
//! framewire cannot rebuild kept as an opaque block.

use std::borrow::Cow;

use bytes::Bytes;
use smallvec::SmallVec;

use super::collection::{self, CollectionKind, CollectionView};
use super::compression::DecompressBudget;
use super::error::DeserializeError;
use super::families::{
    concat, fixint_frame, known_leaf, known_leaf_len, msgpack_value, Leaf, MsgpackFamily,
    SERIALIZER,
};
use super::options::{DeserializeOptions, PACK_MIN};
use super::shards::{self, Tables};
use crate::msgpack::{self, RawMap};
use crate::value::{BinArray, Block, BlockFrames, Header, IntItems, Integer, Value};

/// Deserializes a block as Dask's `loads` does: decompress each frame its
/// header's `compression` list names a codec for, merge shards, then
/// rebuild the value. What framewire cannot decode (`pickle`, `cuda`,
/// unknown families and types) comes back unchanged as a
/// [`Value::Serialized`] block (its frames as they came, still compressed),
/// never dropped. The `error` family gives
/// [`DeserializeError::RemoteSerializationError`].
///
/// The block gets a [`DecompressBudget`] of its own; to bound the blocks of
/// one message together, use [`deserialize_blocks`] or
/// [`deserialize_with_budget`].
pub fn deserialize(block: &Block, opts: &DeserializeOptions) -> Result<Value, DeserializeError> {
    deserialize_with_budget(block, opts, &mut DecompressBudget::new(&opts.limits))
}

/// [`deserialize`], charging what it decompresses to `budget`, which the
/// caller shares between the blocks of one message.
pub fn deserialize_with_budget(
    block: &Block,
    opts: &DeserializeOptions,
    budget: &mut DecompressBudget,
) -> Result<Value, DeserializeError> {
    // A collection whose header has bytes (it came off the wire, or
    // `serialize` wrote it) is read in place: no `Value` per sub-header.
    if let Some(raw) = block.header().raw_bytes() {
        if let Some((top, _)) =
            RawMap::read_noting_items(raw, 0, Some("sub-headers"), known_leaf_len)?
        {
            if top.has("is-collection") {
                let frames = shards::merge(&Tables::of_raw(&top)?, block.frames(), opts, budget)?;
                return raw_collection(raw, &top, Frames::borrowed(&frames), opts);
            }
        }
    }
    match rebuild_block(block, opts, budget)? {
        Some(v) => Ok(v),
        None => Ok(Value::Serialized(Box::new(block.clone()))),
    }
}

/// [`deserialize`], taking the block by value: the frames of a collection
/// move into the rebuilt value instead of being cloned (a `Bytes` clone and
/// its drop are an atomic operation each, per element of an iterated
/// collection), and a block no family rebuilds comes back as it is, not a
/// copy. Same value, same errors as [`deserialize`];
/// [`deserialize_blocks`] deserializes each block of a message this way.
///
/// ```
/// use framewire::serialize::{deserialize_owned, serialize, DeserializeOptions, IterateCollection, SerializeOptions};
/// use framewire::Value;
///
/// let list = Value::Array((0..100u64).map(|i| Value::Bin(i.to_le_bytes().to_vec().into())).collect());
/// let mut opts = SerializeOptions::default();
/// opts.iterate = IterateCollection::Always;
/// let block = serialize(&list, &opts)?;
/// assert_eq!(block.frames().len(), 100); // one frame an element
/// assert_eq!(deserialize_owned(block, &DeserializeOptions::default())?, list);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn deserialize_owned(
    block: Block,
    opts: &DeserializeOptions,
) -> Result<Value, DeserializeError> {
    deserialize_owned_with_budget(block, opts, &mut DecompressBudget::new(&opts.limits))
}

/// [`deserialize_owned`], charging what it decompresses to `budget`.
fn deserialize_owned_with_budget(
    block: Block,
    opts: &DeserializeOptions,
    budget: &mut DecompressBudget,
) -> Result<Value, DeserializeError> {
    // The header's bytes are shared (one reference count), so that the
    // frames can leave the block while they are read.
    if let Some(raw) = block.header().raw_bytes().cloned() {
        if let Some((top, _)) =
            RawMap::read_noting_items(&raw, 0, Some("sub-headers"), known_leaf_len)?
        {
            if top.has("is-collection") {
                let (_, frames) = block.into_parts();
                let merged = shards::merge(&Tables::of_raw(&top)?, &frames, opts, budget)?;
                let owned: BlockFrames = match merged {
                    Cow::Owned(merged) => BlockFrames::from_vec(merged),
                    Cow::Borrowed(_) => frames,
                };
                return raw_collection(&raw, &top, Frames::owned(owned), opts);
            }
        }
    }
    match rebuild_block(&block, opts, budget)? {
        Some(v) => Ok(v),
        None => Ok(Value::Serialized(Box::new(block))),
    }
}

/// A block that is not a collection read in place, rebuilt from its
/// decoded header; `None` when no family rebuilds it (the block stays).
fn rebuild_block(
    block: &Block,
    opts: &DeserializeOptions,
    budget: &mut DecompressBudget,
) -> Result<Option<Value>, DeserializeError> {
    let header = block.header().map();
    if header.as_map().is_none() {
        return Err(DeserializeError::InvalidHeader { field: "header" });
    }
    let frames = shards::merge(&Tables::of(header), block.frames(), opts, budget)?;
    rebuild(header, &frames, opts, 0)
}

/// The frames of a block that is not a collection, decompressed and with
/// their shards merged (§5.8 steps 1–8), for what reads such a block
/// outside the families (the pickle module).
#[cfg(feature = "pickle")]
pub(crate) fn merged_frames<'f>(
    header: &Value,
    frames: &'f [Bytes],
    opts: &DeserializeOptions,
    budget: &mut DecompressBudget,
) -> Result<std::borrow::Cow<'f, [Bytes]>, DeserializeError> {
    if header.as_map().is_none() {
        return Err(DeserializeError::InvalidHeader { field: "header" });
    }
    shards::merge(&Tables::of(header), frames, opts, budget)
}

/// A collection's `frame-lengths`: its bytes when every length is a
/// positive fixint, else the decoded items.
enum Lengths<'a> {
    Small(std::slice::Iter<'a, u8>),
    Items(IntItems<'a>),
}

impl Iterator for Lengths<'_> {
    type Item = Option<Integer>;

    #[inline]
    fn next(&mut self) -> Option<Option<Integer>> {
        match self {
            Lengths::Small(it) => it.next().map(|&b| Some(Integer::from(b))),
            Lengths::Items(it) => it.next(),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match self {
            Lengths::Small(it) => it.size_hint(),
            Lengths::Items(it) => it.size_hint(),
        }
    }
}

impl ExactSizeIterator for Lengths<'_> {}

/// A collection's frames, handed out element by element in order: views of
/// a block's frames (each one an element keeps is a `Bytes` clone), or, when
/// the block was given by value, the frames themselves (moved: no reference
/// count touched).
enum Frames<'f> {
    Views {
        all: &'f [Bytes],
        at: usize,
    },
    /// The block's list, none handed out yet.
    List(BlockFrames),
    Owned {
        len: usize,
        it: smallvec::IntoIter<[Bytes; 2]>,
    },
}

impl<'f> Frames<'f> {
    fn borrowed(all: &'f [Bytes]) -> Frames<'f> {
        Frames::Views { all, at: 0 }
    }

    fn owned(frames: BlockFrames) -> Frames<'f> {
        Frames::List(frames)
    }

    /// How many frames there are in all.
    fn len(&self) -> usize {
        match self {
            Frames::Views { all, .. } => all.len(),
            Frames::List(list) => list.len(),
            Frames::Owned { len, .. } => *len,
        }
    }

    /// The whole list, when it is owned and none was handed out.
    fn take_list(&mut self) -> Option<BlockFrames> {
        match std::mem::replace(self, Frames::List(BlockFrames::new())) {
            Frames::List(list) => Some(list),
            other => {
                *self = other;
                None
            }
        }
    }

    /// The next element's `n` frames; `None` if fewer are left.
    #[inline]
    fn next_run(&mut self, n: usize) -> Option<Run<'f>> {
        if let Frames::List(_) = self {
            let list = self.take_list()?;
            *self = Frames::Owned {
                len: list.len(),
                it: list.into_iter(),
            };
        }
        match self {
            Frames::List(_) => None,
            Frames::Views { all, at } => {
                let run = all.get(*at..at.checked_add(n)?)?;
                *at += n;
                Some(Run::Views(run))
            }
            Frames::Owned { it, .. } if n == 1 => Some(Run::One(it.next()?)),
            Frames::Owned { it, .. } => {
                let mut run = SmallVec::new();
                for _ in 0..n {
                    run.push(it.next()?);
                }
                Some(Run::Owned(run))
            }
        }
    }
}

/// One element's frames (see [`Frames`]).
enum Run<'f> {
    Views(&'f [Bytes]),
    /// One frame, owned (the common case: kept apart from `Owned` so
    /// that it moves as one `Bytes`).
    One(Bytes),
    Owned(SmallVec<[Bytes; 2]>),
}

impl Run<'_> {
    /// The frames as a vector of their own.
    fn into_vec(self) -> Vec<Bytes> {
        match self {
            Run::Views(f) => f.to_vec(),
            Run::One(f) => vec![f],
            Run::Owned(f) => f.into_vec(),
        }
    }

    /// The first frame (there is one).
    fn into_first(self) -> Bytes {
        match self {
            Run::Views(f) => f[0].clone(),
            Run::One(f) => f,
            Run::Owned(f) => f.into_iter().next().unwrap_or_default(),
        }
    }
}

impl std::ops::Deref for Run<'_> {
    type Target = [Bytes];

    fn deref(&self) -> &[Bytes] {
        match self {
            Run::Views(f) => f,
            Run::One(f) => std::slice::from_ref(f),
            Run::Owned(f) => f,
        }
    }
}

/// Rebuilds a collection from its header's bytes, as [`rebuild`] does from its
/// map, with the same checks in the same order (those of
/// [`CollectionView::new`]). The sub-headers are walked in place, nothing
/// kept per element: a leaf header of a built-in family is recognized by its
/// bytes and rebuilt without decoding it; any other element goes through
/// [`rebuild`] from its decoded sub-header.
fn raw_collection(
    raw: &Bytes,
    top: &RawMap<'_>,
    mut frames: Frames<'_>,
    opts: &DeserializeOptions,
) -> Result<Value, DeserializeError> {
    let field = |field| DeserializeError::InvalidHeader { field };
    if opts.limits.max_depth == 0 {
        return Err(DeserializeError::CollectionTooDeep { limit: 0 });
    }
    let subs = top.items().ok_or(field("sub-headers"))?;
    // One byte an element (each has fewer than 128 frames): read as they
    // are, nothing decoded.
    let small = top.fixints("frame-lengths");
    let table = match small {
        Some(_) => None,
        None => top.table("frame-lengths")?,
    };
    let lengths = || match small {
        Some(bytes) => Ok(Lengths::Small(bytes.iter())),
        None => table
            .as_ref()
            .and_then(Value::int_items)
            .map(Lengths::Items)
            .ok_or(field("frame-lengths")),
    };
    let kind = top
        .str("type-serialized")
        .and_then(CollectionKind::from_name)
        .ok_or(field("type-serialized"))?;
    if lengths()?.len() != subs.count {
        return Err(DeserializeError::LengthMismatch {
            field: "frame-lengths",
            expected: subs.count,
            got: lengths()?.len(),
        });
    }
    collection::check_frame_lengths(lengths()?, frames.len(), |_| {})?;
    if !subs.all_maps {
        return Err(field("sub-headers"));
    }
    let sub_header = |at: usize| -> Result<RawMap<'_>, DeserializeError> {
        Ok(RawMap::read(raw, at)?.ok_or(field("sub-headers"))?.0)
    };
    let builtin_msgpack = opts.registry.builtin_msgpack.is_some()
        && opts.registry.index_of(MsgpackFamily::NAME) == opts.registry.builtin_msgpack;
    let dask_bytes = opts.registry.is_builtin();
    let cap = subs.count.min(opts.limits.prealloc_cap);
    let mut items = Elements::new(kind, cap);
    // A dict's keys are read once every element is rebuilt.
    let mut dict_subs = Vec::with_capacity(if kind == CollectionKind::Dict { cap } else { 0 });
    let mut lengths = lengths()?;
    // Every sub-header the same built-in leaf (seen by the pass that found
    // them): no comparison per element.
    let same = subs.same_known.and_then(|_| known_leaf(&raw[subs.start..]));
    // Every element bytes in one frame of its own, and the frames owned:
    // the items are the frames, in order, and the list moves over as it is
    // (as the loop below would rebuild it, unless its first frame lies in
    // a buffer of the backing: then the items may be kept as spans of it).
    if dask_bytes
        && same == Some(Leaf::DaskBytes)
        && kind != CollectionKind::Dict
        && small.is_some_and(|lengths| lengths.iter().all(|&n| n == 1))
    {
        if let Some(list) = frames.take_list() {
            let spans = list
                .first()
                .is_some_and(|f| !f.is_empty() && holder(f, &opts.backing).is_some());
            if !spans {
                return Ok(Elements::Bins(list.into_vec()).finish(&opts.backing));
            }
            frames = Frames::owned(list);
        }
    }
    let mut pos = subs.start;
    for _ in 0..subs.count {
        // Checked above: a non-negative integer, and the frames are there.
        let n = lengths
            .next()
            .flatten()
            .and_then(|n| n.as_u64())
            .ok_or(field("frame-lengths"))? as usize;
        let f = frames.next_run(n).ok_or(field("frame-lengths"))?;
        let known = match same {
            Some(leaf) => Some(leaf),
            None => known_leaf(&raw[pos..]),
        };
        let end = match known {
            Some(leaf) => pos + leaf.len(),
            None => msgpack::value_end(raw, pos)?,
        };
        if kind == CollectionKind::Dict {
            dict_subs.push(pos);
        }
        // Leaves of the built-in families need no header: known by their
        // exact bytes (the common case, one comparison each), or, for the
        // msgpack family, by their entries.
        let item = if builtin_msgpack && known == Some(Leaf::Msgpack) {
            if let Some(b) = fixint_frame(&f, &opts.limits) {
                items.push_int(b.into());
                pos = end;
                continue;
            }
            msgpack_value(&f, &opts.limits)?
        } else if dask_bytes && known == Some(Leaf::DaskBytes) {
            // What the built-in `dask` family rebuilds from this header.
            match f.len() {
                1 => items.push_frame(f, &opts.backing),
                _ => items.push_bin(concat(&f)),
            }
            pos = end;
            continue;
        } else if builtin_msgpack && {
            let map = sub_header(pos)?;
            !map.has("is-collection") && map.str(SERIALIZER) == Some(MsgpackFamily::NAME)
        } {
            msgpack_value(&f, &opts.limits)?
        } else {
            let h = msgpack::decode_range(raw, pos..end, usize::MAX)?;
            match rebuild(&h, &f, opts, 1)? {
                Some(v) => v,
                None => opaque_element(&h, f.into_vec()),
            }
        };
        items.push(item);
        pos = end;
    }
    let items = match items {
        Elements::Values(items) if kind == CollectionKind::Dict => items,
        array => return Ok(array.finish(&opts.backing)),
    };
    let entries = dict_subs
        .into_iter()
        .zip(items)
        .map(|(at, v)| {
            let key = sub_header(at)?
                .get("key")
                .ok_or(field("key"))
                .and_then(|at| Ok(msgpack::decode_range(raw, at, usize::MAX)?))?;
            Ok((key, v))
        })
        .collect::<Result<_, DeserializeError>>()?;
    Ok(Value::Map(entries))
}

/// An element no family rebuilds: an opaque block (without the `key` its
/// dict put in its header).
fn opaque_element(h: &Value, f: Vec<Bytes>) -> Value {
    Value::Serialized(Box::new(Block::new(Header::new(without_key(h)), f)))
}

/// Every `Serialized` block in a decoded message, deserialized (Dask's
/// `loads(frames, deserialize=True)`), with one [`DecompressBudget`] for the
/// whole message. `Pickled` blocks stay as they are, frames still
/// compressed: framewire never unpickles.
pub fn deserialize_blocks(
    value: Value,
    opts: &DeserializeOptions,
) -> Result<Value, DeserializeError> {
    let mut value = value;
    deserialize_all(&mut value, opts, &mut DecompressBudget::new(&opts.limits))?;
    Ok(value)
}

/// Replaces every block in `value` by its value, in place: the containers
/// around the blocks are walked, not rebuilt.
fn deserialize_all(
    value: &mut Value,
    opts: &DeserializeOptions,
    budget: &mut DecompressBudget,
) -> Result<(), DeserializeError> {
    match value {
        Value::Serialized(_) => {
            // Taken out (the value is the caller's): its frames move into
            // what it rebuilds.
            if let Value::Serialized(block) = std::mem::replace(value, Value::Nil) {
                *value = deserialize_owned_with_budget(*block, opts, budget)?;
            }
        }
        Value::Array(items) => {
            for item in items {
                deserialize_all(item, opts, budget)?;
            }
        }
        Value::Map(entries) => {
            for (k, v) in entries {
                deserialize_all(k, opts, budget)?;
                deserialize_all(v, opts, budget)?;
            }
        }
        _ => {}
    }
    Ok(())
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
fn rebuild(
    header: &Value,
    frames: &[Bytes],
    opts: &DeserializeOptions,
    depth: usize,
) -> Result<Option<Value>, DeserializeError> {
    /// A collection being rebuilt.
    struct Level<'a> {
        view: CollectionView<'a>,
        next: usize,
        items: Elements,
    }
    let mut stack: Vec<Level<'_>> = Vec::new();
    let (mut h, mut f) = (header, frames);
    loop {
        // Descend into `h`: open a collection, or rebuild a leaf.
        let mut done = if h.get("is-collection").is_some() {
            if depth + stack.len() >= opts.limits.max_depth {
                return Err(DeserializeError::CollectionTooDeep {
                    limit: opts.limits.max_depth,
                });
            }
            let view = CollectionView::new(h, f)?;
            let cap = view.len().min(opts.limits.prealloc_cap);
            stack.push(Level {
                items: Elements::new(view.kind(), cap),
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
            Some(leaf.unwrap_or_else(|| opaque_element(h, f.to_vec())))
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
            done = Some(finish_collection(level.view, level.items, &opts.backing)?);
        }
    }
}

/// The buffer of `backing` that `f` is a slice of, if any.
fn holder<'b>(f: &Bytes, backing: &'b [Bytes]) -> Option<&'b Bytes> {
    let (from, to) = (f.as_ptr() as usize, f.as_ptr() as usize + f.len());
    backing.iter().find(|p| {
        let base = p.as_ptr() as usize;
        base <= from && to <= base + p.len()
    })
}

/// The rebuilt elements of a collection. A tuple, list or set is kept packed
/// while every element is an integer in `i64`'s range, and comes back as a
/// [`Value::IntArray`] when it has at least [`PACK_MIN`] (as a `msgpack`
/// blob's arrays do); likewise while every element is bytes, as a
/// [`Value::BinArray`](crate::Value::BinArray).
enum Elements {
    /// Nothing yet; room for this many is reserved by the first element,
    /// in the form it asks for (one allocation, never one of another form
    /// first).
    Empty(usize),
    Ints(Vec<i64>),
    /// Bytes lying back to back in `data`, a buffer of the backing: item
    /// `i` is `data[start + ends[i - 1]..start + ends[i]]` (from `start`
    /// for the first), `end` where the last one ends.
    Spans {
        data: Bytes,
        start: usize,
        end: usize,
        ends: Vec<u32>,
    },
    Bins(Vec<Bytes>),
    Values(Vec<Value>),
}

impl Elements {
    fn new(kind: CollectionKind, cap: usize) -> Elements {
        match kind {
            CollectionKind::Dict => Elements::Values(Vec::with_capacity(cap)),
            _ => Elements::Empty(cap),
        }
    }

    #[inline]
    fn push_int(&mut self, x: i64) {
        match self {
            Elements::Ints(ints) => ints.push(x),
            Elements::Empty(cap) => {
                let mut ints = Vec::with_capacity(*cap);
                ints.push(x);
                *self = Elements::Ints(ints);
            }
            _ => self.push(Value::from(x)),
        }
    }

    /// Pushes a bytes element that is the one frame of `f`: while the
    /// frames lie back to back in one buffer of `backing`, only where each
    /// ends is kept (no reference count touched per element, unless `f`
    /// owns its frame: it is then dropped).
    #[inline]
    fn push_frame(&mut self, f: Run<'_>, backing: &[Bytes]) {
        let (from, len) = (f[0].as_ptr() as usize, f[0].len());
        match self {
            Elements::Spans {
                data,
                start,
                end,
                ends,
            } => {
                let at = data.as_ptr() as usize + *end;
                let next = *end + len;
                let fits = next <= data.len() && u32::try_from(next - *start).is_ok();
                if fits && (len == 0 || from == at) {
                    *end = next;
                    ends.push((next - *start) as u32);
                } else {
                    self.unspan();
                    self.push_bin(f.into_first());
                }
            }
            Elements::Empty(cap) if len != 0 => match holder(&f[0], backing) {
                Some(p) => {
                    let start = from - p.as_ptr() as usize;
                    let mut ends = Vec::with_capacity(*cap);
                    ends.push(len as u32);
                    *self = Elements::Spans {
                        data: p.clone(),
                        start,
                        end: start + len,
                        ends,
                    };
                }
                None => self.push_bin(f.into_first()),
            },
            _ => self.push_bin(f.into_first()),
        }
    }

    /// The items of [`Elements::Spans`] as views of their own
    /// ([`Elements::Bins`]); any other state stays as it is.
    fn unspan(&mut self) {
        if let Elements::Spans {
            data, start, ends, ..
        } = self
        {
            let mut bins = Vec::with_capacity(ends.capacity());
            let mut from = *start;
            for &e in ends.iter() {
                let to = *start + e as usize;
                bins.push(data.slice(from..to));
                from = to;
            }
            *self = Elements::Bins(bins);
        }
    }

    /// Pushes a bytes element (a view of its frame).
    #[inline]
    fn push_bin(&mut self, b: Bytes) {
        match self {
            Elements::Bins(bins) => bins.push(b),
            Elements::Empty(cap) => {
                let mut bins = Vec::with_capacity(*cap);
                bins.push(b);
                *self = Elements::Bins(bins);
            }
            _ => self.push(Value::Bin(b)),
        }
    }

    fn push(&mut self, v: Value) {
        if matches!(self, Elements::Spans { .. }) {
            self.unspan();
        }
        match self {
            Elements::Values(items) => items.push(v),
            Elements::Empty(cap) => match v {
                Value::Bin(b) => self.push_bin(b),
                v => match v.as_int().and_then(Integer::as_i64) {
                    Some(x) => self.push_int(x),
                    None => {
                        let mut items = Vec::with_capacity(*cap);
                        items.push(v);
                        *self = Elements::Values(items);
                    }
                },
            },
            Elements::Ints(ints) => match v.as_int().and_then(Integer::as_i64) {
                Some(x) => ints.push(x),
                None => {
                    // As many as were reserved for the integers.
                    let mut items = Vec::with_capacity(ints.capacity());
                    items.extend(ints.drain(..).map(Value::from));
                    items.push(v);
                    *self = Elements::Values(items);
                }
            },
            Elements::Spans { .. } => unreachable!("unspanned above"),
            Elements::Bins(bins) => match v {
                Value::Bin(b) => bins.push(b),
                v => {
                    let mut items = Vec::with_capacity(bins.capacity());
                    items.extend(bins.drain(..).map(Value::Bin));
                    items.push(v);
                    *self = Elements::Values(items);
                }
            },
        }
    }

    /// The array (a dict's values are taken apart by the caller); packed
    /// bytes are kept as a slice of one of `backing` when they lie back to
    /// back in it.
    fn finish(self, backing: &[Bytes]) -> Value {
        match self {
            Elements::Empty(_) => Value::Array(Vec::new()),
            Elements::Ints(ints) if ints.len() >= PACK_MIN => Value::IntArray(ints),
            Elements::Ints(ints) => Value::Array(ints.into_iter().map(Value::from).collect()),
            Elements::Spans {
                data,
                start,
                end,
                ends,
            } if ends.len() >= PACK_MIN => {
                Value::from(BinArray::spanning(data.slice(start..end), ends))
            }
            mut spans @ Elements::Spans { .. } => {
                spans.unspan();
                spans.finish(backing)
            }
            Elements::Bins(bins) if bins.len() >= PACK_MIN => {
                Value::from(BinArray::packing(bins, backing))
            }
            Elements::Bins(bins) => Value::Array(bins.into_iter().map(Value::Bin).collect()),
            Elements::Values(items) => Value::Array(items),
        }
    }
}

/// Builds the container a collection header names from its rebuilt elements.
fn finish_collection(
    view: CollectionView<'_>,
    items: Elements,
    backing: &[Bytes],
) -> Result<Value, DeserializeError> {
    let items = match items {
        Elements::Values(items) if view.kind() == CollectionKind::Dict => items,
        array => return Ok(array.finish(backing)),
    };
    let entries = items
        .into_iter()
        .enumerate()
        .map(|(i, v)| {
            let key = view
                .key(i)
                .ok_or(DeserializeError::InvalidHeader { field: "key" })?;
            Ok((key.clone(), v))
        })
        .collect::<Result<_, DeserializeError>>()?;
    Ok(Value::Map(entries))
}

/// A leaf through the family its `serializer` names; `None` when there is
/// no such family or the family cannot rebuild it.
fn family_value(
    header: &Value,
    frames: &[Bytes],
    opts: &DeserializeOptions,
) -> Result<Option<Value>, DeserializeError> {
    let Some(name) = header.get(SERIALIZER).and_then(Value::as_str) else {
        return Ok(None);
    };
    match opts.registry.by_name(name) {
        Some(family) => family.deserialize(header, frames, &opts.limits).transpose(),
        None => Ok(None),
    }
}
