//! Tuples, lists, sets and dicts: made of the items above a mark, or
//! items added to one below them (`APPEND(S)`, `ADDITEMS`, `SETITEM(S)`),
//! with the fast path for plain values going into a memoized container.

use super::place::{is_plain, plain};
use super::{Item, Obj, Reader, Slot, Stop};
use crate::pickle::error::PickleError;
use crate::serialize::PACK_MIN;
use crate::value::{Integer, Value};

/// Appends `values` to a list or set (packed while they are integers).
pub(super) fn extend(
    target: &mut Value,
    values: impl ExactSizeIterator<Item = Value>,
) -> Result<(), &'static str> {
    match target {
        Value::Array(items) => items.extend(values),
        Value::IntArray(ints) => {
            let mut values = values;
            ints.reserve(values.len());
            while let Some(v) = values.next() {
                match v.as_int().and_then(Integer::as_i64) {
                    Some(x) => ints.push(x),
                    None => {
                        let mut items: Vec<Value> =
                            Vec::with_capacity(ints.len() + 1 + values.len());
                        items.extend(ints.drain(..).map(Value::from));
                        items.push(v);
                        items.extend(values);
                        *target = Value::Array(items);
                        return Ok(());
                    }
                }
            }
        }
        _ => return Err("items appended to something not a list or set"),
    }
    Ok(())
}

