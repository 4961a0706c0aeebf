//! numpy's dtypes and arrays as its own pickles describe them, both ways:
//! `numpy.dtype(spec, False, True)` plus its `BUILD` state (the tuple
//! `dtype.__reduce__` gives), and arrays from a buffer, a shape and an
//! order. Nothing here is numpy's code: only the shapes of the arguments
//! numpy writes, checked.

use bytes::Bytes;

use super::error::{shown, PickleError};
use crate::error::EncodeError;
use crate::ndarray::{dtype_item_size, Geometry, NdArray};
use crate::value::Value;

/// The datetime units numpy pickles (`np.datetime_data`).
const UNITS: &[&str] = &[
    "Y", "M", "W", "D", "h", "m", "s", "ms", "us", "ns", "ps", "fs", "as", "generic",
];

/// A `numpy.dtype(spec, False, True)` being unpickled: `str` is numpy's
/// `dtype.str` once its state is set (`BUILD`).
#[derive(Clone, Debug)]
pub(super) struct Dtype {
    spec: String,
    str: Option<String>,
}

fn unsupported(spec: &str) -> PickleError {
    PickleError::UnsupportedDtype {
        dtype: shown(spec.as_bytes()),
    }
}

impl Dtype {
    /// From `numpy.dtype`'s arguments: `(spec, False, True)`, `spec` a kind
    /// letter and a size (`"f8"`, `"U5"`, `"M8"`).
    pub(super) fn new(args: &[Value]) -> Option<Dtype> {
        match args {
            [Value::Str(spec), Value::Bool(false), Value::Bool(true)] => Some(Dtype {
                spec: spec.to_string(),
                str: None,
            }),
            _ => None,
        }
    }

    /// numpy's `dtype.str`, once built.
    pub(super) fn str(&self) -> Option<&str> {
        self.str.as_deref()
    }

    /// Sets the state `dtype.__reduce__` gives: `(3, endian, None, None,
    /// None, elsize, alignment, flags)`, or version 4 with datetime metadata
    /// `(None, (unit, num, 1, 1))` after it. Fails for what
    /// [`NdArray`] does not hold (object, void, structured, sub-array
    /// dtypes), or for a state numpy would not write for `spec`.
    pub(super) fn build(&mut self, state: &[Value]) -> Result<(), PickleError> {
        let invalid = |reason| PickleError::InvalidArray { reason };
        if self.str.is_some() {
            return Err(invalid("a dtype's state is set twice"));
        }
        let spec = self.spec.as_str();
        let mut chars = spec.chars();
        let kind = chars.next().ok_or_else(|| unsupported(spec))?;
        let digits = chars.as_str();
        let n: usize = match digits.parse() {
            Ok(n) if digits.bytes().all(|b| b.is_ascii_digit()) => n,
            _ => return Err(unsupported(spec)),
        };
        let int = |v: &Value| v.as_int().and_then(|i| i.as_i64());
        let (version, endian, elsize, align, metadata) = match state {
            [v, Value::Str(e), Value::Nil, Value::Nil, Value::Nil, el, al, flags, rest @ ..]
                if int(flags).is_some() && rest.len() <= 1 =>
            {
                (int(v), &**e, int(el), int(al), rest.first())
            }
            // Sub-arrays, structured dtypes (names, fields): not an NdArray.
            [_, _, _, _, _, _, _, _, ..] => return Err(unsupported(spec)),
            _ => return Err(invalid("dtype state is not numpy's")),
        };
        if !matches!(endian, "<" | ">" | "|") {
            return Err(invalid("dtype byte order is not <, > or |"));
        }
        let fixed = (elsize, align) == (Some(-1), Some(-1));
        // numpy writes `|` (no byte order) for one-byte items and `<` or
        // `>` for wider ones; another pairing is no dtype numpy pickles.
        let one_byte = matches!(kind, 'b' | 'i' | 'u') && n == 1;
        let order_fits = (endian == "|") == one_byte;
        let built = match (kind, version, metadata) {
            ('b' | 'i' | 'u' | 'f' | 'c', Some(3), None) if fixed && order_fits => {
                format!("{endian}{spec}")
            }
            ('S', Some(3), None) if elsize == Some(n as i64) && align == Some(1) => {
                format!("|S{n}")
            }
            ('U', Some(3), None)
                if elsize == (n as i64).checked_mul(4) && align == Some(4) && order_fits =>
            {
                format!("{endian}U{n}")
            }
            ('M' | 'm', Some(4), Some(meta)) if n == 8 && fixed && order_fits => {
                format!("{endian}{spec}{}", datetime_unit(meta)?)
            }
            ('b' | 'i' | 'u' | 'f' | 'c' | 'S' | 'U' | 'M' | 'm', _, _) => {
                return Err(invalid("dtype state does not fit its kind"))
            }
            _ => return Err(unsupported(spec)),
        };
        if dtype_item_size(&built).is_none() {
            return Err(unsupported(&built));
        }
        self.str = Some(built);
        Ok(())
    }
}

