//! numpy arrays and dtypes: the arguments numpy's globals take (a dtype,
//! a shape, the data), and `BUILD`, which sets the state of a dtype or of
//! an array `_reconstruct` made.

use std::mem;

use bytes::Bytes;

use super::{Item, Reader, Stop};
use crate::ndarray::NdArray;
use crate::pickle::error::PickleError;
use crate::pickle::numpy;
use crate::value::{Integer, Value};

impl Reader<'_> {
    /// numpy's `dtype.str` of a dtype argument (read, never moved: arrays
    /// share their dtype through the memo).
    pub(super) fn dtype_arg(&self, item: &Item) -> Result<String, Stop> {
        let item = match item {
            &Item::Ref(a) => &self.obj(a)?.item,
            item => item,
        };
        match item {
            Item::Dtype(d) => d
                .str()
                .map(str::to_owned)
                .ok_or_else(|| self.invalid("a numpy.dtype used before its state is set")),
            _ => Err(self.invalid("a numpy argument that is not a dtype")),
        }
    }

    /// A shape argument: a tuple of non-negative integers.
    pub(super) fn shape_arg(&mut self, item: Item) -> Result<Vec<u64>, Stop> {
        let v = self.value_arg(item)?;
        v.int_items()
            .and_then(|items| items.map(|i| i.and_then(Integer::as_u64)).collect())
            .ok_or_else(|| self.invalid("a numpy shape that is not a tuple of sizes"))
    }

    /// A data argument: bytes (read-only) or a writable buffer.
    pub(super) fn data_arg(&mut self, item: Item) -> Result<(Bytes, bool), Stop> {
        let item = match item {
            Item::Ref(a) => self.take(a)?,
            item => item,
        };
        match item {
            Item::Buffer(b) => Ok((b, true)),
            Item::Value(Value::Bin(b)) => Ok((b, false)),
            _ => Err(self.invalid("numpy data that is not bytes or a buffer")),
        }
    }

    pub(super) fn array_value(&self, r: Result<NdArray, PickleError>) -> Result<Item, Stop> {
        Ok(Item::Value(Value::NdArray(Box::new(r?))))
    }

    /// `BUILD`: the state of a numpy dtype, or of an array `_reconstruct`
    /// made.
    pub(super) fn build(&mut self) -> Result<(), Stop> {
        let state = self.pop()?;
        if self.stack.len() <= self.fence() {
            return Err(self.invalid("BUILD without an object"));
        }
        let index = self.stack.len() - 1;
        let target = match self.stack[index].item {
            Item::Ref(a) => {
                if self.obj(a)?.copied {
                    return Err(PickleError::Recursive { at: self.at }.into());
                }
                Some(a)
            }
            _ => None,
        };
        let current = match target {
            Some(a) => &self.arena[a as usize].item,
            None => &self.stack[index].item,
        };
        let dtype = match current {
            Item::Dtype(d) => Some((**d).clone()),
            Item::Reconstructing => None,
            _ => return Err(self.invalid("BUILD of something not a numpy dtype or array")),
        };
        let built = match dtype {
            Some(mut d) => {
                let state: Vec<Value> = self
                    .arguments(state)?
                    .into_iter()
                    .map(|item| self.value_arg(item))
                    .collect::<Result<_, _>>()?;
                d.build(&state)?;
                Item::Dtype(Box::new(d))
            }
            None => {
                let mut args = self.arguments(state)?;
                let [Item::Value(version), shape, dtype, Item::Value(Value::Bool(fortran)), data] =
                    args.as_mut_slice()
                else {
                    return Err(self.invalid("a numpy array state that is not numpy's"));
                };
                if version.as_int().and_then(|v| v.as_u64()) != Some(1) {
                    return Err(self.invalid("a numpy array state that is not version 1"));
                }
                let fortran = *fortran;
                let dtype = self.dtype_arg(dtype)?;
                let shape = self.shape_arg(mem::replace(shape, Item::Moved))?;
                let (data, _) = self.data_arg(mem::replace(data, Item::Moved))?;
                // numpy copies the data into an array of its own.
                self.array_value(numpy::array(&dtype, shape, fortran, true, data))?
            }
        };
        match target {
            Some(a) => self.arena[a as usize].item = built,
            None => self.stack[index].item = built,
        }
        Ok(())
    }
}