impl Reader<'_> {
    /// The values of `stack[from..]`, taken off the stack, and the depth of
    /// the deepest.
    pub(super) fn values_from(&mut self, from: usize) -> Result<(Vec<Value>, u32), Stop> {
        let slots = self.stack.split_off(from);
        let mut depth = 0;
        let mut values = Vec::with_capacity(slots.len());
        for slot in slots {
            depth = depth.max(self.depth_of(&slot)?);
            values.push(self.place(slot)?);
        }
        Ok((values, depth))
    }

    /// `stack[from..]` as key, value pairs, taken off the stack.
    pub(super) fn entries_from(&mut self, from: usize) -> Result<(Vec<(Value, Value)>, u32), Stop> {
        if !(self.stack.len() - from).is_multiple_of(2) {
            return Err(self.invalid("a dict key without its value"));
        }
        let (values, depth) = self.values_from(from)?;
        let mut values = values.into_iter();
        let mut entries = Vec::with_capacity(values.len() / 2);
        while let (Some(k), Some(v)) = (values.next(), values.next()) {
            entries.push((k, v));
        }
        Ok((entries, depth))
    }

    /// Pushes a container whose items nest `depth` deep.
    pub(super) fn push_container(&mut self, v: Value, depth: u32) -> Result<(), Stop> {
        let depth = depth + 1;
        if depth as usize > self.limits.max_depth {
            return Err(PickleError::DepthExceeded {
                limit: self.limits.max_depth,
            }
            .into());
        }
        self.push(Item::Value(v), depth)?;
        Ok(())
    }

    /// A tuple of `stack[from..]`: a value when its items are values, else
    /// the arguments of a call.
    pub(super) fn tuple(&mut self, from: usize) -> Result<(), Stop> {
        let mut plain = true;
        for slot in &self.stack[from..] {
            plain &= self.is_value(&slot.item)?;
        }
        if plain {
            let (values, depth) = self.values_from(from)?;
            let packed = values.len() >= PACK_MIN
                && values
                    .iter()
                    .all(|v| v.as_int().and_then(Integer::as_i64).is_some());
            let v = match packed {
                true => Value::IntArray(
                    values
                        .iter()
                        .filter_map(|v| v.as_int().and_then(Integer::as_i64))
                        .collect(),
                ),
                false => Value::Array(values),
            };
            return self.push_container(v, depth);
        }
        let items = self
            .stack
            .split_off(from)
            .into_iter()
            .map(|slot| slot.item)
            .collect();
        self.push(Item::Args(items), 0)?;
        Ok(())
    }

    /// The list, set or dict at `stack[index]` (or the arena object it
    /// refers to), to change it, and its depth.
    fn target(&mut self, index: usize) -> Result<(&mut Value, &mut u32), Stop> {
        let at = self.at;
        let not_container = || {
            Stop::Error(PickleError::Invalid {
                reason: "items added to something not a list, set or dict",
                at,
            })
        };
        let (item, depth) = match self.stack[index].item {
            Item::Ref(a) => {
                if self.obj(a)?.copied {
                    return Err(PickleError::Recursive { at }.into());
                }
                let Obj { item, depth, .. } = &mut self.arena[a as usize];
                (item, depth)
            }
            _ => {
                let Slot { item, depth } = &mut self.stack[index];
                (item, depth)
            }
        };
        match item {
            Item::Value(v) => Ok((v, depth)),
            _ => Err(not_container()),
        }
    }

    /// Raises the depth of the container at `stack[index]` to hold items
    /// `depth` deep.
    pub(super) fn deepen(depth: &mut u32, items: u32, limit: usize) -> Result<(), Stop> {
        *depth = (*depth).max(items + 1);
        match *depth as usize > limit {
            true => Err(PickleError::DepthExceeded { limit }.into()),
            false => Ok(()),
        }
    }

    /// The index of the container that items from `from` on are added to:
    /// the slot below them, above the innermost mark.
    fn container_below(&self, from: usize) -> Result<usize, Stop> {
        match from > self.fence() && from <= self.stack.len() {
            true => Ok(from - 1),
            false => Err(self.invalid("items added to nothing")),
        }
    }

    /// The fast path of `APPENDS` and `SETITEMS`, for the items Python's
    /// pickles hold most: plain values going into a memoized container
    /// (every list and dict Python pickles is memoized). The container, its
    /// depth, the items drained off the stack, and how deep they nest;
    /// `None` when the general path must run.
    #[allow(clippy::type_complexity)]
    fn plain_into_memoized(
        &mut self,
        index: usize,
        from: usize,
    ) -> Option<(&mut Value, &mut u32, std::vec::Drain<'_, Slot>, u32)> {
        let Item::Ref(a) = self.stack[index].item else {
            return None;
        };
        let items = &self.stack[from..];
        if !items.iter().all(|slot| is_plain(&slot.item)) {
            return None;
        }
        let depth = items.iter().map(|slot| slot.depth).max().unwrap_or(0);
        let Reader { stack, arena, .. } = self;
        match &mut arena[a as usize] {
            Obj {
                item: Item::Value(target),
                depth: target_depth,
                copied: false,
                ..
            } => Some((target, target_depth, stack.drain(from..), depth)),
            _ => None,
        }
    }

    /// `APPEND`, `APPENDS`, `ADDITEMS`: `stack[from..]` into the list or set
    /// below them.
    pub(super) fn append(&mut self, from: usize) -> Result<(), Stop> {
        let index = self.container_below(from)?;
        let limit = self.limits.max_depth;
        let at = self.at;
        let invalid = |reason| PickleError::Invalid { reason, at };
        if let Some((target, target_depth, items, depth)) = self.plain_into_memoized(index, from) {
            extend(target, items.map(|slot| plain(slot.item))).map_err(invalid)?;
            return Self::deepen(target_depth, depth, limit);
        }
        let (values, depth) = self.values_from(from)?;
        let (target, target_depth) = self.target(index)?;
        extend(target, values.into_iter()).map_err(invalid)?;
        Self::deepen(target_depth, depth, limit)
    }

    /// `SETITEM`, `SETITEMS`: the pairs of `stack[from..]` into the dict
    /// below them.
    pub(super) fn set_items(&mut self, from: usize) -> Result<(), Stop> {
        let index = self.container_below(from)?;
        let limit = self.limits.max_depth;
        let not_dict = PickleError::Invalid {
            reason: "items set in something not a dict",
            at: self.at,
        };
        if (self.stack.len() - from).is_multiple_of(2) {
            if let Some((target, target_depth, items, depth)) =
                self.plain_into_memoized(index, from)
            {
                let Value::Map(m) = target else {
                    return Err(not_dict.into());
                };
                let mut items = items.map(|slot| plain(slot.item));
                m.reserve(items.len() / 2);
                while let (Some(k), Some(v)) = (items.next(), items.next()) {
                    m.push((k, v));
                }
                return Self::deepen(target_depth, depth, limit);
            }
        }
        let (entries, depth) = self.entries_from(from)?;
        let (target, target_depth) = self.target(index)?;
        match target {
            Value::Map(m) => m.extend(entries),
            _ => return Err(not_dict.into()),
        }
        Self::deepen(target_depth, depth, limit)
    }
}
