//! [`NdArray`]: an n-dimensional array whose data is a `Bytes` view, laid out
//! as numpy describes it (dtype string, shape, byte strides). It crosses the
//! wire as Dask's `numpy.ndarray` header plus one data frame, zero-copy both
//! ways (SPEC.md §5.4).

use std::fmt;

use bytes::{Bytes, BytesMut};
use zerocopy::{FromBytes, Immutable, KnownLayout};

use crate::error::EncodeError;

mod sealed {
    pub trait Sealed {}
}

/// A numpy number type an [`NdArray`]'s data can be read as: `f64` (`f8`),
/// `f32` (`f4`), `i8`..`i64` (`i1`..`i8`), `u8`..`u64` (`u1`..`u8`).
/// Sealed: framewire implements it for these types only (numpy `bool`,
/// complex, datetime, string dtypes have no view; read [`NdArray::data`]).
pub trait ArrayElement: FromBytes + Immutable + KnownLayout + Copy + sealed::Sealed {
    /// numpy's dtype kind (`'f'`, `'i'`, `'u'`).
    const KIND: char;
}

macro_rules! elements {
    ($($t:ty => $kind:literal),* $(,)?) => {$(
        impl sealed::Sealed for $t {}
        impl ArrayElement for $t {
            const KIND: char = $kind;
        }
    )*};
}

