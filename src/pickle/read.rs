//! The reader: pickle's stack machine, for the opcodes CPython writes for
//! plain values at protocols 2 to 5, every opcode bounded (see the module
//! docs of [`crate::pickle`]). Nothing is imported or called: the few
//! globals it knows are interpreted by name.

use std::mem;
use std::ops::Range;

use bytes::Bytes;
use bytestring::ByteString;

use super::error::{shown, PickleError};
use super::keys;
use super::numpy::{self, Dtype};
use crate::limits::Limits;
use crate::ndarray::NdArray;
use crate::serialize::PACK_MIN;
use crate::value::{Integer, Value};

/// Reads one pickle, its `NEXT_BUFFER`s taken from `buffers` in order.
///
/// A first pass moves every container into the one holding it. If a memo
/// `GET` then asks for a container already moved (one object referenced
/// twice, which a [`Value`] tree holds as two copies), the pickle is read
/// again knowing which memo entries are ever fetched: those are copied
/// where they are used, the others still moved.
pub(super) fn loads(
    data: &Bytes,
    buffers: &[Bytes],
    limits: &Limits,
) -> Result<Value, PickleError> {
    // Memo slots, arena and span indexes are u32s whose top bit is a tag;
    // each counts at most one per opcode byte, so a pickle under 2^31 bytes
    // keeps them in range.
    if data.len() >= SPAN as usize {
        return Err(PickleError::TooManyValues {
            limit: SPAN as usize - 1,
        });
    }
    match Reader::new(data, buffers, limits, None).run() {
        Ok(v) => Ok(v),
        Err(Stop::Error(e)) => Err(e),
        Err(Stop::Shared) => {
            let fetched = fetched_ids(data);
            match Reader::new(data, buffers, limits, Some(fetched)).run() {
                Ok(v) => Ok(v),
                Err(Stop::Error(e)) => Err(e),
                Err(Stop::Shared) => unreachable!("the sharing pass never moves a fetched entry"),
            }
        }
    }
}

/// Why a pass stopped.
enum Stop {
    Error(PickleError),
    /// The fast pass needs a container it has moved: read again, sharing.
    Shared,
}

impl From<PickleError> for Stop {
    fn from(e: PickleError) -> Stop {
        Stop::Error(e)
    }
}

/// The globals framewire interprets, by name; none is ever imported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Global {
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
    fn find(module: &[u8], name: &[u8]) -> Result<Global, PickleError> {
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

/// What the machine's stack (and memo) hold.
#[derive(Clone, Debug)]
enum Item {
    /// A plain value. Lists and sets are kept as [`Value::IntArray`] while
    /// they hold only integers (unpacked again under [`PACK_MIN`] items).
    Value(Value),
    /// A writable buffer: a `bytearray`, or an out-of-band buffer not marked
    /// read-only. A [`Value::Bin`] once it is placed anywhere.
    Buffer(Bytes),
    /// A memoized object that can still change (a container, a dtype, an
    /// array awaiting its state), kept in the arena: its index there.
    Ref(u32),
    /// A global.
    Global(Global),
    /// A `numpy.dtype`.
    Dtype(Box<Dtype>),
    /// `_reconstruct(ndarray, (0,), b"b")`: an array awaiting its state.
    Reconstructing,
    /// A tuple holding something other than values: the arguments of a
    /// numpy call.
    Args(Vec<Item>),
    /// An arena object moved into the container that holds it.
    Moved,
}

impl Item {
    /// What it is, for [`PickleError::NotPlainData`].
    fn what(&self) -> &'static str {
        match self {
            Item::Global(_) => "a global",
            Item::Dtype(_) => "a numpy.dtype",
            Item::Reconstructing => "a numpy array without its state",
            Item::Args(_) => "a tuple holding a global or a numpy.dtype",
            _ => "an object",
        }
    }
}

/// A stack entry: an item and how deeply its containers nest (0 for a
/// scalar; for a [`Item::Ref`], the arena object's own depth counts).
struct Slot {
    item: Item,
    depth: u32,
}

/// A memo entry.
enum Entry {
    /// A value that cannot change: `GET` pushes a copy (a handle to the same
    /// bytes).
    Copy(Item),
    /// An arena object: `GET` pushes a reference to it.
    Obj(u32),
}

/// A memoized object that can change.
struct Obj {
    item: Item,
    depth: u32,
    /// Some memo `GET` fetches it: copied where it is used, never moved.
    shared: bool,
    /// Copied out at least once: changing it now would make the copies
    /// stale (only a cycle does that).
    copied: bool,
}

