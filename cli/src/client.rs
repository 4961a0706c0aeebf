//! `framewire scatter`, `gather` and `who-has`: the library's
//! [`Client`](framewire::dask::Client) from the command line.

use std::io::Write;
use std::time::Duration;

use bytes::Bytes;
use framewire::dask::{Arg, Call, Client, ClientError, ClientOptions, Key, Map, PyFunction};
use framewire::pickle::PickleFamily;
use framewire::serialize::Registry;
use framewire::{NdArray, Value};
use serde_json::Value as Json;

use crate::args::Connect;
use crate::input::Input;
use crate::json::{json_to_value, value_to_json};

/// What `scatter`'s FILE holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// A numpy `.npy` file: a numpy array.
    Npy,
    /// Any bytes: Python `bytes`.
    Bytes,
    /// A JSON document (the conventions of `encode`): a plain value.
    Json,
}

/// The client's options: `opts`, and the pickle family for plain values.
pub(crate) fn client_options(address: &str, opts: &Connect) -> Result<ClientOptions, String> {
    let mut connection = framewire::transport::ConnectionBuilder::new();
    let parsed = framewire::transport::Address::parse(address).map_err(|e| e.to_string())?;
    opts.configure(&mut connection, &parsed)?;
    Ok(ClientOptions::new()
        .connection(connection)
        .registry(Registry::default().with(PickleFamily)))
}

/// A key as given: a JSON list (`'["x", 0]'`, a tuple key) or a string.
pub fn parse_key(s: &str) -> Result<Key, String> {
    if s.starts_with('[') {
        let j: Json = serde_json::from_str(s).map_err(|e| format!("key {s}: {e}"))?;
        let v = json_to_value(&j)?;
        return framewire::from_value(v).map_err(|e| format!("key {s}: {e}"));
    }
    Ok(Key::from(s))
}

pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))
}

/// How long `framewire scatter` keeps its key alive.
pub enum Keep {
    /// Until SIGINT or SIGTERM, then the key is released.
    UntilInterrupted,
    /// This long, then the key is released.
    For(Duration),
    /// For ever: `fire_and_forget`, and exit at once.
    Forever,
}

/// `framewire scatter`: puts FILE's value on the cluster's workers under
/// KEY, prints `scattered KEY to WORKER` once the scheduler knows, and
/// holds the key as `keep` says.
pub fn scatter(
    address: &str,
    key: &str,
    file: &str,
    format: Format,
    keep: Keep,
    opts: &Connect,
    out: &mut impl Write,
) -> Result<(), String> {
    let key = parse_key(key)?;
    let input = Input::read(file)?.buf;
    let value = match format {
        Format::Npy => Value::NdArray(Box::new(npy_read(input, file)?)),
        Format::Bytes => Value::Bin(input),
        Format::Json => {
            let j: Json = serde_json::from_slice(&input).map_err(|e| format!("{file}: {e}"))?;
            json_to_value(&j)?
        }
    };
    let copts = client_options(address, opts)?;
    runtime()?.block_on(async {
        let client = Client::connect(address, copts)
            .await
            .map_err(|e| e.to_string())?;
        let who_has = client
            .scatter([(key.clone(), value)])
            .await
            .map_err(|e| e.to_string())?;
        for worker in who_has.get(&key).into_iter().flatten() {
            writeln!(out, "scattered {} to {worker}", key_name(&key)).map_err(|e| e.to_string())?;
        }
        out.flush().map_err(|e| e.to_string())?;
        match keep {
            Keep::Forever => client
                .fire_and_forget(std::slice::from_ref(&key))
                .map_err(|e| e.to_string())?,
            Keep::For(t) => tokio::time::sleep(t).await,
            Keep::UntilInterrupted => interrupted().await?,
        }
        client.close().await.map_err(|e| e.to_string())
    })
}

/// Until SIGINT (Ctrl-C) or, on Unix, SIGTERM.
async fn interrupted() -> Result<(), String> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
        tokio::select! {
            r = tokio::signal::ctrl_c() => r.map_err(|e| e.to_string()),
            _ = term.recv() => Ok(()),
        }
    }
    #[cfg(not(unix))]
    {
        tokio::signal::ctrl_c().await.map_err(|e| e.to_string())
    }
}

