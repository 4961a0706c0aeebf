//! [`Call`], [`Arg`]: tasks a [`Client`](super::Client) asks a cluster to
//! compute, and the graph pickles they go in (SPEC.md §5.15).

use bytes::Bytes;

use super::Key;
use crate::error::EncodeError;
use crate::ndarray::NdArray;
use crate::pickle::{self, Fixed, Py, PyFunction};
use crate::value::Value;

// The globals a task graph names besides the program's functions: constants
// of this code, never data (`pickle::Fixed`).
/// `dask._expr.Expr._reconstruct` (2025.4.0 and later).
const EXPR_RECONSTRUCT: Fixed = Fixed::new("dask._expr", "Expr._reconstruct");
/// `dask._expr.LLGExpr`.
const LLG_EXPR: Fixed = Fixed::new("dask._expr", "LLGExpr");
/// `dask._task_spec.TaskRef`.
const TASK_REF: Fixed = Fixed::new("dask._task_spec", "TaskRef");
/// `dask.utils.apply`: a call with keyword arguments.
const APPLY: Fixed = Fixed::new("dask.utils", "apply");
/// `distributed.protocol.serialize.ToPickle` (2024.12.1 – 2025.3.x).
const TO_PICKLE: Fixed = Fixed::new("distributed.protocol.serialize", "ToPickle");
/// `dask.highlevelgraph.HighLevelGraph` (2024.12.1 – 2025.3.x).
const HIGH_LEVEL_GRAPH: Fixed = Fixed::new("dask.highlevelgraph", "HighLevelGraph");

/// A call of a named Python function, with positional and keyword
/// arguments: what a task computes. Written into the graph as Dask's tuple
/// tasks: `(f, *args)`, or `(dask.utils.apply, f, [args], {kwargs})` with
/// keyword arguments; the scheduler converts them into `Task`s.
///
/// ```
/// use framewire::dask::{Arg, Call, Key};
///
/// // int("ff", base=16)
/// let call = Call::new("builtins:int".parse()?).arg("ff").kwarg("base", 16i64);
/// assert_eq!(call.function().name(), "int");
/// // operator.add(x, operator.neg(2)), x a key in the cluster
/// let call = Call::new("operator:add".parse()?)
///     .arg(Key::from("x"))
///     .arg(Call::new("operator:neg".parse()?).arg(2i64));
/// assert_eq!(call.dependencies(), vec![Key::from("x")]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Call {
    func: PyFunction,
    args: Vec<Arg>,
    kwargs: Vec<(String, Arg)>,
}

/// An argument of a [`Call`].
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Arg {
    /// A plain value, pickled as [`pickle::dumps`] writes it: ints,
    /// floats, strs, bytes, `None`, bools, tuples (`Value::Array`), dicts,
    /// numpy arrays. (A str equal to a key of the same graph is taken by
    /// Dask for that key's value, as in any Dask graph.)
    Value(Value),
    /// The value of a key: one in the cluster, or another task of the same
    /// graph (`TaskRef(key)`: a dependency the scheduler waits for).
    Key(Key),
    /// A call computed inline, its result the argument.
    Call(Box<Call>),
}

impl From<Value> for Arg {
    fn from(v: Value) -> Arg {
        Arg::Value(v)
    }
}

impl From<NdArray> for Arg {
    fn from(a: NdArray) -> Arg {
        Arg::Value(Value::NdArray(Box::new(a)))
    }
}

impl From<Key> for Arg {
    fn from(k: Key) -> Arg {
        Arg::Key(k)
    }
}

impl From<Call> for Arg {
    fn from(c: Call) -> Arg {
        Arg::Call(Box::new(c))
    }
}

impl From<i64> for Arg {
    fn from(i: i64) -> Arg {
        Arg::Value(Value::from(i))
    }
}

impl From<f64> for Arg {
    fn from(f: f64) -> Arg {
        Arg::Value(Value::from(f))
    }
}

impl From<bool> for Arg {
    fn from(b: bool) -> Arg {
        Arg::Value(Value::from(b))
    }
}

impl From<&str> for Arg {
    fn from(s: &str) -> Arg {
        Arg::Value(Value::from(s))
    }
}

impl From<String> for Arg {
    fn from(s: String) -> Arg {
        Arg::Value(Value::from(s))
    }
}

impl Call {
    /// A call of `func` with no arguments yet.
    pub fn new(func: PyFunction) -> Call {
        Call {
            func,
            args: Vec::new(),
            kwargs: Vec::new(),
        }
    }

