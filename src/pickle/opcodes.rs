//! The pickle opcodes framewire reads and writes, named as Python's
//! `pickletools` names them, and what follows each in the pickle
//! ([`argument`]). The text opcodes of protocol 0 (but `GLOBAL`), `DUP`,
//! persistent ids and the extension registry are not here: the reader
//! refuses them.

// Protocol and framing.
/// `\x80`: the protocol, one byte (2 to 5).
pub(super) const PROTO: u8 = 0x80;
/// `\x95`: a frame's length, 8 bytes (protocol 4 on): a hint.
pub(super) const FRAME: u8 = 0x95;
/// `.`: the end; the top of the stack is the value.
pub(super) const STOP: u8 = b'.';

// The stack.
/// `(`: a mark below the items of a container or a call.
pub(super) const MARK: u8 = b'(';
/// `0`: drops the top item.
pub(super) const POP: u8 = b'0';
/// `1`: drops the items down to the last mark, and the mark.
pub(super) const POP_MARK: u8 = b'1';

// Scalars.
/// `N`: `None`.
pub(super) const NONE: u8 = b'N';
/// `\x88`: `True`.
pub(super) const NEWTRUE: u8 = 0x88;
/// `\x89`: `False`.
pub(super) const NEWFALSE: u8 = 0x89;
/// `K`: an int in 1 unsigned byte.
pub(super) const BININT1: u8 = b'K';
/// `M`: an int in 2 unsigned bytes, little-endian.
pub(super) const BININT2: u8 = b'M';
/// `J`: an int in 4 signed bytes, little-endian.
pub(super) const BININT: u8 = b'J';
/// `\x8a`: an int in n two's complement bytes, n in 1 byte.
pub(super) const LONG1: u8 = 0x8a;
/// `\x8b`: an int in n two's complement bytes, n in 4 signed bytes.
pub(super) const LONG4: u8 = 0x8b;
/// `G`: a float in 8 bytes, big-endian.
pub(super) const BINFLOAT: u8 = b'G';
/// `\x8c`: a str of n UTF-8 bytes, n in 1 byte.
pub(super) const SHORT_BINUNICODE: u8 = 0x8c;
/// `X`: a str, n in 4 bytes.
pub(super) const BINUNICODE: u8 = b'X';
/// `\x8d`: a str, n in 8 bytes.
pub(super) const BINUNICODE8: u8 = 0x8d;
/// `C`: bytes, n in 1 byte (protocol 3 on).
pub(super) const SHORT_BINBYTES: u8 = b'C';
/// `B`: bytes, n in 4 bytes.
pub(super) const BINBYTES: u8 = b'B';
/// `\x8e`: bytes, n in 8 bytes.
pub(super) const BINBYTES8: u8 = 0x8e;
/// `\x96`: a bytearray, n in 8 bytes (protocol 5).
pub(super) const BYTEARRAY8: u8 = 0x96;

// Containers.
/// `)`: `()`.
pub(super) const EMPTY_TUPLE: u8 = b')';
/// `\x85`: a tuple of the top item.
pub(super) const TUPLE1: u8 = 0x85;
/// `\x86`: a tuple of the top two items.
pub(super) const TUPLE2: u8 = 0x86;
/// `\x87`: a tuple of the top three items.
pub(super) const TUPLE3: u8 = 0x87;
/// `t`: a tuple of the items above the mark.
pub(super) const TUPLE: u8 = b't';
/// `]`: `[]`.
pub(super) const EMPTY_LIST: u8 = b']';
/// `l`: a list of the items above the mark.
pub(super) const LIST: u8 = b'l';
/// `a`: the top item appended to the list below it.
pub(super) const APPEND: u8 = b'a';
/// `e`: the items above the mark appended to the list below it.
pub(super) const APPENDS: u8 = b'e';
/// `}`: `{}`.
pub(super) const EMPTY_DICT: u8 = b'}';
/// `d`: a dict of the key, value pairs above the mark.
pub(super) const DICT: u8 = b'd';
/// `s`: the top key, value pair set in the dict below it.
pub(super) const SETITEM: u8 = b's';
/// `u`: the pairs above the mark set in the dict below it.
pub(super) const SETITEMS: u8 = b'u';
/// `\x8f`: `set()` (protocol 4 on).
pub(super) const EMPTY_SET: u8 = 0x8f;
/// `\x90`: the items above the mark added to the set below it.
pub(super) const ADDITEMS: u8 = 0x90;
/// `\x91`: a frozenset of the items above the mark.
pub(super) const FROZENSET: u8 = 0x91;

