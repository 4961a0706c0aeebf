//! The side table that carries what serde's data model has no room for:
//! blocks, arrays, and the `Bytes` behind bin values, across a conversion,
//! by index (as servo/ipc-channel carries shared-memory regions). Serde's
//! own buffering (`Content`, for tagged enums and `flatten`) copies an index
//! or a borrowed slice, never the payload.
//!
//! One table per thread, used by [`to_value`](super::to_value) and
//! [`from_value`](super::from_value) only while they run ([`Scope`]); a
//! conversion inside another one (a [`ToSerialize`](super::ToSerialize)
//! field) shares it.

use std::cell::RefCell;

use bytes::Bytes;

use crate::value::{Block, Value};

/// A stashed entry taken back: a [`Value`], or a block as it was stashed.
enum Stashed {
    Value(Value),
    Block(Block),
}

/// What a running conversion builds.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// A [`Value`] ([`to_value`](super::to_value), [`from_value`](super::from_value),
    /// and [`from_frames`](super::from_frames), whose blocks become values).
    Value,
    /// Frame 0's bytes ([`to_frames`](super::to_frames)): a [`Bin`](super::Bin)
    /// is written where it is, as the bin it is.
    Frames,
}

struct Table {
    /// The conversions running on this thread, innermost last (a
    /// [`ToSerialize`](super::ToSerialize) field runs one inside another).
    modes: Vec<Mode>,
    /// Random per outermost conversion (drawn when it first stashes a
    /// value), in the high half of every token, so that a peer's map that
    /// imitates a stashed value's marker (`{MARKER_KEY: n}`, met where serde
    /// buffers content) names no value.
    nonce: Option<u64>,
    /// Where the nonces are drawn from: random keys once per thread, then
    /// a splitmix64 step per nonce (a peer never sees a nonce, so it cannot
    /// learn the sequence).
    draws: Option<u64>,
    /// Values stashed by index, taken once.
    values: Vec<Option<Value>>,
    /// Blocks stashed as they are (the direct path's `{"__Pickled__": i}`
    /// placeholders, without the `Value` that would box them; taken back
    /// as that `Value` by whoever wants a value), by index, taken once: a
    /// table of their own, so that a value's slot is a value's size.
    blocks: Vec<Option<Block>>,
    /// The buffers whose slices were handed to serde as borrowed bytes, so
    /// that a [`Bin`](super::Bin) can take a slice of its buffer back.
    owners: Vec<Bytes>,
    /// `Value`s being written field by field by [`to_frames`](super::to_frames),
    /// one inside another (see [`Nested`]).
    nested_values: usize,
}

impl Table {
    const fn new() -> Table {
        Table {
            modes: Vec::new(),
            nonce: None,
            draws: None,
            values: Vec::new(),
            blocks: Vec::new(),
            owners: Vec::new(),
            nested_values: 0,
        }
    }

    /// This conversion's nonce, drawn at its first stash.
    fn nonce(&mut self) -> u64 {
        match self.nonce {
            Some(nonce) => nonce,
            None => {
                let nonce = next_nonce(&mut self.draws);
                self.nonce = Some(nonce);
                nonce
            }
        }
    }
}

thread_local! {
    /// The one piece of state the typed layer keeps between serde calls
    /// (`typed/mod.rs` says why it cannot be passed instead).
    static TABLE: RefCell<Table> = const { RefCell::new(Table::new()) };
}

/// The bit of a token's index that says it names a block.
const BLOCK_BIT: u64 = 1 << 31;

/// How many `Value`s inside one another [`to_frames`](super::to_frames)
/// writes through serde (a call per level); deeper ones are handed to the
/// message layer's encoder whole, which needs no stack per level.
const MAX_NESTED_VALUES: usize = 32;

/// A `Value` being written through serde by [`to_frames`](super::to_frames).
pub(super) struct Nested(());

impl Nested {
    /// `None` when [`MAX_NESTED_VALUES`] are being written already.
    pub(super) fn enter() -> Option<Nested> {
        TABLE.with(|t| {
            let mut t = t.borrow_mut();
            (t.nested_values < MAX_NESTED_VALUES).then(|| {
                t.nested_values += 1;
                Nested(())
            })
        })
    }
}

impl Drop for Nested {
    fn drop(&mut self) {
        TABLE.with(|t| t.borrow_mut().nested_values -= 1);
    }
}

/// A conversion running on this thread; the table is cleared when the
/// outermost one ends.
pub(super) struct Scope(());

