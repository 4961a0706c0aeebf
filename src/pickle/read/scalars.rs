//! The opcodes that push a scalar: `None`, the bools, the ints, floats,
//! strs and bytes, each decoded where it lies (strs and bytes are slices of
//! the pickle).

use std::ops::Range;

use bytestring::ByteString;

use super::Reader;
use crate::pickle::error::PickleError;
use crate::pickle::opcodes::*;
use crate::value::{Integer, Value};

impl Reader<'_> {
    /// The scalar value the opcode `op` pushes, its argument starting at
    /// `pos`, and the argument's length; `None` for an opcode that is not
    /// one of these (`NONE`, `NEWTRUE`, `NEWFALSE`, the ints, `BINFLOAT`,
    /// the strs, the bytes).
    #[inline]
    pub(super) fn scalar(&self, op: u8, pos: usize) -> Result<Option<(Value, usize)>, PickleError> {
        let data = &self.data[..];
        let at = self.at;
        let arg = |n: usize| data.get(pos..pos + n).ok_or(PickleError::Truncated { at });
        // The argument of a counted opcode (a length, then that many
        // bytes): the range of its bytes.
        let counted = |op: u8| -> Result<Range<usize>, PickleError> {
            let Some(Argument::Counted(width)) = argument(op) else {
                unreachable!("a counted opcode")
            };
            let n = arg(width)?
                .iter()
                .rev()
                .fold(0u64, |n, &b| (n << 8) | u64::from(b));
            let start = pos + width;
            match n <= (data.len() - start) as u64 {
                true => Ok(start..start + n as usize),
                false => Err(PickleError::Truncated { at }),
            }
        };
        Ok(Some(match op {
            NONE => (Value::Nil, 0),
            NEWTRUE => (Value::Bool(true), 0),
            NEWFALSE => (Value::Bool(false), 0),
            BININT1 => (arg(1)?[0].into(), 1),
            BININT2 => (
                u16::from_le_bytes(arg(2)?.try_into().expect("2 bytes")).into(),
                2,
            ),
            BININT => (
                i32::from_le_bytes(arg(4)?.try_into().expect("4 bytes")).into(),
                4,
            ),
            BINFLOAT => {
                let b = f64::from_be_bytes(arg(8)?.try_into().expect("8 bytes"));
                (Value::Float(b), 8)
            }
            LONG4 if arg(4)?[3] & 0x80 != 0 => {
                return Err(PickleError::Invalid {
                    reason: "negative LONG4 length",
                    at,
                })
            }
            LONG1 | LONG4 => {
                let r = counted(op)?;
                (self.long(r.clone())?, r.end - pos)
            }
            SHORT_BINUNICODE | BINUNICODE | BINUNICODE8 => {
                let r = counted(op)?;
                let end = r.end;
                let s = ByteString::try_from(self.data.slice(r))
                    .map_err(|_| PickleError::InvalidUtf8 { at })?;
                (Value::Str(s), end - pos)
            }
            SHORT_BINBYTES | BINBYTES | BINBYTES8 => {
                let r = counted(op)?;
                (Value::Bin(self.data.slice(r.clone())), r.end - pos)
            }
            _ => return Ok(None),
        }))
    }

    /// `LONG1` / `LONG4`: little-endian two's complement, any width.
    fn long(&self, r: Range<usize>) -> Result<Value, PickleError> {
        let b = &self.data[r];
        let Some(&last) = b.last() else {
            return Ok(Value::from(0u8));
        };
        let neg = last & 0x80 != 0;
        let fill = if neg { 0xff } else { 0 };
        // Sign-extension bytes carry nothing.
        let mut n = b.len();
        while n > 1 && b[n - 1] == fill && (b[n - 2] & 0x80 != 0) == neg {
            n -= 1;
        }
        let out = PickleError::IntegerOutOfRange { at: self.at };
        if n > 16 {
            return Err(out);
        }
        let mut wide = [fill; 16];
        wide[..n].copy_from_slice(&b[..n]);
        Ok(Value::Int(
            Integer::try_from_i128(i128::from_le_bytes(wide)).ok_or(out)?,
        ))
    }
}
