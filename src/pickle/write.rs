//! The writer: a [`Value`] as a protocol 5 pickle that CPython (with numpy
//! 2 for arrays) reads, arrays out of band.

use bytes::Bytes;

use super::call::{Global, Py, MAX_CALL_DEPTH, NUMPY_DTYPE, NUMPY_FROMBUFFER, NUMPY_SCALAR};
use super::numpy;
use super::opcodes::*;
use crate::error::EncodeError;
use crate::ndarray::NdArray;
use crate::value::Value;

/// Containers nested deeper than this are refused (as msgpack-python's
/// limit, which framewire's msgpack encoder keeps too).
const MAX_DEPTH: usize = 1024;

/// `value` as a pickle and the out-of-band buffers its `NEXT_BUFFER`s take,
/// in order: each array's data (itself when it is C- or
/// Fortran-contiguous), and whether the array is writeable.
pub(super) fn dumps(value: &Value) -> Result<(Bytes, Vec<(Bytes, bool)>), EncodeError> {
    let mut w = Writer {
        out: vec![PROTO, 5],
        buffers: Vec::new(),
    };
    w.value(value)?;
    w.out.push(STOP);
    Ok((Bytes::from(w.out), w.buffers))
}

struct Writer {
    out: Vec<u8>,
    buffers: Vec<(Bytes, bool)>,
}

/// The opcodes of a str with a 1-, 4- or 8-byte length.
const STR: [u8; 3] = [SHORT_BINUNICODE, BINUNICODE, BINUNICODE8];
/// The opcodes of bytes with a 1-, 4- or 8-byte length.
const BYTES: [u8; 3] = [SHORT_BINBYTES, BINBYTES, BINBYTES8];

/// What no Python dict key can be: a dict, or an n-dimensional array.
const UNHASHABLE: EncodeError = EncodeError::Unserializable {
    what: "a dict key Python cannot hash (a map or an array)",
};

/// What is left to write: a value (how deep, and whether inside a dict
/// key), or the opcode that closes a container.
enum Task<'v> {
    Value(&'v Value, usize, bool),
    Close(u8),
}

impl Writer {
    /// Writes `root` with an explicit stack: nesting costs heap, never call
    /// stack.
    fn value(&mut self, root: &Value) -> Result<(), EncodeError> {
        let mut tasks = vec![Task::Value(root, 0, false)];
        while let Some(task) = tasks.pop() {
            let (v, depth, key) = match task {
                Task::Close(op) => {
                    self.out.push(op);
                    continue;
                }
                Task::Value(v, depth, key) => (v, depth, key),
            };
            match v {
                Value::Nil => self.out.push(NONE),
                Value::Bool(true) => self.out.push(NEWTRUE),
                Value::Bool(false) => self.out.push(NEWFALSE),
                Value::Int(i) => self.int(i.as_i128()),
                Value::Float(f) => {
                    self.out.push(BINFLOAT);
                    self.out.extend_from_slice(&f.to_be_bytes());
                }
                Value::Str(s) => self.str(s),
                Value::Bin(b) => self.counted(BYTES, b),
                Value::Array(items) => {
                    let depth = nested(depth)?;
                    if let Some(close) = self.open_tuple(items.len()) {
                        tasks.push(Task::Close(close));
                    }
                    tasks.extend(items.iter().rev().map(|x| Task::Value(x, depth, key)));
                }
                Value::IntArray(ints) => {
                    nested(depth)?;
                    self.tuple(ints.len(), |w| ints.iter().for_each(|&x| w.int(x.into())));
                }
                Value::BinArray(bins) => {
                    nested(depth)?;
                    self.tuple(bins.len(), |w| {
                        bins.iter().for_each(|b| w.counted(BYTES, &b))
                    });
                }
                Value::Map(_) if key => return Err(UNHASHABLE),
                Value::Map(entries) => {
                    let depth = nested(depth)?;
                    self.out.push(EMPTY_DICT);
                    if !entries.is_empty() {
                        self.out.push(MARK);
                        tasks.push(Task::Close(SETITEMS));
                        for (k, x) in entries.iter().rev() {
                            tasks.push(Task::Value(x, depth, false));
                            tasks.push(Task::Value(k, depth, true));
                        }
                    }
                }
                Value::NdArray(a) if a.logical_shape().is_empty() => self.scalar(a)?,
                Value::NdArray(_) if key => return Err(UNHASHABLE),
                Value::NdArray(a) => self.array(a)?,
                Value::Serialized(_) | Value::Pickled(_) => {
                    return Err(EncodeError::Unserializable {
                        what: "a block (it is serialized already)",
                    })
                }
                Value::ToSerialize(_) => {
                    return Err(EncodeError::Unserializable {
                        what: "a Serialize wrapper (pickle its value)",
                    })
                }
            }
        }
        Ok(())
    }

