//! What a simulated task costs: how long it "runs" and the size of its
//! result, fixed (`--task-ms`, `--nbytes`) or per key prefix from a file
//! (`--model FILE`), the prefix being Dask's `key_split` of the key.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::time::Duration;

/// The largest result size a model may give: a result is served as that
/// many bytes in memory (zeroed pages, not touched until sent), and a
/// larger one could not be allocated on most machines.
pub const MAX_NBYTES: u64 = 1 << 34;

/// `--nbytes`: a number of bytes up to [`MAX_NBYTES`].
pub fn parse_nbytes(s: &str) -> Result<u64, String> {
    s.trim()
        .parse::<u64>()
        .ok()
        .filter(|&n| n <= MAX_NBYTES)
        .ok_or_else(|| format!("{s:?}: a whole number of bytes up to {MAX_NBYTES}"))
}

use framewire::dask::Key;
use serde_json::Value as Json;

/// How long a task "runs": a fixed time, or uniform between two, chosen
/// by the key's hash (the same key always takes the same time).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TaskTime {
    /// Shortest.
    pub min: Duration,
    /// Longest.
    pub max: Duration,
}

impl TaskTime {
    /// `[min, max]` in milliseconds, for the results file.
    pub fn to_json(self) -> Json {
        serde_json::json!([self.min.as_secs_f64() * 1e3, self.max.as_secs_f64() * 1e3])
    }
}

/// `--task-ms`: `MS` or `MIN..MAX` (milliseconds, fractions allowed).
pub fn parse_task_ms(s: &str) -> Result<TaskTime, String> {
    let ms = |v: &str| -> Result<Duration, String> {
        let f: f64 = v
            .trim()
            .parse()
            .map_err(|_| format!("{v:?} is not a number of milliseconds"))?;
        if !(0.0..=86_400_000.0).contains(&f) {
            return Err(format!("{v:?}: milliseconds from 0 to a day"));
        }
        Ok(Duration::from_secs_f64(f / 1000.0))
    };
    let (min, max) = match s.split_once("..") {
        Some((a, b)) => (ms(a)?, ms(b)?),
        None => (ms(s)?, ms(s)?),
    };
    if max < min {
        return Err(format!("{s:?}: the range is empty"));
    }
    Ok(TaskTime { min, max })
}

/// What one kind of task costs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cost {
    /// Its duration.
    pub time: TaskTime,
    /// Its result's size.
    pub nbytes: u64,
}

/// What every task costs: the default, and per key prefix.
#[derive(Clone, Debug)]
pub struct Model {
    /// For keys whose prefix the file does not name.
    pub default: Cost,
    /// By `key_split` prefix (`--model FILE`).
    pub prefixes: HashMap<String, Cost>,
}

impl Model {
    /// A model with one cost for every key.
    pub fn fixed(time: TaskTime, nbytes: u64) -> Model {
        Model {
            default: Cost { time, nbytes },
            prefixes: HashMap::new(),
        }
    }

    /// The cost of the task `key`.
    pub fn cost(&self, key: &Key) -> Cost {
        if self.prefixes.is_empty() {
            return self.default;
        }
        *self.prefixes.get(&key_split(key)).unwrap_or(&self.default)
    }

    /// The duration of the task `key`.
    pub fn duration(&self, key: &Key) -> Duration {
        let time = self.cost(key).time;
        let span = time.max - time.min;
        if span.is_zero() {
            return time.min;
        }
        let mut h = std::collections::hash_map::DefaultHasher::new();
        key.hash(&mut h);
        let u = (h.finish() >> 11) as f64 / (1u64 << 53) as f64;
        time.min + span.mul_f64(u)
    }

    /// The size of the result of the task `key`.
    pub fn nbytes(&self, key: &Key) -> u64 {
        self.cost(key).nbytes
    }

