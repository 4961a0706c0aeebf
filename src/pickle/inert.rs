//! An inert reading of the pickles of a Python exception and its traceback
//! (what Dask's `task-erred` carries: tblib's
//! `unpickle_exception_with_attrs(<class>, {...}, cause, tb, ...)`): the
//! pickle's objects as a tree in which globals are names, calls and
//! instances are their parts. Nothing is imported, called or built; every
//! opcode is bounded (one arena object per opcode at most, memo indices
//! within the pickle's length, shared objects shared, not copied).

use std::collections::HashSet;
use std::fmt::Write as _;

use super::error::{shown, PickleError};
use super::opcodes::*;
use crate::value::Value;

/// Pickles longer than this are not read (an exception's is a few KiB).
const MAX_LEN: usize = 16 << 20;
/// How deep the tree is followed, and how many traceback levels.
const MAX_DEPTH: usize = 64;
const MAX_FRAMES: usize = 1000;

/// A Python exception read from its pickle without running anything: its
/// class by name, its arguments, the text Python would print for it, the
/// traceback's lines when there is one, and its cause (`raise … from`) or
/// context.
#[derive(Clone, Debug, PartialEq)]
pub struct PyException {
    /// The class's module (`"builtins"`).
    pub module: String,
    /// The class's qualified name (`"ZeroDivisionError"`).
    pub name: String,
    /// The arguments (`exc.args`), plain data as values; anything else as
    /// a str describing it (`"<module.Class object>"`).
    pub args: Vec<Value>,
    /// `str(exc)` as Python gives it for these arguments (`"division by
    /// zero"`; a str argument as it is, several as their tuple).
    pub message: String,
    /// The traceback, most recent call last, a `File "…", line n, in f`
    /// line per level; `None` when Dask sent none.
    pub traceback: Option<String>,
    /// `exc.__cause__`, or else `exc.__context__`.
    pub cause: Option<Box<PyException>>,
}

impl PyException {
    /// The exception and its causes, outermost first.
    pub fn chain(&self) -> impl Iterator<Item = &PyException> {
        std::iter::successors(Some(self), |e| e.cause.as_deref())
    }
}

/// The objects of a pickle, by index in the arena.
#[derive(Debug)]
enum Obj {
    Value(Value),
    /// An int beyond `Value::Int`.
    BigInt,
    Tuple(Vec<u32>),
    List(Vec<u32>),
    Dict(Vec<(u32, u32)>),
    Global(String, String),
    /// `func(*args)` or `cls.__new__(cls, *args)`, and the state `BUILD`
    /// gave it.
    Instance {
        func: u32,
        args: u32,
        state: Option<u32>,
    },
}

enum Slot {
    Obj(u32),
    Mark,
}

struct Machine<'a> {
    data: &'a [u8],
    pos: usize,
    at: usize,
    arena: Vec<Obj>,
    stack: Vec<Slot>,
    memo: Vec<Option<u32>>,
}

