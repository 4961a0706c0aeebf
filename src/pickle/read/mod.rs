//! The reader: pickle's stack machine, for the opcodes CPython writes for
//! plain values at protocols 2 to 5, every opcode bounded (see the module
//! docs of [`crate::pickle`]). Nothing is imported or called: the few
//! globals it knows are interpreted by name.
//!
//! ```text
//! mod.rs         loads (two passes), the machine's state: Reader, its
//!                stack slots, items, memo entries and arena objects
//! run.rs         the opcode loop: an arm per opcode
//! scalars.rs     None, bools, ints, floats, strs, bytes: decoded in place
//! batch.rs       a MARK's run of scalars straight into its container
//! containers.rs  tuples, lists, sets, dicts: built, appended to, set
//! keys.rs        dict keys as Python compares them: a key set twice
//! place.rs       items placed as values: arena references followed
//! memo.rs        PUT, MEMOIZE, GET; which ids a GET fetches
//! globals.rs     GLOBAL, STACK_GLOBAL, REDUCE of the globals known by name
//! arrays.rs      numpy's dtype, shape and data arguments, BUILD
//! ```

mod arrays;
mod batch;
mod containers;
mod globals;
mod keys;
mod memo;
mod place;
mod run;
mod scalars;

use std::ops::Range;

use bytes::Bytes;

use super::error::PickleError;
use super::numpy::Dtype;
use crate::limits::Limits;
use crate::value::Value;
use globals::Global;
use memo::{fetched_ids, SPAN};

/// Reads one pickle, its `NEXT_BUFFER`s taken from `buffers` in order.
///
/// A first pass moves every container into the one holding it. If a memo
/// `GET` then asks for a container already moved (one object referenced
/// twice, which a [`Value`] tree holds as two copies), the pickle is read
/// again knowing which memo entries are ever fetched: those are copied
/// where they are used, the others still moved.
pub(super) fn loads(
    data: &Bytes,
    buffers: &[Bytes],
    limits: &Limits,
) -> Result<Value, PickleError> {
    // Memo slots, arena and span indexes are u32s whose top bit is a tag;
    // each counts at most one per opcode byte, so a pickle under 2^31 bytes
    // keeps them in range.
    if data.len() >= SPAN as usize {
        return Err(PickleError::TooManyValues {
            limit: SPAN as usize - 1,
        });
    }
    match Reader::new(data, buffers, limits, None).run() {
        Ok(v) => Ok(v),
        Err(Stop::Error(e)) => Err(e),
        Err(Stop::Shared) => {
            let fetched = fetched_ids(data);
            match Reader::new(data, buffers, limits, Some(fetched)).run() {
                Ok(v) => Ok(v),
                Err(Stop::Error(e)) => Err(e),
                Err(Stop::Shared) => unreachable!("the sharing pass never moves a fetched entry"),
            }
        }
    }
}

/// Why a pass stopped.
enum Stop {
    Error(PickleError),
    /// The fast pass needs a container it has moved: read again, sharing.
    Shared,
}

impl From<PickleError> for Stop {
    fn from(e: PickleError) -> Stop {
        Stop::Error(e)
    }
}

/// What the machine's stack (and memo) hold.
#[derive(Clone, Debug)]
enum Item {
    /// A plain value. Lists and sets are kept as [`Value::IntArray`] while
    /// they hold only integers (unpacked again under
    /// [`PACK_MIN`](crate::serialize::PACK_MIN) items).
    Value(Value),
    /// A writable buffer: a `bytearray`, or an out-of-band buffer not marked
    /// read-only. A [`Value::Bin`] once it is placed anywhere.
    Buffer(Bytes),
    /// A memoized object that can still change (a container, a dtype, an
    /// array awaiting its state), kept in the arena: its index there.
    Ref(u32),
    /// A global.
    Global(Global),
    /// A `numpy.dtype`.
    Dtype(Box<Dtype>),
    /// `_reconstruct(ndarray, (0,), b"b")`: an array awaiting its state.
    Reconstructing,
    /// A tuple holding something other than values: the arguments of a
    /// numpy call.
    Args(Vec<Item>),
    /// An arena object moved into the container that holds it.
    Moved,
}

impl Item {
    /// What it is, for [`PickleError::NotPlainData`].
    fn what(&self) -> &'static str {
        match self {
            Item::Global(_) => "a global",
            Item::Dtype(_) => "a numpy.dtype",
            Item::Reconstructing => "a numpy array without its state",
            Item::Args(_) => "a tuple holding a global or a numpy.dtype",
            _ => "an object",
        }
    }
}

/// A stack entry: an item and how deeply its containers nest (0 for a
/// scalar; for a [`Item::Ref`], the arena object's own depth counts).
struct Slot {
    item: Item,
    depth: u32,
}

/// A memo entry.
enum Entry {
    /// A value that cannot change: `GET` pushes a copy (a handle to the same
    /// bytes).
    Copy(Item),
    /// An arena object: `GET` pushes a reference to it.
    Obj(u32),
}