    /// One more positional argument.
    pub fn arg(mut self, arg: impl Into<Arg>) -> Call {
        self.args.push(arg.into());
        self
    }

    /// More positional arguments.
    pub fn args<A: Into<Arg>>(mut self, args: impl IntoIterator<Item = A>) -> Call {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// A keyword argument (a name given twice: the last one counts, as in
    /// a Python dict).
    pub fn kwarg(mut self, name: impl Into<String>, arg: impl Into<Arg>) -> Call {
        let name = name.into();
        self.kwargs.retain(|(n, _)| *n != name);
        self.kwargs.push((name, arg.into()));
        self
    }

    /// The function called.
    pub fn function(&self) -> &PyFunction {
        &self.func
    }

    /// The positional arguments.
    pub fn positional(&self) -> &[Arg] {
        &self.args
    }

    /// The keyword arguments, in order.
    pub fn keywords(&self) -> &[(String, Arg)] {
        &self.kwargs
    }

    /// The keys the call reads ([`Arg::Key`]s, in inline calls too), each
    /// once, in order of first use.
    pub fn dependencies(&self) -> Vec<Key> {
        let mut out = Vec::new();
        let mut todo = vec![self];
        while let Some(c) = todo.pop() {
            let args = c.args.iter().chain(c.kwargs.iter().map(|(_, a)| a));
            let mut calls = Vec::new();
            for a in args {
                match a {
                    Arg::Key(k) if !out.contains(k) => out.push(k.clone()),
                    Arg::Call(c) => calls.push(&**c),
                    _ => {}
                }
            }
            todo.extend(calls.into_iter().rev());
        }
        out
    }

    /// The task as the graph's pickle holds it (Dask's tuple form:
    /// `(f, *args)`, or `(dask.utils.apply, f, [args], {kwargs})`;
    /// `dask._task_spec.TaskRef(key)` for a key), protocol 5, and the
    /// out-of-band buffers of its arrays: what Python's `pickle.loads(p,
    /// buffers=...)` reads (importing the functions it names).
    pub fn pickle(&self) -> Result<(Bytes, Vec<Bytes>), EncodeError> {
        let (p, buffers) = pickle::dumps_py(&self.task())?;
        Ok((p, buffers.into_iter().map(|(b, _)| b).collect()))
    }

    /// The call as a Dask tuple task.
    fn task(&self) -> Py {
        let args = self.args.iter().map(Arg::py);
        if self.kwargs.is_empty() {
            let mut items = vec![Py::Function(self.func.clone())];
            items.extend(args);
            return Py::Tuple(items);
        }
        let kwargs = self
            .kwargs
            .iter()
            .map(|(n, a)| (Py::Value(Value::from(n.as_str())), a.py()))
            .collect();
        Py::Tuple(vec![
            Py::Fixed(APPLY),
            Py::Function(self.func.clone()),
            Py::List(args.collect()),
            Py::Dict(kwargs),
        ])
    }
}

impl Arg {
    fn py(&self) -> Py {
        match self {
            Arg::Value(v) => Py::Value(v.clone()),
            Arg::Key(k) => Py::Call(Box::new(Py::Fixed(TASK_REF)), vec![key_py(k)]),
            Arg::Call(c) => c.task(),
        }
    }
}

/// A key as Python has it: a str, an int, a float, or a tuple of keys.
fn key_py(k: &Key) -> Py {
    match k {
        Key::Str(s) => Py::Value(Value::from(s.as_str())),
        Key::Int(i) => Py::Value(Value::from(*i)),
        Key::Float(f) => Py::Value(Value::from(*f)),
        Key::Bytes(b) => Py::Value(Value::Bin(b.clone())),
        Key::Tuple(items) => Py::Tuple(items.iter().map(key_py).collect()),
    }
}

/// The two forms of `update-graph`'s graph, by the scheduler's release.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GraphForm {
    /// 2025.4.0 and later: `expr_ser`, the pickle of
    /// `Expr._reconstruct(LLGExpr, {key: task}, token, {})`.
    Expr,
    /// 2024.12.1 through 2025.3.x: `graph_header` and `graph_frames`, the
    /// pickle of `ToPickle(HighLevelGraph({name: {key: task}}, {name:
    /// set()}))`.
    HighLevelGraph,
}

/// The oldest and the newest release the graph forms are known for.
pub(crate) const OLDEST_RELEASE: (u32, u32) = (2024, 12);
pub(crate) const NEWEST_RELEASE: (u32, u32) = (2026, 8);