/// Reads a pickle into its arena and the index of its top object.
fn run(data: &[u8]) -> Result<(Vec<Obj>, u32), PickleError> {
    if data.len() > MAX_LEN {
        return Err(PickleError::TooManyValues { limit: MAX_LEN });
    }
    let mut m = Machine {
        data,
        pos: 0,
        at: 0,
        arena: Vec::new(),
        stack: Vec::new(),
        memo: Vec::new(),
    };
    loop {
        m.at = m.pos;
        let op = m.take(1)?[0];
        match op {
            PROTO => {
                let p = m.take(1)?[0];
                if p > 5 {
                    return Err(PickleError::UnsupportedProtocol { protocol: p });
                }
            }
            FRAME => {
                m.take(8)?;
            }
            STOP => {
                let top = m.pop()?;
                return Ok((m.arena, top));
            }
            MARK => m.stack.push(Slot::Mark),
            POP => {
                m.stack
                    .pop()
                    .ok_or_else(|| m.invalid("POP of an empty stack"))?;
            }
            POP_MARK => {
                m.marked()?;
            }
            NONE => m.push(Obj::Value(Value::Nil)),
            NEWTRUE => m.push(Obj::Value(Value::Bool(true))),
            NEWFALSE => m.push(Obj::Value(Value::Bool(false))),
            BININT1 => {
                let b = m.take(1)?[0];
                m.push(Obj::Value(Value::from(i64::from(b))));
            }
            BININT2 => {
                let b = m.take(2)?;
                m.push(Obj::Value(Value::from(i64::from(u16::from_le_bytes([
                    b[0], b[1],
                ])))));
            }
            BININT => {
                let b = m.take(4)?;
                let i = i32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                m.push(Obj::Value(Value::from(i64::from(i))));
            }
            LONG1 | LONG4 => {
                let n = match op {
                    LONG1 => m.take(1)?[0] as usize,
                    _ => m.len4()?,
                };
                let b = m.take(n)?;
                let obj = match n {
                    0 => Obj::Value(Value::from(0i64)),
                    1..=8 => {
                        let fill = if b[n - 1] & 0x80 != 0 { 0xff } else { 0 };
                        let mut w = [fill; 8];
                        w[..n].copy_from_slice(b);
                        Obj::Value(Value::from(i64::from_le_bytes(w)))
                    }
                    _ => Obj::BigInt,
                };
                m.push(obj);
            }
            BINFLOAT => {
                let b = m.take(8)?;
                let f = f64::from_be_bytes(b.try_into().expect("8 bytes"));
                m.push(Obj::Value(Value::from(f)));
            }
            SHORT_BINUNICODE | BINUNICODE | BINUNICODE8 => {
                let n = m.len_of(op, SHORT_BINUNICODE, BINUNICODE)?;
                let at = m.at;
                let s =
                    std::str::from_utf8(m.take(n)?).map_err(|_| PickleError::InvalidUtf8 { at })?;
                m.push(Obj::Value(Value::from(s)));
            }
            SHORT_BINBYTES | BINBYTES | BINBYTES8 | BYTEARRAY8 => {
                let n = match op {
                    BYTEARRAY8 => m.len_of(BINBYTES8, SHORT_BINBYTES, BINBYTES)?,
                    _ => m.len_of(op, SHORT_BINBYTES, BINBYTES)?,
                };
                let b = m.take(n)?.to_vec();
                m.push(Obj::Value(Value::Bin(b.into())));
            }
            EMPTY_TUPLE => m.push(Obj::Tuple(Vec::new())),
            TUPLE1 | TUPLE2 | TUPLE3 => {
                let n = usize::from(op - TUPLE1 + 1);
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    items.push(m.pop()?);
                }
                items.reverse();
                m.push(Obj::Tuple(items));
            }
            TUPLE => {
                let items = m.marked()?;
                m.push(Obj::Tuple(items));
            }
            EMPTY_LIST => m.push(Obj::List(Vec::new())),
            LIST => {
                let items = m.marked()?;
                m.push(Obj::List(items));
            }
            EMPTY_DICT => m.push(Obj::Dict(Vec::new())),
            DICT => {
                let items = m.marked()?;
                let d = m.pairs(items)?;
                m.push(Obj::Dict(d));
            }
            EMPTY_SET => m.push(Obj::List(Vec::new())),
            FROZENSET => {
                let items = m.marked()?;
                m.push(Obj::List(items));
            }
            APPEND | APPENDS | ADDITEMS => {
                let items = match op {
                    APPEND => vec![m.pop()?],
                    _ => m.marked()?,
                };
                let top = m.top()?;
                match &mut m.arena[top as usize] {
                    Obj::List(l) => l.extend(items),
                    _ => return Err(m.invalid("APPENDS to something not a list or set")),
                }
            }
            SETITEM | SETITEMS => {
                let items = match op {
                    SETITEM => {
                        let v = m.pop()?;
                        let k = m.pop()?;
                        vec![k, v]
                    }
                    _ => m.marked()?,
                };
                let pairs = m.pairs(items)?;
                let top = m.top()?;
                match &mut m.arena[top as usize] {
                    Obj::Dict(d) => d.extend(pairs),
                    _ => return Err(m.invalid("SETITEMS on something not a dict")),
                }
            }
            BINPUT | LONG_BINPUT | MEMOIZE => {
                let i = match op {
                    BINPUT => m.take(1)?[0] as usize,
                    LONG_BINPUT => m.len4()?,
                    _ => m.memo.len(),
                };
                if i > m.data.len() {
                    return Err(PickleError::MemoIndex {
                        index: i as u64,
                        at: m.at,
                    });
                }
                let top = m.top()?;
                if m.memo.len() <= i {
                    m.memo.resize(i + 1, None);
                }
                m.memo[i] = Some(top);
            }
            BINGET | LONG_BINGET => {
                let i = match op {
                    BINGET => m.take(1)?[0] as usize,
                    _ => m.len4()?,
                };
                let id = m
                    .memo
                    .get(i)
                    .copied()
                    .flatten()
                    .ok_or(PickleError::MemoIndex {
                        index: i as u64,
                        at: m.at,
                    })?;
                m.stack.push(Slot::Obj(id));
            }
            GLOBAL => {
                let module = m.line()?;
                let name = m.line()?;
                m.push(Obj::Global(module, name));
            }
            STACK_GLOBAL => {
                let name = m.pop()?;
                let module = m.pop()?;
                let (Obj::Value(Value::Str(module)), Obj::Value(Value::Str(name))) =
                    (&m.arena[module as usize], &m.arena[name as usize])
                else {
                    return Err(m.invalid("STACK_GLOBAL of something not two strs"));
                };
                let g = Obj::Global(shown(module.as_bytes()), shown(name.as_bytes()));
                m.push(g);
            }
            REDUCE | NEWOBJ | NEWOBJ_EX => {
                if op == NEWOBJ_EX {
                    m.pop()?; // the keyword arguments: not kept
                }
                let args = m.pop()?;
                let func = m.pop()?;
                m.push(Obj::Instance {
                    func,
                    args,
                    state: None,
                });
            }
            BUILD => {
                let state = m.pop()?;
                let top = m.top()?;
                if let Obj::Instance { state: s, .. } = &mut m.arena[top as usize] {
                    *s = Some(state);
                }
            }
            other => {
                return Err(PickleError::UnsupportedOpcode {
                    opcode: other,
                    at: m.at,
                })
            }
        }
    }
}

