//! Globals and calls: `GLOBAL`, `STACK_GLOBAL` and `REDUCE` of the few
//! globals framewire interprets by name (none is ever imported), and a
//! call's arguments.

use std::mem;
use std::ops::Range;

use bytes::Bytes;

use super::{Item, Reader, Slot, Stop};
use crate::pickle::error::{shown, PickleError};
use crate::pickle::numpy::{self, Dtype};
use crate::value::Value;

/// The globals framewire interprets, by name; none is ever imported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Global {
    /// `numpy._core.multiarray._reconstruct` (`numpy.core` before numpy 2).
    Reconstruct,
    /// `numpy.ndarray`, as `_reconstruct`'s first argument.
    NdArray,
    /// `numpy.dtype`.
    Dtype,
    /// `numpy._core.numeric._frombuffer`: protocol 5 arrays.
    FromBuffer,
    /// `numpy._core.multiarray.scalar`: numpy scalars.
    Scalar,
    /// `builtins.complex`.
    Complex,
    /// `builtins.bytearray` (protocols 2 to 4).
    Bytearray,
    /// `builtins.bytes` (`b""` at protocol 2).
    Bytes,
    /// `builtins.set` (protocols 2 and 3).
    Set,
    /// `builtins.frozenset` (protocols 2 and 3).
    Frozenset,
    /// `_codecs.encode`: bytes at protocol 2, as a latin-1 str.
    Encode,
}

impl Global {
    pub(super) fn find(module: &[u8], name: &[u8]) -> Result<Global, PickleError> {
        let builtins = matches!(module, b"builtins" | b"__builtin__");
        Ok(match (module, name) {
            (b"numpy._core.multiarray" | b"numpy.core.multiarray", b"_reconstruct") => {
                Global::Reconstruct
            }
            (b"numpy._core.multiarray" | b"numpy.core.multiarray", b"scalar") => Global::Scalar,
            (b"numpy._core.numeric" | b"numpy.core.numeric", b"_frombuffer") => Global::FromBuffer,
            (b"numpy", b"ndarray") => Global::NdArray,
            (b"numpy", b"dtype") => Global::Dtype,
            (_, b"complex") if builtins => Global::Complex,
            (_, b"bytearray") if builtins => Global::Bytearray,
            (_, b"bytes") if builtins => Global::Bytes,
            (_, b"set") if builtins => Global::Set,
            (_, b"frozenset") if builtins => Global::Frozenset,
            (b"_codecs", b"encode") => Global::Encode,
            _ => {
                return Err(PickleError::GlobalNotAllowed {
                    module: shown(module),
                    name: shown(name),
                })
            }
        })
    }
}

/// `bytes` as a latin-1 str encodes them (`_codecs.encode(s, "latin1")`).
fn latin1(s: &str) -> Option<Bytes> {
    s.chars()
        .map(|c| u8::try_from(u32::from(c)).ok())
        .collect::<Option<Vec<u8>>>()
        .map(Bytes::from)
}

