//! [`PyFunction`]: a Python callable named as `"module:qualname"`, the only
//! data from which the pickle writer names a global.

use std::fmt;
use std::str::FromStr;

/// A Python callable by name: a module (dotted identifiers, `numpy.linalg`)
/// and a qualified name in it (dotted identifiers, `norm`,
/// `Expr._reconstruct`), parsed from `"module:qualname"` (`"operator:add"`,
/// `"numpy.linalg:norm"`, `"builtins:int"`) as `pkgutil.resolve_name` and
/// entry points spell them. Identifiers are ASCII (`[A-Za-z_][A-Za-z0-9_]*`);
/// anything else (spaces, newlines, an empty segment, a second `:`, a
/// leading dot) is a [`PyFunctionError`].
///
/// **What a global may be named from.** framewire's pickle writer names a
/// Python global (`STACK_GLOBAL`) only from a `PyFunction` the program made
/// and from a few fixed constants of its own code (Dask's graph
/// constructors: `dask._expr.Expr._reconstruct`, `dask._expr.LLGExpr`,
/// `dask._task_spec.TaskRef`, `dask.utils.apply`,
/// `distributed.protocol.serialize.ToPickle`,
/// `dask.highlevelgraph.HighLevelGraph`, and numpy's array
/// reconstructors for arrays). Never from data it received: build a
/// `PyFunction` from text you trust, as you would write an `import` line.
/// Whoever unpickles the graph (a Dask scheduler, then a worker) imports
/// the module and calls the function: a client of a Dask cluster can run
/// code there anyway (Python's `Client.submit` sends closures), so naming
/// an importable function grants nothing new, but the name decides what
/// runs.
///
/// ```
/// use framewire::pickle::PyFunction;
///
/// let f: PyFunction = "numpy.linalg:norm".parse()?;
/// assert_eq!((f.module(), f.qualname(), f.name()), ("numpy.linalg", "norm", "norm"));
/// assert_eq!(f.to_string(), "numpy.linalg:norm");
/// assert!("os:system; rm".parse::<PyFunction>().is_err());
/// assert!("operator add".parse::<PyFunction>().is_err());
/// # Ok::<(), framewire::pickle::PyFunctionError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PyFunction {
    module: String,
    qualname: String,
}

/// Why a text is not a [`PyFunction`]: the text (cut at 200 bytes) and
/// what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PyFunctionError {
    text: String,
    reason: &'static str,
}

impl PyFunctionError {
    /// What is wrong (`"no ':' between module and name"`, `"the module is
    /// not dotted identifiers"`, `"the qualified name is not dotted
    /// identifiers"`).
    pub fn reason(&self) -> &'static str {
        self.reason
    }
}

impl fmt::Display for PyFunctionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "not a Python function name ({}): {:?}",
            self.reason, self.text
        )
    }
}

impl std::error::Error for PyFunctionError {}

/// Whether `s` is one or more identifiers joined by dots.
fn dotted(s: &str) -> bool {
    !s.is_empty()
        && s.split('.').all(|part| {
            let mut chars = part.chars();
            chars
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
}

impl PyFunction {
    /// The function `qualname` of `module`, both dotted identifiers.
    pub fn new(module: &str, qualname: &str) -> Result<PyFunction, PyFunctionError> {
        let err = |reason| PyFunctionError {
            text: cut(&format!("{module}:{qualname}")),
            reason,
        };
        if !dotted(module) {
            return Err(err("the module is not dotted identifiers"));
        }
        if !dotted(qualname) {
            return Err(err("the qualified name is not dotted identifiers"));
        }
        Ok(PyFunction {
            module: module.to_owned(),
            qualname: qualname.to_owned(),
        })
    }

    /// The module (`"numpy.linalg"`).
    pub fn module(&self) -> &str {
        &self.module
    }

    /// The qualified name in the module (`"norm"`, `"Expr._reconstruct"`).
    pub fn qualname(&self) -> &str {
        &self.qualname
    }

    /// The last part of the qualified name: what Dask's `funcname` gives
    /// for the function, and what names its keys (`"add"` for
    /// `operator:add`).
    pub fn name(&self) -> &str {
        self.qualname.rsplit('.').next().unwrap_or(&self.qualname)
    }
}

/// At most 200 bytes of `s`, on a char boundary.
fn cut(s: &str) -> String {
    let mut end = s.len().min(200);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_owned()
}

impl FromStr for PyFunction {
    type Err = PyFunctionError;

    fn from_str(s: &str) -> Result<PyFunction, PyFunctionError> {
        match s.split_once(':') {
            Some((module, qualname)) => PyFunction::new(module, qualname),
            None => Err(PyFunctionError {
                text: cut(s),
                reason: "no ':' between module and name",
            }),
        }
    }
}

impl TryFrom<&str> for PyFunction {
    type Error = PyFunctionError;

    fn try_from(s: &str) -> Result<PyFunction, PyFunctionError> {
        s.parse()
    }
}

impl fmt::Display for PyFunction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.module, self.qualname)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_dotted_identifiers() {
        for ok in [
            "operator:add",
            "numpy.linalg:norm",
            "dask._expr:Expr._reconstruct",
            "_m:_f1",
        ] {
            let f: PyFunction = ok.parse().unwrap();
            assert_eq!(f.to_string(), ok);
        }
        for bad in [
            "",
            "add",
            ":add",
            "operator:",
            "operator:add:x",
            "os:system rm",
            "os\n:system",
            ".rel:f",
            "a..b:f",
            "m:f.",
            "1m:f",
            "m:1f",
            "m:f()",
            "m:é",
            "m :f",
        ] {
            assert!(bad.parse::<PyFunction>().is_err(), "{bad:?} accepted");
        }
        let e = "operator add".parse::<PyFunction>().unwrap_err();
        assert_eq!(e.reason(), "no ':' between module and name");
        assert_eq!(
            PyFunction::new("numpy", "linalg.norm").unwrap().name(),
            "norm"
        );
    }
}
