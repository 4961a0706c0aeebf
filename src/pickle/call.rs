//! Calls of named Python functions as pickles (crate-internal): what
//! framewire's Dask client writes to have a cluster compute. The only
//! globals written are a [`PyFunction`] the program made and the fixed
//! constants of [`Fixed`]; nothing received ever names one.

use super::PyFunction;
use crate::value::Value;

/// A global of framewire's own code: a module and a qualified name written
/// as constants in the source ([`Fixed::new`] is crate-private; the numpy
/// constructors are below, the task graph's in `dask::task`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Fixed {
    module: &'static str,
    qualname: &'static str,
}

impl Fixed {
    /// A constant of the code: never built from data.
    pub(crate) const fn new(module: &'static str, qualname: &'static str) -> Fixed {
        Fixed { module, qualname }
    }

    /// The module and the qualified name.
    pub(crate) fn names(self) -> (&'static str, &'static str) {
        (self.module, self.qualname)
    }
}

/// `numpy.dtype`.
pub(crate) const NUMPY_DTYPE: Fixed = Fixed::new("numpy", "dtype");
/// `numpy._core.multiarray.scalar`.
pub(crate) const NUMPY_SCALAR: Fixed = Fixed::new("numpy._core.multiarray", "scalar");
/// `numpy._core.numeric._frombuffer`.
pub(crate) const NUMPY_FROMBUFFER: Fixed = Fixed::new("numpy._core.numeric", "_frombuffer");

/// A global the writer may name: one of its own constants, or a function
/// the program named. There is no other way to write one.
#[derive(Clone, Copy, Debug)]
// Functions and calls are written for the task graphs of the layer above
// (`dask`); a build without it writes only numpy's globals.
#[allow(dead_code)]
pub(crate) enum Global<'a> {
    Fixed(Fixed),
    Function(&'a PyFunction),
}

/// A Python object to pickle: plain values, globals, containers of them,
/// calls.
#[derive(Clone, Debug)]
#[allow(dead_code)] // (see Global)
pub(crate) enum Py {
    /// A plain value (as [`dumps`](super::dumps) writes it).
    Value(Value),
    /// A fixed global.
    Fixed(Fixed),
    /// A function the program named.
    Function(PyFunction),
    /// A tuple.
    Tuple(Vec<Py>),
    /// A list.
    List(Vec<Py>),
    /// A dict.
    Dict(Vec<(Py, Py)>),
    /// `set()`.
    EmptySet,
    /// `f(*args)` (`REDUCE`).
    Call(Box<Py>, Vec<Py>),
}

/// Calls nested deeper than this are refused.
#[allow(dead_code)] // (see Global)
pub(crate) const MAX_CALL_DEPTH: usize = 256;
