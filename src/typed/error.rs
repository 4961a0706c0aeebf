//! The error of a conversion, with the path of the field it happened at;
//! it becomes [`DecodeError::Field`] or [`EncodeError::Field`].

use std::fmt;

use crate::error::EncodeError;
use crate::message::MessageError;
use crate::msgpack::MsgpackError;
use crate::protocol::DecodeError;
use crate::serialize::DeserializeError;
use crate::value::Value;

/// Boxed: every serde call returns it, and a one-pointer `Result` is
/// what keeps the direct path's calls cheap.
#[derive(Debug)]
pub(super) struct Error(Box<Inner>);

#[derive(Debug)]
struct Inner {
    message: String,
    /// Field names, map keys and indexes from the top down (built bottom
    /// up, as the error travels out).
    path: Vec<String>,
    /// An error of a layer below (the message's bytes, a block, a limit),
    /// met by the direct path ([`to_frames`](super::to_frames),
    /// [`from_frames`](super::from_frames)): reported as it is, without a
    /// path, as `dumps` and `loads` report it.
    layer: Option<Layer>,
}

#[derive(Debug)]
enum Layer {
    Encode(EncodeError),
    Decode(DecodeError),
}

impl Error {
    pub(super) fn new(message: impl fmt::Display) -> Error {
        Error::with(message.to_string(), Vec::new(), None)
    }

    /// The errors both paths give, worded once.
    pub(super) fn out_of_range(v: impl fmt::Display) -> Error {
        Error::new(format!("{v} is outside msgpack's integer range"))
    }

    pub(super) fn outside_conversion() -> Error {
        Error::new("a framewire value outside its conversion")
    }

    pub(super) fn value_without_key() -> Error {
        Error::new("a map value without its key")
    }

    pub(super) fn not_an_enum(found: &str) -> Error {
        Error::new(format!(
            "an enum is a string or a map of one entry, not {found}"
        ))
    }

    pub(super) fn unit_variant_holds(found: &str) -> Error {
        Error::new(format!("a unit variant holds {found}"))
    }

    fn with(message: String, path: Vec<String>, layer: Option<Layer>) -> Error {
        Error(Box::new(Inner {
            message,
            path,
            layer,
        }))
    }

    fn of_layer(layer: Layer) -> Error {
        let message = match &layer {
            Layer::Encode(e) => e.to_string(),
            Layer::Decode(e) => e.to_string(),
        };
        Error::with(message, Vec::new(), Some(layer))
    }

    /// The error, one level further out: inside field or key `key`.
    pub(super) fn at_key(mut self, key: &Value) -> Error {
        self.0.path.push(match key {
            Value::Str(s) => format!(".{}", &**s),
            Value::Int(i) => format!("[{i}]"),
            other => format!("[{}]", short(other)),
        });
        self
    }

    /// The error, one level further out: inside item `index`.
    pub(super) fn at_index(mut self, index: usize) -> Error {
        self.0.path.push(format!("[{index}]"));
        self
    }

    /// The error, one level further out: inside field `name`.
    pub(super) fn at_field(mut self, name: &str) -> Error {
        self.0.path.push(format!(".{name}"));
        self
    }

    fn path(&self) -> String {
        let path: String = self.0.path.iter().rev().map(String::as_str).collect();
        path.strip_prefix('.').unwrap_or(&path).to_owned()
    }

    pub(super) fn into_decode(self) -> DecodeError {
        let path = self.path();
        let Inner { message, layer, .. } = *self.0;
        match layer {
            Some(Layer::Decode(e)) => e,
            _ => DecodeError::Field { path, message },
        }
    }

    pub(super) fn into_encode(self) -> EncodeError {
        let path = self.path();
        let Inner { message, layer, .. } = *self.0;
        match layer {
            Some(Layer::Encode(e)) => e,
            _ => EncodeError::Field { path, message },
        }
    }
}

impl From<EncodeError> for Error {
    fn from(e: EncodeError) -> Error {
        Error::of_layer(Layer::Encode(e))
    }
}

impl From<DecodeError> for Error {
    fn from(e: DecodeError) -> Error {
        Error::of_layer(Layer::Decode(e))
    }
}

impl From<MessageError> for Error {
    fn from(e: MessageError) -> Error {
        DecodeError::Message(e).into()
    }
}

impl From<MsgpackError> for Error {
    fn from(e: MsgpackError) -> Error {
        MessageError::Msgpack(e).into()
    }
}

impl From<DeserializeError> for Error {
    fn from(e: DeserializeError) -> Error {
        DecodeError::Deserialize(e).into()
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
        match self.0.path.is_empty() {
            true => f.write_str(&self.0.message),
            false => write!(f, "{}: {}", self.path(), self.0.message),
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