impl<'a> Machine<'a> {
    fn invalid(&self, reason: &'static str) -> PickleError {
        PickleError::Invalid {
            reason,
            at: self.at,
        }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], PickleError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.data.len())
            .ok_or(PickleError::Truncated { at: self.at })?;
        let data: &'a [u8] = self.data;
        let b = &data[self.pos..end];
        self.pos = end;
        Ok(b)
    }

    fn len4(&mut self) -> Result<usize, PickleError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
    }

    /// The length of a 1-, 4- or 8-byte-counted opcode.
    fn len_of(&mut self, op: u8, short: u8, four: u8) -> Result<usize, PickleError> {
        Ok(if op == short {
            self.take(1)?[0] as usize
        } else if op == four {
            self.len4()?
        } else {
            let b = self.take(8)?;
            usize::try_from(u64::from_le_bytes(b.try_into().expect("8 bytes")))
                .map_err(|_| PickleError::Truncated { at: self.at })?
        })
    }

    fn line(&mut self) -> Result<String, PickleError> {
        let rest = &self.data[self.pos..];
        let n = rest
            .iter()
            .position(|&b| b == b'\n')
            .ok_or(PickleError::Truncated { at: self.at })?;
        let s = shown(&rest[..n]);
        self.pos += n + 1;
        Ok(s)
    }

    fn push(&mut self, obj: Obj) {
        self.arena.push(obj);
        self.stack.push(Slot::Obj(self.arena.len() as u32 - 1));
    }

    fn pop(&mut self) -> Result<u32, PickleError> {
        match self.stack.pop() {
            Some(Slot::Obj(id)) => Ok(id),
            Some(Slot::Mark) => Err(self.invalid("a mark where an object goes")),
            None => Err(self.invalid("an empty stack")),
        }
    }

    fn top(&self) -> Result<u32, PickleError> {
        match self.stack.last() {
            Some(Slot::Obj(id)) => Ok(*id),
            _ => Err(self.invalid("no object on the stack")),
        }
    }

    /// The objects above the last mark, the mark removed.
    fn marked(&mut self) -> Result<Vec<u32>, PickleError> {
        let mark = self
            .stack
            .iter()
            .rposition(|s| matches!(s, Slot::Mark))
            .ok_or_else(|| self.invalid("no mark"))?;
        let items = self
            .stack
            .drain(mark + 1..)
            .map(|s| match s {
                Slot::Obj(id) => id,
                Slot::Mark => unreachable!("the last mark"),
            })
            .collect();
        self.stack.pop();
        Ok(items)
    }

    fn pairs(&self, items: Vec<u32>) -> Result<Vec<(u32, u32)>, PickleError> {
        if !items.len().is_multiple_of(2) {
            return Err(self.invalid("a dict key without a value"));
        }
        Ok(items.chunks(2).map(|p| (p[0], p[1])).collect())
    }
}

