//! The memo: `PUT`, `MEMOIZE` and `GET`, memoized scalars kept as where
//! they start until fetched, and the walk that finds which ids any `GET`
//! fetches (for the sharing pass).

use std::mem;

use super::{Entry, Item, Obj, Reader, Stop};
use crate::pickle::error::PickleError;
use crate::pickle::opcodes::*;
use crate::value::Value;

/// A memo slot with this bit set is an index in [`Reader::spans`].
pub(super) const SPAN: u32 = 1 << 31;

impl Reader<'_> {
    /// `GET`: a copy of a value, or a reference to an object.
    pub(super) fn get(&mut self, id: u64) -> Result<(), Stop> {
        let at = self.at;
        let entry = usize::try_from(id)
            .ok()
            .and_then(|i| self.memo_entry(i))
            .ok_or(PickleError::MemoIndex { index: id, at })?;
        match &self.entries[entry] {
            Entry::Copy(item) => {
                let item = item.clone();
                self.push(item, 0)?;
            }
            &Entry::Obj(a) => {
                let depth = self.obj(a)?.depth;
                self.push(Item::Ref(a), depth)?;
            }
        }
        Ok(())
    }

    /// `PUT`, `MEMOIZE`: the top item under `id`. An object that can still
    /// change moves to the arena, a reference to it left on the stack.
    pub(super) fn put(&mut self, id: u64) -> Result<(), Stop> {
        let index = self.memo_index(id)?;
        let fetched = self
            .fetched
            .as_ref()
            .is_some_and(|f| f.get(index).copied().unwrap_or(false));
        if self.stack.len() <= self.fence() {
            return Err(self.invalid("PUT without an item above the mark"));
        }
        let top = self.stack.last_mut().expect("an item above the mark");
        let entry = match &top.item {
            Item::Value(Value::Array(_) | Value::IntArray(_) | Value::Map(_))
            | Item::Dtype(_)
            | Item::Reconstructing
            | Item::Args(_) => {
                let a = self.arena.len() as u32;
                let item = mem::replace(&mut top.item, Item::Ref(a));
                self.arena.push(Obj {
                    item,
                    depth: top.depth,
                    shared: fetched,
                    copied: false,
                });
                Entry::Obj(a)
            }
            &Item::Ref(a) => {
                self.arena[a as usize].shared |= fetched;
                Entry::Obj(a)
            }
            item => Entry::Copy(item.clone()),
        };
        self.memo_set(index, entry);
        Ok(())
    }

    /// A memo id as an index, below the bound on values: one memo slot (4
    /// bytes) per value at most.
    fn memo_index(&self, id: u64) -> Result<usize, Stop> {
        let at = self.at;
        usize::try_from(id)
            .ok()
            .filter(|&i| i < self.max_values)
            .ok_or(PickleError::MemoIndex { index: id, at }.into())
    }

    pub(super) fn memo_set(&mut self, index: usize, entry: Entry) {
        self.entries.push(entry);
        self.memo_slot(index, self.entries.len() as u32);
    }

    /// Memo id `index` set to `slot` (see [`Reader::memo`]).
    pub(super) fn memo_slot(&mut self, index: usize, slot: u32) {
        if index >= self.memo.len() {
            self.memo.resize(index + 1, 0);
        }
        if self.memo[index] == 0 {
            self.memo_len += 1;
        }
        self.memo[index] = slot;
    }

    /// The index in `entries` of memo id `id`, if it is set. A scalar kept
    /// as where it starts is decoded into an entry of its own the first
    /// time (each memoized scalar is decoded at most twice).
    fn memo_entry(&mut self, id: usize) -> Option<usize> {
        let slot = *self.memo.get(id)?;
        if slot & SPAN == 0 {
            return (slot as usize).checked_sub(1);
        }
        let at = *self.spans.get((slot & !SPAN) as usize)?;
        let (v, _) = self.scalar(*self.data.get(at)?, at + 1).ok()??;
        self.entries.push(Entry::Copy(Item::Value(v)));
        self.memo[id] = self.entries.len() as u32;
        Some(self.entries.len() - 1)
    }

    /// The value a `GET` of memo id `id` pushes, if it is a scalar value
    /// (for [`Reader::scalar_run`]).
    pub(super) fn memo_value(&mut self, id: usize) -> Option<Value> {
        let entry = self.memo_entry(id)?;
        match &self.entries[entry] {
            Entry::Copy(Item::Value(v)) => Some(v.clone()),
            _ => None,
        }
    }
}

/// The memo ids some `GET` fetches, by walking the opcodes without
/// building anything (for the sharing pass). It stops at the first byte it
/// cannot step over; the pass that follows fails there too.
pub(super) fn fetched_ids(data: &[u8]) -> Vec<bool> {
    let mut fetched = vec![false; 0];
    let mut pos = 0usize;
    let le = |b: &[u8]| b.iter().rev().fold(0u64, |n, &x| (n << 8) | u64::from(x));
    while let Some(&op) = data.get(pos) {
        pos += 1;
        let rest = &data[pos..];
        if op == STOP {
            break;
        }
        if let (BINGET | LONG_BINGET, Some(Argument::Fixed(width))) = (op, argument(op)) {
            if let Some(i) = rest
                .get(..width)
                .and_then(|id| usize::try_from(le(id)).ok())
                .filter(|&i| i < data.len())
            {
                if i >= fetched.len() {
                    fetched.resize(i + 1, false);
                }
                fetched[i] = true;
            }
        }
        let skip = argument(op).and_then(|arg| match arg {
            Argument::None => Some(0),
            Argument::Fixed(n) => (rest.len() >= n).then_some(n),
            Argument::Counted(width) => {
                let n = usize::try_from(le(rest.get(..width)?)).ok()?;
                let total = width.checked_add(n)?;
                (rest.len() >= total).then_some(total)
            }
            Argument::Lines => {
                let first = rest.iter().position(|&b| b == b'\n')?;
                let second = rest[first + 1..].iter().position(|&b| b == b'\n')?;
                Some(first + 1 + second + 1)
            }
        });
        match skip {
            Some(n) => pos += n,
            None => break,
        }
    }
    fetched
}