    /// Reads `--model FILE` into this model (whose default comes from
    /// `--task-ms` and `--nbytes`): a JSON object
    /// `{"PREFIX": {"task_ms": 10 | "5..20", "nbytes": 1000}, ...}`, either
    /// field optional (the default's then).
    pub fn load(&mut self, path: &str) -> Result<(), String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("--model {path}: {e}"))?;
        self.parse(path, &text)
    }

    fn parse(&mut self, path: &str, text: &str) -> Result<(), String> {
        let doc: Json =
            serde_json::from_str(text).map_err(|e| format!("--model {path}: not JSON: {e}"))?;
        let Json::Object(entries) = doc else {
            return Err(format!(
                "--model {path}: expected an object of key prefixes, \
                 {{\"PREFIX\": {{\"task_ms\": MS, \"nbytes\": BYTES}}, ...}}"
            ));
        };
        for (prefix, spec) in entries {
            let bad = |what: String| format!("--model {path}: entry {prefix:?}: {what}");
            let Json::Object(fields) = spec else {
                return Err(bad(format!(
                    "expected {{\"task_ms\": MS, \"nbytes\": BYTES}}, got {spec}"
                )));
            };
            let mut cost = self.default;
            for (field, v) in &fields {
                match field.as_str() {
                    "task_ms" => {
                        cost.time = match v {
                            Json::Number(n) => parse_task_ms(&n.to_string()),
                            Json::String(s) => parse_task_ms(s),
                            _ => Err(format!("{v} is not MS nor \"MIN..MAX\"")),
                        }
                        .map_err(|e| bad(format!("task_ms: {e}")))?;
                    }
                    "nbytes" => {
                        cost.nbytes = v.as_u64().filter(|&n| n <= MAX_NBYTES).ok_or_else(|| {
                            bad(format!(
                                "nbytes: {v} is not a whole number of bytes up to {MAX_NBYTES}"
                            ))
                        })?;
                    }
                    _ => {
                        return Err(bad(format!(
                            "unknown field {field:?} (task_ms and nbytes are known)"
                        )))
                    }
                }
            }
            self.prefixes.insert(prefix, cost);
        }
        Ok(())
    }

    /// The model for the results file.
    pub fn to_json(&self) -> Json {
        let mut prefixes: Vec<(&String, &Cost)> = self.prefixes.iter().collect();
        prefixes.sort_by_key(|(p, _)| *p);
        let prefixes: serde_json::Map<String, Json> = prefixes
            .into_iter()
            .map(|(p, c)| {
                let v = serde_json::json!({"task_ms": c.time.to_json(), "nbytes": c.nbytes});
                (p.clone(), v)
            })
            .collect();
        Json::Object(prefixes)
    }
}

/// The "Other" of `key_split`.
const OTHER: &str = "Other";

/// Dask's `key_split` (`dask/utils.py`, `key_split`): the name of a key's
/// kind of task, e.g. `sum-aggregate` for `("sum-aggregate-1a2b…", 0)`,
/// `inc` for `"inc-6a3c…"`. A tuple's is its first element's; bytes are
/// decoded; words after the first are kept while alphabetic and not an
/// 8-letter word starting with `a`–`f` (a hex token); 32 hex digits are
/// `data`; `<module.class object at 0x…>` is `class`; anything else
/// `Other`.
///
/// Where Python's raises instead (an empty tuple, bytes not UTF-8), this
/// answers `Other`. `isalpha` is Unicode's Alphabetic property here, which
/// is Python's for every ASCII character and nearly every other.
pub fn key_split(key: &Key) -> String {
    match key {
        Key::Str(s) => split_str(s),
        Key::Bytes(b) => std::str::from_utf8(b).map_or(OTHER.to_owned(), split_str),
        Key::Tuple(t) => t.first().map_or(OTHER.to_owned(), key_split),
        Key::Int(_) | Key::Float(_) => OTHER.to_owned(),
    }
}

/// `str.isalpha`: not empty, every character a letter.
fn is_alpha(s: &str) -> bool {
    !s.is_empty() && s.chars().all(char::is_alphabetic)
}

/// `str.isspace` of one character (`str.split()`'s separators), which
/// counts the ASCII separators 0x1c–0x1f as Rust's `is_whitespace` does
/// not.
fn is_space(c: char) -> bool {
    c.is_whitespace() || ('\x1c'..='\x1f').contains(&c)
}

