//! [`NdArray`]: an n-dimensional array whose data is a `Bytes` view, laid out
//! as numpy describes it (dtype string, shape, byte strides). It crosses the
//! wire as Dask's `numpy.ndarray` header plus one data frame, zero-copy both
//! ways (SPEC.md §5.4).

use bytes::{Bytes, BytesMut};

use crate::error::EncodeError;

/// An n-dimensional array: numpy's `dtype.str`, shape, strides in bytes, and
/// the data frame, exactly as Dask's `numpy.ndarray` header describes it.
///
/// ```
/// use bytes::Bytes;
/// use framewire::NdArray;
/// let data: Vec<u8> = [1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0].iter().flat_map(|x| x.to_le_bytes()).collect();
/// let a = NdArray::from_c_order("<f8", &[2, 3], Bytes::from(data))?;
/// assert_eq!(a.strides(), &[24, 8]);
/// assert_eq!(a.item_size(), 8);
/// # Ok::<(), framewire::EncodeError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NdArray {
    dtype: String,
    item_size: usize,
    shape: Vec<u64>,
    strides: Vec<u64>,
    writeable: bool,
    broadcast_to: Option<Vec<u64>>,
    data: Bytes,
}

/// The item size of a simple numpy dtype string (`"<f8"`, `"|u1"`, `"<M8[ns]"`,
/// `"<U5"`, `"|S3"`, `"|b1"`, `"<c16"`), or `None` for anything else.
pub(crate) fn dtype_item_size(dtype: &str) -> Option<usize> {
    let mut chars = dtype.chars();
    let order = chars.next()?;
    if !matches!(order, '<' | '>' | '|' | '=') {
        return None;
    }
    let kind = chars.next()?;
    let rest = chars.as_str();
    let (digits, unit) = match rest.find('[') {
        Some(i) => (&rest[..i], Some(&rest[i..])),
        None => (rest, None),
    };
    let n: usize = digits.parse().ok().filter(|&n| n > 0)?;
    match (kind, unit) {
        ('b' | 'i' | 'u' | 'f' | 'c' | 'S', None) => Some(n),
        ('U', None) => n.checked_mul(4),
        ('M' | 'm', _) if n == 8 => Some(8),
        _ => None,
    }
}

/// Where an array's elements lie in its data frame, as a Dask header gives
/// it: the shape sent, strides in bytes, and the shape it is broadcast to.
pub(crate) struct Geometry {
    pub(crate) shape: Vec<u64>,
    pub(crate) strides: Vec<u64>,
    pub(crate) broadcast_to: Option<Vec<u64>>,
}

impl NdArray {
    /// A C-contiguous array over `data`, which must hold exactly
    /// `product(shape) × item size` bytes.
    pub fn from_c_order(dtype: &str, shape: &[u64], data: Bytes) -> Result<NdArray, EncodeError> {
        let bad = || EncodeError::InvalidArray {
            reason: "dtype, shape and data length do not agree",
        };
        let item_size = dtype_item_size(dtype).ok_or(bad())?;
        let mut strides = vec![0u64; shape.len()];
        let mut step = item_size as u64;
        for (s, &n) in strides.iter_mut().zip(shape).rev() {
            *s = step;
            step = step.checked_mul(n).ok_or(bad())?;
        }
        if step != data.len() as u64 {
            return Err(bad());
        }
        Ok(NdArray {
            dtype: dtype.to_owned(),
            item_size,
            shape: shape.to_vec(),
            strides,
            writeable: true,
            broadcast_to: None,
            data,
        })
    }

