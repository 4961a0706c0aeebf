//! An exact, recursive reference for layer 3's iteration rules, written
//! from SPEC.md §5.3–5.6 independently of the code: which collections are
//! iterated under each `IterateCollection` mode, which values `serialize`
//! must refuse, how many frames it must produce, the whole header tree it
//! must write, and what deserializing gives back. Shared by
//! `tests/serialize_props.rs` and the `serialize_iterate` fuzz target
//! (`#[path = "…/tests/support/serialize_reference.rs"] mod reference;`).
#![allow(dead_code)]

use framewire::{EncodeError, IterateCollection, Value};

/// A packed `BinArray` as the boxed `Array` of `Bin`s it equals: the
/// reference's rules are written for the boxed form.
fn boxed(v: &Value) -> Option<Value> {
    v.as_bin_array()
        .map(|a| Value::Array(a.iter().map(Value::Bin).collect()))
}

/// Whether `v` needs frames of its own anywhere inside (Auto's rule).
pub fn needs_frames(v: &Value, threshold: usize) -> bool {
    if let Some(b) = boxed(v) {
        return needs_frames(&b, threshold);
    }
    match v {
        Value::Serialized(_) | Value::Pickled(_) | Value::ToSerialize(_) | Value::NdArray(_) => {
            true
        }
        Value::Bin(b) => b.len() >= threshold,
        Value::Array(a) => a.iter().any(|x| needs_frames(x, threshold)),
        Value::Map(m) => m
            .iter()
            .any(|(k, x)| needs_frames(k, threshold) || needs_frames(x, threshold)),
        _ => false,
    }
}

/// Whether a collection is iterated.
pub fn iterated(v: &Value, mode: IterateCollection, forced: bool, threshold: usize) -> bool {
    forced
        || match mode {
            IterateCollection::Always => true,
            IterateCollection::Never => false,
            IterateCollection::Auto => needs_frames(v, threshold),
        }
}

/// Why `serialize` must refuse `v`, or `None` when it must succeed: the
/// first refusal in the order the encoder meets values. A collection that is
/// not iterated is tried as one msgpack blob ([`blob_refusal`]): under
/// `Auto`, a blob with an out-of-band value is iterated instead; under
/// `Never` (whose blobs inline bins whatever their size) it is refused, as is
/// any blob holding a map with a reserved key. An iterated collection's
/// elements are then serialized in order (a dict's keys go into the element
/// headers as values, where a reserved key is no key). Values holding
/// `Pickled` blocks or `Serialized` blocks whose header is not a map are
/// outside this reference.
pub fn refusal(v: &Value, mode: IterateCollection, forced: bool, thr: usize) -> Option<Refusal> {
    if let Some(b) = boxed(v) {
        return refusal(&b, mode, forced, thr);
    }
    match v {
        Value::ToSerialize(x) => refusal(x, mode, true, thr),
        Value::Pickled(_) => panic!("the reference has no rule for Pickled blocks"),
        Value::Array(_) | Value::IntArray(_) | Value::Map(_) => {
            if !forced && mode != IterateCollection::Always {
                let blob_thr = match mode {
                    IterateCollection::Never => usize::MAX,
                    _ => thr,
                };
                match blob_refusal(v, blob_thr) {
                    None => return None,
                    Some(Refusal::OutOfBandInBlob) if mode == IterateCollection::Auto => {}
                    Some(r) => return Some(r),
                }
            }
            match v {
                Value::Array(a) => a.iter().find_map(|x| refusal(x, mode, false, thr)),
                Value::Map(m) => m.iter().find_map(|(_, x)| refusal(x, mode, false, thr)),
                _ => None,
            }
        }
        _ => None,
    }
}