impl GraphForm {
    /// The form a `distributed` release (`"2025.5.1"`) reads, or `None`
    /// outside 2024.12.1 ..= 2026.8.x.
    pub(crate) fn of_release(release: &str) -> Option<GraphForm> {
        let mut parts = release.split('.').map(|p| {
            let digits: String = p.chars().take_while(char::is_ascii_digit).collect();
            digits.parse::<u32>().ok()
        });
        let (y, m, p) = (parts.next()??, parts.next()??, parts.next().flatten()?);
        let v = (y, m, p);
        if v < (OLDEST_RELEASE.0, OLDEST_RELEASE.1, 1) || (y, m) > NEWEST_RELEASE {
            return None;
        }
        Some(match v >= (2025, 4, 0) {
            true => GraphForm::Expr,
            false => GraphForm::HighLevelGraph,
        })
    }
}

/// The pickle of a graph of tasks in `form`, `token` its 32 hex digits,
/// and its out-of-band buffers (each with whether it is writeable).
pub(crate) fn graph_pickle(
    tasks: &[(Key, Call)],
    form: GraphForm,
    token: &str,
) -> Result<(Bytes, Vec<(Bytes, bool)>), EncodeError> {
    let dsk = Py::Dict(tasks.iter().map(|(k, c)| (key_py(k), c.task())).collect());
    let token = Py::Value(Value::from(token));
    let graph = match form {
        GraphForm::Expr => Py::Call(
            Box::new(Py::Fixed(EXPR_RECONSTRUCT)),
            vec![Py::Fixed(LLG_EXPR), dsk, token, Py::Dict(Vec::new())],
        ),
        GraphForm::HighLevelGraph => {
            let Py::Value(Value::Str(t)) = &token else {
                unreachable!("a str token")
            };
            let name = Py::Value(Value::from(format!("framewire-{t}").as_str()));
            let hlg = Py::Call(
                Box::new(Py::Fixed(HIGH_LEVEL_GRAPH)),
                vec![
                    Py::Dict(vec![(name.clone(), dsk)]),
                    Py::Dict(vec![(name, Py::EmptySet)]),
                ],
            );
            Py::Call(Box::new(Py::Fixed(TO_PICKLE)), vec![hlg])
        }
    };
    pickle::dumps_py(&graph)
}

/// A deterministic 128-bit token of a call (FNV-1a over its pickle and
/// the data of its arrays), as 32 hex digits: the same call, the same key,
/// as Dask's `tokenize` makes pure calls share one.
pub(crate) fn call_token(call: &Call) -> Result<String, EncodeError> {
    let (pickle, buffers) = pickle::dumps_py(&call.task())?;
    let mut h: u128 = 0x6c62272e07bb014262b821756295c58d;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            h ^= u128::from(b);
            h = h.wrapping_mul(0x0000000001000000000000000000013B);
        }
    };
    eat(&pickle);
    for (b, _) in &buffers {
        eat(&(b.len() as u64).to_le_bytes());
        eat(b);
    }
    Ok(format!("{h:032x}"))
}

/// A random token: 32 hex digits (as `uuid4().hex`).
pub(crate) fn random_token() -> String {
    format!("{:032x}", fastrand::u128(..))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_and_their_forms() {
        for (r, f) in [
            ("2024.12.1", Some(GraphForm::HighLevelGraph)),
            ("2025.1.0", Some(GraphForm::HighLevelGraph)),
            ("2025.3.9", Some(GraphForm::HighLevelGraph)),
            ("2025.4.0", Some(GraphForm::Expr)),
            ("2025.5.1", Some(GraphForm::Expr)),
            ("2026.8.0", Some(GraphForm::Expr)),
            ("2026.8.3+4.gabc", Some(GraphForm::Expr)),
            ("2024.12.0", None),
            ("2024.11.1", None),
            ("2026.9.0", None),
            ("2027.1.0", None),
            ("garbage", None),
            ("2025.4", None),
        ] {
            assert_eq!(GraphForm::of_release(r), f, "{r}");
        }
    }

    #[test]
    fn tokens_follow_the_call() {
        let add: PyFunction = "operator:add".parse().unwrap();
        let a = Call::new(add.clone()).arg(1i64).arg(2i64);
        let b = Call::new(add).arg(1i64).arg(3i64);
        assert_eq!(call_token(&a).unwrap(), call_token(&a.clone()).unwrap());
        assert_ne!(call_token(&a).unwrap(), call_token(&b).unwrap());
        assert_eq!(call_token(&a).unwrap().len(), 32);
    }
}
