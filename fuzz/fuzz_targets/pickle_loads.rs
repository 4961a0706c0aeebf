//! `framewire::pickle::loads`: the first input byte picks the limits
//! (bit 0: `strict()`, else `dask_compat()`), the rest is the pickle, and
//! its out-of-band buffers are slices of it (the first 8, 16, 24 and 64
//! bytes). Oracle: a typed result, never a panic; never more values out
//! than bytes of pickle in; what is read writes again (`dumps`) unless a
//! dict key is one Python cannot hash, and reading that gives the same
//! value (arrays compared as Python sees them: dtype, shape, elements).
//!
//! Runs on a thread with the stack `max_depth` needs to drop what is read
//! (the machine itself never recurses; see `msgpack_decode`).
#![no_main]
use bytes::Bytes;
use framewire::{pickle, EncodeError, Limits, Value};
use libfuzzer_sys::fuzz_target;

/// Values in `v`: containers and their items, an `IntArray` counting its
/// integers, an array one.
fn count(v: &Value) -> usize {
    match v {
        Value::Array(items) => 1 + items.iter().map(count).sum::<usize>(),
        Value::IntArray(ints) => 1 + ints.len(),
        Value::Map(m) => 1 + m.iter().map(|(k, x)| count(k) + count(x)).sum::<usize>(),
        _ => 1,
    }
}

/// The same Python value: arrays by dtype, logical shape and C-order
/// elements (a numpy scalar comes back writeable, a 1-wide axis may come
/// back with other strides), everything else by `Value`'s own equality.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::NdArray(x), Value::NdArray(y)) => {
            x.dtype() == y.dtype()
                && x.logical_shape() == y.logical_shape()
                && x.to_c_order() == y.to_c_order()
                && (x.shape().is_empty() || x.writeable() == y.writeable())
        }
        (Value::Array(_) | Value::IntArray(_), Value::Array(_) | Value::IntArray(_)) => {
            a.array_len() == b.array_len()
                && (0..a.array_len().unwrap())
                    .all(|i| same(&a.array_item(i).unwrap(), &b.array_item(i).unwrap()))
        }
        (Value::Map(x), Value::Map(y)) => {
            x.len() == y.len()
                && x
                    .iter()
                    .zip(y)
                    .all(|((k, v), (l, w))| same(k, l) && same(v, w))
        }
        _ => a == b,
    }
}

/// A dict key Python cannot hash somewhere in `v`: the one thing read that
/// the writer refuses.
fn unhashable_key(v: &Value) -> bool {
    fn in_key(k: &Value) -> bool {
        match k {
            Value::Map(_) => true,
            Value::NdArray(a) => !a.shape().is_empty(),
            Value::Array(items) => items.iter().any(in_key),
            _ => false,
        }
    }
    match v {
        Value::Array(items) => items.iter().any(unhashable_key),
        Value::Map(m) => m.iter().any(|(k, x)| in_key(k) || unhashable_key(x)),
        _ => false,
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let (limits, stack) = match flags & 1 {
        1 => (Limits::strict(), 128 << 10),
        _ => (Limits::dask_compat(), 1 << 20),
    };
    let input = Bytes::copy_from_slice(rest);
    std::thread::Builder::new()
        .stack_size(stack)
        .spawn(move || {
            let buffers: Vec<Bytes> = [8, 16, 24, 64]
                .iter()
                .map(|&n| input.slice(..n.min(input.len())))
                .collect();
            let Ok(value) = pickle::loads(&input, &buffers, &limits) else {
                return;
            };
            assert!(
                count(&value) <= input.len(),
                "{} values out of {} bytes",
                count(&value),
                input.len()
            );
            match pickle::dumps(&value) {
                Ok((again, out_of_band)) => {
                    let back = pickle::loads(&again, &out_of_band, &Limits::dask_compat())
                        .expect("what framewire writes, it reads");
                    assert!(same(&back, &value), "{back:?}\n!= {value:?}");
                }
                Err(EncodeError::Unserializable { .. }) => {
                    assert!(unhashable_key(&value), "refused to write {value:?}")
                }
                Err(e) => panic!("refused to write what was read: {e} ({value:?})"),
            }
        })
        .expect("spawn")
        .join()
        .expect("no panic");
});