fn split_str(s: &str) -> String {
    let mut words = s.split('-');
    let first = words.next().unwrap_or("");
    // `words[0][0].isalpha()`: an empty first word raises: `Other`.
    let Some(c0) = first.chars().next() else {
        return OTHER.to_owned();
    };
    let mut result = if c0.is_alphabetic() {
        first.to_owned()
    } else {
        let head = first.split(',').next().unwrap_or("");
        head.trim_matches(|c| matches!(c, '_' | '\'' | '(' | ')' | '"'))
            .to_owned()
    };
    for word in words {
        let hex = word.chars().count() == 8 && word.starts_with(|c| matches!(c, 'a'..='f'));
        if is_alpha(word) && !hex {
            result.push('-');
            result.push_str(word);
        } else {
            break;
        }
    }
    // `len(result) == 32 and re.match(r"[a-f0-9]{32}", result)`.
    if result.chars().count() == 32 && result.chars().all(|c| matches!(c, 'a'..='f' | '0'..='9')) {
        return "data".to_owned();
    }
    match result.chars().next() {
        // `result[0]` of an empty result raises: `Other`.
        None => OTHER.to_owned(),
        Some('<') => {
            // `result.strip("<>").split()[0].split(".")[-1]`
            let inner = result.trim_matches(|c| c == '<' || c == '>');
            match inner.split(is_space).find(|w| !w.is_empty()) {
                Some(w) => w.rsplit('.').next().unwrap_or(w).to_owned(),
                None => OTHER.to_owned(),
            }
        }
        Some(_) => result,
    }
}

