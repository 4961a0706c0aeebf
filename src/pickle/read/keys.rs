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

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hash, Hasher};
use std::mem;
use std::slice;

use crate::value::Value;

/// Dicts with at most this many entries compare their keys pairwise; larger
/// ones through a table of their hashes ([`hashed`]).
const PAIRWISE: usize = 8;

/// Merges the entries of a dict whose keys Python holds equal: the first
/// key stays in its place, with the last value set for it.
pub(super) fn merge_repeated(entries: &mut Vec<(Value, Value)>) {
    let repeats = match entries.len() <= PAIRWISE {
        true => pairwise(entries),
        false => hashed(entries),
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

/// Each entry whose key equals an earlier one, and the first such entry
/// (a repeat, the entry it sets), in order: every key against those before
/// it.
fn pairwise(entries: &[(Value, Value)]) -> Vec<(usize, usize)> {
    (1..entries.len())
        .filter_map(|i| {
            let key = Part::Value(&entries[i].0);
            (0..i)
                .find(|&j| same(key, Part::Value(&entries[j].0)))
                .map(|j| (i, j))
        })
        .collect()
}

/// As [`pairwise`], through a table of the keys' hashes: open addressing,
/// a slot the top 32 bits of a key's hash and 1 + its entry's index (0 when
/// empty; a dict holds fewer than 2^31 entries, one per byte of pickle at
/// most), twice as many slots as keys. Only keys whose slots and hashes
/// meet are compared. The hash is SipHash under a random key (std's
/// `RandomState`): no input aims its keys at one slot.
fn hashed(entries: &[(Value, Value)]) -> Vec<(usize, usize)> {
    let state = RandomState::new();
    let mask = (entries.len() * 2).next_power_of_two() - 1;
    let mut table = vec![0u64; mask + 1];
    let mut repeats = Vec::new();
    for (i, (k, _)) in entries.iter().enumerate() {
        let key = Part::Value(k);
        let mut hasher = state.build_hasher();
        if !hash(key, &mut hasher) {
            continue;
        }
        let h = hasher.finish();
        let mut slot = h as usize & mask;
        loop {
            let e = table[slot];
            if e == 0 {
                table[slot] = (h & !0xffff_ffff) | (i as u64 + 1);
                break;
            }
            let j = (e as u32 - 1) as usize;
            if e >> 32 == h >> 32 && same(key, Part::Value(&entries[j].0)) {
                repeats.push((i, j));
                break;
            }
            slot = (slot + 1) & mask;
        }
    }
    repeats
}

/// A key, or an item of a tuple key.
#[derive(Clone, Copy)]
enum Part<'a> {
    Value(&'a Value),
    /// An item of a [`Value::IntArray`].
    Int(i64),
}

/// A key that is not a tuple, as Python compares it. Its derived `Hash`
/// feeds a prefix-free stream (the variant, then a fixed width or a
/// length), as [`hash`] does for tuples: distinct keys feed distinct
/// streams, so only chance, never an input, makes their hashes meet.
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

/// Feeds a key to `state`, the same for keys Python holds equal; false
/// (what is fed then is of no use) for a key that equals no key.
fn hash(key: Part<'_>, state: &mut impl Hasher) -> bool {
    match key.items() {
        Some(mut items) => {
            state.write_u8(u8::MAX);
            state.write_usize(items.len());
            items.all(|item| hash(item, state))
        }
        None => key.atom().map(|atom| atom.hash(state)).is_some(),
    }
}