/// A memoized object that can change.
struct Obj {
    item: Item,
    depth: u32,
    /// Some memo `GET` fetches it: copied where it is used, never moved.
    shared: bool,
    /// Copied out at least once: changing it now would make the copies
    /// stale (only a cycle does that).
    copied: bool,
}

struct Reader<'a> {
    data: &'a Bytes,
    pos: usize,
    /// Where the current opcode starts.
    at: usize,
    buffers: &'a [Bytes],
    next_buffer: usize,
    limits: &'a Limits,
    /// The sharing pass: which memo ids some `GET` fetches.
    fetched: Option<Vec<bool>>,
    stack: Vec<Slot>,
    marks: Vec<usize>,
    /// Memo id → 1 + index in `entries`; 0 when unset; with [`SPAN`] set,
    /// an index in `spans`.
    memo: Vec<u32>,
    /// Distinct ids set: where `MEMOIZE` puts the next one.
    memo_len: usize,
    entries: Vec<Entry>,
    /// Where the scalars [`Reader::scalar_run`] memoizes start (their
    /// opcode): decoded again when a `GET` first fetches them, so that a
    /// memoized str costs 8 bytes and no reference count until then.
    spans: Vec<usize>,
    arena: Vec<Obj>,
    /// Values pushed plus values copied out of shared objects...
    values: usize,
    /// ...at most this many: the pickle's length, or
    /// [`Limits::max_pickle_values`] if less.
    max_values: usize,
    /// The values of the run [`Reader::scalar_run`] is reading, and the
    /// memo ids its `MEMOIZE`s set with the index of the value each holds
    /// and where that value's opcode starts (`None` for a value a `GET`
    /// fetched) (kept to reuse their memory).
    run: Vec<Value>,
    run_memo: Vec<(usize, usize, Option<usize>)>,
}

impl<'a> Reader<'a> {
    fn new(
        data: &'a Bytes,
        buffers: &'a [Bytes],
        limits: &'a Limits,
        fetched: Option<Vec<bool>>,
    ) -> Reader<'a> {
        Reader {
            data,
            pos: 0,
            at: 0,
            buffers,
            next_buffer: 0,
            limits,
            fetched,
            stack: Vec::new(),
            marks: Vec::new(),
            memo: Vec::new(),
            memo_len: 0,
            entries: Vec::new(),
            spans: Vec::new(),
            arena: Vec::new(),
            values: 0,
            max_values: data.len().min(limits.max_pickle_values),
            run: Vec::new(),
            run_memo: Vec::new(),
        }
    }

    fn invalid(&self, reason: &'static str) -> Stop {
        Stop::Error(PickleError::Invalid {
            reason,
            at: self.at,
        })
    }

    /// The next `n` bytes, as a range of `data`: none is allocated before
    /// they are all there.
    fn span(&mut self, n: u64) -> Result<Range<usize>, Stop> {
        let left = (self.data.len() - self.pos) as u64;
        if n > left {
            return Err(PickleError::Truncated { at: self.at }.into());
        }
        let start = self.pos;
        self.pos += n as usize;
        Ok(start..self.pos)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], Stop> {
        let r = self.span(N as u64)?;
        Ok(self.data[r].try_into().expect("N bytes"))
    }

    fn byte(&mut self) -> Result<u8, Stop> {
        Ok(self.array::<1>()?[0])
    }

    fn u32(&mut self) -> Result<u32, Stop> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    fn u64(&mut self) -> Result<u64, Stop> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// Counts `n` more values, within the bound.
    fn count(&mut self, n: usize) -> Result<(), Stop> {
        self.values = self.values.saturating_add(n);
        match self.values > self.max_values {
            true => Err(PickleError::TooManyValues {
                limit: self.max_values,
            }
            .into()),
            false => Ok(()),
        }
    }

    fn push(&mut self, item: Item, depth: u32) -> Result<(), Stop> {
        self.count(1)?;
        self.stack.push(Slot { item, depth });
        Ok(())
    }

    fn push_value(&mut self, v: Value) -> Result<(), Stop> {
        self.push(Item::Value(v), 0)
    }

    fn pop(&mut self) -> Result<Slot, Stop> {
        match self.stack.len() > self.marks.last().copied().unwrap_or(0) {
            true => Ok(self.stack.pop().expect("a slot above the mark")),
            false => Err(self.invalid("an item is popped past a mark or the stack's bottom")),
        }
    }

    fn pop_mark(&mut self) -> Result<usize, Stop> {
        self.marks
            .pop()
            .ok_or_else(|| self.invalid("no mark on the stack"))
    }

    /// The stack's bottom for the items of the innermost mark: nothing at or
    /// below it is popped or changed (CPython's `fence`).
    fn fence(&self) -> usize {
        self.marks.last().copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stack_slot_stays_small() {
        // What a one-byte opcode can cost while the pickle is read (the
        // Limits::max_pickle_values docs say about 120 bytes with growth).
        assert!(size_of::<Slot>() <= 56, "{}", size_of::<Slot>());
    }
}