/// Why `v` cannot be one msgpack blob in which bins of `thr` bytes or more
/// would go out of band: the first problem met walking it as the encoder
/// does (depth first, a map's keys checked when the map is reached, then
/// its keys and values in order).
pub fn blob_refusal(v: &Value, thr: usize) -> Option<Refusal> {
    if let Some(b) = boxed(v) {
        return blob_refusal(&b, thr);
    }
    match v {
        Value::Serialized(_) | Value::Pickled(_) | Value::ToSerialize(_) | Value::NdArray(_) => {
            Some(Refusal::OutOfBandInBlob)
        }
        Value::Bin(b) if b.len() >= thr => Some(Refusal::OutOfBandInBlob),
        Value::Array(a) => a.iter().find_map(|x| blob_refusal(x, thr)),
        Value::Map(m) => {
            if m.iter().any(|(k, _)| is_reserved_key(k)) {
                return Some(Refusal::ReservedKey);
            }
            m.iter()
                .find_map(|(k, x)| blob_refusal(k, thr).or_else(|| blob_refusal(x, thr)))
        }
        _ => None,
    }
}

/// A map key Dask would read as a placeholder.
pub fn is_reserved_key(k: &Value) -> bool {
    matches!(k.as_str(), Some("__Serialized__" | "__Pickled__"))
}

/// What [`refusal`] says `serialize` fails with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// [`EncodeError::OutOfBandInBlob`].
    OutOfBandInBlob,
    /// [`EncodeError::ReservedKey`], for either key.
    ReservedKey,
}

impl Refusal {
    /// The refusal `e` is, if it is one of these.
    pub fn of(e: &EncodeError) -> Option<Refusal> {
        match e {
            EncodeError::OutOfBandInBlob => Some(Refusal::OutOfBandInBlob),
            EncodeError::ReservedKey { .. } => Some(Refusal::ReservedKey),
            _ => None,
        }
    }
}

/// The frames `serialize` must produce.
pub fn expected_frames(v: &Value, mode: IterateCollection, forced: bool, thr: usize) -> usize {
    if let Some(b) = boxed(v) {
        return expected_frames(&b, mode, forced, thr);
    }
    match v {
        Value::ToSerialize(x) => expected_frames(x, mode, true, thr),
        Value::Serialized(b) => b.frames().len(),
        Value::Array(a) if iterated(v, mode, forced, thr) => {
            a.iter().map(|x| expected_frames(x, mode, false, thr)).sum()
        }
        Value::Map(m) if iterated(v, mode, forced, thr) => m
            .iter()
            .map(|(_, x)| expected_frames(x, mode, false, thr))
            .sum(),
        // One msgpack frame per integer.
        Value::IntArray(a) if iterated(v, mode, forced, thr) => a.len(),
        _ => 1,
    }
}

/// What deserializing gives back: `Serialize` wrappers unwrapped.
pub fn norm(v: &Value) -> Value {
    match v {
        Value::ToSerialize(x) => norm(x),
        Value::Array(a) => Value::Array(a.iter().map(norm).collect()),
        Value::Map(m) => Value::Map(m.iter().map(|(k, x)| (k.clone(), norm(x))).collect()),
        other => other.clone(),
    }
}