elements! {
    f64 => 'f', f32 => 'f',
    i8 => 'i', i16 => 'i', i32 => 'i', i64 => 'i',
    u8 => 'u', u16 => 'u', u32 => 'u', u64 => 'u',
}

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
///
/// `Debug` shows the elements as numbers, in C order, for the dtypes with
/// numbers in them (bool, ints, uints, `f4`, `f8`, complex `c8` and `c16`,
/// either byte order); past 8 of them, the first and last three around
/// `...`, as numpy's repr does. Other dtypes show a byte count:
///
/// ```
/// # use bytes::Bytes;
/// # use framewire::NdArray;
/// let data: Vec<u8> = [7i32, -1, 300].iter().flat_map(|x| x.to_be_bytes()).collect();
/// let a = NdArray::from_c_order(">i4", &[3], Bytes::from(data))?;
/// assert_eq!(
///     format!("{a:?}"),
///     r#"NdArray { dtype: ">i4", shape: [3], strides: [4], writeable: true, broadcast_to: None, data: [7, -1, 300] }"#
/// );
/// # Ok::<(), framewire::EncodeError>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
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
    /// `product(shape) × item size` bytes. An object dtype (`|O`) is
    /// [`EncodeError::ObjectArray`].
    ///
    /// ```
    /// use bytes::Bytes;
    /// use framewire::{EncodeError, NdArray};
    /// let pointers = Bytes::from(vec![0u8; 16]);
    /// assert_eq!(NdArray::from_c_order("|O", &[2], pointers), Err(EncodeError::ObjectArray));
    /// ```
    pub fn from_c_order(dtype: &str, shape: &[u64], data: Bytes) -> Result<NdArray, EncodeError> {
        if matches!(dtype.as_bytes(), [b'<' | b'>' | b'|' | b'=', b'O', ..]) {
            return Err(EncodeError::ObjectArray);
        }
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

    /// Whether the dtype is `T`, in any byte order; and whether that order
    /// is this machine's.
    fn dtype_is<T: ArrayElement>(&self) -> Option<bool> {
        let mut chars = self.dtype.chars();
        let order = chars.next()?;
        let kind = chars.next()?;
        if kind != T::KIND || self.item_size != std::mem::size_of::<T>() {
            return None;
        }
        let native = match order {
            '=' | '|' => true,
            '<' => cfg!(target_endian = "little"),
            '>' => cfg!(target_endian = "big"),
            _ => return None,
        };
        // A one-byte type has no byte order.
        Some(native || self.item_size == 1)
    }

    /// The number of elements the receiver sees (the logical shape's).
    fn count(&self) -> Option<usize> {
        self.logical_shape()
            .iter()
            .try_fold(1u64, |n, &d| n.checked_mul(d))
            .and_then(|n| usize::try_from(n).ok())
    }

    /// The elements as a `&[T]` in C order, borrowed from the data frame
    /// (no copy), when that is what the bytes are: the dtype is `T` in this
    /// machine's byte order, the array is C-contiguous and not broadcast,
    /// and the data is aligned for `T` (a frame sliced out of a message
    /// need not be). `None` otherwise: [`to_vec`](Self::to_vec) copies.
    ///
    /// ```
    /// use bytes::Bytes;
    /// use framewire::NdArray;
    /// let values = [1.5f64, 2.5, 3.5, 4.5];
    /// let data: Vec<u8> = values.iter().flat_map(|x| x.to_ne_bytes()).collect();
    /// let dtype = if cfg!(target_endian = "little") { "<f8" } else { ">f8" };
    /// let a = NdArray::from_c_order(dtype, &[2, 2], Bytes::from(data))?;
    /// // A `Vec<u8>`'s buffer need not be aligned for f64: `as_slice` may
    /// // decline; `to_vec` always reads it.
    /// if let Some(view) = a.as_slice::<f64>() {
    ///     assert_eq!(view, &values);
    /// }
    /// assert_eq!(a.to_vec::<f64>().as_deref(), Some(&values[..]));
    /// assert_eq!(a.as_slice::<i64>(), None, "not the dtype");
    /// # Ok::<(), framewire::EncodeError>(())
    /// ```
    pub fn as_slice<T: ArrayElement>(&self) -> Option<&[T]> {
        if !self.dtype_is::<T>()? || self.broadcast_to.is_some() {
            return None;
        }
        let len = self.count()?.checked_mul(self.item_size)?;
        if !self.is_c_contiguous() || self.data.len() < len {
            return None;
        }
        <[T]>::ref_from_bytes(&self.data[..len]).ok()
    }

    /// The elements as a `Vec<T>` in C order (numpy's `tolist()` order),
    /// whatever the strides, broadcasting, alignment and byte order; `None`
    /// when the dtype is not `T`.
    ///
    /// ```
    /// use bytes::Bytes;
    /// use framewire::NdArray;
    /// // Big-endian int32 read on any machine.
    /// let data: Vec<u8> = [7i32, -1, 300].iter().flat_map(|x| x.to_be_bytes()).collect();
    /// let a = NdArray::from_c_order(">i4", &[3], Bytes::from(data))?;
    /// assert_eq!(a.to_vec::<i32>(), Some(vec![7, -1, 300]));
    /// assert_eq!(a.to_vec::<u32>(), None);
    /// # Ok::<(), framewire::EncodeError>(())
    /// ```
    pub fn to_vec<T: ArrayElement>(&self) -> Option<Vec<T>> {
        let native = self.dtype_is::<T>()?;
        if let Some(view) = self.as_slice::<T>() {
            return Some(view.to_vec());
        }
        let bytes = self.to_c_order();
        let size = self.item_size;
        let mut item = [0u8; 8];
        bytes
            .chunks_exact(size)
            .map(|chunk| {
                let item = &mut item[..size];
                item.copy_from_slice(chunk);
                if !native {
                    item.reverse();
                }
                T::read_from_bytes(item).ok()
            })
            .collect()
    }

    /// Whether the (unbroadcast) data is C-contiguous.
    fn is_c_contiguous(&self) -> bool {
        let mut c_stride = self.item_size as u64;
        self.shape.iter().zip(&self.strides).rev().all(|(&n, &s)| {
            let ok = n <= 1 || s == c_stride;
            c_stride = c_stride.saturating_mul(n);
            ok
        })
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

/// Elements up to which an [`NdArray`]'s `Debug` shows them all; past it,
/// the first and last three (numpy's `edgeitems`).
const DEBUG_ELEMENTS: usize = 8;

/// numpy's `edgeitems`: elements shown at each end of a long array.
const EDGE_ELEMENTS: usize = 3;

impl fmt::Debug for NdArray {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = f.debug_struct("NdArray");
        s.field("dtype", &self.dtype)
            .field("shape", &self.shape)
            .field("strides", &self.strides)
            .field("writeable", &self.writeable)
            .field("broadcast_to", &self.broadcast_to);
        match (self.number_kind(), self.count()) {
            (Some(kind), Some(count)) => s.field(
                "data",
                &Elements {
                    array: self,
                    kind,
                    count,
                },
            ),
            _ => s.field("data", &format_args!("{} bytes", self.data.len())),
        }
        .finish()
    }
}

/// How an element's bytes make a number, for `Debug`.
#[derive(Clone, Copy, Debug)]
struct NumberKind {
    /// numpy's kind: `b`, `i`, `u`, `f` or `c`.
    kind: char,
    /// The bytes are big-endian.
    big_endian: bool,
}

impl NdArray {
    /// How the dtype's elements read as numbers, or `None` for a dtype
    /// without numbers `Debug` can show (strings, datetimes, `f2`...).
    fn number_kind(&self) -> Option<NumberKind> {
        let mut chars = self.dtype.chars();
        let big_endian = match chars.next()? {
            '>' => true,
            '<' => false,
            '|' | '=' => cfg!(target_endian = "big"),
            _ => return None,
        };
        let kind = chars.next()?;
        match (kind, self.item_size) {
            ('b', 1) | ('i' | 'u', 1 | 2 | 4 | 8) | ('f', 4 | 8) | ('c', 8 | 16) => {
                Some(NumberKind { kind, big_endian })
            }
            _ => None,
        }
    }

    /// The bytes of the `i`-th element in C order of the logical shape
    /// (none past the data, which a checked array never reaches).
    fn element(&self, i: usize) -> Option<&[u8]> {
        let (mut rest, mut at) = (i as u64, 0u64);
        for (&n, &stride) in self.logical_shape().iter().zip(&self.strides).rev() {
            at = at.checked_add(rest.checked_rem(n)?.checked_mul(stride)?)?;
            rest = rest.checked_div(n)?;
        }
        let at = usize::try_from(at).ok()?;
        self.data.get(at..at.checked_add(self.item_size)?)
    }
}

/// The elements of an array as numbers, for `Debug`.
struct Elements<'a> {
    array: &'a NdArray,
    kind: NumberKind,
    /// The number of elements (the logical shape's).
    count: usize,
}

