//! Dict keys as Python compares them. A pickle may set one key twice (no
//! pickler writes that, a hand-made pickle can); `pickle.loads` then keeps
//! one entry: the first key, in its place, with the last value. Keys are
//! equal as Python's `==` says for the keys framewire reads: numbers by
//! value (`1`, `1.0` and `True` are one key; `2**53 + 1` and `2.0**53` are
//! two), `None`, str and bytes by content (a str never equals bytes),
//! tuples item by item.
//!
//! Equal to no other key: a NaN, and a tuple holding one (Python finds one
//! NaN *object* set twice through the memo by identity; the memo's copies
//! here have none), and a numpy scalar (Python would merge
//! `np.float64(1.0)` with `1`; framewire keeps both).

use std::collections::hash_map::{Entry, HashMap};
use std::hash::{Hash, Hasher};
use std::mem;
use std::slice;

use crate::value::Value;

/// Dicts with at most this many entries compare their keys pairwise; larger
/// ones through a hash table.
const PAIRWISE: usize = 8;

/// Merges the entries of a dict whose keys Python holds equal: the first
/// key stays in its place, with the last value set for it.
// A `Key` hashes scalars and tuples only: nothing in it changes (clippy
// sees a block's lazily decoded header in `Value`).
#[allow(clippy::mutable_key_type)]
pub(super) fn merge_repeated(entries: &mut Vec<(Value, Value)>) {
    // (a repeat, the entry it sets), in order.
    let repeats: Vec<(usize, usize)> = if entries.len() <= PAIRWISE {
        (1..entries.len())
            .filter_map(|i| {
                let key = Part::Value(&entries[i].0);
                (0..i)
                    .find(|&j| same(key, Part::Value(&entries[j].0)))
                    .map(|j| (i, j))
            })
            .collect()
    } else {
        let mut first = HashMap::with_capacity(entries.len());
        let mut repeats = Vec::new();
        for (i, (k, _)) in entries.iter().enumerate() {
            let key = Key(Part::Value(k));
            if !same(key.0, key.0) {
                continue;
            }
            match first.entry(key) {
                Entry::Occupied(j) => repeats.push((i, *j.get())),
                Entry::Vacant(slot) => {
                    slot.insert(i);
                }
            }
        }
        repeats
    };
    if repeats.is_empty() {
        return;
    }
    for &(i, j) in &repeats {
        entries[j].1 = mem::take(&mut entries[i].1);
    }
    let mut repeats = repeats.iter().map(|&(i, _)| i).peekable();
    let mut index = 0;
    entries.retain(|_| {
        let repeat = repeats.next_if_eq(&index).is_some();
        index += 1;
        !repeat
    });
}

/// A key, or an item of a tuple key.
#[derive(Clone, Copy)]
enum Part<'a> {
    Value(&'a Value),
    /// An item of a [`Value::IntArray`].
    Int(i64),
}

/// A key that is not a tuple, as Python compares it.
#[derive(PartialEq, Eq, Hash)]
enum Atom<'a> {
    None,
    /// A number whose value is an integer: `True`, `1` and `1.0` alike.
    Integral(i128),
    /// Any other float but NaN, by its bits (one value, one form: `-0.0`
    /// is integral).
    Float(u64),
    Str(&'a [u8]),
    Bytes(&'a [u8]),
}

impl<'a> Part<'a> {
    /// What it is as a key that is not a tuple; `None` for a tuple and for
    /// what equals no key.
    fn atom(self) -> Option<Atom<'a>> {
        let v = match self {
            Part::Int(i) => return Some(Atom::Integral(i.into())),
            Part::Value(v) => v,
        };
        Some(match v {
            Value::Nil => Atom::None,
            &Value::Bool(b) => Atom::Integral(b.into()),
            Value::Int(i) => Atom::Integral(i.as_i128()),
            // Below 2^127 in magnitude, an integral float is an i128 exactly.
            &Value::Float(f) if f.fract() == 0.0 && f.abs() < 2f64.powi(127) => {
                Atom::Integral(f as i128)
            }
            Value::Float(f) if f.is_nan() => return None,
            Value::Float(f) => Atom::Float(f.to_bits()),
            Value::Str(s) => Atom::Str(s.as_bytes()),
            Value::Bin(b) => Atom::Bytes(b),
            _ => return None,
        })
    }

    /// A tuple's items.
    fn items(self) -> Option<Items<'a>> {
        match self {
            Part::Value(Value::Array(a)) => Some(Items::Boxed(a.iter())),
            Part::Value(Value::IntArray(a)) => Some(Items::Packed(a.iter())),
            _ => None,
        }
    }
}

/// See [`Part::items`].
enum Items<'a> {
    Boxed(slice::Iter<'a, Value>),
    Packed(slice::Iter<'a, i64>),
}

impl<'a> Iterator for Items<'a> {
    type Item = Part<'a>;

    fn next(&mut self) -> Option<Part<'a>> {
        match self {
            Items::Boxed(it) => it.next().map(Part::Value),
            Items::Packed(it) => it.next().map(|&i| Part::Int(i)),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match self {
            Items::Boxed(it) => it.size_hint(),
            Items::Packed(it) => it.size_hint(),
        }
    }
}

impl ExactSizeIterator for Items<'_> {}

/// Whether two keys are equal as Python's `==` says (never for what
/// equals no key, itself included).
fn same(a: Part<'_>, b: Part<'_>) -> bool {
    match (a.items(), b.items()) {
        (Some(x), Some(y)) => x.len() == y.len() && x.zip(y).all(|(x, y)| same(x, y)),
        (None, None) => matches!((a.atom(), b.atom()), (Some(x), Some(y)) if x == y),
        _ => false,
    }
}

/// A key that equals itself, in a hash table: its hash is the same for
/// keys Python holds equal.
#[derive(Clone, Copy)]
struct Key<'a>(Part<'a>);

impl PartialEq for Key<'_> {
    fn eq(&self, other: &Self) -> bool {
        same(self.0, other.0)
    }
}

impl Eq for Key<'_> {}

impl Hash for Key<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        match self.0.items() {
            Some(items) => {
                state.write_usize(items.len());
                items.for_each(|item| Key(item).hash(state));
            }
            None => self.0.atom().hash(state),
        }
    }
}