struct Reader<'a> {
    data: &'a Bytes,
    pos: usize,
    /// Where the current opcode starts.
    at: usize,
    buffers: &'a [Bytes],
    next_buffer: usize,
    limits: &'a Limits,
    /// The sharing pass: which memo ids some `GET` fetches.
    fetched: Option<Vec<bool>>,
    stack: Vec<Slot>,
    marks: Vec<usize>,
    /// Memo id → 1 + index in `entries`; 0 when unset; with [`SPAN`] set,
    /// an index in `spans`.
    memo: Vec<u32>,
    /// Distinct ids set: where `MEMOIZE` puts the next one.
    memo_len: usize,
    entries: Vec<Entry>,
    /// Where the scalars [`Reader::scalar_run`] memoizes start (their
    /// opcode): decoded again when a `GET` first fetches them, so that a
    /// memoized str costs 8 bytes and no reference count until then.
    spans: Vec<usize>,
    arena: Vec<Obj>,
    /// Values pushed plus values copied out of shared objects...
    values: usize,
    /// ...at most this many: the pickle's length, or
    /// [`Limits::max_pickle_values`] if less.
    max_values: usize,
    /// The values of the run [`Reader::scalar_run`] is reading, and the
    /// memo ids its `MEMOIZE`s set with the index of the value each holds
    /// and where that value's opcode starts (`None` for a value a `GET`
    /// fetched) (kept to reuse their memory).
    run: Vec<Value>,
    run_memo: Vec<(usize, usize, Option<usize>)>,
}

/// A memo slot with this bit set is an index in [`Reader::spans`].
const SPAN: u32 = 1 << 31;

/// A value as it leaves the machine, placed in a container or returned: an
/// [`Value::IntArray`] too short to stay packed becomes an array, a dict
/// keeps one entry per key (Python's [`keys::merge_repeated`]).
fn finished(v: Value) -> Value {
    match v {
        Value::IntArray(ints) if ints.len() < PACK_MIN => {
            Value::Array(ints.into_iter().map(Value::from).collect())
        }
        Value::Map(mut entries) => {
            keys::merge_repeated(&mut entries);
            Value::Map(entries)
        }
        v => v,
    }
}

/// Values in `v`, containers and their items (an [`Value::IntArray`] counts
/// its integers).
fn count(v: &Value) -> usize {
    match v {
        Value::Array(items) => 1 + items.iter().map(count).sum::<usize>(),
        Value::IntArray(ints) => 1 + ints.len(),
        Value::Map(entries) => {
            1 + entries
                .iter()
                .map(|(k, x)| count(k) + count(x))
                .sum::<usize>()
        }
        _ => 1,
    }
}

/// Items, as the arguments of a call: each one.
fn item_count(item: &Item) -> usize {
    match item {
        Item::Value(v) => count(v),
        Item::Args(items) => 1 + items.iter().map(item_count).sum::<usize>(),
        _ => 1,
    }
}

/// Whether an item is a value as it stands: no reference to follow, no
/// numpy object. What the fast paths move straight into a container.
fn is_plain(item: &Item) -> bool {
    matches!(item, Item::Value(_) | Item::Buffer(_))
}

/// An item [`is_plain`] says is a value, as that value.
fn plain(item: Item) -> Value {
    match item {
        Item::Value(v) => finished(v),
        Item::Buffer(b) => Value::Bin(b),
        _ => unreachable!("is_plain is checked first"),
    }
}