/// `"[ns]"`, `"[10ms]"` or `""` (generic) from numpy's datetime metadata
/// `(None, (unit, num, 1, 1))`.
fn datetime_unit(meta: &Value) -> Result<String, PickleError> {
    let invalid = PickleError::InvalidArray {
        reason: "datetime metadata is not (None, (unit, num, 1, 1))",
    };
    let Some([Value::Nil, inner]) = meta.as_array() else {
        return Err(invalid);
    };
    let Some([unit, num, den, events]) = inner.as_array() else {
        return Err(invalid);
    };
    let unit = match unit {
        Value::Bin(b) => std::str::from_utf8(b).ok(),
        Value::Str(s) => Some(&**s),
        _ => None,
    }
    .filter(|u| UNITS.contains(u))
    .ok_or(invalid.clone())?;
    let one = |v: &Value| v.as_int().and_then(|i| i.as_u64()) == Some(1);
    let num = num
        .as_int()
        .and_then(|i| i.as_u64())
        .filter(|&n| n >= 1 && n <= i32::MAX as u64 && one(den) && one(events))
        .ok_or(invalid)?;
    Ok(match (unit, num) {
        ("generic", _) => String::new(),
        (u, 1) => format!("[{u}]"),
        (u, n) => format!("[{n}{u}]"),
    })
}

/// An array over `data` of `shape`, in C order or Fortran order, as
/// `numpy.frombuffer(data, dtype).reshape(shape, order=...)` makes it: the
/// data must hold exactly the elements. The data itself, not a copy.
pub(super) fn array(
    dtype: &str,
    shape: Vec<u64>,
    fortran: bool,
    writeable: bool,
    data: Bytes,
) -> Result<NdArray, PickleError> {
    let invalid = |reason| PickleError::InvalidArray { reason };
    let item = dtype_item_size(dtype).ok_or_else(|| unsupported(dtype))? as u64;
    let ndim = shape.len();
    let mut strides = vec![0u64; ndim];
    let mut step = item;
    // The fastest axis first: the last in C order, the first in Fortran order.
    for i in 0..ndim {
        let axis = if fortran { i } else { ndim - 1 - i };
        strides[axis] = step;
        step = step
            .checked_mul(shape[axis])
            .ok_or(invalid("shape overflows"))?;
    }
    if step != data.len() as u64 {
        return Err(invalid("the data is not shape × item size bytes"));
    }
    let geometry = Geometry {
        shape,
        strides,
        broadcast_to: None,
    };
    NdArray::from_parts(dtype, geometry, writeable, data).map_err(invalid)
}

