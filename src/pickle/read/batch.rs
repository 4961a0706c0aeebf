//! Batches: a run of scalars between a `MARK` and the `APPENDS`,
//! `ADDITEMS` or `SETITEMS` that closes it, read straight into the
//! memoized container below the mark.

use std::mem;

use super::containers::extend;
use super::memo::SPAN;
use super::{Entry, Item, Obj, Reader, Slot, Stop};
use crate::pickle::opcodes::*;
use crate::value::Value;

impl Reader<'_> {
    /// Right after a `MARK` above a memoized list, set or dict: a run of
    /// scalars (each maybe memoized, or fetched from the memo) that ends in
    /// the `APPENDS`, `ADDITEMS` or `SETITEMS` closing the mark (how Python
    /// pickles a container of plain values, a thousand items at a time)
    /// goes straight into the container, never through stack slots. Its
    /// `MEMOIZE`s take effect once the run is whole (a `GET` inside the run
    /// of an id the run sets is the run's own value). Anything else (an
    /// error included) leaves the machine to read the run from the `MARK`
    /// on as usual, so that the result and the errors are the machine's; a
    /// run stops at the first other opcode and the next `MARK` comes after
    /// it, so runs never overlap: at most one more pass over the bytes.
    pub(super) fn scalar_run(&mut self) -> Result<(), Stop> {
        // The container must be above the mark before this one, as
        // `container_below` asks of `APPENDS` and `SETITEMS`.
        let outer = match self.marks.len() {
            n if n >= 2 => self.marks[n - 2],
            _ => 0,
        };
        if self.stack.len() <= outer {
            return Ok(());
        }
        let Some(&Slot {
            item: Item::Ref(a), ..
        }) = self.stack.last()
        else {
            return Ok(());
        };
        let dict = match &self.arena[a as usize] {
            Obj { copied: true, .. } => return Ok(()),
            Obj {
                item: Item::Value(Value::Map(_)),
                ..
            } => true,
            Obj {
                item: Item::Value(Value::IntArray(_) | Value::Array(_)),
                ..
            } => false,
            _ => return Ok(()),
        };
        let mut run = mem::take(&mut self.run);
        let mut memoized = mem::take(&mut self.run_memo);
        // What `memo_len` becomes as the run's `MEMOIZE`s are read.
        let mut memo_len = self.memo_len;
        let mut pos = self.pos;
        // Where the last value of the run was decoded, if it was.
        let mut last = None;
        let whole = loop {
            let Some(&op) = self.data.get(pos) else {
                break false;
            };
            if let Ok(Some((v, n))) = self.scalar(op, pos + 1) {
                run.push(v);
                last = Some(pos);
                pos += 1 + n;
                continue;
            }
            match op {
                MEMOIZE if !run.is_empty() && memo_len < self.max_values => {
                    memoized.push((memo_len, run.len() - 1, last));
                    // As `memo_set` will: an id not set yet lengthens it.
                    if self.memo.get(memo_len).is_none_or(|&e| e == 0) {
                        memo_len += 1;
                    }
                }
                BINGET | LONG_BINGET => {
                    let width = if op == BINGET { 1 } else { 4 };
                    let Some(id) = self.data.get(pos + 1..pos + 1 + width) else {
                        break false;
                    };
                    let id = id
                        .iter()
                        .rev()
                        .fold(0usize, |n, &b| (n << 8) | usize::from(b));
                    // The ids the run sets never decrease: the last one
                    // set to `id`, if any, is the value fetched.
                    let i = memoized.partition_point(|&(m, _, _)| m <= id);
                    let v = match i.checked_sub(1).map(|i| memoized[i]) {
                        Some((m, v, _)) if m == id => Some(run[v].clone()),
                        _ => self.memo_value(id),
                    };
                    match v {
                        Some(v) => run.push(v),
                        None => break false,
                    }
                    last = None;
                    pos += width;
                }
                FRAME => {
                    // A frame boundary: the frame must be there.
                    let Some(n) = self.data.get(pos + 1..pos + 9) else {
                        break false;
                    };
                    let n = u64::from_le_bytes(n.try_into().expect("8 bytes"));
                    if n > (self.data.len() - (pos + 9)) as u64 {
                        break false;
                    }
                    pos += 8;
                }
                SETITEMS => break dict && run.len().is_multiple_of(2),
                APPENDS | ADDITEMS => break !dict,
                _ => break false,
            }
            pos += 1;
        };
        let result = match whole {
            true => self.commit_run(a, &mut run, &memoized, pos + 1),
            false => Ok(()),
        };
        run.clear();
        memoized.clear();
        self.run = run;
        self.run_memo = memoized;
        result
    }

    /// A whole run of [`Reader::scalar_run`] into the arena object `a`:
    /// counted, its memo entries set, its values moved in, the mark popped
    /// and the closing opcode read (`end` is past it).
    fn commit_run(
        &mut self,
        a: u32,
        run: &mut Vec<Value>,
        memoized: &[(usize, usize, Option<usize>)],
        end: usize,
    ) -> Result<(), Stop> {
        self.count(run.len())?;
        for &(id, i, at) in memoized {
            match at {
                Some(at) if self.spans.len() < SPAN as usize - 1 => {
                    self.spans.push(at);
                    self.memo_slot(id, SPAN | (self.spans.len() - 1) as u32);
                }
                _ => self.memo_set(id, Entry::Copy(Item::Value(run[i].clone()))),
            }
        }
        let limit = self.limits.max_depth;
        let target = &mut self.arena[a as usize];
        Self::deepen(&mut target.depth, 0, limit)?;
        match &mut target.item {
            Item::Value(Value::Map(m)) => {
                let mut items = run.drain(..);
                m.reserve(items.len() / 2);
                while let (Some(k), Some(v)) = (items.next(), items.next()) {
                    m.push((k, v));
                }
            }
            Item::Value(list) => extend(list, run.drain(..)).expect("a list or set"),
            _ => unreachable!("scalar_run checks the target"),
        }
        self.marks.pop();
        self.pos = end;
        Ok(())
    }
}
