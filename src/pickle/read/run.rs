//! The opcode loop: an arm per opcode, the longer ones in small functions
//! below it.

use super::globals::Global;
use super::{Item, Reader, Slot, Stop};
use crate::pickle::error::PickleError;
use crate::pickle::opcodes::*;
use crate::value::Value;

impl Reader<'_> {
    /// Runs the machine to `STOP`.
    pub(super) fn run(mut self) -> Result<Value, Stop> {
        loop {
            self.at = self.pos;
            let op = self
                .byte()
                .map_err(|_| PickleError::Truncated { at: self.at })?;
            if let Some((v, n)) = self.scalar(op, self.pos)? {
                self.pos += n;
                self.push_value(v)?;
                continue;
            }
            match op {
                PROTO => self.proto()?,
                FRAME => self.frame()?,
                STOP => {
                    let top = self.pop()?;
                    return self.place(top);
                }
                MARK => {
                    self.marks.push(self.stack.len());
                    self.scalar_run()?;
                }
                POP => {
                    self.pop()?;
                }
                POP_MARK => {
                    let m = self.pop_mark()?;
                    self.stack.truncate(m);
                }
                BYTEARRAY8 => {
                    let n = self.u64()?;
                    let r = self.span(n)?;
                    self.push(Item::Buffer(self.data.slice(r)), 0)?;
                }
                EMPTY_TUPLE => self.push(Item::Value(Value::Array(Vec::new())), 1)?,
                TUPLE1..=TUPLE3 => self.small_tuple(usize::from(op - TUPLE1) + 1)?,
                TUPLE => {
                    let m = self.pop_mark()?;
                    self.tuple(m)?;
                }
                EMPTY_LIST | EMPTY_SET => self.push(Item::Value(Value::IntArray(Vec::new())), 1)?,
                EMPTY_DICT => self.push(Item::Value(Value::Map(Vec::new())), 1)?,
                LIST | FROZENSET => {
                    let m = self.pop_mark()?;
                    let (values, depth) = self.values_from(m)?;
                    self.push_container(Value::Array(values), depth)?;
                }
                DICT => {
                    let m = self.pop_mark()?;
                    let (entries, depth) = self.entries_from(m)?;
                    self.push_container(Value::Map(entries), depth)?;
                }
                APPEND => self.append(self.stack.len().saturating_sub(1))?,
                APPENDS | ADDITEMS => {
                    let m = self.pop_mark()?;
                    self.append(m)?;
                }
                SETITEM => self.set_items(self.stack.len().saturating_sub(2))?,
                SETITEMS => {
                    let m = self.pop_mark()?;
                    self.set_items(m)?;
                }
                BINGET => {
                    let id = self.byte()?;
                    self.get(u64::from(id))?;
                }
                LONG_BINGET => {
                    let id = self.u32()?;
                    self.get(u64::from(id))?;
                }
                BINPUT => {
                    let id = self.byte()?;
                    self.put(u64::from(id))?;
                }
                LONG_BINPUT => {
                    let id = self.u32()?;
                    self.put(u64::from(id))?;
                }
                MEMOIZE => self.put(self.memo_len as u64)?,
                GLOBAL => {
                    let module = self.line()?;
                    let name = self.line()?;
                    let g = Global::find(&self.data[module], &self.data[name])?;
                    self.push(Item::Global(g), 0)?;
                }
                STACK_GLOBAL => self.stack_global()?,
                REDUCE => self.reduce()?,
                BUILD => self.build()?,
                NEXT_BUFFER => self.next_buffer()?,
                READONLY_BUFFER => self.readonly_buffer()?,
                opcode => {
                    return Err(PickleError::UnsupportedOpcode {
                        opcode,
                        at: self.at,
                    }
                    .into())
                }
            }
        }
    }

    /// `PROTO`: protocols up to 5.
    fn proto(&mut self) -> Result<(), Stop> {
        let protocol = self.byte()?;
        match protocol > 5 {
            true => Err(PickleError::UnsupportedProtocol { protocol }.into()),
            false => Ok(()),
        }
    }

    /// `FRAME`: a framing hint; the frame must be there, nothing else.
    fn frame(&mut self) -> Result<(), Stop> {
        let n = self.u64()?;
        match n > (self.data.len() - self.pos) as u64 {
            true => Err(PickleError::Truncated { at: self.at }.into()),
            false => Ok(()),
        }
    }

    /// `TUPLE1` to `TUPLE3`: a tuple of the top `n` items, above the mark.
    fn small_tuple(&mut self, n: usize) -> Result<(), Stop> {
        let from = self.stack.len().checked_sub(n);
        match from.filter(|&f| f >= self.fence()) {
            Some(from) => self.tuple(from),
            None => Err(self.invalid("TUPLE1-3 with too few items")),
        }
    }

    /// `STACK_GLOBAL`: a global named by the top two strs.
    fn stack_global(&mut self) -> Result<(), Stop> {
        let name = self.pop()?;
        let module = self.pop()?;
        match (module.item, name.item) {
            (Item::Value(Value::Str(m)), Item::Value(Value::Str(n))) => {
                let g = Global::find(m.as_bytes(), n.as_bytes())?;
                self.push(Item::Global(g), 0)
            }
            _ => Err(self.invalid("STACK_GLOBAL of something not two str")),
        }
    }

    /// `NEXT_BUFFER`: the next out-of-band buffer, writable until
    /// `READONLY_BUFFER` says otherwise.
    fn next_buffer(&mut self) -> Result<(), Stop> {
        let given = self.buffers.len();
        let b = self
            .buffers
            .get(self.next_buffer)
            .cloned()
            .ok_or(PickleError::MissingBuffer { given, at: self.at })?;
        self.next_buffer += 1;
        self.push(Item::Buffer(b), 0)
    }

    /// `READONLY_BUFFER`: the top buffer as bytes (its slot reused: not
    /// counted again).
    fn readonly_buffer(&mut self) -> Result<(), Stop> {
        let top = self.pop()?;
        match top.item {
            Item::Buffer(b) | Item::Value(Value::Bin(b)) => {
                self.stack.push(Slot {
                    item: Item::Value(Value::Bin(b)),
                    depth: 0,
                });
                Ok(())
            }
            _ => Err(self.invalid("READONLY_BUFFER without a buffer")),
        }
    }
}