/// What `numpy.dtype(dtype).__reduce__()` gives for one of
/// [`NdArray`]'s dtypes: the spec `numpy.dtype` is called with, and the
/// `BUILD` state.
pub(super) struct DtypeParts {
    /// `"f8"`, `"U5"`, `"M8"`.
    pub(super) spec: String,
    /// `'<'`, `'>'` or `'|'`.
    pub(super) endian: char,
    /// The state's elsize, alignment and flags.
    pub(super) sizes: [i64; 3],
    /// Datetime metadata: the unit and its multiple.
    pub(super) datetime: Option<(&'static str, u64)>,
}

/// The pickle form of an [`NdArray`] dtype string (`"<f8"`, `"|S3"`,
/// `"<M8[10ms]"`). `=` (and `|` for a multi-byte number) is this machine's
/// order, as numpy spells it in `dtype.str`.
pub(super) fn dtype_parts(dtype: &str) -> Result<DtypeParts, EncodeError> {
    let bad = EncodeError::InvalidArray {
        reason: "dtype has no pickle form",
    };
    let size = dtype_item_size(dtype).ok_or(bad.clone())?;
    let mut chars = dtype.chars();
    let order = chars.next().ok_or(bad.clone())?;
    let kind = chars.next().ok_or(bad.clone())?;
    let rest = chars.as_str();
    let (digits, unit) = match rest.find('[') {
        Some(i) => (&rest[..i], Some(&rest[i..])),
        None => (rest, None),
    };
    let native = if cfg!(target_endian = "big") {
        '>'
    } else {
        '<'
    };
    let endian = match (kind, size, order) {
        ('S', _, _) | ('b' | 'i' | 'u', 1, _) => '|',
        (_, _, '<' | '>') => order,
        _ => native,
    };
    let n: usize = digits.parse().map_err(|_| bad.clone())?;
    let (sizes, datetime) = match kind {
        'S' => ([n as i64, 1, 0], None),
        'U' => ([(n as i64) * 4, 4, 8], None),
        'M' | 'm' => {
            let (num, unit) = match unit {
                None => (1, "generic"),
                Some(u) => {
                    let inner = u
                        .strip_prefix('[')
                        .and_then(|u| u.strip_suffix(']'))
                        .ok_or(bad.clone())?;
                    let split = inner
                        .find(|c: char| !c.is_ascii_digit())
                        .ok_or(bad.clone())?;
                    let num = match &inner[..split] {
                        "" => 1,
                        d => d
                            .parse::<u64>()
                            .ok()
                            .filter(|&n| n >= 1)
                            .ok_or(bad.clone())?,
                    };
                    let unit = UNITS
                        .iter()
                        .find(|&&u| u == &inner[split..])
                        .ok_or(bad.clone())?;
                    (num, *unit)
                }
            };
            ([-1, -1, 0], Some((unit, num)))
        }
        _ => ([-1, -1, 0], None),
    };
    Ok(DtypeParts {
        spec: format!("{kind}{n}"),
        endian,
        sizes,
        datetime,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(endian: &str, sizes: [i64; 3]) -> Vec<Value> {
        vec![
            3.into(),
            Value::str(endian),
            Value::Nil,
            Value::Nil,
            Value::Nil,
            sizes[0].into(),
            sizes[1].into(),
            sizes[2].into(),
        ]
    }

    fn built(spec: &str, st: &[Value]) -> Result<String, PickleError> {
        let mut d =
            Dtype::new(&[Value::str(spec), false.into(), true.into()]).expect("numpy's arguments");
        d.build(st)?;
        Ok(d.str().unwrap().to_owned())
    }

    #[test]
    fn dtypes_read_as_numpy_spells_them() {
        assert_eq!(built("f8", &state("<", [-1, -1, 0])).unwrap(), "<f8");
        assert_eq!(built("i8", &state(">", [-1, -1, 0])).unwrap(), ">i8");
        assert_eq!(built("b1", &state("|", [-1, -1, 0])).unwrap(), "|b1");
        assert_eq!(built("S3", &state("|", [3, 1, 0])).unwrap(), "|S3");
        assert_eq!(built("U5", &state("<", [20, 4, 8])).unwrap(), "<U5");
        let mut dt = state("<", [-1, -1, 0]);
        dt[0] = 4.into();
        let meta = |unit: &'static [u8], num: u64| {
            Value::Array(vec![
                Value::Nil,
                Value::Array(vec![
                    Value::Bin(Bytes::from_static(unit)),
                    num.into(),
                    1.into(),
                    1.into(),
                ]),
            ])
        };
        dt.push(meta(b"ns", 1));
        assert_eq!(built("M8", &dt).unwrap(), "<M8[ns]");
        dt[8] = meta(b"ms", 10);
        assert_eq!(built("m8", &dt).unwrap(), "<m8[10ms]");
        dt[8] = meta(b"generic", 1);
        assert_eq!(built("M8", &dt).unwrap(), "<M8");
        dt[8] = meta(b"lightyear", 1);
        assert!(matches!(
            built("M8", &dt),
            Err(PickleError::InvalidArray { .. })
        ));
        // Object and void dtypes are not arrays framewire holds.
        assert_eq!(
            built("O8", &state("|", [-1, -1, 63])),
            Err(PickleError::UnsupportedDtype { dtype: "O8".into() })
        );
        assert_eq!(
            built("V4", &state("|", [4, 1, 0])),
            Err(PickleError::UnsupportedDtype { dtype: "V4".into() })
        );
        // A state that does not fit the kind.
        assert!(matches!(
            built("U5", &state("<", [5, 1, 0])),
            Err(PickleError::InvalidArray { .. })
        ));
        // A byte order that does not fit the item's size (numpy writes `|`
        // for one-byte items only; found by the `pickle_loads` fuzz target:
        // `|i4` read, then written and read back as `<i4`).
        for (spec, endian) in [
            ("i4", "|"),
            ("f8", "|"),
            ("U5", "|"),
            ("i1", "<"),
            ("b1", ">"),
        ] {
            let sizes = if spec == "U5" {
                [20, 4, 8]
            } else {
                [-1, -1, 0]
            };
            assert!(
                matches!(
                    built(spec, &state(endian, sizes)),
                    Err(PickleError::InvalidArray { .. })
                ),
                "{endian}{spec}"
            );
        }
        assert_eq!(built("u1", &state("|", [-1, -1, 0])).unwrap(), "|u1");
        // Structured: names and fields set.
        let mut s = state("|", [8, 1, 16]);
        s[3] = Value::Array(vec![Value::str("a")]);
        assert!(matches!(
            built("V8", &s),
            Err(PickleError::UnsupportedDtype { .. })
        ));
    }

    #[test]
    fn dtype_parts_are_what_numpy_reduces_to() {
        let p = dtype_parts("<f8").unwrap();
        assert_eq!(
            (p.spec.as_str(), p.endian, p.sizes),
            ("f8", '<', [-1, -1, 0])
        );
        let p = dtype_parts("|u1").unwrap();
        assert_eq!((p.spec.as_str(), p.endian), ("u1", '|'));
        let p = dtype_parts("<U5").unwrap();
        assert_eq!((p.spec.as_str(), p.sizes), ("U5", [20, 4, 8]));
        let p = dtype_parts("|S3").unwrap();
        assert_eq!((p.spec.as_str(), p.endian, p.sizes), ("S3", '|', [3, 1, 0]));
        let p = dtype_parts("<M8[10ms]").unwrap();
        assert_eq!((p.spec.as_str(), p.datetime), ("M8", Some(("ms", 10))));
        let p = dtype_parts(">m8").unwrap();
        assert_eq!(
            (p.spec.as_str(), p.endian, p.datetime),
            ("m8", '>', Some(("generic", 1)))
        );
        assert!(dtype_parts("<O8").is_err());
    }

    #[test]
    fn arrays_hold_exactly_their_elements() {
        let data = Bytes::from(vec![0u8; 48]);
        let c = array("<f8", vec![2, 3], false, true, data.clone()).unwrap();
        assert_eq!(c.strides(), &[24, 8]);
        let f = array("<f8", vec![2, 3], true, false, data.clone()).unwrap();
        assert_eq!(f.strides(), &[8, 16]);
        assert!(!f.writeable());
        assert_eq!(f.data().as_ptr(), data.as_ptr());
        assert!(array("<f8", vec![2, 2], false, true, data.clone()).is_err());
        assert!(array("<f8", vec![u64::MAX, 2], false, true, data).is_err());
        let scalar = array("<i2", vec![], false, true, Bytes::from_static(&[1, 0])).unwrap();
        assert_eq!(scalar.shape(), &[] as &[u64]);
    }
}