/// `framewire gather`: waits (at most `timeout`) for KEY to be in memory,
/// fetches it from its worker, and writes it: an array as a `.npy` file,
/// bytes as they are, any other value as one JSON line.
pub fn gather(
    address: &str,
    key: &str,
    output: Option<&str>,
    timeout: Duration,
    opts: &Connect,
    out: &mut impl Write,
) -> Result<(), String> {
    let key = parse_key(key)?;
    let copts = client_options(address, opts)?;
    let value = runtime()?.block_on(async {
        let client = Client::connect(address, copts)
            .await
            .map_err(|e| e.to_string())?;
        let keys = std::slice::from_ref(&key);
        match tokio::time::timeout(timeout, client.wait(keys)).await {
            Err(_) => {
                return Err(format!(
                "{key} is not in memory after {} s (unknown to the scheduler, or still computing)",
                timeout.as_secs_f64()
            ))
            }
            Ok(r) => r.map_err(|e| e.to_string())?,
        }
        let mut got = client.gather(keys).await.map_err(|e| e.to_string())?;
        client.close().await.map_err(|e| e.to_string())?;
        got.swap_remove(&key)
            .ok_or_else(|| format!("{key}: no value"))
    })?;
    write_value(&key, &value, output, out)
}

/// A gathered value as `gather` prints it: an array to `output` as `.npy`
/// (else a summary line), bytes to `output` as they are (else a JSON
/// line), a plain value as one JSON line; anything else is an error saying
/// what it is.
pub(crate) fn write_value(
    key: &Key,
    value: &Value,
    output: Option<&str>,
    out: &mut impl Write,
) -> Result<(), String> {
    let name = key_name(key);
    if let Some(what) = unreadable(value) {
        return Err(format!("{name}: {what}, which framewire cannot read"));
    }
    let (bytes, summary) = match value {
        Value::NdArray(a) => {
            let line = format!(
                "{name}: array shape={:?} dtype={} bytes={}\n",
                a.shape(),
                a.dtype(),
                a.data().len()
            );
            (npy_write(a), line.into_bytes())
        }
        Value::Bin(b) => {
            let mut line = value_to_json(value).to_string();
            line.push('\n');
            (b.to_vec(), line.into_bytes())
        }
        other => {
            let mut line = value_to_json(other).to_string();
            line.push('\n');
            (line.clone().into_bytes(), line.into_bytes())
        }
    };
    match output {
        Some(path) if path != "-" => {
            std::fs::write(path, bytes).map_err(|e| format!("{path}: {e}"))
        }
        Some(_) => out.write_all(&bytes).map_err(|e| e.to_string()),
        None => out.write_all(&summary).map_err(|e| e.to_string()),
    }
}

/// What `framewire submit` computes, and how it waits.
pub struct Submit<'a> {
    /// `module:qualname`.
    pub function: &'a str,
    /// Positional arguments: JSON values, or `@KEY` for a key's value.
    pub args: &'a [String],
    /// Keyword arguments: a JSON object.
    pub kwargs: Option<&'a str>,
    /// The task's key (else one made as Dask makes a pure call's).
    pub key: Option<&'a str>,
    /// How long to wait for the result.
    pub timeout: Duration,
    /// Where the result goes (as `gather`'s `-o`).
    pub output: Option<&'a str>,
    /// Print the key and leave the task to run (`fire_and_forget`).
    pub no_wait: bool,
}

/// One argument: `@KEY` (a key's value: a string, or `@["x", 0]` for a
/// tuple key), else a JSON value.
fn submit_arg(s: &str) -> Result<Arg, String> {
    if let Some(key) = s.strip_prefix('@') {
        return Ok(Arg::Key(parse_key(key)?));
    }
    let j: Json = serde_json::from_str(s).map_err(|e| format!("argument {s}: {e}"))?;
    Ok(Arg::Value(json_to_value(&j)?))
}