/// What reads the arena: objects by index, every walk bounded.
struct Tree {
    arena: Vec<Obj>,
}

impl Tree {
    fn get(&self, id: u32) -> &Obj {
        &self.arena[id as usize]
    }

    /// Plain data as a value; anything else (a cycle, an instance, a
    /// global) described as a str.
    fn value(&self, id: u32, depth: usize, seen: &mut HashSet<u32>) -> Value {
        if depth > MAX_DEPTH || !seen.insert(id) {
            return Value::from("...");
        }
        let v = match self.get(id) {
            Obj::Value(v) => v.clone(),
            Obj::BigInt => Value::from("<int>"),
            Obj::Tuple(items) | Obj::List(items) => Value::Array(
                items
                    .iter()
                    .map(|&i| self.value(i, depth + 1, seen))
                    .collect(),
            ),
            Obj::Dict(d) => Value::Map(
                d.iter()
                    .map(|&(k, v)| {
                        (
                            self.value(k, depth + 1, seen),
                            self.value(v, depth + 1, seen),
                        )
                    })
                    .collect(),
            ),
            Obj::Global(m, n) => Value::from(format!("<{m}.{n}>")),
            Obj::Instance { func, .. } => match self.get(*func) {
                Obj::Global(m, n) => Value::from(format!("<{m}.{n} object>")),
                _ => Value::from("<object>"),
            },
        };
        seen.remove(&id);
        v
    }

    fn items(&self, id: u32) -> &[u32] {
        match self.get(id) {
            Obj::Tuple(items) | Obj::List(items) => items,
            _ => &[],
        }
    }

    fn dict_get(&self, id: Option<u32>, key: &str) -> Option<u32> {
        let Obj::Dict(d) = self.get(id?) else {
            return None;
        };
        d.iter().rev().find_map(|&(k, v)| match self.get(k) {
            Obj::Value(Value::Str(s)) if &**s == key => Some(v),
            _ => None,
        })
    }

    fn global(&self, id: u32) -> Option<(&str, &str)> {
        match self.get(id) {
            Obj::Global(m, n) => Some((m, n)),
            _ => None,
        }
    }

    fn is_none(&self, id: u32) -> bool {
        matches!(self.get(id), Obj::Value(Value::Nil))
    }

