//! The `op=` of a log line, read from frame 0 alone with
//! [`peek_ops`](framewire::message::peek_ops), which looks at the `"op"`
//! keys of the top-level map (a message) or of the maps in a top-level
//! array (a batched stream's list) and steps over everything else in place.
//!
//! Frame 0 is all the tap needs: a placeholder (`{"__Serialized__": i}`)
//! is a map like any other there, so the sub-headers and payloads after
//! frame 0 can be relayed before (or without) being read.

use framewire::message::{peek_ops, Ops};

/// Ops listed per message at most; the rest are counted.
pub(super) const MAX_OPS: usize = 64;

/// The `op=` of a message whose frame 0 is `frame0`: its ops (`a,b*3,c`),
/// `(handshake)` (`first`: the connection's first message, a map with
/// `pickle-protocol` and no `op`), `-` (no op: a reply) or `?` (frame 0 is
/// not one msgpack value).
pub(super) fn describe(frame0: &[u8], first: bool) -> String {
    match peek_ops(frame0) {
        None => "?".into(),
        Some(Ops::Handshake) if first => "(handshake)".into(),
        Some(Ops::Op(op)) => ops_text(&[op]),
        Some(Ops::Batch(ops)) => {
            let ops: Vec<&str> = ops.iter().map(|op| op.unwrap_or("-")).collect();
            ops_text(&ops)
        }
        Some(_) => ops_text(&[]),
    }
}

