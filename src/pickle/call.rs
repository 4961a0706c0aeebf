//! Calls of named Python functions as pickles (crate-internal): what
//! framewire's Dask client writes to have a cluster compute. The only
//! globals written are a [`PyFunction`] the program made and the fixed
//! constants of [`Fixed`]; nothing received ever names one.

use super::PyFunction;
use crate::value::Value;

/// The globals of framewire's own code, module and name constants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fixed {
    /// `numpy.dtype`.
    NumpyDtype,
    /// `numpy._core.multiarray.scalar`.
    NumpyScalar,
    /// `numpy._core.numeric._frombuffer`.
    NumpyFromBuffer,
    /// `dask._expr.Expr._reconstruct` (2025.4.0 and later).
    ExprReconstruct,
    /// `dask._expr.LLGExpr`.
    LlgExpr,
    /// `dask._task_spec.TaskRef`.
    TaskRef,
    /// `dask.utils.apply`: a call with keyword arguments.
    Apply,
    /// `distributed.protocol.serialize.ToPickle` (2024.12.1 – 2025.3.x).
    ToPickle,
    /// `dask.highlevelgraph.HighLevelGraph` (2024.12.1 – 2025.3.x).
    HighLevelGraph,
}

impl Fixed {
    /// The module and the qualified name.
    pub(crate) fn names(self) -> (&'static str, &'static str) {
        match self {
            Fixed::NumpyDtype => ("numpy", "dtype"),
            Fixed::NumpyScalar => ("numpy._core.multiarray", "scalar"),
            Fixed::NumpyFromBuffer => ("numpy._core.numeric", "_frombuffer"),
            Fixed::ExprReconstruct => ("dask._expr", "Expr._reconstruct"),
            Fixed::LlgExpr => ("dask._expr", "LLGExpr"),
            Fixed::TaskRef => ("dask._task_spec", "TaskRef"),
            Fixed::Apply => ("dask.utils", "apply"),
            Fixed::ToPickle => ("distributed.protocol.serialize", "ToPickle"),
            Fixed::HighLevelGraph => ("dask.highlevelgraph", "HighLevelGraph"),
        }
    }
}

/// A global the writer may name: one of its own constants, or a function
/// the program named. There is no other way to write one.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Global<'a> {
    Fixed(Fixed),
    Function(&'a PyFunction),
}

/// A Python object to pickle: plain values, globals, containers of them,
/// calls.
#[derive(Clone, Debug)]
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
pub(crate) const MAX_CALL_DEPTH: usize = 256;