    fn exception(&self, id: u32, depth: usize) -> Result<PyException, PickleError> {
        let bad = |reason| PickleError::Invalid { reason, at: 0 };
        if depth > MAX_DEPTH {
            return Err(PickleError::DepthExceeded { limit: MAX_DEPTH });
        }
        let Obj::Instance { func, args, state } = self.get(id) else {
            return Err(bad("not an exception"));
        };
        let call = self.items(*args);
        let (class, exc_args, extra) = match self.global(*func) {
            Some(("tblib.pickling_support", "unpickle_exception_with_attrs")) => {
                let [class, attrs, rest @ ..] = call else {
                    return Err(bad("tblib's exception without class and attributes"));
                };
                let args = self
                    .dict_get(Some(*attrs), "args")
                    .map(|a| self.items(a).to_vec())
                    .unwrap_or_default();
                (*class, args, rest)
            }
            Some(("tblib.pickling_support", "unpickle_exception")) => {
                let [class, args, rest @ ..] = call else {
                    return Err(bad("tblib's exception without class and arguments"));
                };
                (*class, self.items(*args).to_vec(), rest)
            }
            Some(_) => (*func, call.to_vec(), &[][..]),
            None => return Err(bad("an exception whose class is not a global")),
        };
        let (module, name) = self
            .global(class)
            .ok_or_else(|| bad("an exception whose class is not a global"))?;
        let mut seen = HashSet::new();
        let args: Vec<Value> = exc_args
            .iter()
            .map(|&a| self.value(a, 0, &mut seen))
            .collect();
        let message = match args.as_slice() {
            [] => String::new(),
            [Value::Str(s)] => s.to_string(),
            [one] => repr(one),
            many => format!("({})", many.iter().map(repr).collect::<Vec<_>>().join(", ")),
        };
        // tblib: (cause, tb, context, suppress_context, notes).
        let cause = [extra.first(), extra.get(2)]
            .into_iter()
            .flatten()
            .find(|&&c| !self.is_none(c))
            .map(|&c| self.exception(c, depth + 1).map(Box::new))
            .transpose()?;
        let traceback = extra
            .get(1)
            .filter(|&&t| !self.is_none(t))
            .map(|&t| self.traceback(t));
        let _ = state;
        Ok(PyException {
            module: module.to_owned(),
            name: name.to_owned(),
            args,
            message,
            traceback,
            cause,
        })
    }

    /// tblib's `unpickle_traceback(Frame, lineno, next)` chain as text.
    fn traceback(&self, mut id: u32) -> String {
        let mut out = String::from("Traceback (most recent call last):\n");
        for _ in 0..MAX_FRAMES {
            let Obj::Instance { args, .. } = self.get(id) else {
                break;
            };
            let [frame, lineno, rest @ ..] = self.items(*args) else {
                break;
            };
            let state = match self.get(*frame) {
                Obj::Instance { state, .. } => *state,
                _ => None,
            };
            let code = self
                .dict_get(state, "f_code")
                .and_then(|c| match self.get(c) {
                    Obj::Instance { state, .. } => *state,
                    _ => None,
                });
            let text = |id: Option<u32>| match id.map(|i| self.get(i)) {
                Some(Obj::Value(Value::Str(s))) => s.to_string(),
                _ => "?".to_owned(),
            };
            let line = match self.get(*lineno) {
                Obj::Value(Value::Int(i)) => Some(i.as_i128().to_string()),
                _ => None,
            };
            let _ = writeln!(
                out,
                "  File \"{}\", line {}, in {}",
                text(self.dict_get(code, "co_filename")),
                line.as_deref().unwrap_or("?"),
                text(self.dict_get(code, "co_name")),
            );
            match rest.first() {
                Some(&next) if !self.is_none(next) => id = next,
                _ => break,
            }
        }
        out
    }
}

/// A value as Python's `repr` gives it, near enough for messages.
fn repr(v: &Value) -> String {
    match v {
        Value::Str(s) => format!("{:?}", &**s).replace('"', "'"),
        Value::Nil => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::Array(items) => format!(
            "({})",
            items.iter().map(repr).collect::<Vec<_>>().join(", ")
        ),
        Value::Int(i) => i.as_i128().to_string(),
        Value::Float(f) => format!("{f:?}"),
        other => format!("{other:?}"),
    }
}

/// Reads the pickle of an exception (and, when given, of its traceback,
/// which wins over the one inside the exception), inertly.
pub(crate) fn read_exception(
    exception: &[u8],
    traceback: Option<&[u8]>,
) -> Result<PyException, PickleError> {
    let (arena, top) = run(exception)?;
    let tree = Tree { arena };
    let mut e = tree.exception(top, 0)?;
    if let Some(tb) = traceback {
        let (arena, top) = run(tb)?;
        let tree = Tree { arena };
        if !tree.is_none(top) {
            e.traceback = Some(tree.traceback(top));
        }
    }
    Ok(e)
}