/// Checks the header tree against the reference: collections iterated
/// exactly when expected, leaves under the right family.
pub fn check_header(
    v: &Value,
    h: &Value,
    mode: IterateCollection,
    forced: bool,
    thr: usize,
) -> Result<(), String> {
    if let Some(b) = boxed(v) {
        return check_header(&b, h, mode, forced, thr);
    }
    let serializer = h.get("serializer").and_then(Value::as_str);
    let err = |why: &str| Err(format!("{why}: value {v:?}\n header {h:?}"));
    match v {
        Value::ToSerialize(x) => check_header(x, h, mode, true, thr),
        Value::Serialized(b) => {
            // The block's own header, plus "key" inside a dict.
            let strip = |m: &Value| -> Vec<(Value, Value)> {
                m.as_map()
                    .unwrap()
                    .iter()
                    .filter(|(k, _)| k.as_str() != Some("key"))
                    .cloned()
                    .collect()
            };
            if strip(h) != strip(b.header().map()) {
                return err("opaque header changed");
            }
            Ok(())
        }
        Value::Array(_) | Value::IntArray(_) | Value::Map(_) => {
            let iter = iterated(v, mode, forced, thr);
            if iter != h.get("is-collection").is_some() {
                return err(if iter {
                    "expected an iterated collection"
                } else {
                    "expected one blob"
                });
            }
            if !iter {
                return if serializer == Some("msgpack") {
                    Ok(())
                } else {
                    err("blob not msgpack")
                };
            }
            let subs = h.get("sub-headers").and_then(Value::as_array).unwrap();
            let kind = h.get("type-serialized").and_then(Value::as_str);
            match v {
                Value::Array(a) => {
                    if kind != Some("tuple") || subs.len() != a.len() {
                        return err("tuple header");
                    }
                    for (x, s) in a.iter().zip(subs) {
                        check_header(x, s, mode, false, thr)?;
                    }
                }
                Value::IntArray(a) => {
                    if kind != Some("tuple") || subs.len() != a.len() {
                        return err("tuple header");
                    }
                    for (&x, s) in a.iter().zip(subs) {
                        check_header(&Value::from(x), s, mode, false, thr)?;
                    }
                }
                Value::Map(m) => {
                    if kind != Some("dict") || subs.len() != m.len() {
                        return err("dict header");
                    }
                    for ((k, x), s) in m.iter().zip(subs) {
                        if s.get("key") != Some(k) {
                            return err("dict key");
                        }
                        check_header(x, s, mode, false, thr)?;
                    }
                }
                _ => unreachable!(),
            }
            Ok(())
        }
        Value::NdArray(_) => match (serializer, h.get("type").and_then(Value::as_str)) {
            (Some("dask"), Some("numpy.ndarray")) => Ok(()),
            _ => err("array header"),
        },
        Value::Bin(_) => match (serializer, h.get("type").and_then(Value::as_str)) {
            (Some("dask"), Some("bytes")) => Ok(()),
            _ => err("bytes header"),
        },
        _ => {
            if serializer == Some("msgpack") {
                Ok(())
            } else {
                err("scalar not msgpack")
            }
        }
    }
}

/// Zero-copy: every `Serialized` leaf comes back with the same frames (same
/// count, same memory), every array over the same data.
pub fn check_same_memory(expected: &Value, got: &Value) -> Result<(), String> {
    match (expected, got) {
        (Value::Serialized(a), Value::Serialized(b)) => {
            if a.frames().len() != b.frames().len() {
                return Err(format!(
                    "frame count {} -> {}",
                    a.frames().len(),
                    b.frames().len()
                ));
            }
            for (x, y) in a.frames().iter().zip(b.frames()) {
                if (x.as_ptr(), x.len()) != (y.as_ptr(), y.len()) && !x.is_empty() {
                    return Err(format!("frame copied: {x:?}"));
                }
            }
            Ok(())
        }
        (Value::NdArray(a), Value::NdArray(b)) => {
            if a.data().as_ptr() != b.data().as_ptr() && !a.data().is_empty() {
                return Err("array data copied".into());
            }
            Ok(())
        }
        (Value::Array(a), Value::Array(b)) => a
            .iter()
            .zip(b)
            .try_for_each(|(x, y)| check_same_memory(x, y)),
        // Packed bytes are views of the frames they came in: the same memory
        // as the bins serialized (each its own frame).
        (Value::Array(a), Value::BinArray(b)) => {
            a.iter().zip(b.iter()).try_for_each(|(x, y)| match x {
                Value::Bin(x) if x.as_ptr() != y.as_ptr() && !x.is_empty() => {
                    Err(format!("packed bytes copied: {x:?}"))
                }
                _ => Ok(()),
            })
        }
        (Value::Map(a), Value::Map(b)) => a
            .iter()
            .zip(b)
            .try_for_each(|((_, x), (_, y))| check_same_memory(x, y)),
        _ => Ok(()),
    }
}
