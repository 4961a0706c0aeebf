//! The error of a conversion, with the path of the field it happened at;
//! it becomes [`DecodeError::Field`] or [`EncodeError::Field`].

use std::fmt;

use crate::error::EncodeError;
use crate::protocol::DecodeError;
use crate::value::Value;

#[derive(Debug)]
pub(super) struct Error {
    message: String,
    /// Field names, map keys and indexes from the top down (built bottom
    /// up, as the error travels out).
    path: Vec<String>,
}

impl Error {
    pub(super) fn new(message: impl fmt::Display) -> Error {
        Error {
            message: message.to_string(),
            path: Vec::new(),
        }
    }

    /// The error, one level further out: inside field or key `key`.
    pub(super) fn at_key(mut self, key: &Value) -> Error {
        self.path.push(match key {
            Value::Str(s) => format!(".{}", &**s),
            Value::Int(i) => format!("[{i}]"),
            other => format!("[{}]", short(other)),
        });
        self
    }

    /// The error, one level further out: inside item `index`.
    pub(super) fn at_index(mut self, index: usize) -> Error {
        self.path.push(format!("[{index}]"));
        self
    }

    /// The error, one level further out: inside field `name`.
    pub(super) fn at_field(mut self, name: &str) -> Error {
        self.path.push(format!(".{name}"));
        self
    }

    fn path(&self) -> String {
        let path: String = self.path.iter().rev().map(String::as_str).collect();
        path.strip_prefix('.').unwrap_or(&path).to_owned()
    }

    pub(super) fn into_decode(self) -> DecodeError {
        DecodeError::Field {
            path: self.path(),
            message: self.message,
        }
    }

    pub(super) fn into_encode(self) -> EncodeError {
        EncodeError::Field {
            path: self.path(),
            message: self.message,
        }
    }
}

/// A map key as a path shows it.
fn short(v: &Value) -> String {
    match v {
        Value::Nil => "nil".into(),
        Value::Bool(b) => b.to_string(),
        Value::Float(f) => f.to_string(),
        Value::Bin(b) => format!("<{} bytes>", b.len()),
        Value::Array(a) => format!("<array of {}>", a.len()),
        _ => "<key>".into(),
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.path.is_empty() {
            true => f.write_str(&self.message),
            false => write!(f, "{}: {}", self.path(), self.message),
        }
    }
}

impl std::error::Error for Error {}

impl serde::de::Error for Error {
    fn custom<T: fmt::Display>(msg: T) -> Error {
        Error::new(msg)
    }
}

impl serde::ser::Error for Error {
    fn custom<T: fmt::Display>(msg: T) -> Error {
        Error::new(msg)
    }
}