impl Elements<'_> {
    /// Element `i` as a number.
    fn number(&self, i: usize) -> Option<Number> {
        let bytes = self.array.element(i)?;
        let NumberKind { kind, big_endian } = self.kind;
        // The bytes as an unsigned integer, most significant first.
        let uint = |b: &[u8]| {
            let fold = |n: u64, &x: &u8| (n << 8) | u64::from(x);
            match big_endian {
                true => b.iter().fold(0, fold),
                false => b.iter().rev().fold(0, fold),
            }
        };
        let float = |b: &[u8]| match b.len() {
            4 => f64::from(f32::from_bits(uint(b) as u32)),
            _ => f64::from_bits(uint(b)),
        };
        Some(match kind {
            'b' => Number::Bool(bytes[0] != 0),
            'u' => Number::Uint(uint(bytes)),
            'i' => {
                // Sign-extended from the item's width.
                let shift = 64 - 8 * bytes.len() as u32;
                Number::Int(((uint(bytes) << shift) as i64) >> shift)
            }
            'f' => Number::Float(float(bytes)),
            _ => {
                let (re, im) = bytes.split_at(bytes.len() / 2);
                Number::Complex(float(re), float(im))
            }
        })
    }
}

impl fmt::Debug for Elements<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let count = self.count;
        let shown: Vec<usize> = match count <= DEBUG_ELEMENTS {
            true => (0..count).collect(),
            false => (0..EDGE_ELEMENTS)
                .chain(count - EDGE_ELEMENTS..count)
                .collect(),
        };
        let mut list = f.debug_list();
        for (n, &i) in shown.iter().enumerate() {
            if count > DEBUG_ELEMENTS && n == EDGE_ELEMENTS {
                list.entry(&format_args!("..."));
            }
            match self.number(i) {
                Some(x) => list.entry(&x),
                None => list.entry(&format_args!("?")),
            };
        }
        list.finish()
    }
}

/// One element, as `Debug` shows it.
enum Number {
    Bool(bool),
    Int(i64),
    Uint(u64),
    Float(f64),
    /// Real and imaginary parts.
    Complex(f64, f64),
}

impl fmt::Debug for Number {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Number::Bool(b) => write!(f, "{b}"),
            Number::Int(i) => write!(f, "{i}"),
            Number::Uint(u) => write!(f, "{u}"),
            Number::Float(x) => write!(f, "{x:?}"),
            // numpy's `1+2j`, with Rust's float digits.
            Number::Complex(re, im) if im.is_sign_negative() => write!(f, "{re:?}-{:?}j", -im),
            Number::Complex(re, im) => write!(f, "{re:?}+{im:?}j"),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn le(dtype: &str) -> String {
        match cfg!(target_endian = "little") {
            true => dtype.to_owned(),
            false => dtype.replacen('<', ">", 1),
        }
    }

    /// `bytes` in a buffer whose start is `offset` bytes past an 8-aligned
    /// address.
    fn placed(bytes: &[u8], offset: usize) -> Bytes {
        let mut out = BytesMut::with_capacity(bytes.len() + 16);
        let pad = out.as_ptr().align_offset(8) + offset;
        out.extend_from_slice(&vec![0u8; pad]);
        out.extend_from_slice(bytes);
        out.freeze().slice(pad..)
    }