/// Appends `values` to a list or set (packed while they are integers).
fn extend(
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

/// `bytes` as a latin-1 str encodes them (`_codecs.encode(s, "latin1")`).
fn latin1(s: &str) -> Option<Bytes> {
    s.chars()
        .map(|c| u8::try_from(u32::from(c)).ok())
        .collect::<Option<Vec<u8>>>()
        .map(Bytes::from)
}

impl<'a> Reader<'a> {
    fn new(
        data: &'a Bytes,
        buffers: &'a [Bytes],
        limits: &'a Limits,
        fetched: Option<Vec<bool>>,
    ) -> Reader<'a> {
        Reader {
            data,
            pos: 0,
            at: 0,
            buffers,
            next_buffer: 0,
            limits,
            fetched,
            stack: Vec::new(),
            marks: Vec::new(),
            memo: Vec::new(),
            memo_len: 0,
            entries: Vec::new(),
            spans: Vec::new(),
            arena: Vec::new(),
            values: 0,
            max_values: data.len().min(limits.max_pickle_values),
            run: Vec::new(),
            run_memo: Vec::new(),
        }
    }

    fn invalid(&self, reason: &'static str) -> Stop {
        Stop::Error(PickleError::Invalid {
            reason,
            at: self.at,
        })
    }

    /// The next `n` bytes, as a range of `data`: none is allocated before
    /// they are all there.
    fn span(&mut self, n: u64) -> Result<Range<usize>, Stop> {
        let left = (self.data.len() - self.pos) as u64;
        if n > left {
            return Err(PickleError::Truncated { at: self.at }.into());
        }
        let start = self.pos;
        self.pos += n as usize;
        Ok(start..self.pos)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], Stop> {
        let r = self.span(N as u64)?;
        Ok(self.data[r].try_into().expect("N bytes"))
    }

    fn byte(&mut self) -> Result<u8, Stop> {
        Ok(self.array::<1>()?[0])
    }

    fn u32(&mut self) -> Result<u32, Stop> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    fn u64(&mut self) -> Result<u64, Stop> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// Counts `n` more values, within the bound.
    fn count(&mut self, n: usize) -> Result<(), Stop> {
        self.values = self.values.saturating_add(n);
        match self.values > self.max_values {
            true => Err(PickleError::TooManyValues {
                limit: self.max_values,
            }
            .into()),
            false => Ok(()),
        }
    }

    fn push(&mut self, item: Item, depth: u32) -> Result<(), Stop> {
        self.count(1)?;
        self.stack.push(Slot { item, depth });
        Ok(())
    }

    fn push_value(&mut self, v: Value) -> Result<(), Stop> {
        self.push(Item::Value(v), 0)
    }

    fn pop(&mut self) -> Result<Slot, Stop> {
        match self.stack.len() > self.marks.last().copied().unwrap_or(0) {
            true => Ok(self.stack.pop().expect("a slot above the mark")),
            false => Err(self.invalid("an item is popped past a mark or the stack's bottom")),
        }
    }

    fn pop_mark(&mut self) -> Result<usize, Stop> {
        self.marks
            .pop()
            .ok_or_else(|| self.invalid("no mark on the stack"))
    }

    /// Runs the machine to `STOP`.
    fn run(mut self) -> Result<Value, Stop> {
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
                b'(' => {
                    self.marks.push(self.stack.len());
                    self.scalar_run()?;
                }
                b'.' => {
                    let top = self.pop()?;
                    return self.place(top);
                }
                b'0' => {
                    self.pop()?;
                }
                b'1' => {
                    let m = self.pop_mark()?;
                    self.stack.truncate(m);
                }
                0x96 => {
                    let n = self.u64()?;
                    let r = self.span(n)?;
                    self.push(Item::Buffer(self.data.slice(r)), 0)?;
                }
                b')' => self.push(Item::Value(Value::Array(Vec::new())), 1)?,
                0x85..=0x87 => {
                    let n = usize::from(op - 0x84);
                    let from = self.stack.len().checked_sub(n);
                    match from.filter(|&f| f >= self.marks.last().copied().unwrap_or(0)) {
                        Some(from) => self.tuple(from)?,
                        None => return Err(self.invalid("TUPLE1-3 with too few items")),
                    }
                }
                b't' => {
                    let m = self.pop_mark()?;
                    self.tuple(m)?;
                }
                0x91 => {
                    let m = self.pop_mark()?;
                    let (values, depth) = self.values_from(m)?;
                    self.push_container(Value::Array(values), depth)?;
                }
                b']' | 0x8f => self.push(Item::Value(Value::IntArray(Vec::new())), 1)?,
                b'}' => self.push(Item::Value(Value::Map(Vec::new())), 1)?,
                b'l' => {
                    let m = self.pop_mark()?;
                    let (values, depth) = self.values_from(m)?;
                    self.push_container(Value::Array(values), depth)?;
                }
                b'd' => {
                    let m = self.pop_mark()?;
                    let (entries, depth) = self.entries_from(m)?;
                    self.push_container(Value::Map(entries), depth)?;
                }
                b'a' => self.append(self.stack.len().saturating_sub(1))?,
                b'e' | 0x90 => {
                    let m = self.pop_mark()?;
                    self.append(m)?;
                }
                b's' => self.set_items(self.stack.len().saturating_sub(2))?,
                b'u' => {
                    let m = self.pop_mark()?;
                    self.set_items(m)?;
                }
                b'h' => {
                    let id = self.byte()?;
                    self.get(u64::from(id))?;
                }
                b'j' => {
                    let id = self.u32()?;
                    self.get(u64::from(id))?;
                }
                b'q' => {
                    let id = self.byte()?;
                    self.put(u64::from(id))?;
                }
                b'r' => {
                    let id = self.u32()?;
                    self.put(u64::from(id))?;
                }
                0x94 => self.put(self.memo_len as u64)?,
                b'c' => {
                    let module = self.line()?;
                    let name = self.line()?;
                    let g = Global::find(&self.data[module], &self.data[name])?;
                    self.push(Item::Global(g), 0)?;
                }
                0x93 => {
                    let name = self.pop()?;
                    let module = self.pop()?;
                    match (module.item, name.item) {
                        (Item::Value(Value::Str(m)), Item::Value(Value::Str(n))) => {
                            let g = Global::find(m.as_bytes(), n.as_bytes())?;
                            self.push(Item::Global(g), 0)?;
                        }
                        _ => return Err(self.invalid("STACK_GLOBAL of something not two str")),
                    }
                }
                b'R' => self.reduce()?,
                b'b' => self.build()?,
                0x97 => {
                    let given = self.buffers.len();
                    let b = self
                        .buffers
                        .get(self.next_buffer)
                        .cloned()
                        .ok_or(PickleError::MissingBuffer { given, at: self.at })?;
                    self.next_buffer += 1;
                    self.push(Item::Buffer(b), 0)?;
                }
                0x98 => {
                    let top = self.pop()?;
                    match top.item {
                        Item::Buffer(b) | Item::Value(Value::Bin(b)) => self.stack.push(Slot {
                            item: Item::Value(Value::Bin(b)),
                            depth: 0,
                        }),
                        _ => return Err(self.invalid("READONLY_BUFFER without a buffer")),
                    }
                }
                0x80 => {
                    let protocol = self.byte()?;
                    if protocol > 5 {
                        return Err(PickleError::UnsupportedProtocol { protocol }.into());
                    }
                }
                0x95 => {
                    // A framing hint: the frame must be there; nothing else.
                    let n = self.u64()?;
                    if n > (self.data.len() - self.pos) as u64 {
                        return Err(PickleError::Truncated { at: self.at }.into());
                    }
                }
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

    /// The scalar value the opcode `op` pushes, its argument starting at
    /// `pos`, and the argument's length; `None` for an opcode that is not
    /// one of these (`NONE`, `NEWTRUE`, `NEWFALSE`, the ints, `BINFLOAT`,
    /// the strs, the bytes).
    #[inline]
    fn scalar(&self, op: u8, pos: usize) -> Result<Option<(Value, usize)>, PickleError> {
        let data = &self.data[..];
        let at = self.at;
        let arg = |n: usize| data.get(pos..pos + n).ok_or(PickleError::Truncated { at });
        // A length in `width` bytes, then that many bytes: their range.
        let counted = |width: usize| -> Result<Range<usize>, PickleError> {
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
        let width = |op: u8| match op {
            0x8a | 0x8c | b'C' => 1,
            0x8b | b'X' | b'B' => 4,
            _ => 8,
        };
        Ok(Some(match op {
            b'N' => (Value::Nil, 0),
            0x88 => (Value::Bool(true), 0),
            0x89 => (Value::Bool(false), 0),
            b'K' => (arg(1)?[0].into(), 1),
            b'M' => (
                u16::from_le_bytes(arg(2)?.try_into().expect("2 bytes")).into(),
                2,
            ),
            b'J' => (
                i32::from_le_bytes(arg(4)?.try_into().expect("4 bytes")).into(),
                4,
            ),
            b'G' => {
                let b = f64::from_be_bytes(arg(8)?.try_into().expect("8 bytes"));
                (Value::Float(b), 8)
            }
            0x8b if arg(4)?[3] & 0x80 != 0 => {
                return Err(PickleError::Invalid {
                    reason: "negative LONG4 length",
                    at,
                })
            }
            0x8a | 0x8b => {
                let r = counted(width(op))?;
                (self.long(r.clone())?, r.end - pos)
            }
            0x8c | b'X' | 0x8d => {
                let r = counted(width(op))?;
                let end = r.end;
                let s = ByteString::try_from(self.data.slice(r))
                    .map_err(|_| PickleError::InvalidUtf8 { at })?;
                (Value::Str(s), end - pos)
            }
            b'C' | b'B' | 0x8e => {
                let r = counted(width(op))?;
                (Value::Bin(self.data.slice(r.clone())), r.end - pos)
            }
            _ => return Ok(None),
        }))
    }

    /// Right after a `MARK` above a memoized list, set or dict: a run of
    /// scalars (each maybe memoized, or fetched from the memo) that ends in
    /// the `APPENDS`, `ADDITEMS` or `SETITEMS` closing the mark (how Python
    /// pickles a container of plain values, a thousand items at a time)
    /// goes straight into the container, never through stack slots. Its
    /// `MEMOIZE`s take effect once the run is whole (a `GET` inside the run
    /// of an id the run sets is the run's own value). Anything else (an
    /// error included) leaves the machine to read the run from the `MARK`
    /// on as usual, so that the result and the errors are the machine's; a
    /// run stops at the first other opcode and the next `MARK` comes after
    /// it, so runs never overlap: at most one more pass over the bytes.
    fn scalar_run(&mut self) -> Result<(), Stop> {
        // The container must be above the mark before this one, as
        // `container_below` asks of `APPENDS` and `SETITEMS`.
        let outer = match self.marks.len() {
            n if n >= 2 => self.marks[n - 2],
            _ => 0,
        };
        if self.stack.len() <= outer {
            return Ok(());
        }
        let Some(&Slot {
            item: Item::Ref(a), ..
        }) = self.stack.last()
        else {
            return Ok(());
        };
        let dict = match &self.arena[a as usize] {
            Obj { copied: true, .. } => return Ok(()),
            Obj {
                item: Item::Value(Value::Map(_)),
                ..
            } => true,
            Obj {
                item: Item::Value(Value::IntArray(_) | Value::Array(_)),
                ..
            } => false,
            _ => return Ok(()),
        };
        let mut run = mem::take(&mut self.run);
        let mut memoized = mem::take(&mut self.run_memo);
        // What `memo_len` becomes as the run's `MEMOIZE`s are read.
        let mut memo_len = self.memo_len;
        let mut pos = self.pos;
        // Where the last value of the run was decoded, if it was.
        let mut last = None;
        let whole = loop {
            let Some(&op) = self.data.get(pos) else {
                break false;
            };
            if let Ok(Some((v, n))) = self.scalar(op, pos + 1) {
                run.push(v);
                last = Some(pos);
                pos += 1 + n;
                continue;
            }
            match op {
                0x94 if !run.is_empty() && memo_len < self.max_values => {
                    memoized.push((memo_len, run.len() - 1, last));
                    // As `memo_set` will: an id not set yet lengthens it.
                    if self.memo.get(memo_len).is_none_or(|&e| e == 0) {
                        memo_len += 1;
                    }
                }
                b'h' | b'j' => {
                    let width = if op == b'h' { 1 } else { 4 };
                    let Some(id) = self.data.get(pos + 1..pos + 1 + width) else {
                        break false;
                    };
                    let id = id
                        .iter()
                        .rev()
                        .fold(0usize, |n, &b| (n << 8) | usize::from(b));
                    // The ids the run sets never decrease: the last one
                    // set to `id`, if any, is the value fetched.
                    let i = memoized.partition_point(|&(m, _, _)| m <= id);
                    let v = match i.checked_sub(1).map(|i| memoized[i]) {
                        Some((m, v, _)) if m == id => Some(run[v].clone()),
                        _ => self.memo_value(id),
                    };
                    match v {
                        Some(v) => run.push(v),
                        None => break false,
                    }
                    last = None;
                    pos += width;
                }
                0x95 => {
                    // A frame boundary: the frame must be there.
                    let Some(n) = self.data.get(pos + 1..pos + 9) else {
                        break false;
                    };
                    let n = u64::from_le_bytes(n.try_into().expect("8 bytes"));
                    if n > (self.data.len() - (pos + 9)) as u64 {
                        break false;
                    }
                    pos += 8;
                }
                b'u' => break dict && run.len().is_multiple_of(2),
                b'e' | 0x90 => break !dict,
                _ => break false,
            }
            pos += 1;
        };
        let result = match whole {
            true => self.commit_run(a, &mut run, &memoized, pos + 1),
            false => Ok(()),
        };
        run.clear();
        memoized.clear();
        self.run = run;
        self.run_memo = memoized;
        result
    }

    /// The value a `GET` of memo id `id` pushes, if it is a scalar value
    /// (for [`Reader::scalar_run`]).
    fn memo_value(&mut self, id: usize) -> Option<Value> {
        let entry = self.memo_entry(id)?;
        match &self.entries[entry] {
            Entry::Copy(Item::Value(v)) => Some(v.clone()),
            _ => None,
        }
    }

    /// A whole run of [`Reader::scalar_run`] into the arena object `a`:
    /// counted, its memo entries set, its values moved in, the mark popped
    /// and the closing opcode read (`end` is past it).
    fn commit_run(
        &mut self,
        a: u32,
        run: &mut Vec<Value>,
        memoized: &[(usize, usize, Option<usize>)],
        end: usize,
    ) -> Result<(), Stop> {
        self.count(run.len())?;
        for &(id, i, at) in memoized {
            match at {
                Some(at) if self.spans.len() < SPAN as usize - 1 => {
                    self.spans.push(at);
                    self.memo_slot(id, SPAN | (self.spans.len() - 1) as u32);
                }
                _ => self.memo_set(id, Entry::Copy(Item::Value(run[i].clone()))),
            }
        }
        let limit = self.limits.max_depth;
        let target = &mut self.arena[a as usize];
        Self::deepen(&mut target.depth, 0, limit)?;
        match &mut target.item {
            Item::Value(Value::Map(m)) => {
                let mut items = run.drain(..);
                m.reserve(items.len() / 2);
                while let (Some(k), Some(v)) = (items.next(), items.next()) {
                    m.push((k, v));
                }
            }
            Item::Value(list) => extend(list, run.drain(..)).expect("a list or set"),
            _ => unreachable!("scalar_run checks the target"),
        }
        self.marks.pop();
        self.pos = end;
        Ok(())
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

    /// `GLOBAL`'s newline-terminated argument.
    fn line(&mut self) -> Result<Range<usize>, Stop> {
        let rest = &self.data[self.pos..];
        let n = rest
            .iter()
            .position(|&b| b == b'\n')
            .ok_or(PickleError::Truncated { at: self.at })?;
        let r = self.span(n as u64)?;
        self.pos += 1;
        Ok(r)
    }

    /// The arena object `a`, unless it was moved (the fast pass then starts
    /// over, sharing).
    fn obj(&self, a: u32) -> Result<&Obj, Stop> {
        let obj = &self.arena[a as usize];
        match obj.item {
            Item::Moved => Err(self.moved()),
            _ => Ok(obj),
        }
    }

    fn moved(&self) -> Stop {
        match self.fetched {
            None => Stop::Shared,
            // Only an object no GET fetches is moved in the sharing pass,
            // and its one reference is gone with it.
            Some(_) => self.invalid("an object is used after it was placed"),
        }
    }

    fn depth_of(&self, slot: &Slot) -> Result<u32, Stop> {
        match slot.item {
            Item::Ref(a) => Ok(self.obj(a)?.depth),
            _ => Ok(slot.depth),
        }
    }

    /// The arena object `a`'s item, to place it: moved out, or copied when
    /// some `GET` fetches it too (charged to the values bound).
    fn take(&mut self, a: u32) -> Result<Item, Stop> {
        self.obj(a)?;
        let obj = &mut self.arena[a as usize];
        if !obj.shared {
            return Ok(mem::replace(&mut obj.item, Item::Moved));
        }
        // Counted before it is copied: a copy past the bound never exists.
        let n = item_count(&obj.item);
        self.count(n)?;
        let obj = &mut self.arena[a as usize];
        obj.copied = true;
        Ok(obj.item.clone())
    }

    /// The item of a slot, a reference followed.
    fn resolve(&mut self, slot: Slot) -> Result<Item, Stop> {
        match slot.item {
            Item::Ref(a) => self.take(a),
            item => Ok(item),
        }
    }

    /// A slot as the value placed in a container.
    fn place(&mut self, slot: Slot) -> Result<Value, Stop> {
        match self.resolve(slot)? {
            Item::Value(v) => Ok(finished(v)),
            Item::Buffer(b) => Ok(Value::Bin(b)),
            other => Err(PickleError::NotPlainData {
                what: other.what(),
                at: self.at,
            }
            .into()),
        }
    }

    /// Whether an item becomes a value when placed.
    fn is_value(&self, item: &Item) -> Result<bool, Stop> {
        let item = match item {
            Item::Ref(a) => &self.obj(*a)?.item,
            item => item,
        };
        Ok(matches!(item, Item::Value(_) | Item::Buffer(_)))
    }

    /// The values of `stack[from..]`, taken off the stack, and the depth of
    /// the deepest.
    fn values_from(&mut self, from: usize) -> Result<(Vec<Value>, u32), Stop> {
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
    fn entries_from(&mut self, from: usize) -> Result<(Vec<(Value, Value)>, u32), Stop> {
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
    fn push_container(&mut self, v: Value, depth: u32) -> Result<(), Stop> {
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
    fn tuple(&mut self, from: usize) -> Result<(), Stop> {
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
    fn deepen(depth: &mut u32, items: u32, limit: usize) -> Result<(), Stop> {
        *depth = (*depth).max(items + 1);
        match *depth as usize > limit {
            true => Err(PickleError::DepthExceeded { limit }.into()),
            false => Ok(()),
        }
    }

    /// The stack's bottom for the items of the innermost mark: nothing at or
    /// below it is popped or changed (CPython's `fence`).
    fn fence(&self) -> usize {
        self.marks.last().copied().unwrap_or(0)
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
    fn append(&mut self, from: usize) -> Result<(), Stop> {
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
    fn set_items(&mut self, from: usize) -> Result<(), Stop> {
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

    /// `GET`: a copy of a value, or a reference to an object.
    fn get(&mut self, id: u64) -> Result<(), Stop> {
        let at = self.at;
        let entry = usize::try_from(id)
            .ok()
            .and_then(|i| self.memo_entry(i))
            .ok_or(PickleError::MemoIndex { index: id, at })?;
        match &self.entries[entry] {
            Entry::Copy(item) => {
                let item = item.clone();
                self.push(item, 0)?;
            }
            &Entry::Obj(a) => {
                let depth = self.obj(a)?.depth;
                self.push(Item::Ref(a), depth)?;
            }
        }
        Ok(())
    }

    /// `PUT`, `MEMOIZE`: the top item under `id`. An object that can still
    /// change moves to the arena, a reference to it left on the stack.
    fn put(&mut self, id: u64) -> Result<(), Stop> {
        let index = self.memo_index(id)?;
        let fetched = self
            .fetched
            .as_ref()
            .is_some_and(|f| f.get(index).copied().unwrap_or(false));
        if self.stack.len() <= self.fence() {
            return Err(self.invalid("PUT without an item above the mark"));
        }
        let top = self.stack.last_mut().expect("an item above the mark");
        let entry = match &top.item {
            Item::Value(Value::Array(_) | Value::IntArray(_) | Value::Map(_))
            | Item::Dtype(_)
            | Item::Reconstructing
            | Item::Args(_) => {
                let a = self.arena.len() as u32;
                let item = mem::replace(&mut top.item, Item::Ref(a));
                self.arena.push(Obj {
                    item,
                    depth: top.depth,
                    shared: fetched,
                    copied: false,
                });
                Entry::Obj(a)
            }
            &Item::Ref(a) => {
                self.arena[a as usize].shared |= fetched;
                Entry::Obj(a)
            }
            item => Entry::Copy(item.clone()),
        };
        self.memo_set(index, entry);
        Ok(())
    }

    /// A memo id as an index, below the bound on values: one memo slot (4
    /// bytes) per value at most.
    fn memo_index(&self, id: u64) -> Result<usize, Stop> {
        let at = self.at;
        usize::try_from(id)
            .ok()
            .filter(|&i| i < self.max_values)
            .ok_or(PickleError::MemoIndex { index: id, at }.into())
    }

    fn memo_set(&mut self, index: usize, entry: Entry) {
        self.entries.push(entry);
        self.memo_slot(index, self.entries.len() as u32);
    }

    /// Memo id `index` set to `slot` (see [`Reader::memo`]).
    fn memo_slot(&mut self, index: usize, slot: u32) {
        if index >= self.memo.len() {
            self.memo.resize(index + 1, 0);
        }
        if self.memo[index] == 0 {
            self.memo_len += 1;
        }
        self.memo[index] = slot;
    }

    /// The index in `entries` of memo id `id`, if it is set. A scalar kept
    /// as where it starts is decoded into an entry of its own the first
    /// time (each memoized scalar is decoded at most twice).
    fn memo_entry(&mut self, id: usize) -> Option<usize> {
        let slot = *self.memo.get(id)?;
        if slot & SPAN == 0 {
            return (slot as usize).checked_sub(1);
        }
        let at = *self.spans.get((slot & !SPAN) as usize)?;
        let (v, _) = self.scalar(*self.data.get(at)?, at + 1).ok()??;
        self.entries.push(Entry::Copy(Item::Value(v)));
        self.memo[id] = self.entries.len() as u32;
        Some(self.entries.len() - 1)
    }

    /// A call's arguments: the items of a tuple, references to values
    /// followed (a dtype stays a reference: arrays share it).
    fn arguments(&mut self, slot: Slot) -> Result<Vec<Item>, Stop> {
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
    fn value_arg(&mut self, item: Item) -> Result<Value, Stop> {
        self.place(Slot { item, depth: 0 })
    }

    /// numpy's `dtype.str` of a dtype argument (read, never moved: arrays
    /// share their dtype through the memo).
    fn dtype_arg(&self, item: &Item) -> Result<String, Stop> {
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
    fn shape_arg(&mut self, item: Item) -> Result<Vec<u64>, Stop> {
        let v = self.value_arg(item)?;
        v.int_items()
            .and_then(|items| items.map(|i| i.and_then(Integer::as_u64)).collect())
            .ok_or_else(|| self.invalid("a numpy shape that is not a tuple of sizes"))
    }

    /// A data argument: bytes (read-only) or a writable buffer.
    fn data_arg(&mut self, item: Item) -> Result<(Bytes, bool), Stop> {
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

    fn array_value(&self, r: Result<NdArray, PickleError>) -> Result<Item, Stop> {
        Ok(Item::Value(Value::NdArray(Box::new(r?))))
    }

    /// `REDUCE`: the globals framewire knows, with the arguments their
    /// pickles carry.
    fn reduce(&mut self) -> Result<(), Stop> {
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

    /// `BUILD`: the state of a numpy dtype, or of an array `_reconstruct`
    /// made.
    fn build(&mut self) -> Result<(), Stop> {
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

/// The memo ids some `GET` fetches, by walking the opcodes without
/// building anything (for the sharing pass). It stops at the first byte it
/// cannot step over; the pass that follows fails there too.
fn fetched_ids(data: &[u8]) -> Vec<bool> {
    let mut fetched = vec![false; 0];
    let mut pos = 0usize;
    let le = |b: &[u8]| b.iter().rev().fold(0u64, |n, &x| (n << 8) | u64::from(x));
    while let Some(&op) = data.get(pos) {
        pos += 1;
        let rest = &data[pos..];
        let fixed = |n: usize| (rest.len() >= n).then_some(n);
        let counted = |width: usize| {
            let n = usize::try_from(le(rest.get(..width)?)).ok()?;
            let total = width.checked_add(n)?;
            (rest.len() >= total).then_some(total)
        };
        let skip = match op {
            b'.' => break,
            b'K' | b'q' | 0x80 => fixed(1),
            b'M' => fixed(2),
            b'J' | b'r' => fixed(4),
            b'G' | 0x95 => fixed(8),
            b'h' | b'j' => {
                let width = if op == b'h' { 1 } else { 4 };
                if let Some(id) = rest.get(..width).map(le) {
                    if let Some(i) = usize::try_from(id).ok().filter(|&i| i < data.len()) {
                        if i >= fetched.len() {
                            fetched.resize(i + 1, false);
                        }
                        fetched[i] = true;
                    }
                }
                fixed(width)
            }
            0x8a | 0x8c | b'C' => counted(1),
            0x8b | b'X' | b'B' => counted(4),
            0x8d | 0x8e | 0x96 => counted(8),
            b'c' => {
                let first = rest.iter().position(|&b| b == b'\n');
                first.and_then(|i| {
                    let second = rest[i + 1..].iter().position(|&b| b == b'\n')?;
                    Some(i + 1 + second + 1)
                })
            }
            b'('
            | b'0'
            | b'1'
            | b'N'
            | 0x88
            | 0x89
            | b')'
            | 0x85..=0x87
            | b't'
            | 0x91
            | b']'
            | 0x8f
            | b'}'
            | b'l'
            | b'd'
            | b'a'
            | b'e'
            | 0x90
            | b's'
            | b'u'
            | 0x94
            | 0x93
            | b'R'
            | b'b'
            | 0x97
            | 0x98 => Some(0),
            _ => None,
        };
        match skip {
            Some(n) => pos += n,
            None => break,
        }
    }
    fetched
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stack_slot_stays_small() {
        // What a one-byte opcode can cost while the pickle is read (the
        // Limits::max_pickle_values docs say about 120 bytes with growth).
        assert!(mem::size_of::<Slot>() <= 56, "{}", mem::size_of::<Slot>());
    }
}