#[cfg(test)]
#[path = "../../../tests/support/dask_python.rs"]
mod dask_python;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_times() {
        let t = parse_task_ms("10").unwrap();
        assert_eq!(
            (t.min, t.max),
            (Duration::from_millis(10), Duration::from_millis(10))
        );
        let t = parse_task_ms("5..20").unwrap();
        assert_eq!(
            (t.min, t.max),
            (Duration::from_millis(5), Duration::from_millis(20))
        );
        assert!(parse_task_ms("20..5").is_err());
        assert!(parse_task_ms("-1").is_err());
        assert!(parse_task_ms("x").is_err());
        let m = Model::fixed(t, 0);
        let d = m.duration(&Key::from("a"));
        assert!(d >= t.min && d <= t.max);
        assert_eq!(d, m.duration(&Key::from("a")));
    }

    #[test]
    fn model_file_by_prefix() {
        let mut m = Model::fixed(parse_task_ms("10").unwrap(), 1000);
        m.parse(
            "m.json",
            r#"{"sum-aggregate": {"task_ms": "5..20", "nbytes": 8},
                "inc": {"task_ms": 2.5}, "x": {}}"#,
        )
        .unwrap();
        let agg = Key::Tuple(vec![Key::from("sum-aggregate-1a2b3c4d5e"), Key::Int(0)]);
        assert_eq!(m.nbytes(&agg), 8);
        let d = m.duration(&agg);
        assert!(d >= Duration::from_millis(5) && d <= Duration::from_millis(20));
        let inc = Key::from("inc-6a3c94b1f2d0e8a7b5c4d3e2f1a0b9c8");
        assert_eq!(m.duration(&inc), Duration::from_micros(2500));
        assert_eq!(m.nbytes(&inc), 1000, "the default's nbytes");
        let other = Key::from("dec-1");
        assert_eq!(
            (m.duration(&other), m.nbytes(&other)),
            (Duration::from_millis(10), 1000)
        );
        assert_eq!(m.nbytes(&Key::from("x-1")), 1000);
    }

    #[test]
    fn model_file_errors_name_the_file_and_entry() {
        let err = |text: &str| {
            let mut m = Model::fixed(parse_task_ms("10").unwrap(), 1000);
            m.parse("m.json", text).unwrap_err()
        };
        let e = err("[1]");
        assert!(e.starts_with("--model m.json: expected an object"), "{e}");
        let e = err("{");
        assert!(e.starts_with("--model m.json: not JSON"), "{e}");
        let e = err(r#"{"inc": {"task_ms": "20..5"}}"#);
        assert!(e.contains("m.json: entry \"inc\": task_ms: "), "{e}");
        let e = err(r#"{"inc": {"task_ms": -3}}"#);
        assert!(e.contains("m.json: entry \"inc\": task_ms: "), "{e}");
        let e = err(r#"{"inc": {"task_ms": true}}"#);
        assert!(e.contains("entry \"inc\": task_ms: true is not"), "{e}");
        let e = err(r#"{"inc": {"nbytes": -1}}"#);
        assert!(e.contains("entry \"inc\": nbytes: -1 is not"), "{e}");
        let e = err(r#"{"inc": {"nbytes": 1.5}}"#);
        assert!(e.contains("entry \"inc\": nbytes"), "{e}");
        // More than a result can be served as.
        let e = err(r#"{"inc": {"nbytes": 18446744073709551615}}"#);
        assert!(e.contains("up to 17179869184"), "{e}");
        assert!(parse_nbytes("17179869185").is_err());
        assert_eq!(parse_nbytes("17179869184"), Ok(MAX_NBYTES));
        let e = err(r#"{"inc": {"bytes": 1}}"#);
        assert!(e.contains("entry \"inc\": unknown field \"bytes\""), "{e}");
        let e = err(r#"{"inc": 3}"#);
        assert!(e.contains("entry \"inc\": expected"), "{e}");
        let deep = "[".repeat(100_000);
        assert!(err(&deep).contains("not JSON"));
        let mut m = Model::fixed(parse_task_ms("1").unwrap(), 1);
        let e = m.load("/nonexistent/model.json").unwrap_err();
        assert!(e.starts_with("--model /nonexistent/model.json: "), "{e}");
    }

    /// A key as JSON (a tuple as a list).
    fn key_of(v: &Json) -> Key {
        match v {
            Json::String(s) => Key::from(s.as_str()),
            Json::Array(a) => Key::Tuple(a.iter().map(key_of).collect()),
            Json::Number(n) if n.is_i64() => Key::Int(n.as_i64().unwrap()),
            Json::Number(n) => Key::Float(n.as_f64().unwrap()),
            _ => panic!("not a key: {v}"),
        }
    }

    /// Real keys of dask collections, `client.map`-style and `delayed`
    /// names, and the edge cases of `key_split`'s code, split by Python's
    /// `dask.utils.key_split` and by ours.
    #[test]
    fn key_split_matches_dask() {
        let script = r#"
import json, operator
import dask, dask.array as da
from dask import delayed
from dask.utils import key_split
from dask.base import tokenize
from dask.utils import funcname
keys = []
x = da.ones((40, 40), chunks=(10, 10))
for coll in [x.sum(), (x + x.T).mean(axis=0), x.dot(x), x[::2].std(), da.random.random(20, chunks=5).cumsum(axis=0)]:
    keys += list(dict(coll.__dask_graph__()).keys())
d = delayed(operator.add)(delayed(max)(1, 2), 3)
keys += list(dict(d.__dask_graph__()).keys())
keys += ["inc-" + tokenize(i) for i in range(5)]
keys += [funcname(lambda x: x) + "-" + tokenize(1), "pick-" + tokenize(2)]
keys += ["x", "x-1", "x-1-2-3", ("x-2", 1), "('x-2', 1)", "('x', 1)", "hello-world-1",
         "ae05086432ca935f6eba409a8ecd4896", "ae05086432ca935f6eba409a8ecd489", "AE05086432CA935F6EBA409A8ECD4896",
         "<module.submodule.myclass object at 0xdaf372", "<x>", "<>", "<", "< >",
         "x-abcdefab", "x-abcdefgh", "x-ghcdefab", "x-abcdefa", "sum-aggregat-1", "sum-Aggregat-1",
         "_(x)", "", "-x", "x-", "x--y", "(", "(,", "'a'-b", "1-x", "é-ü-1", "日本-語",
         "<a.b.c\x1cd>", "<\x1cq.r>", "x y-z", (("x-1", 0), 1), ("",), 7, 1.5, (3, 4),
         "finalize-" + tokenize(0), "getitem-" + "0" * 32, "0" * 31 + "a-x"]
seen, out = set(), []
for k in keys:
    r = repr(k)
    if r in seen:
        continue
    seen.add(r)
    out.append([k, key_split(k)])
print(json.dumps(out))
"#;
        let python = dask_python::python();
        let out = std::process::Command::new(&python)
            .arg("-c")
            .arg(script)
            .output()
            .expect("run python");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let pairs: Vec<(Json, String)> = serde_json::from_str(stdout.trim()).expect("json");
        assert!(pairs.len() > 100, "{}", pairs.len());
        let prefixes: std::collections::HashSet<&str> =
            pairs.iter().map(|(_, p)| p.as_str()).collect();
        for p in [
            "sum-aggregate",
            "data",
            "myclass",
            "Other",
            "hello-world",
            "inc",
        ] {
            assert!(prefixes.contains(p), "{p}: {prefixes:?}");
        }
        let wrong: Vec<String> = pairs
            .iter()
            .filter_map(|(k, want)| {
                let got = key_split(&key_of(k));
                (&got != want).then(|| format!("{k}: dask {want:?}, ours {got:?}"))
            })
            .collect();
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }
}
