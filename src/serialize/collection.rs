//! Iterated collections: `sub-headers` plus a `frame-lengths` offset table.
//! [`CollectionView`] checks the table once (prefix sums, O(n)) and then
//! hands out any element's header and frames in O(1), without touching the
//! others.

use bytes::Bytes;

use super::error::DeserializeError;
use crate::value::{IntItems, Integer, Value};

/// The Python container a collection header names in `type-serialized`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CollectionKind {
    /// `"list"`.
    List,
    /// `"tuple"` (what framewire writes for arrays: Dask decodes msgpack
    /// arrays as tuples too).
    Tuple,
    /// `"set"`.
    Set,
    /// `"dict"`: each element header carries its `key`.
    Dict,
}

impl CollectionKind {
    /// The `type-serialized` string.
    pub fn name(self) -> &'static str {
        match self {
            CollectionKind::List => "list",
            CollectionKind::Tuple => "tuple",
            CollectionKind::Set => "set",
            CollectionKind::Dict => "dict",
        }
    }

    pub(super) fn from_name(name: &str) -> Option<CollectionKind> {
        [
            CollectionKind::List,
            CollectionKind::Tuple,
            CollectionKind::Set,
            CollectionKind::Dict,
        ]
        .into_iter()
        .find(|k| k.name() == name)
    }
}

/// Lazy access to a serialized collection: element `i`'s header and frames
/// without deserializing the others.
///
/// ```
/// use framewire::serialize::{serialize, CollectionView, IterateCollection, SerializeOptions};
/// use framewire::Value;
///
/// let items = Value::Array((0..100).map(|i| Value::ToSerialize(Box::new(Value::from(i)))).collect());
/// let mut opts = SerializeOptions::default();
/// opts.iterate = IterateCollection::Always;
/// let block = serialize(&items, &opts)?;
/// let view = CollectionView::new(block.header().map(), block.frames())?;
/// assert_eq!(view.len(), 100);
/// let (header, frames) = view.element(42);
/// assert_eq!(header.get("serializer").and_then(Value::as_str), Some("msgpack"));
/// assert_eq!(frames.len(), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct CollectionView<'a> {
    kind: CollectionKind,
    sub_headers: &'a [Value],
    /// `starts[i]..starts[i + 1]` are element i's frames.
    starts: Vec<usize>,
    frames: &'a [Bytes],
}

impl<'a> CollectionView<'a> {
    /// Checks a collection header against its frames: `sub-headers` and
    /// `frame-lengths` have one entry per element, the lengths add up to the
    /// frames exactly, and `type-serialized` names a known container.
    pub fn new(
        header: &'a Value,
        frames: &'a [Bytes],
    ) -> Result<CollectionView<'a>, DeserializeError> {
        let field = |field| DeserializeError::InvalidHeader { field };
        let sub_headers = header
            .get("sub-headers")
            .and_then(Value::as_array)
            .ok_or(field("sub-headers"))?;
        let lengths = header
            .get("frame-lengths")
            .and_then(Value::int_items)
            .ok_or(field("frame-lengths"))?;
        let kind = header
            .get("type-serialized")
            .and_then(Value::as_str)
            .and_then(CollectionKind::from_name)
            .ok_or(field("type-serialized"))?;
        if lengths.len() != sub_headers.len() {
            return Err(DeserializeError::LengthMismatch {
                field: "frame-lengths",
                expected: sub_headers.len(),
                got: lengths.len(),
            });
        }
        let starts = frame_starts(lengths, frames.len())?;
        if sub_headers.iter().any(|h| h.as_map().is_none()) {
            return Err(field("sub-headers"));
        }
        Ok(CollectionView {
            kind,
            sub_headers,
            starts,
            frames,
        })
    }

    /// The container type.
    pub fn kind(&self) -> CollectionKind {
        self.kind
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.sub_headers.len()
    }

    /// Whether the collection is empty.
    pub fn is_empty(&self) -> bool {
        self.sub_headers.is_empty()
    }

    /// Element `i`'s header and frames. Panics if `i >= len()`, like slice
    /// indexing.
    pub fn element(&self, i: usize) -> (&'a Value, &'a [Bytes]) {
        (
            &self.sub_headers[i],
            &self.frames[self.starts[i]..self.starts[i + 1]],
        )
    }

    /// Element `i`'s dict key (`dict` collections only).
    pub fn key(&self, i: usize) -> Option<&'a Value> {
        self.sub_headers.get(i)?.get("key")
    }
}

/// Prefix sums over `frame-lengths`: element i's frames are
/// `starts[i]..starts[i + 1]`. Every length must be a non-negative integer
/// and they must add up to the `frames` there are.
pub(super) fn frame_starts(
    lengths: IntItems<'_>,
    frames: usize,
) -> Result<Vec<usize>, DeserializeError> {
    let mut starts = Vec::with_capacity(lengths.len() + 1);
    starts.push(0);
    check_frame_lengths(lengths, frames, |end| starts.push(end))?;
    Ok(starts)
}

/// The checks of [`frame_starts`], handing each element's end to `each_end`
/// instead of keeping them.
pub(super) fn check_frame_lengths(
    lengths: impl ExactSizeIterator<Item = Option<Integer>>,
    frames: usize,
    mut each_end: impl FnMut(usize),
) -> Result<(), DeserializeError> {
    let count = lengths.len();
    let mut seen = 0;
    let mut at: u64 = 0;
    for len in lengths {
        let len = len
            .and_then(|i| i.as_u64())
            .ok_or(DeserializeError::InvalidHeader {
                field: "frame-lengths",
            })?;
        at = at.saturating_add(len);
        if at > frames as u64 {
            break;
        }
        each_end(at as usize);
        seen += 1;
    }
    if at != frames as u64 || seen != count {
        return Err(DeserializeError::FrameLengthsMismatch {
            declared: at,
            frames,
        });
    }
    Ok(())
}