impl Scope {
    pub(super) fn enter(mode: Mode) -> Scope {
        TABLE.with(|t| {
            let mut t = t.borrow_mut();
            if t.modes.is_empty() {
                t.nonce = None; // drawn at the first stash
            }
            t.modes.push(mode);
        });
        Scope(())
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        TABLE.with(|t| {
            let mut t = t.borrow_mut();
            t.modes.pop();
            if t.modes.is_empty() {
                t.values.clear();
                t.blocks.clear();
                t.owners.clear();
            }
        });
    }
}

/// The innermost framewire conversion running on this thread, if any: the
/// types of this module use the side table only inside one.
pub(super) fn mode() -> Option<Mode> {
    TABLE.with(|t| t.borrow().modes.last().copied())
}

/// Whether a framewire conversion is running on this thread.
pub(super) fn active() -> bool {
    mode().is_some()
}

/// Stashes a value; its token (the conversion's nonce and an index) is
/// what travels through serde.
pub(super) fn stash(value: Value) -> u64 {
    TABLE.with(|t| {
        let mut t = t.borrow_mut();
        let nonce = t.nonce();
        t.values.push(Some(value));
        nonce | (t.values.len() - 1) as u64
    })
}

/// Stashes a block as it is: [`take`] gives it back as the `Value` that
/// carries it ([`Block::into_value`]), [`take_block`] as the block.
pub(super) fn stash_block(block: Block) -> u64 {
    TABLE.with(|t| {
        let mut t = t.borrow_mut();
        let nonce = t.nonce();
        t.blocks.push(Some(block));
        nonce | BLOCK_BIT | (t.blocks.len() - 1) as u64
    })
}

/// A new nonce, in the high half of a `u64`.
fn next_nonce(draws: &mut Option<u64>) -> u64 {
    let x = draws.get_or_insert_with(|| {
        use std::hash::BuildHasher;
        // std's RandomState: random keys per thread.
        std::collections::hash_map::RandomState::new().hash_one(0u8)
    });
    *x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (z ^ (z >> 31)) << 32
}

/// Takes back a stashed value (once), by a token [`stash`] or
/// [`stash_block`] gave out.
pub(super) fn take(token: u64) -> Option<Value> {
    take_entry(token).map(|s| match s {
        Stashed::Value(v) => v,
        Stashed::Block(b) => b.into_value(),
    })
}

/// Takes back a stashed value (once) as a block, if it is one (as
/// [`take`] would give it: a [`Value::Pickled`] or [`Value::Serialized`]);
/// any other value as it is.
pub(super) fn take_block(token: u64) -> Option<Result<Block, Value>> {
    take_entry(token).map(|s| match s {
        Stashed::Block(b) => Ok(b),
        Stashed::Value(Value::Pickled(b)) => Ok(b.with_kind(true)),
        Stashed::Value(Value::Serialized(b)) => Ok(b.with_kind(false)),
        Stashed::Value(v) => Err(v),
    })
}

/// The value or block a token names, taken.
fn take_entry(token: u64) -> Option<Stashed> {
    TABLE.with(|t| {
        let mut t = t.borrow_mut();
        if Some(token & !0xFFFF_FFFF) != t.nonce {
            return None;
        }
        let slot = usize::try_from(token & (BLOCK_BIT - 1)).ok()?;
        match token & BLOCK_BIT {
            0 => t.values.get_mut(slot)?.take().map(Stashed::Value),
            _ => t.blocks.get_mut(slot)?.take().map(Stashed::Block),
        }
    })
}

/// Records that slices of `owner` are being handed to serde.
pub(super) fn own(owner: &Bytes) {
    TABLE.with(|t| {
        let mut t = t.borrow_mut();
        let known = t
            .owners
            .last()
            .is_some_and(|o| o.as_ptr() == owner.as_ptr() && o.len() == owner.len());
        if !known {
            t.owners.push(owner.clone());
        }
    });
}

/// `slice` as a `Bytes`: a slice of the buffer it was handed out from, or a
/// copy when it came from anywhere else.
pub(super) fn bytes_of(slice: &[u8]) -> Bytes {
    let found = TABLE.with(|t| {
        let t = t.borrow();
        let (start, end) = (
            slice.as_ptr() as usize,
            slice.as_ptr() as usize + slice.len(),
        );
        t.owners.iter().rev().find_map(|o| {
            let (o_start, o_end) = (o.as_ptr() as usize, o.as_ptr() as usize + o.len());
            (o_start <= start && end <= o_end).then(|| o.slice_ref(slice))
        })
    });
    found.unwrap_or_else(|| Bytes::copy_from_slice(slice))
}
