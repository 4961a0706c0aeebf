//! The `op=` of a log line, read from frame 0 alone, without building a
//! value: a msgpack walk that looks at the `"op"` keys of the top-level map
//! (a message) or of the maps in a top-level array (a batched stream's
//! list) and skips everything else in place.
//!
//! Frame 0 is all the tap needs: a placeholder (`{"__Serialized__": i}`)
//! is a map like any other here, so the sub-headers and payloads after
//! frame 0 can be relayed before (or without) being read.

/// Ops listed per message at most; the rest are counted.
pub(super) const MAX_OPS: usize = 64;

/// The `op=` of a message whose frame 0 is `frame0`: its ops (`a,b*3,c`),
/// `(handshake)` (`first`: the connection's first message, a map with
/// `pickle-protocol` and no `op`), `-` (no op: a reply) or `?` (frame 0 is
/// not one msgpack value).
pub(super) fn describe(frame0: &[u8], first: bool) -> String {
    let mut r = Reader { buf: frame0, at: 0 };
    let Some(ops) = r.top(first) else {
        return "?".into();
    };
    if r.at != frame0.len() {
        return "?".into(); // trailing bytes: not one msgpack value
    }
    match ops {
        Top::Handshake => "(handshake)".into(),
        Top::Ops(ops) => ops_text(&ops),
    }
}

enum Top<'a> {
    Handshake,
    Ops(Vec<&'a str>),
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

/// What a msgpack head byte (and its length bytes) announce.
enum Item<'a> {
    Str(&'a str),
    Map(u64),
    Array(u64),
    /// Anything else, already skipped.
    Other,
}

/// What a map says of itself.
#[derive(Default)]
struct MapKeys<'a> {
    /// The value of its first `"op"` key, if that is a str.
    op: Option<&'a str>,
    has_op: bool,
    has_pickle: bool,
}

struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(n)?;
        let s = self.buf.get(self.at..end)?;
        self.at = end;
        Some(s)
    }

    fn uint(&mut self, n: usize) -> Option<u64> {
        Some(
            self.take(n)?
                .iter()
                .fold(0u64, |acc, &b| (acc << 8) | u64::from(b)),
        )
    }

    fn len(&mut self, n: usize) -> Option<usize> {
        usize::try_from(self.uint(n)?).ok()
    }

    /// Reads one head; scalars, strings and binaries are consumed whole,
    /// containers only their head.
    fn item(&mut self) -> Option<Item<'a>> {
        let b = *self.take(1)?.first()?;
        let skip = |r: &mut Self, n: usize| r.take(n).map(|_| Item::Other);
        match b {
            0x00..=0x7f | 0xe0..=0xff | 0xc0 | 0xc2 | 0xc3 => Some(Item::Other),
            0x80..=0x8f => Some(Item::Map(u64::from(b & 0x0f))),
            0x90..=0x9f => Some(Item::Array(u64::from(b & 0x0f))),
            0xa0..=0xbf => self.str(usize::from(b & 0x1f)),
            0xc1 => None, // never used
            0xc4 => {
                let n = self.len(1)?;
                skip(self, n)
            }
            0xc5 => {
                let n = self.len(2)?;
                skip(self, n)
            }
            0xc6 => {
                let n = self.len(4)?;
                skip(self, n)
            }
            0xc7 => {
                let n = self.len(1)?;
                skip(self, n.checked_add(1)?)
            }
            0xc8 => {
                let n = self.len(2)?;
                skip(self, n.checked_add(1)?)
            }
            0xc9 => {
                let n = self.len(4)?;
                skip(self, n.checked_add(1)?)
            }
            0xca | 0xce | 0xd2 => skip(self, 4),
            0xcb | 0xcf | 0xd3 => skip(self, 8),
            0xcc | 0xd0 => skip(self, 1),
            0xcd | 0xd1 => skip(self, 2),
            0xd4 => skip(self, 2),
            0xd5 => skip(self, 3),
            0xd6 => skip(self, 5),
            0xd7 => skip(self, 9),
            0xd8 => skip(self, 17),
            0xd9 => {
                let n = self.len(1)?;
                self.str(n)
            }
            0xda => {
                let n = self.len(2)?;
                self.str(n)
            }
            0xdb => {
                let n = self.len(4)?;
                self.str(n)
            }
            0xdc => Some(Item::Array(self.uint(2)?)),
            0xdd => Some(Item::Array(self.uint(4)?)),
            0xde => Some(Item::Map(self.uint(2)?)),
            0xdf => Some(Item::Map(self.uint(4)?)),
        }
    }

    /// A str of `n` bytes (not valid UTF-8: skipped, as any other value).
    fn str(&mut self, n: usize) -> Option<Item<'a>> {
        let bytes = self.take(n)?;
        Some(std::str::from_utf8(bytes).map_or(Item::Other, Item::Str))
    }

    /// Skips `n` values, however nested: a count of values still to skip,
    /// never recursion. Every value takes at least one byte, so a declared
    /// count larger than the frame fails at the frame's end.
    fn skip(&mut self, mut n: u64) -> Option<()> {
        while n > 0 {
            n -= 1;
            match self.item()? {
                Item::Map(k) => n = n.checked_add(k.checked_mul(2)?)?,
                Item::Array(k) => n = n.checked_add(k)?,
                Item::Str(_) | Item::Other => {}
            }
        }
        Some(())
    }

    /// The value after a head already read.
    fn skip_rest(&mut self, item: Item<'a>) -> Option<()> {
        match item {
            Item::Map(k) => self.skip(k.checked_mul(2)?),
            Item::Array(k) => self.skip(k),
            Item::Str(_) | Item::Other => Some(()),
        }
    }

    /// The entries of a map whose head announced `k` of them.
    fn map(&mut self, k: u64) -> Option<MapKeys<'a>> {
        let mut keys = MapKeys::default();
        for _ in 0..k {
            let key = match self.item()? {
                Item::Str(s) => Some(s),
                other => {
                    self.skip_rest(other)?;
                    None
                }
            };
            let value = self.item()?;
            let first_op = key == Some("op") && !keys.has_op;
            keys.has_op |= key == Some("op");
            keys.has_pickle |= key == Some("pickle-protocol");
            match value {
                Item::Str(s) if first_op => keys.op = Some(s),
                value => self.skip_rest(value)?,
            }
        }
        Some(keys)
    }

    fn top(&mut self, first: bool) -> Option<Top<'a>> {
        match self.item()? {
            Item::Map(k) => {
                let keys = self.map(k)?;
                if first && !keys.has_op && keys.has_pickle {
                    return Some(Top::Handshake);
                }
                Some(Top::Ops(keys.op.into_iter().collect()))
            }
            Item::Array(k) => {
                let mut ops = Vec::new();
                for _ in 0..k {
                    match self.item()? {
                        Item::Map(k) => ops.push(self.map(k)?.op.unwrap_or("-")),
                        other => {
                            self.skip_rest(other)?;
                            ops.push("-");
                        }
                    }
                }
                Some(Top::Ops(ops))
            }
            other => {
                self.skip_rest(other)?;
                Some(Top::Ops(Vec::new()))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use framewire::{dumps, message, Limits, Value};

    /// The tap's `op=` before it read frame 0 alone: the message decoded in
    /// pass-through mode (every frame), then its ops.
    fn reference(frames: &[Bytes], first: bool) -> String {
        let Ok(loaded) = message::loads_detailed(frames, &Limits::dask_compat()) else {
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
        assert_eq!(describe(b"\xc1", false), "?");
        assert_eq!(describe(b"", false), "?");
        // One value, then a byte too many.
        assert_eq!(describe(b"\x81\xa2op\xa4ping\x00", false), "?");
        let many: Vec<String> = (0..70).map(|i| i.to_string()).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert!(ops_text(&many).ends_with(",...+6"));
        // A declared count far beyond the frame ends at the frame's end.
        assert_eq!(describe(b"\xdf\xff\xff\xff\xff\xa2op", false), "?");
        assert_eq!(describe(b"\xdd\xff\xff\xff\xff\x80", false), "?");
        // Forms Python's msgpack does not write are skipped all the same:
        // float32, ext, fixext, a non-UTF-8 str, an int key.
        let exotic = b"\x86\xa1a\xca\0\0\0\0\xa1b\xc7\x02\x05xy\xa1c\xd8\x01\
                       0123456789abcdef\xa1d\xa2\xff\xfe\x07\x08\xa2op\xa1x";
        assert_eq!(describe(exotic, false), "x");
        assert_eq!(describe(&exotic[..exotic.len() - 1], false), "?");
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
                9 => Value::Serialize(Box::new(Value::Bin(Bytes::from(vec![1u8; self.len()])))),
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
                        .filter(|(k, _)| !matches!(k, Value::Serialize(_)))
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