    /// Opens a tuple of `n` items, and gives the opcode that closes it
    /// after them (none for `EMPTY_TUPLE`, which is whole).
    fn open_tuple(&mut self, n: usize) -> Option<u8> {
        match n {
            0 => {
                self.out.push(EMPTY_TUPLE);
                None
            }
            1..=3 => Some([TUPLE1, TUPLE2, TUPLE3][n - 1]),
            _ => {
                self.out.push(MARK);
                Some(TUPLE)
            }
        }
    }

    /// A tuple of `n` leaves that `items` writes.
    fn tuple(&mut self, n: usize, items: impl FnOnce(&mut Writer)) {
        let close = self.open_tuple(n);
        items(self);
        self.out.extend(close);
    }

    /// The smallest of `BININT1`, `BININT2`, `BININT`, `LONG1`.
    fn int(&mut self, i: i128) {
        if let Ok(b) = u8::try_from(i) {
            self.out.extend_from_slice(&[BININT1, b]);
        } else if let Ok(b) = u16::try_from(i) {
            self.out.push(BININT2);
            self.out.extend_from_slice(&b.to_le_bytes());
        } else if let Ok(b) = i32::try_from(i) {
            self.out.push(BININT);
            self.out.extend_from_slice(&b.to_le_bytes());
        } else {
            // Two's complement, little-endian, as few bytes as keep the sign.
            let bytes = i.to_le_bytes();
            let mut n = bytes.len();
            while n > 1 {
                let (last, below) = (bytes[n - 1], bytes[n - 2]);
                let redundant =
                    (last == 0 && below & 0x80 == 0) || (last == 0xff && below & 0x80 != 0);
                if !redundant {
                    break;
                }
                n -= 1;
            }
            self.out.extend_from_slice(&[LONG1, n as u8]);
            self.out.extend_from_slice(&bytes[..n]);
        }
    }

    fn str(&mut self, s: &str) {
        self.counted(STR, s.as_bytes());
    }

    /// A str or bytes opcode with a 1-, 4- or 8-byte length, then the bytes.
    fn counted(&mut self, ops: [u8; 3], b: &[u8]) {
        let n = b.len();
        if let Ok(len) = u8::try_from(n) {
            self.out.extend_from_slice(&[ops[0], len]);
        } else if let Ok(len) = u32::try_from(n) {
            self.out.push(ops[1]);
            self.out.extend_from_slice(&len.to_le_bytes());
        } else {
            self.out.push(ops[2]);
            self.out.extend_from_slice(&(n as u64).to_le_bytes());
        }
        self.out.extend_from_slice(b);
    }

    /// A global (`STACK_GLOBAL`): only a [`Global`], never a name from
    /// data.
    fn global(&mut self, g: Global<'_>) {
        let (module, name) = match g {
            Global::Fixed(f) => f.names(),
            Global::Function(f) => (f.module(), f.qualname()),
        };
        self.str(module);
        self.str(name);
        self.out.push(STACK_GLOBAL);
    }

    /// `numpy.dtype(spec, False, True)` and its state, as
    /// `dtype.__reduce__` gives them.
    fn dtype(&mut self, dtype: &str) -> Result<(), EncodeError> {
        let p = numpy::dtype_parts(dtype)?;
        self.global(Global::Fixed(NUMPY_DTYPE));
        self.str(&p.spec);
        self.out
            .extend_from_slice(&[NEWFALSE, NEWTRUE, TUPLE3, REDUCE, MARK]);
        self.int(if p.datetime.is_some() { 4 } else { 3 });
        self.str(p.endian.encode_utf8(&mut [0; 4]));
        self.out.extend_from_slice(&[NONE; 3]);
        p.sizes.iter().for_each(|&s| self.int(s.into()));
        if let Some((unit, num)) = p.datetime {
            self.out.push(NONE);
            self.tuple(4, |w| {
                w.counted(BYTES, unit.as_bytes());
                w.int(num.into());
                w.int(1);
                w.int(1);
            });
            self.out.push(TUPLE2);
        }
        self.out.extend_from_slice(&[TUPLE, BUILD]);
        Ok(())
    }

    /// A 0-d array as the numpy scalar of its dtype (numpy's own pickle of
    /// one: `scalar(dtype, bytes)`).
    fn scalar(&mut self, a: &NdArray) -> Result<(), EncodeError> {
        self.global(Global::Fixed(NUMPY_SCALAR));
        self.dtype(a.dtype())?;
        self.counted(BYTES, &a.to_c_order());
        self.out.extend_from_slice(&[TUPLE2, REDUCE]);
        Ok(())
    }

