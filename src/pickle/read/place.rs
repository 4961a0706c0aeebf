//! Items placed as values: references to the arena followed (an object
//! moved out, or copied when a memo `GET` fetches it too), and a value
//! finished as it leaves the machine.

use std::mem;

use super::{keys, Item, Obj, Reader, Slot, Stop};
use crate::pickle::error::PickleError;
use crate::serialize::PACK_MIN;
use crate::value::Value;

/// A value as it leaves the machine, placed in a container or returned: an
/// [`Value::IntArray`] too short to stay packed becomes an array, a dict
/// keeps one entry per key (Python's [`keys::merge_repeated`]).
fn finished(v: Value) -> Value {
    match v {
        Value::IntArray(ints) if ints.len() < PACK_MIN => {
            Value::Array(ints.into_iter().map(Value::from).collect())
        }
        Value::Map(mut entries) => {
            keys::merge_repeated(&mut entries);
            Value::Map(entries)
        }
        v => v,
    }
}

/// Values in `v`, containers and their items (an [`Value::IntArray`] counts
/// its integers).
fn count(v: &Value) -> usize {
    match v {
        Value::Array(items) => 1 + items.iter().map(count).sum::<usize>(),
        Value::IntArray(ints) => 1 + ints.len(),
        Value::Map(entries) => {
            1 + entries
                .iter()
                .map(|(k, x)| count(k) + count(x))
                .sum::<usize>()
        }
        _ => 1,
    }
}

/// Items, as the arguments of a call: each one.
fn item_count(item: &Item) -> usize {
    match item {
        Item::Value(v) => count(v),
        Item::Args(items) => 1 + items.iter().map(item_count).sum::<usize>(),
        _ => 1,
    }
}

/// Whether an item is a value as it stands: no reference to follow, no
/// numpy object. What the fast paths move straight into a container.
pub(super) fn is_plain(item: &Item) -> bool {
    matches!(item, Item::Value(_) | Item::Buffer(_))
}

/// An item [`is_plain`] says is a value, as that value.
pub(super) fn plain(item: Item) -> Value {
    match item {
        Item::Value(v) => finished(v),
        Item::Buffer(b) => Value::Bin(b),
        _ => unreachable!("is_plain is checked first"),
    }
}

impl Reader<'_> {
    /// The arena object `a`, unless it was moved (the fast pass then starts
    /// over, sharing).
    pub(super) fn obj(&self, a: u32) -> Result<&Obj, Stop> {
        let obj = &self.arena[a as usize];
        match obj.item {
            Item::Moved => Err(self.moved()),
            _ => Ok(obj),
        }
    }

    fn moved(&self) -> Stop {
        match self.fetched {
            None => Stop::Shared,
            // Only an object no GET fetches is moved in the sharing pass,
            // and its one reference is gone with it.
            Some(_) => self.invalid("an object is used after it was placed"),
        }
    }

    pub(super) fn depth_of(&self, slot: &Slot) -> Result<u32, Stop> {
        match slot.item {
            Item::Ref(a) => Ok(self.obj(a)?.depth),
            _ => Ok(slot.depth),
        }
    }

    /// The arena object `a`'s item, to place it: moved out, or copied when
    /// some `GET` fetches it too (charged to the values bound).
    pub(super) fn take(&mut self, a: u32) -> Result<Item, Stop> {
        self.obj(a)?;
        let obj = &mut self.arena[a as usize];
        if !obj.shared {
            return Ok(mem::replace(&mut obj.item, Item::Moved));
        }
        // Counted before it is copied: a copy past the bound never exists.
        let n = item_count(&obj.item);
        self.count(n)?;
        let obj = &mut self.arena[a as usize];
        obj.copied = true;
        Ok(obj.item.clone())
    }

    /// The item of a slot, a reference followed.
    pub(super) fn resolve(&mut self, slot: Slot) -> Result<Item, Stop> {
        match slot.item {
            Item::Ref(a) => self.take(a),
            item => Ok(item),
        }
    }

    /// A slot as the value placed in a container.
    pub(super) fn place(&mut self, slot: Slot) -> Result<Value, Stop> {
        match self.resolve(slot)? {
            Item::Value(v) => Ok(finished(v)),
            Item::Buffer(b) => Ok(Value::Bin(b)),
            other => Err(PickleError::NotPlainData {
                what: other.what(),
                at: self.at,
            }
            .into()),
        }
    }

    /// Whether an item becomes a value when placed.
    pub(super) fn is_value(&self, item: &Item) -> Result<bool, Stop> {
        let item = match item {
            Item::Ref(a) => &self.obj(*a)?.item,
            item => item,
        };
        Ok(matches!(item, Item::Value(_) | Item::Buffer(_)))
    }
}