    /// f64s, 8-aligned.
    fn aligned_f64(values: &[f64]) -> Bytes {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_ne_bytes()).collect();
        placed(&bytes, 0)
    }

    /// `Debug`'s `data` field of an array.
    fn debug_data(a: &NdArray) -> String {
        let s = format!("{a:?}");
        let at = s.find("data: ").expect("a data field") + "data: ".len();
        s[at..s.len() - " }".len()].to_owned()
    }

    fn bytes_of<const N: usize>(items: impl IntoIterator<Item = [u8; N]>) -> Bytes {
        Bytes::from(items.into_iter().flatten().collect::<Vec<u8>>())
    }

    #[test]
    fn debug_shows_numbers_in_either_byte_order() {
        let a = NdArray::from_c_order(
            "<f8",
            &[2, 3],
            bytes_of([1.0f64, 2.5, -3.0, 4.0, 5.0, 6.0].map(f64::to_le_bytes)),
        )
        .unwrap();
        assert_eq!(
            format!("{a:?}"),
            r#"NdArray { dtype: "<f8", shape: [2, 3], strides: [24, 8], writeable: true, broadcast_to: None, data: [1.0, 2.5, -3.0, 4.0, 5.0, 6.0] }"#
        );
        let cases = [
            NdArray::from_c_order(
                ">f4",
                &[2],
                bytes_of([0.5f32, f32::NAN].map(f32::to_be_bytes)),
            ),
            NdArray::from_c_order(
                "<i2",
                &[3],
                bytes_of([-2i16, 0, i16::MAX].map(i16::to_le_bytes)),
            ),
            NdArray::from_c_order(">i8", &[2], bytes_of([i64::MIN, 7].map(i64::to_be_bytes))),
            NdArray::from_c_order("|i1", &[2], bytes_of([-128i8, 127].map(i8::to_le_bytes))),
            NdArray::from_c_order(">u4", &[2], bytes_of([u32::MAX, 1].map(u32::to_be_bytes))),
            NdArray::from_c_order("<u8", &[1], bytes_of([u64::MAX].map(u64::to_le_bytes))),
            NdArray::from_c_order("|b1", &[3], Bytes::from_static(&[1, 0, 1])),
            NdArray::from_c_order(
                "<c16",
                &[2],
                bytes_of([1.0f64, 2.0, 0.5, -1.5].map(f64::to_le_bytes)),
            ),
            NdArray::from_c_order(">c8", &[1], bytes_of([-1.0f32, 0.25].map(f32::to_be_bytes))),
        ];
        let want = [
            "[0.5, NaN]",
            "[-2, 0, 32767]",
            "[-9223372036854775808, 7]",
            "[-128, 127]",
            "[4294967295, 1]",
            "[18446744073709551615]",
            "[true, false, true]",
            "[1.0+2.0j, 0.5-1.5j]",
            "[-1.0+0.25j]",
        ];
        for (a, want) in cases.iter().zip(want) {
            assert_eq!(debug_data(a.as_ref().unwrap()), want);
        }
    }

    #[test]
    fn debug_truncates_long_arrays_as_numpy_does() {
        let a = NdArray::from_c_order("<i4", &[1000], bytes_of((0..1000i32).map(i32::to_le_bytes)))
            .unwrap();
        assert_eq!(debug_data(&a), "[0, 1, 2, ..., 997, 998, 999]");
        let a =
            NdArray::from_c_order("<i4", &[8], bytes_of((0..8i32).map(i32::to_le_bytes))).unwrap();
        assert_eq!(debug_data(&a), "[0, 1, 2, 3, 4, 5, 6, 7]");
        let a = NdArray::from_c_order("<i4", &[3, 0], Bytes::new()).unwrap();
        assert_eq!(debug_data(&a), "[]");
    }

    #[test]
    fn debug_reads_strided_and_broadcast_arrays_in_c_order() {
        // The transpose of [[0, 1, 2], [3, 4, 5]]: strides of a
        // Fortran-order view.
        let data = bytes_of((0..6i16).map(i16::to_le_bytes));
        let geometry = Geometry {
            shape: vec![3, 2],
            strides: vec![2, 6],
            broadcast_to: None,
        };
        let a = NdArray::from_parts("<i2", geometry, true, data.clone()).unwrap();
        assert_eq!(debug_data(&a), "[0, 3, 1, 4, 2, 5]");
        // One row broadcast to two.
        let geometry = Geometry {
            shape: vec![1, 3],
            strides: vec![0, 2],
            broadcast_to: Some(vec![2, 3]),
        };
        let a = NdArray::from_parts("<i2", geometry, false, data).unwrap();
        assert_eq!(debug_data(&a), "[0, 1, 2, 0, 1, 2]");
    }

    #[test]
    fn debug_counts_the_bytes_of_other_dtypes() {
        let a = NdArray::from_c_order("<U2", &[2], Bytes::from(vec![0u8; 16])).unwrap();
        assert_eq!(debug_data(&a), "16 bytes");
        let a = NdArray::from_c_order("<M8[ns]", &[1], Bytes::from(vec![0u8; 8])).unwrap();
        assert_eq!(debug_data(&a), "8 bytes");
    }

    #[test]
    fn object_arrays_are_refused_as_such() {
        let pointers = Bytes::from(vec![0u8; 16]);
        assert_eq!(
            NdArray::from_c_order("|O", &[2], pointers.clone()),
            Err(EncodeError::ObjectArray)
        );
        assert_eq!(
            NdArray::from_c_order("|O", &[3], pointers)
                .unwrap_err()
                .to_string(),
            "object arrays (dtype |O) cannot be read: they hold pickled Python objects"
        );
    }

    #[test]
    fn as_slice_borrows_aligned_native_c_order_data() {
        let data = aligned_f64(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let a = NdArray::from_c_order(&le("<f8"), &[2, 3], data.clone()).unwrap();
        let view = a.as_slice::<f64>().expect("aligned, native, C order");
        assert_eq!(view, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        assert_eq!(view.as_ptr() as *const u8, data.as_ptr(), "no copy");
        assert_eq!(a.as_slice::<i64>(), None, "another dtype");
        assert_eq!(a.as_slice::<f32>(), None, "another size");
        assert_eq!(a.to_vec::<f64>().unwrap(), view);
    }

    #[test]
    fn as_slice_declines_what_is_not_a_plain_view() {
        // Unaligned: one byte past an aligned address.
        let bytes: Vec<u8> = [0.0f64, 1.0, 2.0]
            .iter()
            .flat_map(|v| v.to_ne_bytes())
            .collect();
        let a = NdArray::from_c_order(&le("<f8"), &[3], placed(&bytes, 1)).unwrap();
        assert_eq!(a.as_slice::<f64>(), None, "unaligned");
        assert_eq!(a.to_vec::<f64>(), Some(vec![0.0, 1.0, 2.0]));

        // Foreign byte order.
        let foreign = if cfg!(target_endian = "little") {
            ">i2"
        } else {
            "<i2"
        };
        let data: Vec<u8> = [1i16, -2, 3]
            .iter()
            .flat_map(|x| x.swap_bytes().to_ne_bytes())
            .collect();
        let a = NdArray::from_c_order(foreign, &[3], Bytes::from(data)).unwrap();
        assert_eq!(a.as_slice::<i16>(), None, "byte order");
        assert_eq!(a.to_vec::<i16>(), Some(vec![1, -2, 3]));

        // Fortran order (a transposed 2x3), and a broadcast row.
        let data = aligned_f64(&[1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
        let geometry = |shape, strides, broadcast_to| Geometry {
            shape,
            strides,
            broadcast_to,
        };
        let fortran = geometry(vec![2, 3], vec![8, 16], None);
        let f = NdArray::from_parts(&le("<f8"), fortran, true, data).unwrap();
        assert_eq!(f.as_slice::<f64>(), None, "not C order");
        assert_eq!(f.to_vec::<f64>(), Some(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]));
        let row = aligned_f64(&[7.0, 8.0]);
        let broadcast = geometry(vec![1, 2], vec![0, 8], Some(vec![3, 2]));
        let b = NdArray::from_parts(&le("<f8"), broadcast, true, row).unwrap();
        assert_eq!(b.as_slice::<f64>(), None, "broadcast");
        assert_eq!(b.to_vec::<f64>(), Some(vec![7.0, 8.0, 7.0, 8.0, 7.0, 8.0]));
    }

    #[test]
    fn one_byte_types_have_no_byte_order_and_other_dtypes_no_view() {
        let a = NdArray::from_c_order("|u1", &[3], Bytes::from_static(&[1, 2, 255])).unwrap();
        assert_eq!(a.as_slice::<u8>(), Some(&[1u8, 2, 255][..]));
        assert_eq!(a.to_vec::<i8>(), None, "u1 is not i1");
        let b = NdArray::from_c_order("|b1", &[3], Bytes::from_static(&[1, 0, 1])).unwrap();
        assert_eq!(b.as_slice::<u8>(), None, "bool is not u1");
        let s = NdArray::from_c_order("|S2", &[1], Bytes::from_static(b"ab")).unwrap();
        assert_eq!(s.to_vec::<u16>(), None);
        let c = NdArray::from_c_order("<c16", &[1], Bytes::from(vec![0u8; 16])).unwrap();
        assert_eq!(c.to_vec::<f64>(), None);
    }
}