    /// An array as numpy 2 pickles it at protocol 5 with a buffer callback:
    /// `_frombuffer(NEXT_BUFFER, dtype, shape, order)`, the buffer the
    /// array's own data when it is C- or Fortran-contiguous, else a C-order
    /// copy.
    fn array(&mut self, a: &NdArray) -> Result<(), EncodeError> {
        let (data, order) = match fortran_data(a) {
            Some(data) => (data, "F"),
            None => (a.to_c_order(), "C"),
        };
        self.global(Global::Fixed(NUMPY_FROMBUFFER));
        self.out.extend_from_slice(&[MARK, NEXT_BUFFER]);
        if !a.writeable() {
            self.out.push(READONLY_BUFFER);
        }
        self.buffers.push((data, a.writeable()));
        self.dtype(a.dtype())?;
        let shape = a.logical_shape();
        self.tuple(shape.len(), |w| shape.iter().for_each(|&n| w.int(n.into())));
        self.str(order);
        self.out.extend_from_slice(&[TUPLE, REDUCE]);
        Ok(())
    }
}

/// One level deeper, within [`MAX_DEPTH`].
fn nested(depth: usize) -> Result<usize, EncodeError> {
    match depth < MAX_DEPTH {
        true => Ok(depth + 1),
        false => Err(EncodeError::DepthExceeded { limit: MAX_DEPTH }),
    }
}

/// The data of an array that is Fortran-contiguous but not C-contiguous
/// (so written with order `F`, not copied).
fn fortran_data(a: &NdArray) -> Option<Bytes> {
    if a.broadcast_to().is_some() {
        return None;
    }
    let (shape, strides) = (a.shape(), a.strides());
    // Whether the axes, fastest first, step through the data without gaps.
    let contiguous = |axes: &[usize]| {
        let mut step = a.item_size() as u64;
        axes.iter().all(|&i| {
            let ok = shape[i] <= 1 || strides[i] == step;
            step = step.saturating_mul(shape[i]);
            ok
        })
    };
    let len = shape
        .iter()
        .try_fold(a.item_size() as u64, |n, &d| n.checked_mul(d))?;
    let mut axes: Vec<usize> = (0..shape.len()).collect();
    let f = contiguous(&axes);
    axes.reverse();
    let c = contiguous(&axes);
    (f && !c && a.data().len() as u64 >= len).then(|| a.data().slice(..len as usize))
}

/// `py` as a protocol 5 pickle and its out-of-band buffers (as [`dumps`]).
#[allow(dead_code)] // (see call::Global)
pub(super) fn dumps_py(py: &Py) -> Result<(Bytes, Vec<(Bytes, bool)>), EncodeError> {
    let mut w = Writer {
        out: vec![PROTO, 5],
        buffers: Vec::new(),
    };
    w.py(py, 0)?;
    w.out.push(STOP);
    Ok((Bytes::from(w.out), w.buffers))
}

impl Writer {
    /// A [`Py`] object, its plain values written as [`Writer::value`] does.
    #[allow(dead_code)] // (see call::Global)
    fn py(&mut self, py: &Py, depth: usize) -> Result<(), EncodeError> {
        if depth > MAX_CALL_DEPTH {
            return Err(EncodeError::DepthExceeded {
                limit: MAX_CALL_DEPTH,
            });
        }
        let depth = depth + 1;
        match py {
            Py::Value(v) => self.value(v)?,
            Py::Fixed(f) => self.global(Global::Fixed(*f)),
            Py::Function(f) => self.global(Global::Function(f)),
            Py::Tuple(items) => {
                let close = self.open_tuple(items.len());
                for x in items {
                    self.py(x, depth)?;
                }
                self.out.extend(close);
            }
            Py::List(items) => {
                self.out.push(EMPTY_LIST);
                if !items.is_empty() {
                    self.out.push(MARK);
                    for x in items {
                        self.py(x, depth)?;
                    }
                    self.out.push(APPENDS);
                }
            }
            Py::Dict(entries) => {
                self.out.push(EMPTY_DICT);
                if !entries.is_empty() {
                    self.out.push(MARK);
                    for (k, v) in entries {
                        self.py(k, depth)?;
                        self.py(v, depth)?;
                    }
                    self.out.push(SETITEMS);
                }
            }
            Py::EmptySet => self.out.push(EMPTY_SET),
            Py::Call(f, args) => {
                self.py(f, depth)?;
                let close = self.open_tuple(args.len());
                for x in args {
                    self.py(x, depth)?;
                }
                self.out.extend(close);
                self.out.push(REDUCE);
            }
        }
        Ok(())
    }
}