impl Reader<'_> {
    /// `GLOBAL`'s newline-terminated argument.
    pub(super) fn line(&mut self) -> Result<Range<usize>, Stop> {
        let rest = &self.data[self.pos..];
        let n = rest
            .iter()
            .position(|&b| b == b'\n')
            .ok_or(PickleError::Truncated { at: self.at })?;
        let r = self.span(n as u64)?;
        self.pos += 1;
        Ok(r)
    }

    /// A call's arguments: the items of a tuple, references to values
    /// followed (a dtype stays a reference: arrays share it).
    pub(super) fn arguments(&mut self, slot: Slot) -> Result<Vec<Item>, Stop> {
        match self.resolve(slot)? {
            Item::Args(items) => items
                .into_iter()
                .map(|item| match item {
                    Item::Ref(a) if self.is_value(&item)? => self.take(a),
                    item => Ok(item),
                })
                .collect(),
            Item::Value(Value::Array(values)) => Ok(values.into_iter().map(Item::Value).collect()),
            Item::Value(Value::IntArray(ints)) => {
                Ok(ints.into_iter().map(|i| Item::Value(i.into())).collect())
            }
            _ => Err(self.invalid("arguments that are not a tuple")),
        }
    }

    /// An argument that must be a value.
    pub(super) fn value_arg(&mut self, item: Item) -> Result<Value, Stop> {
        self.place(Slot { item, depth: 0 })
    }

    /// `REDUCE`: the globals framewire knows, with the arguments their
    /// pickles carry.
    pub(super) fn reduce(&mut self) -> Result<(), Stop> {
        let args = self.pop()?;
        let func = self.pop()?;
        let Item::Global(g) = func.item else {
            return Err(self.invalid("REDUCE of something not a global"));
        };
        let bad = |s: &Self| s.invalid("arguments that are not what this global's pickles carry");
        let mut args = self.arguments(args)?;
        let item = match (g, args.as_mut_slice()) {
            (Global::Complex, [Item::Value(Value::Float(re)), Item::Value(Value::Float(im))]) => {
                let mut data = re.to_le_bytes().to_vec();
                data.extend_from_slice(&im.to_le_bytes());
                let a = numpy::array("<c16", vec![], false, true, Bytes::from(data));
                self.array_value(a)?
            }
            (Global::Bytearray, []) => Item::Buffer(Bytes::new()),
            (Global::Bytearray, [Item::Value(Value::Bin(b))]) => Item::Buffer(b.clone()),
            (
                Global::Bytearray | Global::Encode,
                [Item::Value(Value::Str(s)), Item::Value(Value::Str(enc))],
            ) if matches!(&**enc, "latin1" | "latin-1") => {
                let b = latin1(s).ok_or_else(|| self.invalid("a latin-1 str above U+00FF"))?;
                match g {
                    Global::Bytearray => Item::Buffer(b),
                    _ => Item::Value(Value::Bin(b)),
                }
            }
            (Global::Bytes, []) => Item::Value(Value::Bin(Bytes::new())),
            (Global::Set | Global::Frozenset, []) => Item::Value(Value::Array(Vec::new())),
            (Global::Set | Global::Frozenset, [items]) => {
                let items = mem::replace(items, Item::Moved);
                match self.value_arg(items)? {
                    v @ (Value::Array(_) | Value::IntArray(_)) => Item::Value(v),
                    _ => return Err(bad(self)),
                }
            }
            (Global::Dtype, [Item::Value(spec), Item::Value(align), Item::Value(copy)]) => {
                let args = [spec.clone(), align.clone(), copy.clone()];
                Item::Dtype(Box::new(Dtype::new(&args).ok_or_else(|| bad(self))?))
            }
            (
                Global::Reconstruct,
                [Item::Global(Global::NdArray), Item::Value(shape), Item::Value(Value::Bin(kind))],
            ) if shape.int_items().is_some_and(|s| s.len() == 1) && &kind[..] == b"b" => {
                Item::Reconstructing
            }
            (Global::FromBuffer, [data, dtype, shape, Item::Value(Value::Str(order))])
                if matches!(&**order, "C" | "F") =>
            {
                let fortran = &**order == "F";
                let dtype = self.dtype_arg(dtype)?;
                let shape = self.shape_arg(mem::replace(shape, Item::Moved))?;
                let (data, writeable) = self.data_arg(mem::replace(data, Item::Moved))?;
                self.array_value(numpy::array(&dtype, shape, fortran, writeable, data))?
            }
            (Global::Scalar, [dtype, Item::Value(Value::Bin(data))]) => {
                let dtype = self.dtype_arg(dtype)?;
                self.array_value(numpy::array(&dtype, vec![], false, true, data.clone()))?
            }
            _ => return Err(bad(self)),
        };
        let depth = match &item {
            Item::Value(Value::Array(_) | Value::IntArray(_)) => 1,
            _ => 0,
        };
        self.push(item, depth)?;
        Ok(())
    }
}
