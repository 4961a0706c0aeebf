//! [`PickleError`]: why a pickle is not read into a [`Value`](crate::Value).

use std::fmt;

use crate::serialize::DeserializeError;

/// Why a pickle was not read: it is malformed or hostile, or it holds
/// something that is not plain data. The pickle (or its block) is left as
/// it was; nothing was imported or executed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PickleError {
    /// The pickle ends inside an opcode or its argument, or before `STOP`.
    Truncated {
        /// Where the incomplete opcode starts.
        at: usize,
    },
    /// An opcode framewire does not read: the text opcodes of protocol 0,
    /// `DUP`, persistent ids, the extension registry, and the opcodes that
    /// build class instances (`INST`, `OBJ`, `NEWOBJ`, `NEWOBJ_EX`).
    UnsupportedOpcode {
        /// The opcode byte.
        opcode: u8,
        /// Its offset.
        at: usize,
    },
    /// A `PROTO` above 5.
    UnsupportedProtocol {
        /// The protocol.
        protocol: u8,
    },
    /// A global that is not one of the few framewire interprets (numpy's
    /// array and scalar reconstructors, `builtins.complex`, `set`,
    /// `frozenset`, `bytearray`, `bytes`, `_codecs.encode`): a class, a
    /// function, anything whose object is not plain data. It is never
    /// imported.
    GlobalNotAllowed {
        /// The module, as the pickle names it (cut at 200 bytes).
        module: String,
        /// The name (cut at 200 bytes).
        name: String,
    },
    /// Something that is not plain data where a value goes: a global, a
    /// `numpy.dtype`, an array without its state.
    NotPlainData {
        /// What it is.
        what: &'static str,
        /// Where the opcode that placed it starts.
        at: usize,
    },
    /// An opcode whose operands are not what it needs: an empty stack, a
    /// missing mark, a dict key without a value, a `REDUCE` or `BUILD`
    /// whose arguments are not the shape numpy (or `builtins`) writes.
    Invalid {
        /// What is wrong.
        reason: &'static str,
        /// Where the opcode starts.
        at: usize,
    },
    /// An integer outside `-2^63 ..= 2^64 - 1`, the range of
    /// [`Value::Int`](crate::Value::Int) (and of msgpack).
    IntegerOutOfRange {
        /// Where its opcode starts.
        at: usize,
    },
    /// A str that is not UTF-8 (a lone surrogate, which Python writes with
    /// `surrogatepass`).
    InvalidUtf8 {
        /// Where its opcode starts.
        at: usize,
    },
    /// Containers nested deeper than [`Limits::max_depth`](crate::Limits).
    DepthExceeded {
        /// The limit.
        limit: usize,
    },
    /// More values than the pickle has bytes, or than
    /// [`Limits::max_pickle_values`](crate::Limits): a value-count bomb, or
    /// shared references (memo `GET`s of one container) that would be copied
    /// out past that.
    TooManyValues {
        /// The bound: the smaller of the two.
        limit: usize,
    },
    /// A memo `GET` of an index never `PUT`, or a `PUT` at an index past the
    /// bound on values.
    MemoIndex {
        /// The index.
        index: u64,
        /// Where the opcode starts.
        at: usize,
    },
    /// A container that contains itself (a cycle), which a
    /// [`Value`](crate::Value) tree cannot hold.
    Recursive {
        /// Where the opcode that closed the cycle starts.
        at: usize,
    },
    /// `NEXT_BUFFER` with no out-of-band buffer left.
    MissingBuffer {
        /// Buffers given.
        given: usize,
        /// Where the opcode starts.
        at: usize,
    },
    /// A numpy dtype that [`NdArray`](crate::NdArray) does not hold: object
    /// (`|O`), structured, void, sub-array dtypes.
    UnsupportedDtype {
        /// The dtype, as numpy spells it in the pickle (cut at 200 bytes).
        dtype: String,
    },
    /// A numpy array whose shape, dtype and data do not agree.
    InvalidArray {
        /// What is wrong.
        reason: &'static str,
    },
    /// A block that holds no pickle: neither a `{"__Pickled__": i}` block
    /// with a `pickled-obj` nor a block of Dask's `pickle` family.
    NotPickle,
    /// The block's frames could not be merged or decompressed.
    Block(DeserializeError),
}

/// At most this many bytes of a name or dtype from the input go into an error.
pub(super) const MAX_NAME: usize = 200;

/// `bytes` as text for an error message: lossy UTF-8, cut at [`MAX_NAME`].
pub(super) fn shown(bytes: &[u8]) -> String {
    String::from_utf8_lossy(&bytes[..bytes.len().min(MAX_NAME)]).into_owned()
}

impl fmt::Display for PickleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use PickleError::*;
        match self {
            Truncated { at } => write!(f, "pickle truncated at byte {at}"),
            UnsupportedOpcode { opcode, at } => {
                write!(f, "pickle opcode 0x{opcode:02x} at byte {at} is not read")
            }
            UnsupportedProtocol { protocol } => write!(f, "pickle protocol {protocol} (above 5)"),
            GlobalNotAllowed { module, name } => {
                write!(f, "pickle global not allowed: {module}.{name}")
            }
            NotPlainData { what, at } => {
                write!(f, "pickle holds {what} where a value goes (byte {at})")
            }
            Invalid { reason, at } => write!(f, "invalid pickle at byte {at}: {reason}"),
            IntegerOutOfRange { at } => write!(
                f,
                "pickle integer at byte {at} is outside -2^63 ..= 2^64 - 1"
            ),
            InvalidUtf8 { at } => write!(f, "pickle str at byte {at} is not UTF-8"),
            DepthExceeded { limit } => write!(f, "pickle containers nested deeper than {limit}"),
            TooManyValues { limit } => write!(
                f,
                "pickle makes more than {limit} values (its length, or Limits::max_pickle_values)"
            ),
            MemoIndex { index, at } => write!(f, "pickle memo index {index} at byte {at}"),
            Recursive { at } => write!(f, "pickle container contains itself (byte {at})"),
            MissingBuffer { given, at } => write!(
                f,
                "pickle asks for an out-of-band buffer at byte {at}; {given} given, all used"
            ),
            UnsupportedDtype { dtype } => write!(f, "numpy dtype {dtype:?} is not read"),
            InvalidArray { reason } => write!(f, "invalid numpy array in pickle: {reason}"),
            NotPickle => f.write_str("the block holds no pickle"),
            Block(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for PickleError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PickleError::Block(e) => Some(e),
            _ => None,
        }
    }
}

impl From<DeserializeError> for PickleError {
    fn from(e: DeserializeError) -> PickleError {
        PickleError::Block(e)
    }
}