    /// An array from the parts of a Dask header, checked: the dtype must be
    /// simple, strides non-negative, and every element inside `data`. The
    /// error says what is wrong.
    pub(crate) fn from_parts(
        dtype: &str,
        geometry: Geometry,
        writeable: bool,
        data: Bytes,
    ) -> Result<NdArray, &'static str> {
        let Geometry {
            shape,
            strides,
            broadcast_to,
        } = geometry;
        let invalid = |reason| reason;
        let item_size = dtype_item_size(dtype).ok_or(invalid("unsupported dtype"))?;
        if shape.len() != strides.len() {
            return Err(invalid("shape and strides differ in length"));
        }
        if let Some(full) = &broadcast_to {
            let compatible = full.len() == shape.len()
                && shape
                    .iter()
                    .zip(full)
                    .zip(&strides)
                    .all(|((&s, &f), &st)| s == f || (st == 0 && s <= 1));
            if !compatible {
                return Err(invalid("broadcast_to does not fit shape and strides"));
            }
        }
        // The last byte any element touches must lie inside the data. numpy
        // reads the frame with the logical shape and the header's strides.
        let logical = broadcast_to.as_ref().unwrap_or(&shape);
        if !logical.contains(&0) {
            let mut extent = item_size as u64;
            for (&n, &s) in logical.iter().zip(&strides) {
                let span = (n - 1).checked_mul(s).ok_or(invalid("strides overflow"))?;
                extent = extent
                    .checked_add(span)
                    .ok_or(invalid("strides overflow"))?;
            }
            if extent > data.len() as u64 {
                return Err(invalid("shape and strides reach past the data frame"));
            }
        }
        Ok(NdArray {
            dtype: dtype.to_owned(),
            item_size,
            shape,
            strides,
            writeable,
            broadcast_to,
            data,
        })
    }

    /// numpy's `dtype.str`, e.g. `"<f8"`.
    pub fn dtype(&self) -> &str {
        &self.dtype
    }
    /// Bytes per element.
    pub fn item_size(&self) -> usize {
        self.item_size
    }
    /// The shape of the data sent (before broadcasting).
    pub fn shape(&self) -> &[u64] {
        &self.shape
    }
    /// Strides in bytes.
    pub fn strides(&self) -> &[u64] {
        &self.strides
    }
    /// Whether the receiver may write to the array.
    pub fn writeable(&self) -> bool {
        self.writeable
    }
    /// The full shape, when the array is a broadcast view (some stride 0).
    pub fn broadcast_to(&self) -> Option<&[u64]> {
        self.broadcast_to.as_deref()
    }
    /// The shape the receiver sees: `broadcast_to` if set, else `shape`.
    pub fn logical_shape(&self) -> &[u64] {
        self.broadcast_to.as_deref().unwrap_or(&self.shape)
    }
    /// The data frame, as sent.
    pub fn data(&self) -> &Bytes {
        &self.data
    }

    /// The elements in C order, as numpy's `tobytes()` gives them: the data
    /// itself when it already is C-contiguous and not broadcast, else a copy.
    pub fn to_c_order(&self) -> Bytes {
        let shape = self.logical_shape();
        let count: u64 = shape.iter().product();
        let strides = &self.strides;
        let item = self.item_size as u64;
        let mut c_stride = item;
        let contiguous = shape.iter().zip(strides).rev().all(|(&n, &s)| {
            let ok = n <= 1 || s == c_stride;
            c_stride *= n;
            ok
        });
        let len = (count * item) as usize;
        if contiguous && self.data.len() >= len {
            return self.data.slice(..len);
        }
        let mut out = BytesMut::with_capacity(len);
        let mut index = vec![0u64; shape.len()];
        for _ in 0..count {
            let at: u64 = index.iter().zip(strides).map(|(i, s)| i * s).sum();
            let at = at as usize;
            out.extend_from_slice(&self.data[at..at + self.item_size]);
            for d in (0..shape.len()).rev() {
                index[d] += 1;
                if index[d] < shape[d] {
                    break;
                }
                index[d] = 0;
            }
        }
        out.freeze()
    }

    /// Dask's shard unit for this array's frame: the item size, or
    /// `gcd(item size, 8)` for items wider than 8 bytes.
    pub(crate) fn shard_unit(&self) -> usize {
        if self.item_size > 8 {
            gcd(self.item_size, 8)
        } else {
            self.item_size
        }
    }
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}