/// `framewire submit`: computes FUNCTION(ARG..., **kwargs) on the cluster
/// and prints its result as `gather` does.
/// A task that raised is one line naming the exception.
pub fn submit(
    address: &str,
    s: &Submit<'_>,
    opts: &Connect,
    out: &mut impl Write,
) -> Result<(), String> {
    let function: PyFunction = s.function.parse().map_err(|e| format!("{e}"))?;
    let mut call = Call::new(function);
    for a in s.args {
        call = call.arg(submit_arg(a)?);
    }
    if let Some(kwargs) = s.kwargs {
        let j: Json = serde_json::from_str(kwargs).map_err(|e| format!("--kwargs: {e}"))?;
        let Json::Object(entries) = j else {
            return Err("--kwargs: a JSON object is expected".into());
        };
        for (name, v) in entries {
            call = call.kwarg(name, Arg::Value(json_to_value(&v)?));
        }
    }
    let key = s.key.map(parse_key).transpose()?;
    let copts = client_options(address, opts)?;
    runtime()?.block_on(async {
        let client = Client::connect(address, copts)
            .await
            .map_err(|e| e.to_string())?;
        let key = match key {
            Some(k) => {
                client
                    .submit_as(k.clone(), call)
                    .map_err(|e| e.to_string())?;
                k
            }
            None => client.submit(call).map_err(|e| e.to_string())?,
        };
        if s.no_wait {
            // Wanted by the scheduler's "fire-and-forget" pseudo-client
            // (sent after the graph, on the same stream): the task runs
            // after this client closes; once it is done, the scheduler
            // lets the key go (distributed 2026.8.0 `scheduler.py`,
            // `_add_to_memory` and `transition_processing_erred`: "if ts in
            // cs.wants_what: self._client_releases_keys(...)" for
            // `clients["fire-and-forget"]`), as for Python's
            // `fire_and_forget`.
            client
                .fire_and_forget(std::slice::from_ref(&key))
                .map_err(|e| e.to_string())?;
            client.close().await.map_err(|e| e.to_string())?;
            return writeln!(out, "{}", key_name(&key)).map_err(|e| e.to_string());
        }
        let value = match tokio::time::timeout(s.timeout, client.result(&key)).await {
            Err(_) => {
                return Err(format!(
                    "{key} is not in memory after {} s",
                    s.timeout.as_secs_f64()
                ))
            }
            Ok(Err(ClientError::Erred(e))) => {
                return Err(match (e.type_name(), e.message()) {
                    (Some(t), Some(m)) if !m.is_empty() => format!("{t}: {m}"),
                    (Some(t), _) => t.to_owned(),
                    _ => e.to_string(),
                })
            }
            Ok(r) => r.map_err(|e| e.to_string())?,
        };
        client.close().await.map_err(|e| e.to_string())?;
        write_value(&key, &value, s.output, out)
    })
}

/// What a value holds that is not plain data (a block framewire did not
/// deserialize: a pickle of an object, a serializer it does not know).
fn unreadable(value: &Value) -> Option<String> {
    match value {
        Value::Serialized(b) | Value::Pickled(b) => {
            let serializer = b
                .header()
                .get("serializer")
                .and_then(Value::as_str)
                .unwrap_or("?")
                .to_owned();
            // A pickle framewire refuses says why: the global that stopped
            // it (`pickle global not allowed: collections.OrderedDict`).
            let why = framewire::pickle::deserialize(b, &Default::default())
                .err()
                .map(|e| format!(" ({e})"))
                .unwrap_or_default();
            Some(format!("a block of serializer {serializer:?}{why}"))
        }
        Value::Array(items) => items.iter().find_map(unreadable),
        Value::Map(entries) => entries
            .iter()
            .find_map(|(k, v)| unreadable(k).or_else(|| unreadable(v))),
        _ => None,
    }
}

/// `framewire who-has`: where each key is (every key when none is given),
/// as one JSON object.
pub fn who_has(
    address: &str,
    keys: &[String],
    opts: &Connect,
    out: &mut impl Write,
) -> Result<(), String> {
    let keys: Vec<Key> = keys
        .iter()
        .map(|k| parse_key(k))
        .collect::<Result<_, _>>()?;
    let copts = client_options(address, opts)?;
    let who_has = runtime()?.block_on(async {
        let client = Client::connect(address, copts)
            .await
            .map_err(|e| e.to_string())?;
        let who_has = match keys.is_empty() {
            true => client.who_has_all().await,
            false => client.who_has(&keys).await,
        }
        .map_err(|e| e.to_string())?;
        client.close().await.map_err(|e| e.to_string())?;
        Ok::<_, String>(who_has)
    })?;
    writeln!(out, "{}", who_has_json(&who_has)).map_err(|e| e.to_string())
}

fn who_has_json(who_has: &Map<Key, Vec<String>>) -> Json {
    Json::Object(
        who_has
            .iter()
            .map(|(k, w)| (key_name(k), Json::from(w.clone())))
            .collect(),
    )
}

/// A key as a JSON object's name: a str key as it is, any other as Python
/// writes it (`('x', 0)`).
pub(crate) fn key_name(key: &Key) -> String {
    match key {
        Key::Str(s) => s.clone(),
        other => other.to_string(),
    }
}

// ---- .npy ---------------------------------------------------------------------

const NPY_MAGIC: &[u8] = b"\x93NUMPY";