/// `a,b*3,c`; `-` for none; at most [`MAX_OPS`] runs.
pub(super) fn ops_text(ops: &[&str]) -> String {
    if ops.is_empty() {
        return "-".into();
    }
    let mut runs: Vec<(&str, usize)> = Vec::new();
    for &op in ops {
        match runs.last_mut() {
            Some((last, n)) if *last == op => *n += 1,
            _ => runs.push((op, 1)),
        }
    }
    let mut parts: Vec<String> = runs
        .iter()
        .take(MAX_OPS)
        .map(|&(op, n)| match n {
            1 => op.to_owned(),
            n => format!("{op}*{n}"),
        })
        .collect();
    if runs.len() > MAX_OPS {
        let rest: usize = runs[MAX_OPS..].iter().map(|&(_, n)| n).sum();
        parts.push(format!("...+{rest}"));
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use framewire::{dumps, message, Limits, Value};

    /// The tap's `op=` before it read frame 0 alone: the message decoded in
    /// pass-through mode (every frame), then its ops.
    fn reference(frames: &[Bytes], first: bool) -> String {
        let Ok(loaded) = message::decode_detailed(frames, &Limits::dask_compat()) else {
            return "?".into();
        };
        let v = &loaded.value;
        if first && v.get("op").is_none() && v.get("pickle-protocol").is_some() {
            return "(handshake)".into();
        }
        let ops: Vec<&str> = match v {
            Value::Map(_) => v.get("op").and_then(Value::as_str).into_iter().collect(),
            Value::Array(items) => items
                .iter()
                .map(|m| m.get("op").and_then(Value::as_str).unwrap_or("-"))
                .collect(),
            _ => Vec::new(),
        };
        ops_text(&ops)
    }

    fn op(name: &str) -> Value {
        Value::map_of([("op", Value::str(name))])
    }

    #[test]
    fn ops() {
        let f0 = |v: &Value| dumps(v).unwrap()[0].clone();
        assert_eq!(describe(&f0(&op("identity")), false), "identity");
        let batch = Value::Array(vec![op("a"), op("b"), op("b"), op("b"), Value::str("OK")]);
        assert_eq!(describe(&f0(&batch), false), "a,b*3,-");
        assert_eq!(describe(&f0(&Value::str("OK")), false), "-");
        let hs = Value::map_of([("compression", Value::Nil), ("pickle-protocol", 5u8.into())]);
        assert_eq!(describe(&f0(&hs), true), "(handshake)");
        assert_eq!(describe(&f0(&hs), false), "-");
        assert_eq!(describe(b"", false), "?");
        // One value, then a byte too many.
        let mut trailing = f0(&op("ping")).to_vec();
        trailing.push(0);
        assert_eq!(describe(&trailing, false), "?");
        let many: Vec<String> = (0..70).map(|i| i.to_string()).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert!(ops_text(&many).ends_with(",...+6"));
    }

    /// A small deterministic generator (xorshift) of msgpack values of
    /// every kind, some with ops and placeholders.
    struct Gen(u64);

    impl Gen {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }

        /// Lengths around the boundaries of msgpack's str/bin/array/map forms.
        fn len(&mut self) -> usize {
            const L: [usize; 10] = [0, 1, 15, 16, 31, 32, 255, 256, 65_535, 65_536];
            match self.below(4) {
                0 => L[self.below(L.len() as u64) as usize],
                _ => self.below(6) as usize,
            }
        }

        fn scalar(&mut self) -> Value {
            match self.below(12) {
                0 => Value::Nil,
                1 => Value::Bool(self.below(2) == 1),
                2 => (self.next() as i64 >> self.below(64)).into(),
                3 => (self.next() >> self.below(64)).into(),
                4 | 5 => Value::Float(f64::from_bits(self.next())),
                6 => Value::Bin(Bytes::from(vec![7u8; self.len()])),
                7 => Value::str(&"x".repeat(self.len())),
                8 => Value::str("op"),
                9 => Value::ToSerialize(Box::new(Value::Bin(Bytes::from(vec![1u8; self.len()])))),
                10 => {
                    Value::str(["ping", "compute-task", "pickle-protocol"][self.below(3) as usize])
                }
                _ => (self.below(200) as i64 - 100).into(),
            }
        }

        fn value(&mut self, depth: u32) -> Value {
            if depth == 0 || self.below(3) == 0 {
                return self.scalar();
            }
            // Long containers (map16/32, array16/32) only of scalars.
            let n = if depth == 1 && self.below(8) == 0 {
                self.len()
            } else {
                self.below(4) as usize
            };
            match self.below(3) {
                0 => Value::Array((0..n).map(|_| self.value(depth - 1)).collect()),
                1 => Value::Map(
                    (0..n)
                        .map(|_| {
                            let key = match self.below(4) {
                                0 => "op".to_owned(),
                                1 => "pickle-protocol".to_owned(),
                                _ => format!("k{}", self.below(1000)),
                            };
                            (Value::str(&key), self.value(depth - 1))
                        })
                        .collect(),
                ),
                _ => Value::Map(
                    (0..n)
                        .map(|_| (self.scalar(), self.value(depth - 1)))
                        .filter(|(k, _)| !matches!(k, Value::ToSerialize(_)))
                        .collect(),
                ),
            }
        }

        /// A message: an op map, a batch of op maps, or anything.
        fn message(&mut self) -> Value {
            match self.below(3) {
                0 => {
                    let mut m = vec![(Value::str("op"), self.scalar())];
                    m.extend(
                        (0..self.below(4)).map(|i| (Value::str(&format!("a{i}")), self.value(3))),
                    );
                    Value::Map(m)
                }
                1 => Value::Array(
                    (0..self.below(6))
                        .map(|_| match self.below(4) {
                            0 => self.value(2),
                            _ => op(["task-finished", "release", "op"][self.below(3) as usize]),
                        })
                        .collect(),
                ),
                _ => self.value(4),
            }
        }
    }

    /// Frame 0 alone gives the ops the whole message gives, for messages
    /// of every shape (placeholders and their blocks included); every
    /// strict prefix of a frame 0 is `?`.
    #[test]
    fn frame0_alone_names_the_same_ops() {
        let mut g = Gen(0x9e37_79b9_7f4a_7c15);
        let mut shapes = std::collections::BTreeSet::new();
        for i in 0..1500 {
            let v = g.message();
            let Ok(frames) = dumps(&v) else {
                continue; // not encodable (a reserved key): not a message
            };
            let first = i % 2 == 0;
            let want = reference(&frames, first);
            assert_eq!(describe(&frames[0], first), want, "{v:?}");
            shapes.insert(want);
            let f0 = &frames[0];
            for cut in [0, 1, f0.len() / 2, f0.len().saturating_sub(1)] {
                if cut < f0.len() {
                    assert_eq!(describe(&f0[..cut], first), "?", "{v:?} cut at {cut}");
                }
            }
        }
        // The generator reached ops, batches, replies and handshakes.
        assert!(
            shapes.contains("-") && shapes.contains("(handshake)"),
            "{shapes:?}"
        );
        assert!(shapes.iter().any(|s| s.contains('*')), "{shapes:?}");
    }
}