// The memo.
/// `h`: pushes memo entry n, n in 1 byte.
pub(super) const BINGET: u8 = b'h';
/// `j`: pushes memo entry n, n in 4 bytes.
pub(super) const LONG_BINGET: u8 = b'j';
/// `q`: the top item as memo entry n, n in 1 byte.
pub(super) const BINPUT: u8 = b'q';
/// `r`: the top item as memo entry n, n in 4 bytes.
pub(super) const LONG_BINPUT: u8 = b'r';
/// `\x94`: the top item as the next memo entry (protocol 4 on).
pub(super) const MEMOIZE: u8 = 0x94;

// Globals and calls.
/// `c`: a global, its module and name each a line.
pub(super) const GLOBAL: u8 = b'c';
/// `\x93`: a global, its module and name the top two strs (protocol 4 on).
pub(super) const STACK_GLOBAL: u8 = 0x93;
/// `R`: the global below the top item called with it (a tuple).
pub(super) const REDUCE: u8 = b'R';
/// `b`: the top item set as the state of the object below it.
pub(super) const BUILD: u8 = b'b';
/// `\x81`: `cls.__new__(cls, *args)` (protocol 2).
pub(super) const NEWOBJ: u8 = 0x81;
/// `\x92`: `cls.__new__(cls, *args, **kwargs)` (protocol 4).
pub(super) const NEWOBJ_EX: u8 = 0x92;

// Out-of-band buffers (protocol 5).
/// `\x97`: the next out-of-band buffer.
pub(super) const NEXT_BUFFER: u8 = 0x97;
/// `\x98`: the top buffer made read-only.
pub(super) const READONLY_BUFFER: u8 = 0x98;

/// What follows an opcode in the pickle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Argument {
    /// Nothing.
    None,
    /// This many bytes.
    Fixed(usize),
    /// A little-endian length in this many bytes, then that many bytes.
    Counted(usize),
    /// Two newline-terminated lines (`GLOBAL`).
    Lines,
}

/// What follows `op`; `None` for an opcode framewire does not read.
pub(super) fn argument(op: u8) -> Option<Argument> {
    Some(match op {
        BININT1 | BINGET | BINPUT | PROTO => Argument::Fixed(1),
        BININT2 => Argument::Fixed(2),
        BININT | LONG_BINGET | LONG_BINPUT => Argument::Fixed(4),
        BINFLOAT | FRAME => Argument::Fixed(8),
        LONG1 | SHORT_BINUNICODE | SHORT_BINBYTES => Argument::Counted(1),
        LONG4 | BINUNICODE | BINBYTES => Argument::Counted(4),
        BINUNICODE8 | BINBYTES8 | BYTEARRAY8 => Argument::Counted(8),
        GLOBAL => Argument::Lines,
        STOP | MARK | POP | POP_MARK | NONE | NEWTRUE | NEWFALSE | EMPTY_TUPLE | TUPLE1
        | TUPLE2 | TUPLE3 | TUPLE | EMPTY_LIST | LIST | APPEND | APPENDS | EMPTY_DICT | DICT
        | SETITEM | SETITEMS | EMPTY_SET | ADDITEMS | FROZENSET | MEMOIZE | STACK_GLOBAL
        | REDUCE | BUILD | NEXT_BUFFER | READONLY_BUFFER => Argument::None,
        _ => return None,
    })
}