/// A `.npy` file (versions 1 to 3) as an array over the file's bytes: the
/// header's `descr`, `fortran_order` (only `False`) and `shape`.
fn npy_read(file: Bytes, name: &str) -> Result<NdArray, String> {
    let bad =
        |why: &str| format!("{name}: not a .npy file ({why}); --bytes sends any file as bytes");
    if file.len() < 10 || &file[..6] != NPY_MAGIC {
        return Err(bad("no \\x93NUMPY magic"));
    }
    let (len, start) = match file[6] {
        1 => (u16::from_le_bytes([file[8], file[9]]) as usize, 10usize),
        2 | 3 if file.len() >= 12 => (
            u32::from_le_bytes([file[8], file[9], file[10], file[11]]) as usize,
            12,
        ),
        _ => return Err(bad("unknown version")),
    };
    let end = start
        .checked_add(len)
        .filter(|&e| e <= file.len())
        .ok_or_else(|| bad("header past the end"))?;
    let header = std::str::from_utf8(&file[start..end]).map_err(|_| bad("header not text"))?;
    let field = |name: &str| -> Result<&str, String> {
        let at = header
            .find(&format!("'{name}':"))
            .ok_or_else(|| bad(&format!("no {name}")))?;
        Ok(header[at + name.len() + 3..].trim_start())
    };
    let descr = field("descr")?;
    let descr = descr
        .strip_prefix('\'')
        .and_then(|d| d.split('\'').next())
        .ok_or_else(|| bad("descr is not a simple dtype"))?;
    if !field("fortran_order")?.starts_with("False") {
        return Err(format!(
            "{name}: a Fortran-order .npy file (save np.ascontiguousarray(x) instead)"
        ));
    }
    let shape = field("shape")?;
    let shape = shape
        .strip_prefix('(')
        .and_then(|s| s.split(')').next())
        .ok_or_else(|| bad("shape is not a tuple"))?;
    let shape: Vec<u64> = shape
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().map_err(|_| bad("shape is not a tuple of ints")))
        .collect::<Result<_, _>>()?;
    NdArray::from_c_order(descr, &shape, file.slice(end..)).map_err(|e| format!("{name}: {e}"))
}

/// A version 1.0 `.npy` file of the array, in C order.
fn npy_write(a: &NdArray) -> Vec<u8> {
    let shape = match a.shape() {
        [n] => format!("({n},)"),
        dims => format!(
            "({})",
            dims.iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut header = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': {shape}, }}",
        a.dtype()
    );
    // Magic, version and length (10 bytes), header and newline: a multiple
    // of 64, as numpy writes it.
    let padded = (10 + header.len() + 1).div_ceil(64) * 64;
    header.extend(std::iter::repeat_n(' ', padded - 10 - header.len() - 1));
    header.push('\n');
    let data = a.to_c_order();
    let mut out = Vec::with_capacity(padded + data.len());
    out.extend_from_slice(NPY_MAGIC);
    out.extend_from_slice(&[1, 0]);
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(&data);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn npy_round_trip() {
        let data = Bytes::from((0..12u8).collect::<Vec<u8>>());
        let a = NdArray::from_c_order("<u2", &[2, 3], data).unwrap();
        let file = npy_write(&a);
        assert_eq!((file.len() - 12) % 64, 0);
        let back = npy_read(Bytes::from(file), "x.npy").unwrap();
        assert_eq!(back.dtype(), "<u2");
        assert_eq!(back.shape(), &[2, 3]);
        assert_eq!(back.data(), a.data());
        assert!(npy_read(Bytes::from_static(b"hello world"), "x").is_err());
    }

    #[test]
    fn object_npy_is_refused_as_such() {
        // What `np.save` writes for `np.array([1, "a"], dtype=object)`: a
        // pickle after the header, where numbers would be.
        let mut header = "{'descr': '|O', 'fortran_order': False, 'shape': (2,), }".to_string();
        header.extend(std::iter::repeat_n(' ', 117 - header.len()));
        header.push('\n');
        let mut file = b"\x93NUMPY\x01\x00".to_vec();
        file.extend_from_slice(&(header.len() as u16).to_le_bytes());
        file.extend_from_slice(header.as_bytes());
        file.extend_from_slice(b"\x80\x02]q\x00(K\x01X\x01\x00\x00\x00aq\x01e.");
        assert_eq!(
            npy_read(Bytes::from(file), "o.npy").unwrap_err(),
            "o.npy: object arrays (dtype |O) cannot be read: they hold pickled Python objects"
        );
    }
}
